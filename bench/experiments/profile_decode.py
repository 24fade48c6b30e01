"""Where nmtdecode's decoding time goes: torch.profiler over one benchmark batch.

    python bench/experiments/profile_decode.py [--model marian-base|demo|nllb-600m] [--beam 5]
        [--threads 2] [--int8] [--isa native|avx2] [--shapes]

Decodes one batch of 32 sentences, marian-base (the benchmark's model and inputs,
every hypothesis 32 tokens long) or the demo model (32 test lines of the median
length, natural lengths), or the benchmark's batch of 16 on the NLLB-600M shape (beam 4
unless --beam says otherwise, 32 tokens each), and prints the operators by self CPU time,
then the share of time in matrix products and the operator calls per decoding step; with
--shapes, the operators by input shape too (the output projection apart from the layers').
--isa avx2 runs it with the libraries capped at AVX2 (bench/common.py: ISA_CAPS). This is the
profile behind docs/speed.md's note on what limits the speed-up over `transformers` and CTranslate2.
"""

from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # bench/, for common
from common import DEMO, ISA_CAPS, run_with_isa  # noqa: E402

MATMULS = (
    "mkldnn::_linear_pointwise",
    "aten::addmm",
    "aten::mm",
    "aten::bmm",
    "aten::matmul",
    "aten::linear",
    "aten::baddbmm",
    "quantized::linear_dynamic",
    "aten::_scaled_dot_product_flash_attention_for_cpu",
)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--beam", type=int, default=0, help="beam size (default: 4 on nllb-600m, else 5)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--model", default="marian-base", choices=["marian-base", "demo", "nllb-600m"])
    parser.add_argument("--isa", default="native", choices=sorted(ISA_CAPS), help="cap the instruction set")
    parser.add_argument("--shapes", action="store_true", help="also list the operators by input shape")
    parser.add_argument("--int8", action="store_true", help="profile the --quantize int8 model")
    parser.add_argument("--gemm", default="auto", choices=["auto", "onednn", "torch"], help="CPU matrix products")
    parser.add_argument("--rows", type=int, default=15, help="operators to list")
    args = parser.parse_args()
    run_with_isa(args.isa)
    import torch

    torch.set_num_threads(args.threads)
    from nmtdecode.options.config import Config
    from nmtdecode.models.gemm import cpu_description
    from nmtdecode.models.placement import Placement, place_model
    from nmtdecode.engine.decoding import BatchDecoder
    from nmtdecode.models import memory

    model, rules, sources, forced = profiled_batch(args.model)
    place_model(model, Placement(backend="int8" if args.int8 else args.gemm))
    memory.tune_allocator()  # as Engine.load: a step's large logits reuse freed memory, not fresh pages
    print(f"gemm: {model.backend} ({cpu_description()})")
    beam = args.beam or (4 if args.model == "nllb-600m" else 5)
    decoding = Config.from_values({"beam_size": beam, "length_penalty": "avg", "alpha": 1.0, **forced}).decoding
    translator = BatchDecoder(model, decoding, rules)
    with torch.inference_mode():
        translator.decode(sources[:4])  # warm-up
        activities = [torch.profiler.ProfilerActivity.CPU]
        with torch.profiler.profile(activities=activities, record_shapes=args.shapes) as prof:
            translator.decode(sources)
    events = prof.key_averages()
    print(events.table(sort_by="self_cpu_time_total", row_limit=args.rows))
    if args.shapes:
        by_shape = prof.key_averages(group_by_input_shape=True)
        print(by_shape.table(sort_by="self_cpu_time_total", row_limit=args.rows))
    total = sum(e.self_cpu_time_total for e in events)
    matmul = sum(e.self_cpu_time_total for e in events if e.key in MATMULS)
    print(f"matrix products (incl. attention kernels): {100 * matmul / total:.0f}% of self CPU time")
    steps = next((e.count for e in events if e.key == "aten::_log_softmax"), 0)  # one per step, every search
    calls = sum(e.count for e in events if e.key.startswith(("aten::", "mkldnn::", "quantized::")))
    if steps:
        print(
            f"{steps} decoding steps, {total / steps / 1000:.2f} ms and ~{calls / steps:.0f} operator calls "
            "(nested ones included) per step"
        )


def profiled_batch(name: str):
    """(model, rules, sources, forced lengths) of the batch profiled for model `name`: the demo's
    (`demo_batch`), or the benchmark's batch of 16 (NLLB-600M shape) or 32 (marian-base), every
    hypothesis 32 tokens long. The model is not yet placed."""
    if name == "demo":
        return demo_batch()
    from run import prepare_marian, prepare_nllb

    from nmtdecode.models.checkpoint import read_json
    from nmtdecode.models.formats.huggingface import load_network

    dirs, task = prepare_nllb(16) if name == "nllb-600m" else prepare_marian(32)
    model, _, rules = load_network(dirs["nmtdecode"], read_json(os.path.join(dirs["nmtdecode"], "config.json")))
    return model, rules, task["sources"], {"min_length": 32, "max_length": 32}


def demo_batch():
    """The bundled model and 32 of its test lines around the median length."""
    from nmtdecode.models.loading import load_model

    loaded = load_model(DEMO)
    with open(os.path.join(DEMO, "test.en"), encoding="utf-8") as f:
        sources = sorted((loaded.tokenizer.encode(line.rstrip("\n")) for line in f), key=len)
    middle = len(sources) // 2
    return loaded.model, loaded.rules, sources[middle - 16 : middle + 16], {}


if __name__ == "__main__":
    main()
