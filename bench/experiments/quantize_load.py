"""Does quantizing a load's blocks of rows in place make quantizing at load (`--quantize int8`) faster?

    python bench/experiments/quantize_load.py [--rounds 3] [--models marian-base,nllb-600m] [--threads 2]

`quantized_rows` (models/quantize.py) reads a weight a block of rows at a time into a float32
scratch block and quantizes it: `quantize_block_in_place`, four passes over the block itself. It
is measured against the rule written out in six plain passes with three temporaries (the way the
blocks were quantized before), which gives the same bits. First one block of 4096 x 1024 on one
thread (best of 30 calls, each variant's output compared bit for bit), then whole loads of seeded
random models (bench/convert.py) with `--quantize int8` from their float32 files, the two
variants alternating in one process, --rounds loads each.
"""

from __future__ import annotations

import argparse
import gc
import os
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # bench/, for common
from common import OUT  # noqa: E402

import nmtdecode.models.quantize as quantize  # noqa: E402
from nmtdecode.models.gemm import cpu_description  # noqa: E402

IN_PLACE = quantize.quantize_block_in_place


def six_passes(block: torch.Tensor, values: torch.Tensor, scales: torch.Tensor) -> None:
    """The same rule in plain passes, each making a new tensor, the results copied into place."""
    scales[:] = block.abs().amax(dim=1).float().clamp_min(torch.finfo(torch.float32).tiny) / 127
    values[:] = torch.round(block / scales[:, None]).clamp_(-127, 127).to(torch.int8)


VARIANTS = {"six passes, copied": six_passes, "in place": IN_PLACE}


def one_block() -> None:
    torch.manual_seed(0)
    rows = torch.randn(4096, 1024)
    block = torch.empty_like(rows)
    outputs = {}
    for name, variant in VARIANTS.items():
        values, scales = torch.empty(rows.shape, dtype=torch.int8), torch.empty(len(rows))
        best = float("inf")
        for _ in range(30):
            block.copy_(rows)
            start = time.perf_counter()
            variant(block, values, scales)
            best = min(best, time.perf_counter() - start)
        outputs[name] = (values, scales)
        print(f"| one block, {name} | {best * 1e3:.2f} ms |")
    (a, b), (c, d) = outputs.values()
    print(f"\nthe same int8 rows and scales: {torch.equal(a, c) and torch.equal(b, d)}\n")


def model_path(name: str) -> str:
    import convert

    if name == "marian-base":
        return convert.marian_base(os.path.join(OUT, "marian-base"))
    return convert.nllb_600m_shape(os.path.join(OUT, "nllb-600m"))


def loads(name: str, rounds: int) -> None:
    from nmtdecode.models.checkpoint import read_json
    from nmtdecode.models.formats.huggingface import load_network
    from nmtdecode.models.placement import Placement

    path = model_path(name)
    config = read_json(os.path.join(path, "config.json"))
    seconds: dict[str, list[float]] = {variant: [] for variant in VARIANTS}
    for r in range(rounds):
        for variant in VARIANTS if r % 2 == 0 else reversed(VARIANTS):
            quantize.quantize_block_in_place = VARIANTS[variant]  # what quantized_rows calls
            gc.collect()
            start = time.perf_counter()
            model = load_network(path, config, Placement(backend="int8"))
            seconds[variant].append(time.perf_counter() - start)
            del model
    quantize.quantize_block_in_place = IN_PLACE
    for variant, taken in seconds.items():
        print(f"| {name} load, {variant} | {min(taken):.2f} s (all: {', '.join(f'{t:.2f}' for t in taken)}) |")


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--models", default="marian-base,nllb-600m")
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    print(f"CPU: {cpu_description()}; torch {torch.__version__}\n")
    print("| what | fastest |\n|---|---|")
    torch.set_num_threads(1)
    one_block()
    torch.set_num_threads(args.threads)
    print("| what | fastest |\n|---|---|")
    for name in args.models.split(","):
        loads(name, args.rounds)


if __name__ == "__main__":
    main()
