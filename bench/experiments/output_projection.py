"""How should the CPU multiply by a large output projection kept plain (tied to the embeddings)?

    python bench/experiments/output_projection.py [--threads 2] [--isa native|avx2] [--rows 16,64]
        [--vocab 256206] [--width 1024] [--repeat 5] [--cpu-time]

NLLB's and mBART's output projections (256k x 1024 in float32, 1 GB) are tied to the token
embeddings, whose lookup needs the plain rows, so the product reads the plain matrix: a packed
copy beside it would cost another gigabyte. For the rows of one decoding step (16 sentences at
beam 1 and at beam 4), the best time of each way to multiply by it:

  torch linear            torch's own product (MKL's sgemm on x86 builds);
  onednn blocks of N      oneDNN's product on N rows of the weight at a time, each reordered
                          into oneDNN's layout at every call, into one output (models/gemm.py);
  onednn swapped          the same product with the roles swapped, W x^T: the weight is the
                          input, read as it lies, and the step's few rows are the reordered
                          "weight"; the (vocab, rows) result transposed into place, whole or
                          a block of N rows of the weight at a time, or as many rows as make
                          a result of 16 MB;
  onednn packed copy      a packed copy of the whole weight: the bound the others are held
                          against (it costs the gigabyte);
  models/gemm.py          PackedLinear on the plain weight, as the engine multiplies it: swapped
                          up to SWAPPED_MAX_ROWS, each 16 MB result transposed into place in
                          pieces of TRANSPOSE_CHUNK_BYTES (`transpose_into`), by blocks above.

--cpu-time reports the CPU seconds of all threads instead of wall seconds (bench/common.py).
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # bench/, for common
from common import kernel_experiment_parser, start_kernel_experiment  # noqa: E402

TODAY = "onednn blocks of 4096"  # what models/gemm.py did before the swapped product


def main():
    parser = kernel_experiment_parser(__doc__, repeat=5)
    parser.add_argument("--rows", default="16,64", help="rows of a step, comma-separated")
    parser.add_argument("--vocab", type=int, default=256206)
    parser.add_argument("--width", type=int, default=1024)
    parser.add_argument("--ways", default="", help="only the ways whose names hold one of these, comma-separated")
    args = parser.parse_args()
    clock = start_kernel_experiment(args)
    import torch
    import torch.nn.functional as F

    from nmtdecode.models.gemm import PackedLinear, cpu_description

    weight = torch.randn(args.vocab, args.width, generator=torch.Generator().manual_seed(0)) * 0.02
    product = torch.ops.mkldnn._linear_pointwise
    plain_layer = PackedLinear(weight, pack=False)  # what the engine runs for a tied projection kept plain

    def best(work):
        work()
        times = []
        for _ in range(args.repeat):
            start = clock()
            work()
            times.append(clock() - start)
        return min(times)

    def blocks(x, rows, weights):
        out = x.new_empty(x.size(0), args.vocab)
        for i, first in enumerate(range(0, args.vocab, rows)):
            out[:, first : first + rows] = product(x, weights[i], None, "none", [], "")
        return out

    def swapped(x, rows):
        out = x.new_empty(x.size(0), args.vocab)
        for first in range(0, args.vocab, rows):
            out[:, first : first + rows] = product(weight[first : first + rows], x, None, "none", [], "").t()
        return out

    def ways_for(x):
        """Every way to multiply the rows x by the weight: name -> a function of nothing."""
        ways = {"torch linear": lambda: F.linear(x, weight)}
        for block in (1024, 4096, 16384):
            plain = [weight[first : first + block] for first in range(0, args.vocab, block)]
            ways[f"onednn blocks of {block}"] = lambda plain=plain, block=block: blocks(x, block, plain)
        ways["onednn swapped"] = lambda: product(weight, x, None, "none", [], "").t().contiguous()
        for block in (4096, 16384):
            ways[f"onednn swapped, blocks of {block}"] = lambda block=block: swapped(x, block)
        results_of_16_mb = max(1, (16 << 20) // (4 * x.size(0)))
        ways["onednn swapped, results of 16 MB"] = lambda: swapped(x, results_of_16_mb)
        ways["models/gemm.py (swapped up to 64 rows, transposed in pieces)"] = lambda: plain_layer(x)
        packed = []  # made on first use: a second gigabyte

        def packed_copy():
            if not packed:
                packed.extend(
                    torch.ops.mkldnn._reorder_linear_weight(weight[first : first + 65536], None)
                    for first in range(0, args.vocab, 65536)
                )
            return blocks(x, 65536, packed)

        ways["onednn packed copy"] = packed_copy
        wanted = [w for w in args.ways.split(",") if w]
        return {way: work for way, work in ways.items() if way == TODAY or not wanted or any(w in way for w in wanted)}

    print(f"CPU: {cpu_description()}; ISA {args.isa}; {args.threads} threads; torch {torch.__version__}")
    print(f"weight {args.vocab} x {args.width}; {'CPU' if args.cpu_time else 'wall'} ms, best of {args.repeat}\n")
    print(f"| rows | way | ms | GFLOP/s | ÷ {TODAY} |")
    print("|---|---|---|---|---|")
    with torch.inference_mode():
        for rows in map(int, args.rows.split(",")):
            x = torch.randn(rows, args.width)
            expected = F.linear(x, weight)
            results = {}
            for way, work in ways_for(x).items():
                torch.testing.assert_close(work(), expected, rtol=1e-4, atol=1e-4)
                results[way] = best(work)
            flop = 2 * rows * args.vocab * args.width
            for way, seconds in results.items():
                ratio = seconds / results[TODAY]
                print(f"| {rows} | {way} | {seconds * 1e3:.1f} | {flop / seconds / 1e9:.0f} | {ratio:.2f} |")


if __name__ == "__main__":
    main()
