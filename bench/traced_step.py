"""How much of a CPU decoding step is Python: the eager step against the same step recorded by
`torch.jit.trace` (TorchScript, part of torch: no compiler needed), demo model, beam 1.

    python bench/traced_step.py [--threads 2] [--rows 1,8,32,160] [--steps 300]

The trace is of one shape and one position (the cache is reset to the same position before every
call), so it is not a decoder yet: it measures what running the step's ~100 operator calls
without the Python between them would save, which `torch.compile` (bench/compile_step.py) did not
show on this CPU. The logits must be bit-identical to the eager step's; the script checks.

The tracer cannot record `torch.ops.mkldnn._linear_pointwise` called from Python (its
`Scalar?[]` argument), so for the trace the oneDNN products go through a TorchScript function
that makes the same call (`PackedLinear.forward` is replaced here, in this process only).
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, HERE)

import compile_step  # noqa: E402

from nmtdecode.models.gemm import PackedLinear, cpu_description  # noqa: E402

SCRIPTED = torch.jit.CompilationUnit("""
def packed_linear(x: Tensor, w: Tensor, b: Optional[Tensor], post_op: str, algorithm: str):
    scalars: List[Optional[number]] = []
    return torch.ops.mkldnn._linear_pointwise(x, w, b, post_op, scalars, algorithm)
""")


def traceable_products():
    PackedLinear.forward = lambda self, x: SCRIPTED.packed_linear(x, self.packed_weight, self.bias, self.post_op,
                                                                  self.algorithm)


def best_ms(call, steps: int) -> float:
    best = float("inf")
    for _ in range(5):
        start = time.perf_counter()
        for _ in range(steps):
            call()
        best = min(best, (time.perf_counter() - start) / steps)
    return best * 1e3


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rows", default="1,8,32,160")
    parser.add_argument("--steps", type=int, default=300)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    traceable_products()
    model = compile_step.load("onednn")
    for parameter in model.parameters():
        parameter.requires_grad_(False)  # a traced graph holds them as constants
    packed = [m.packed_weight for m in model.modules() if isinstance(m, PackedLinear)]
    print(f"CPU: {cpu_description()}; {args.threads} threads; torch {torch.__version__}; demo model, beam 1, "
          f"ms per step\n")
    print("| rows | eager | traced | traced ÷ eager | same logits | tracing it, s |")
    print("|---|---|---|---|---|---|")
    with torch.no_grad():
        for rows in map(int, args.rows.split(",")):
            cache = model.init_cache(*compile_step.encoded(model, rows))
            tokens = torch.full((rows,), model.cfg.decoder_start_id)
            for _ in range(compile_step.WARM_STEPS):
                model.decode_step(tokens, cache)

            def step(tokens, *weights):  # the packed weights are inputs: the tracer cannot hold them as constants
                cache.length = compile_step.WARM_STEPS
                return model.decode_step(tokens, cache)
            expected = step(tokens)
            start = time.perf_counter()
            traced = torch.jit.trace(step, (tokens, *packed), check_trace=False)
            same = torch.equal(traced(tokens, *packed), expected)  # the first calls optimise the graph
            traced(tokens, *packed)
            tracing = time.perf_counter() - start
            eager_ms = best_ms(lambda: step(tokens), args.steps)
            traced_ms = best_ms(lambda: traced(tokens, *packed), args.steps)
            print(f"| {rows} | {eager_ms:.3f} | {traced_ms:.3f} | {traced_ms / eager_ms:.2f} | {same} "
                  f"| {tracing:.2f} |")


if __name__ == "__main__":
    main()
