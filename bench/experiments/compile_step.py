"""Does compiling the decoding step pay? Eager steps against torch.compile's, on a CPU or a GPU.

    python bench/experiments/compile_step.py [--threads 2] [--rows 32] [--steps 50]
    python bench/experiments/compile_step.py --device cuda [--model marian-base] [--rows 32] [--width 5]

On the demo model, one batch of --rows sentences at beam 1 (a source of 12 tokens), the best
of 5 runs of --steps steps, in milliseconds per step:

* the eager step decoding uses (models/cache.py), with each matrix-product backend;
* the fixed-shape step (models/fixed_step.py, the one CUDA graphs replay) run eagerly;
* that step compiled by torch.compile (Inductor) once, with and without its `freezing`
  (weights as constants, packed for oneDNN), and the seconds the first call took.

The fixed-shape step is the form a compiler can take whole: its shapes change only between
buckets, not every step (compiling `decode_step` itself recompiled every step: its keys grow
by one position). Inductor needs a C++ compiler on the machine. The oneDNN packed product of
`--gemm onednn` has no Inductor lowering, so the compiled steps start from `--gemm torch`.

With --device cuda (Inductor's kernels are Triton's there): --rows sentences of --width rows
each (a beam's), in float16 by default, on the demo or a Transformer-base Marian of seeded random
weights (bench/convert.py). The fixed-shape step eager, replayed as the CUDA graph decoding uses
(models/fixed_step.py), compiled (`torch.compile`, its kernels launched one by one) and compiled
then captured in the same CUDA graph; per step the milliseconds (best of 5 runs), the kernels
launched (torch.profiler) per decoder layer, and the largest difference of the logits from the
eager step's.
"""

from __future__ import annotations

import argparse
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # bench/, for common
from common import DEMO, best_seconds, timed  # noqa: E402
from gpu_benchmark import synchronize  # noqa: E402

from nmtdecode.models.fixed_step import FixedShapeCache, FixedShapeSteps  # noqa: E402
from nmtdecode.models.gemm import cpu_description  # noqa: E402

SOURCE_LENGTH = 12
WARM_STEPS = 10  # steps decoded before the timed ones: the cache holds a few positions


class StillCache(FixedShapeCache):
    """The fixed-shape cache with its Python step counter left alone inside the step: the
    compiled step would otherwise guard on it and recompile every step. FixedShapeSteps.
    decode_step keeps the count itself; here every timed step rewrites the same position."""

    def advance(self):
        pass


def load(gemm: str):
    import nmtdecode

    return nmtdecode.Translator.load(DEMO, beam_size=1, gemm=gemm).engine.loaded.model


CPU = torch.device("cpu")


def best_ms(step, steps: int, device: torch.device = CPU) -> float:
    """Milliseconds per call of `step`: the best of 5 runs of `steps` calls (after one more), each
    run ending when `device` has done its work."""

    def run():
        for _ in range(steps):
            step()
        synchronize(device)

    run()
    return best_seconds(run, 5) / steps * 1e3


def encoded(model, rows: int):
    """The encoder output and source mask of `rows` random sources of SOURCE_LENGTH tokens, on the
    model's device."""
    device = next(model.parameters()).device
    generator = torch.Generator().manual_seed(0)
    src = torch.randint(4, model.cfg.src_vocab_size, (rows, SOURCE_LENGTH), generator=generator).to(device)
    mask = torch.ones(rows, SOURCE_LENGTH, dtype=torch.bool, device=device)
    return model.encode(src, mask), mask


def eager_step(model, rows: int, steps: int) -> float:
    cache = model.init_cache(*encoded(model, rows))
    tokens = torch.full((rows,), model.cfg.decoder_start_id)
    for _ in range(WARM_STEPS):
        model.decode_step(tokens, cache)

    def step():
        cache.length = WARM_STEPS  # every timed step decodes the same position (the buffer has room)
        model.decode_step(tokens, cache)

    return best_ms(step, steps)


def fixed_steps(model, rows: int, width: int = 1):
    """The fixed-shape step (not captured) and its cache for `rows` sentences of `width` rows each,
    every step at position WARM_STEPS."""
    steps = FixedShapeSteps(model, graphs=False)
    cache = steps.init_cache(*encoded(model, rows), positions=2 * WARM_STEPS, width=width)
    cache.__class__ = StillCache
    steps.buffers.position.fill_(WARM_STEPS)
    return steps, cache


def gpu_model(name: str, dtype: torch.dtype, device: torch.device):
    """The demo, or a Transformer-base Marian of seeded random weights, on `device` in `dtype`."""
    from nmtdecode.models.loading import load_model

    if name == "demo":
        path = DEMO
    else:
        from common import OUT
        from convert import marian_base_native

        path = marian_base_native(OUT)
    return load_model(path).model.to(device, dtype).eval()


def kernels_per_call(step, calls: int = 5) -> float:
    """CUDA kernels one call of `step` launches (torch.profiler; a graph's replay: the kernels in it)."""
    from torch.autograd import DeviceType

    torch.cuda.synchronize()
    activities = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
    with torch.profiler.profile(activities=activities) as prof:
        for _ in range(calls):
            step()
        torch.cuda.synchronize()
    return sum(e.count for e in prof.key_averages() if e.device_type == DeviceType.CUDA) / calls


