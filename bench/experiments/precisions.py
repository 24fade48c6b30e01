"""Each precision's products on this CPU (models/cpu.py decides which run natively): the
measurements behind docs/speed.md's "Precisions per CPU class".

    python bench/experiments/precisions.py [--threads 2] [--repeat 20]
    ONEDNN_MAX_CPU_ISA=AVX512_CORE python bench/experiments/precisions.py    # AVX-512 without VNNI or BF16
    ONEDNN_MAX_CPU_ISA=AVX2 ATEN_CPU_CAPABILITY=avx2 FBGEMM_ENABLE_INSTRUCTIONS=AVX2 \\
        python bench/experiments/precisions.py                                # AVX2

For a Transformer-base feed-forward weight (2048 x 512), its 32k x 512 output projection and a
16k-token block of NLLB's 256k x 1024 one, at 8, 64 and 160 rows: float32 (torch's linear and
oneDNN on packed weights), bfloat16 on oneDNN (wherever oneDNN runs it at all: natively with
AVX512_BF16 or AMX, converted to float32 product by product on other AVX-512 CPUs), and int8:
fbgemm's dynamic-quantized linear (packed weights: every linear layer, and a copy of a tied
table) and torch._int_mm on the plain int8 table with each row of activations quantized alone
(only with AVX512-VNNI within oneDNN's cap: without it torch runs a reference loop, and a capped
oneDNN saturates). Best of --repeat, alternated.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # bench/, for common
import common  # noqa: E402, F401  (puts the repository on sys.path)
import torch  # noqa: E402

from nmtdecode.models import cpu  # noqa: E402
from nmtdecode.models.gemm import PackedLinear  # noqa: E402
from nmtdecode.models.quantize import Int8Embedding, Int8TiedOutput, int8_linear, quantize_rows  # noqa: E402

SHAPES = {"FFN 2048 x 512": (2048, 512), "output 32k x 512": (32000, 512), "output 16k x 1024": (16384, 1024)}
COLUMNS = ("float32 torch", "float32 oneDNN", "bfloat16 oneDNN", "int8 fbgemm", "int8 _int_mm")


def best_times(functions: dict, repeat: int) -> dict[str, float]:
    for function in functions.values():
        function()  # warm-up
    best = {name: float("inf") for name in functions}
    for _ in range(repeat):
        for name, function in functions.items():
            start = time.perf_counter()
            function()
            best[name] = min(best[name], time.perf_counter() - start)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=20)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    caps = cpu.current()
    print(f"CPU: {caps.name}; torch's kernels {caps.torch_isa}; {caps.features()}; {args.threads} threads")
    print("| weight | rows | " + " | ".join(COLUMNS) + " |")
    print("|---|---|" + "---|" * len(COLUMNS))
    generator = torch.Generator().manual_seed(0)
    for label, (rows_out, width) in SHAPES.items():
        weight = torch.randn(rows_out, width, generator=generator) * 0.05
        embedding = Int8Embedding(*quantize_rows(weight))
        products = {"float32 torch": torch.nn.Linear(width, rows_out, bias=False)}
        products["float32 torch"].weight.data = weight
        if caps.onednn:
            products["float32 oneDNN"] = PackedLinear(weight)
        if caps.onednn_bf16:
            products["bfloat16 oneDNN"] = PackedLinear(weight.bfloat16())
        products["int8 fbgemm"] = int8_linear(embedding.values, embedding.scales, None)
        if caps.int8_dot:
            products["int8 _int_mm"] = Int8TiedOutput(embedding, None)
        for rows in (8, 64, 160):
            x = torch.randn(rows, width, generator=generator)
            functions = {
                name: (lambda p=product, n=name: p(x.bfloat16() if n.startswith("bfloat16") else x))
                for name, product in products.items()
            }
            with torch.inference_mode():
                best = best_times(functions, args.repeat)
            cells = [f"{best[n] * 1e3:.2f} ms" if n in best else "not native" for n in COLUMNS]
            print(f"| {label} | {rows} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
