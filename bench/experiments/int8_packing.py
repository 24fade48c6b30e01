"""How should fbgemm pack a tall int8 weight (an output projection over a large vocabulary)?

    python bench/experiments/int8_packing.py [--threads 2] [--isa native|avx2] [--vocab 256206]
        [--width 1024] [--blocks 1,4,16,32,64] [--rows 8] [--repeat 5] [--cpu-time]

An int8 output projection that fbgemm multiplies (models/quantize.py, `int8_linear`: every int8
model on a CPU without VNNI, and a tied table of up to 64 MB on one with it) is packed into
fbgemm's layout when the model loads. For the weight whole and cut into blocks of rows (one
fbgemm layer each, their outputs side by side), this prints the seconds to pack it (once) and
the best time of one product of `--rows` rows of activations (a step's few hypotheses), and
checks that the blocks give the whole layer's logits bit for bit.
"""

from __future__ import annotations

import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # bench/, for common
from common import kernel_experiment_parser, start_kernel_experiment  # noqa: E402


def main() -> None:
    parser = kernel_experiment_parser(__doc__, repeat=5)
    parser.add_argument("--vocab", type=int, default=256206)
    parser.add_argument("--width", type=int, default=1024)
    parser.add_argument("--blocks", default="1,4,16,32,64", help="numbers of blocks, comma-separated")
    parser.add_argument("--rows", type=int, default=8, help="rows of activations a product multiplies")
    args = parser.parse_args()
    clock = start_kernel_experiment(args)
    import torch

    from nmtdecode.models.gemm import cpu_description
    from nmtdecode.models.quantize import RowBlocks, _fbgemm_linear, quantize_rows

    generator = torch.Generator().manual_seed(0)
    values, scales = quantize_rows(torch.randn(args.vocab, args.width, generator=generator) * 0.02)
    x = torch.randn(args.rows, args.width, generator=generator)
    shape = f"{args.vocab} x {args.width} int8, {args.rows} rows"
    print(f"{cpu_description()}, --isa {args.isa}, {args.threads} threads; {shape}")
    print("| blocks | rows a block | pack (s) | product (ms, best) | same logits as whole |")
    print("|---|---|---|---|---|")
    whole = None
    for count in (int(n) for n in args.blocks.split(",")):
        size = -(-args.vocab // count)
        start = time.perf_counter()
        layers = [_fbgemm_linear(values[i : i + size], scales[i : i + size], None) for i in range(0, args.vocab, size)]
        packed = time.perf_counter() - start
        layer = RowBlocks(layers) if len(layers) > 1 else layers[0]
        logits = layer(x)
        whole = logits if whole is None else whole
        times = []
        for _ in range(args.repeat):
            begin = clock()
            layer(x)
            times.append(clock() - begin)
        print(f"| {count} | {size} | {packed:.2f} | {min(times) * 1000:.1f} | {torch.equal(logits, whole)} |")


if __name__ == "__main__":
    main()