def captured(steps: FixedShapeSteps, cache, step=None):
    """`step` (default: the fixed-shape step itself) recorded as one CUDA graph as decoding records
    it (FixedShapeSteps._capture): the graph's replay, and the logits it writes."""
    if step is not None:
        steps._step = step  # what _capture records (an attribute of the instance, for this capture)
    try:
        graph, logits = steps._capture(cache)
    finally:
        vars(steps).pop("_step", None)
    return graph.replay, logits


def tools() -> str:
    import shutil

    try:
        import triton

        version = triton.__version__
    except ImportError:
        version = "absent"
    return f"triton {version}; C compiler {shutil.which('cc') or shutil.which('gcc') or 'absent'}"


def beam_main(args) -> None:
    """--device cuda (or cpu, to try this code without a GPU: no graphs, no kernel counts)."""
    device, dtype = torch.device(args.device), getattr(torch, args.dtype)
    on_gpu = device.type == "cuda"
    model = gpu_model(args.model, dtype, device)
    layers = model.cfg.decoder_layers
    steps, cache = fixed_steps(model, args.rows, args.width)
    where = torch.cuda.get_device_name() if on_gpu else cpu_description()
    print(
        f"{where}; torch {torch.__version__}; {tools()}; {args.model}, {args.dtype}, "
        f"{args.rows} sentences x {args.width} rows, {layers} decoder layers\n"
    )
    print("| step | first call s | ms per step | kernels per step | kernels per layer | max abs logit diff |")
    print("|---|---|---|---|---|---|")
    reference = steps._step(cache).float().clone()

    def row(label, first, step, logits):
        ms = best_ms(step, args.steps, device)
        kernels = kernels_per_call(step) if on_gpu else float("nan")
        diff = (logits.float() - reference).abs().max().item()
        first_s = "–" if first is None else f"{first:.1f}"
        print(f"| {label} | {first_s} | {ms:.3f} | {kernels:.0f} | {kernels / layers:.1f} | {diff:.2e} |", flush=True)

    row("fixed-shape, eager", None, lambda: steps._step(cache), steps._step(cache))
    if on_gpu:
        replay, logits = captured(steps, cache)
        row("fixed-shape, CUDA graph (as decoding)", None, replay, logits)
    for mode in args.modes.split(","):
        torch._dynamo.reset()
        compiled = torch.compile(steps._step, dynamic=False, mode=None if mode == "default" else mode)
        try:
            first, logits = timed(lambda: (compiled(cache), synchronize(device))[0])
            row(f"torch.compile {mode}", first, lambda: compiled(cache), logits)
            if on_gpu and mode != "reduce-overhead":  # that mode records CUDA graphs itself
                replay, logits = captured(steps, cache, compiled)
                row(f"torch.compile {mode}, CUDA graph", None, replay, logits)
        except Exception as error:  # noqa: BLE001  (a compiler missing or failing is an answer too)
            print(f"| torch.compile {mode} | failed: {type(error).__name__}: {str(error).splitlines()[0][:200]} |")


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rows", type=int, default=32)
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--device", default="cpu", help="cuda: the beam rows below; cpu-beam: the same on the CPU")
    parser.add_argument("--model", default="marian-base", help="--device cuda: demo or marian-base")
    parser.add_argument("--width", type=int, default=5, help="--device cuda: rows per sentence (the beam)")
    parser.add_argument("--dtype", default="float16", help="--device cuda: float16, bfloat16 or float32")
    parser.add_argument("--modes", default="default", help="--device cuda: torch.compile modes, comma-separated")
    args = parser.parse_args()
    if args.device in ("cuda", "cpu-beam"):
        args.device = args.device.removesuffix("-beam")
        with torch.inference_mode():
            beam_main(args)
        return
    torch.set_num_threads(args.threads)
    import torch._inductor.config as inductor

    print(
        f"CPU: {cpu_description()}; {args.threads} threads; torch {torch.__version__}; demo model, "
        f"{args.rows} rows, beam 1\n"
    )
    print("| step | first call s | ms per step |")
    print("|---|---|---|")
    with torch.inference_mode():
        for gemm in ("onednn", "torch"):
            print(f"| eager, --gemm {gemm} | – | {eager_step(load(gemm), args.rows, args.steps):.2f} |")
        model = load("torch")
        steps, cache = fixed_steps(model, args.rows)
        print(f"| fixed-shape, eager, --gemm torch | – | {best_ms(lambda: steps._step(cache), args.steps):.2f} |")
        for freezing in (False, True):
            inductor.freezing = freezing
            torch._dynamo.reset()
            compiled = torch.compile(steps._step, dynamic=False)
            first, _ = timed(lambda: compiled(cache))
            label = "fixed-shape, torch.compile" + (" (freezing)" if freezing else "")
            print(f"| {label} | {first:.1f} | {best_ms(lambda: compiled(cache), args.steps):.2f} |")


if __name__ == "__main__":
    main()
