"""How much of a CPU decoding step is Python: the eager step against the same step recorded by
`torch.jit.trace` (TorchScript, part of torch: no compiler needed), demo model, beam 1.

    python bench/experiments/traced_step.py [--threads 2] [--rows 1,8,32,160] [--steps 300]
        [--fixed-shape|--first-replays]

The trace is of one shape and one position (the cache is reset to the same position before every
call): it measures what running the step's ~100 operator calls without the Python between them
saves, which `torch.compile` (bench/experiments/compile_step.py) did not show on this CPU. The logits must be
bit-identical to the eager step's; the script checks.

With --fixed-shape it traces the fixed-shape step instead (models/fixed_step.py, whose position
is a tensor): recorded once at one position, the trace is run at the next positions of its
positions bucket and compared with that step run eagerly: the design decoding did not take, one
trace per bucket (docs/speed.md, "The traced step on the CPU", says why).

The packed oneDNN weights are inputs of each trace (the tracer cannot hold them as constants);
`PackedLinear` gives the tracer a form of its product it can record (models/gemm.py). Decoding
itself traces the model's step in a shape-general way (models/traced_step.py, `--traced-step`);
this script measures one shape and one position.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # bench/, for common
from common import BENCH, timed  # noqa: E402

sys.path.insert(0, os.path.join(BENCH, "experiments"))
import compile_step  # noqa: E402

from nmtdecode.models.gemm import PackedLinear, cpu_description  # noqa: E402


def fixed_shape(model, packed: list, rows_list: list[int], steps: int):
    """The fixed-shape step traced at position WARM_STEPS, then run at the next positions of its
    bucket: same logits as that step run eagerly, and its time against the eager one."""
    from nmtdecode.models.fixed_step import FixedShapeSteps

    print("| rows | positions the trace ran at | same logits | eager | traced | traced ÷ eager |")
    print("|---|---|---|---|---|---|")
    t0 = compile_step.WARM_STEPS
    for rows in rows_list:
        fixed = FixedShapeSteps(model, graphs=False)
        cache = fixed.init_cache(*compile_step.encoded(model, rows), positions=64, width=1)
        buffers = fixed.buffers

        def eager(t: int):
            buffers.position.fill_(t)
            cache.length, cache.positions_bucket = t, 16
            return fixed._step(cache)

        def step(tokens, position, *weights):  # the position lives in the buffers; here it is an input too
            buffers.tokens.copy_(tokens)
            return fixed._step(cache)

        for t in range(t0):
            eager(t)
        tokens = buffers.tokens.clone()
        buffers.position.fill_(t0)
        traced = torch.jit.trace(step, (tokens, buffers.position, *packed), check_trace=False)
        positions = range(t0, t0 + 4)
        same = True
        for t in positions:
            expected = eager(t).clone()  # writes position t; the trace then rewrites it from the same state
            buffers.position.fill_(t)
            same &= torch.equal(traced(tokens, buffers.position, *packed), expected)
        eager_ms = compile_step.best_ms(lambda: eager(t0), steps)
        buffers.position.fill_(t0)
        traced_ms = compile_step.best_ms(lambda: traced(tokens, buffers.position, *packed), steps)
        print(
            f"| {rows} | {positions.start}-{positions.stop - 1} | {same} | {eager_ms:.3f} | {traced_ms:.3f} "
            f"| {traced_ms / eager_ms:.2f} |"
        )


def first_replays(model, packed: list, rows_list: list[int], rounds: int = 8):
    """What TorchScript's graph optimizations cost once: the step traced again and again, its first
    three replays timed with them on and off, alternately, each setting first in half the rounds
    (decoding replays with them off: models/traced_step.py). Medians of `rounds`, ms."""
    print("| rows | optimizations | tracing | replay 1 | replay 2 | replay 3 |")
    print("|---|---|---|---|---|---|")
    for rows in rows_list:
        cache = model.init_cache(*compile_step.encoded(model, rows))
        tokens = torch.full((rows,), model.cfg.decoder_start_id)
        for _ in range(compile_step.WARM_STEPS):
            model.decode_step(tokens, cache)

        def step(tokens, *weights):
            cache.length = compile_step.WARM_STEPS
            return model.decode_step(tokens, cache)

        times = {True: [], False: []}
        for round_ in range(rounds):
            for optimize in (True, False) if round_ % 2 == 0 else (False, True):
                with torch.jit.optimized_execution(optimize):
                    marks = [time.perf_counter()]
                    traced = torch.jit.trace(step, (tokens, *packed), check_trace=False)
                    marks.append(time.perf_counter())
                    for _ in range(3):
                        traced(tokens, *packed)
                        marks.append(time.perf_counter())
                times[optimize].append([b - a for a, b in zip(marks, marks[1:])])
        for optimize, runs in times.items():
            medians = [statistics.median(run[i] for run in runs) * 1e3 for i in range(4)]
            print(f"| {rows} | {'on' if optimize else 'off'} | " + " | ".join(f"{m:.1f}" for m in medians) + " |")


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rows", default="1,8,32,160")
    parser.add_argument("--steps", type=int, default=300)
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--fixed-shape", action="store_true", help="trace the fixed-shape step (see above)")
    mode.add_argument(
        "--first-replays",
        action="store_true",
        help="the one-off cost of TorchScript's graph optimizations (see first_replays)",
    )
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    model = compile_step.load("onednn")
    for parameter in model.parameters():
        parameter.requires_grad_(False)  # a traced graph holds them as constants
    packed = [m.packed_weight for m in model.modules() if isinstance(m, PackedLinear) and m.packed]
    print(
        f"CPU: {cpu_description()}; {args.threads} threads; torch {torch.__version__}; demo model, beam 1, "
        f"ms per step\n"
    )
    rows_list = [int(r) for r in args.rows.split(",")]
    if args.fixed_shape:
        with torch.no_grad():
            fixed_shape(model, packed, rows_list, args.steps)
        return
    if args.first_replays:
        with torch.no_grad():
            first_replays(model, packed, rows_list)
        return
    print("| rows | eager | traced | traced ÷ eager | same logits | tracing it, s |")
    print("|---|---|---|---|---|---|")
    with torch.no_grad():
        for rows in rows_list:
            cache = model.init_cache(*compile_step.encoded(model, rows))
            tokens = torch.full((rows,), model.cfg.decoder_start_id)
            for _ in range(compile_step.WARM_STEPS):
                model.decode_step(tokens, cache)

            def step(tokens, *weights):  # the packed weights are inputs: the tracer cannot hold them as constants
                cache.length = compile_step.WARM_STEPS
                return model.decode_step(tokens, cache)

            expected = step(tokens)

            def record():
                traced = torch.jit.trace(step, (tokens, *packed), check_trace=False)
                same = torch.equal(traced(tokens, *packed), expected)  # the first calls optimise the graph
                traced(tokens, *packed)
                return traced, same

            tracing, (traced, same) = timed(record)
            eager_ms = compile_step.best_ms(lambda: step(tokens), args.steps)
            traced_ms = compile_step.best_ms(lambda: traced(tokens, *packed), args.steps)
            print(
                f"| {rows} | {eager_ms:.3f} | {traced_ms:.3f} | {traced_ms / eager_ms:.2f} | {same} | {tracing:.2f} |"
            )


if __name__ == "__main__":
    main()
