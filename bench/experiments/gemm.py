"""torch's `linear` against oneDNN's prepacked product on decoder-shaped matrices, on this CPU.

    python bench/experiments/gemm.py [--threads 2] [--model marian-base|demo]

For every weight shape of the model and a few row counts (one sentence at beam 1,
a batch of 32 at beam 1 and at beam 5, an encoder batch), the best time of each
backend, its GFLOP/s and the ratio, with the CPU it ran on. Then the two ways of
summing a step from such products: each product timed alone, again and again on
one weight, and a step's layers in turn, each its own weight
(models/gemm.py:measure, the probe `--gemm auto` makes at load). On a small model the
two differ: a product timed alone finds its weight in the cache, a step's does not.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from typing import Callable, Iterator

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # bench/, for common
from common import DEMO  # noqa: E402

from nmtdecode.models.gemm import (  # noqa: E402
    PROBE_ROWS,
    cpu_description,
    linear_shapes,
    measure,
    onednn_available,
    probed_shapes,
)

ROWS = (1, 32, 160, 1024)


def best_of_both(
    first: Callable[[], object], second: Callable[[], object], budget: float = 0.01
) -> tuple[float, float]:
    """Best time of each of two calls, alternated (so both see the same machine load) for
    about `budget` seconds, at least 3 times each."""
    first(), second()  # warm-up: first-call allocations and kernel selection
    best, spent, calls = [float("inf"), float("inf")], 0.0, 0
    while calls < 3 or spent < budget:
        for i, function in enumerate((first, second)):
            start = time.perf_counter()
            function()
            elapsed = time.perf_counter() - start
            best[i], spent = min(best[i], elapsed), spent + elapsed
        calls += 1
    return best[0], best[1]


def model_shapes(name: str) -> dict:
    if name == "demo":
        from nmtdecode.models.loading import load_model

        return linear_shapes(load_model(DEMO).model)
    from run import prepare_marian

    from nmtdecode.models.checkpoint import read_json
    from nmtdecode.models.formats.huggingface import load_network

    dirs, _ = prepare_marian(1)
    model, _, _ = load_network(dirs["nmtdecode"], read_json(os.path.join(dirs["nmtdecode"], "config.json")))
    return linear_shapes(model)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--model", default="marian-base", choices=["marian-base", "demo"])
    args = parser.parse_args()
    if not onednn_available():
        raise SystemExit("this torch build has no oneDNN linear")
    torch.set_num_threads(args.threads)
    print(f"CPU: {cpu_description()}; {args.threads} threads; torch {torch.__version__}; model {args.model}\n")
    print("| weight (out x in) | rows | torch µs | GFLOP/s | onednn µs | GFLOP/s | torch ÷ onednn |")
    print("|---|---|---|---|---|---|---|")
    g = torch.Generator().manual_seed(0)
    shapes = model_shapes(args.model)
    with torch.inference_mode():
        for out_features, in_features in sorted(shapes):
            for rows, plain, onednn in timed_by_rows((out_features, in_features), ROWS, g, budget=0.1):
                flop = 2 * rows * in_features * out_features
                print(
                    f"| {out_features} x {in_features} | {rows} | {plain * 1e6:.0f} | {flop / plain / 1e9:.0f} | "
                    f"{onednn * 1e6:.0f} | {flop / onednn / 1e9:.0f} | {plain / onednn:.2f} |"
                )
    print(f"\nA step's products at {', '.join(map(str, PROBE_ROWS))} rows, summed:\n")
    print("| timed | torch ms | onednn ms | onednn ÷ torch |")
    print("|---|---|---|---|")
    for way, seconds in (
        ("each product alone", alone(shapes)),
        ("layers in turn (`--gemm auto`)", measure(shapes, torch.float32)),
    ):
        plain, onednn = seconds["torch"], seconds["onednn"]
        print(f"| {way} | {plain * 1e3:.2f} | {onednn * 1e3:.2f} | {onednn / plain:.2f} |")


def alone(shapes: dict) -> dict:
    """A step's products summed from each shape's product timed again and again on its own weight."""
    totals = {"torch": 0.0, "onednn": 0.0}
    g = torch.Generator().manual_seed(0)
    with torch.inference_mode():
        for shape, count in probed_shapes(shapes).items():
            for _, plain, onednn in timed_by_rows(shape, PROBE_ROWS, g, budget=0.01):
                totals["torch"] += count * plain
                totals["onednn"] += count * onednn
    return totals


def timed_by_rows(shape: tuple, row_counts: tuple, g: torch.Generator, budget: float) -> Iterator[tuple]:
    """One random weight of `shape` (out, in), plain and packed: at each row count, (rows, torch's
    best seconds, oneDNN's), the product timed again and again (`best_of_both`)."""
    out_features, in_features = shape
    weight, bias = torch.randn(out_features, in_features, generator=g), torch.randn(out_features, generator=g)
    packed = torch.ops.mkldnn._reorder_linear_weight(weight, None)
    for rows in row_counts:
        x = torch.randn(rows, in_features, generator=g)
        plain, onednn = best_of_both(
            lambda: F.linear(x, weight, bias),
            lambda: torch.ops.mkldnn._linear_pointwise(x, packed, bias, "none", [], ""),
            budget=budget,
        )
        yield rows, plain, onednn


if __name__ == "__main__":
    main()
