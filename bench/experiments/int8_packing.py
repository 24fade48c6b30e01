"""How should fbgemm pack a tall int8 weight (an output projection over a large vocabulary)?

    python bench/experiments/int8_packing.py [--threads 2] [--isa native|avx2] [--vocab 256206]
        [--width 1024] [--blocks 1,8,32] [--rows 8,64] [--repeat 25] [--cpu-time]

An int8 output projection that fbgemm multiplies (models/quantize.py, `int8_linear`: every int8
model on a CPU without VNNI, and a tied table of up to 64 MB on one with it) is packed into
fbgemm's layout when the model loads. For the weight whole and cut into blocks of rows (one
fbgemm layer each, their outputs side by side), this prints the seconds to pack it (once, from
fbgemm's input copy on 2 MB pages as int8_linear makes it for a large weight, and once on 4 KB
pages) and the median time of one product by `--rows` rows of activations (a step's
hypotheses), the layouts' calls interleaved, and checks that the blocks give the whole layer's
logits bit for bit.
"""

from __future__ import annotations

import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # bench/, for common
from common import kernel_experiment_parser, start_kernel_experiment  # noqa: E402


def side_by_side(parts):
    """The blocks as one layer: their outputs side by side."""
    import torch

    return lambda x: torch.cat([part(x) for part in parts], dim=-1)


def main() -> None:
    parser = kernel_experiment_parser(__doc__, repeat=25)
    parser.add_argument("--vocab", type=int, default=256206)
    parser.add_argument("--width", type=int, default=1024)
    parser.add_argument("--blocks", default="1,8,32", help="numbers of blocks, comma-separated (the first: reference)")
    parser.add_argument(
        "--rows", type=lambda v: [int(r) for r in v.split(",")], default=[8, 64], help="rows of activations"
    )
    args = parser.parse_args()
    clock = start_kernel_experiment(args)
    import torch

    from nmtdecode.models import quantize
    from nmtdecode.models.gemm import cpu_description
    from nmtdecode.models.quantize import int8_linear, quantize_rows

    generator = torch.Generator().manual_seed(0)
    values, scales = quantize_rows(torch.randn(args.vocab, args.width, generator=generator) * 0.02)
    counts = [int(n) for n in args.blocks.split(",")]
    print(f"{cpu_description()}, --isa {args.isa}, {args.threads} threads; {args.vocab} x {args.width} int8")
    layers, packed, on_small_pages = {}, {}, {}

    def pack(size: int) -> list:
        return [int8_linear(values[i : i + size], scales[i : i + size], None) for i in range(0, args.vocab, size)]

    for count in counts:
        size = -(-args.vocab // count)
        start = time.perf_counter()
        parts = pack(size)
        packed[count] = time.perf_counter() - start
        layers[count] = side_by_side(parts) if len(parts) > 1 else parts[0]
        threshold, quantize.HUGE_PAGES_FROM = quantize.HUGE_PAGES_FROM, values.numel() + 1
        start = time.perf_counter()
        pack(size)
        on_small_pages[count] = time.perf_counter() - start
        quantize.HUGE_PAGES_FROM = threshold
    print(
        "| blocks | rows a block | pack (s) | pack on 4 KB pages (s) | "
        + " | ".join(f"product of {r} rows (ms)" for r in args.rows)
        + " |"
    )
    print("|---|---|---|---|" + "---|" * len(args.rows))
    times: dict[tuple[int, int], list[float]] = {(c, r): [] for c in counts for r in args.rows}
    for rows in args.rows:
        x = torch.randn(rows, args.width, generator=generator)
        whole = layers[counts[0]](x)
        for count in counts:  # warm, and the same logits from every layout
            assert torch.equal(layers[count](x), whole), f"{count} blocks: other logits"
        for _ in range(args.repeat):  # interleaved: a change in the machine's load hits every layout alike
            for count in counts:
                begin = clock()
                layers[count](x)
                times[count, rows].append(clock() - begin)
    for count in counts:
        cells = " | ".join(f"{statistics.median(times[count, r]) * 1000:.1f}" for r in args.rows)
        print(f"| {count} | {-(-args.vocab // count)} | {packed[count]:.2f} | {on_small_pages[count]:.2f} | {cells} |")


if __name__ == "__main__":
    main()
