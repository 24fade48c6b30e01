"""Does compiling the decoding step pay on this CPU? Eager steps against torch.compile's.

    python bench/experiments/compile_step.py [--threads 2] [--rows 32] [--steps 50]

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
"""

from __future__ import annotations

import argparse
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # bench/, for common
from common import DEMO, best_seconds, timed  # noqa: E402

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


def best_ms(step, steps: int) -> float:
    """Milliseconds per call of `step`: the best of 5 runs of `steps` calls."""

    def run():
        for _ in range(steps):
            step()

    return best_seconds(run, 5) / steps * 1e3


def encoded(model, rows: int):
    """The encoder output and source mask of `rows` random sources of SOURCE_LENGTH tokens."""
    generator = torch.Generator().manual_seed(0)
    src = torch.randint(4, model.cfg.src_vocab_size, (rows, SOURCE_LENGTH), generator=generator)
    mask = torch.ones(rows, SOURCE_LENGTH, dtype=torch.bool)
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


def fixed_steps(model, rows: int):
    steps = FixedShapeSteps(model, graphs=False)
    cache = steps.init_cache(*encoded(model, rows), positions=2 * WARM_STEPS, width=1)
    cache.__class__ = StillCache
    steps.buffers.position.fill_(WARM_STEPS)
    return steps, cache


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rows", type=int, default=32)
    parser.add_argument("--steps", type=int, default=50)
    args = parser.parse_args()
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
