"""How many operators does a decoding step launch, model and search apart: the count a GPU pays
a kernel launch for each (without CUDA graphs), measured on the CPU with torch.profiler.

    python bench/experiments/step_operators.py [--shape marian-base|demo] [--beam 5] [--batch 32]
        [--steps 12] [--time-attention]

Runs one batch through the decoding loop for each variant and counts, per step, the operators
called by the loop's own code (top-level: an operator that another operator calls runs inside
it, on a GPU inside its kernel), those that compute (views, reshapes without a copy and other
metadata changes launch no kernel) apart. Variants:

    attention   `attend` (two products: the CPU's step) or the fused kernel (the GPU's step,
                models/attention.py `step_attend`), forced here on the CPU
    runner      the model's own step (eager) or the fixed-shape step of CUDA graphs, run eagerly
    search      the host search (search/beam.py) or the device search (search/device/beam.py)

The counts, not the times, are the point: on a GPU each computing operator is at least one
kernel (docs/speed.md has the table).
"""

from __future__ import annotations

import argparse
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # bench/, for common
import common  # noqa: E402, F401  (the repository on sys.path)
from operators import MODEL, SEARCH, labelled_parts, part_counts  # noqa: E402

from nmtdecode.options.config import DecodingConfig  # noqa: E402
from nmtdecode.engine.decoding import BatchDecoder  # noqa: E402
from nmtdecode.models import attention  # noqa: E402
from nmtdecode.models.architecture import TransformerConfig  # noqa: E402
from nmtdecode.models.fixed_step import FixedShapeSteps  # noqa: E402
from nmtdecode.models.transformer import Transformer  # noqa: E402

SHAPES = {  # Transformer-base as Marian has it (32k vocabulary: the output layer's size does not change counts)
    "marian-base": dict(
        d_model=512,
        heads=8,
        encoder_layers=6,
        decoder_layers=6,
        ffn_dim=2048,
        activation="silu",
        pre_norm=False,
        encoder_final_norm=False,
        decoder_final_norm=False,
        vocab=32000,
    ),
    "demo": dict(d_model=256, heads=4, encoder_layers=3, decoder_layers=2, ffn_dim=768, vocab=6000),
}


def build(shape: dict) -> Transformer:
    values = dict(shape)
    vocab = values.pop("vocab")
    cfg = TransformerConfig(
        src_vocab_size=vocab,
        tgt_vocab_size=vocab,
        pad_id=0,
        unk_id=1,
        bos_id=2,
        eos_id=3,
        decoder_start_id=2,
        max_positions=256,
        **values,
    )
    torch.manual_seed(0)
    return Transformer(cfg).eval()


def count(
    model: Transformer, sources: list[list[int]], beam: int, steps: int, fused: bool, fixed: bool, on_device: bool
) -> dict[str, tuple[float, float]]:
    """(operators, computing operators) per step of each part, over `steps` steps of one batch."""
    runner = FixedShapeSteps(model, graphs=False) if fixed else None
    decoder = BatchDecoder(
        model,
        DecodingConfig(beam_size=beam, max_length=steps, min_length=steps),
        steps=runner,
        search_on="device" if on_device else "host",
    )
    attend = attention.step_attend
    if fused:  # the GPU's choice, forced on the CPU
        attention.step_attend = lambda q, k, v, mask: attention.fused_attention(q, k, v, mask)
    try:
        with torch.inference_mode():
            decoder.decode(sources)  # warm-up
            with labelled_parts(decoder), torch.profiler.profile() as prof:
                decoder.decode(sources)
    finally:
        attention.step_attend = attend
    return {part: (calls / steps, computing / steps) for part, (calls, computing) in part_counts(prof).items()}


def time_attention(repeat: int = 300):
    """A step's attention on the CPU: the two products (`attend`) against the fused kernel, for
    step shapes (sentences, heads, rows per sentence, keys, head size): median microseconds."""
    import statistics
    import time

    print("| sentences, heads, rows, keys, head size | two products µs | fused µs | fused ÷ two products |")
    print("| --- | ---: | ---: | ---: |")
    for b, h, k, t, hd in [
        (32, 4, 5, 100, 64),
        (32, 8, 5, 150, 64),
        (32, 8, 1, 30, 64),
        (128, 8, 5, 150, 64),
        (32, 8, 5, 40, 64),
    ]:
        g = torch.Generator().manual_seed(0)
        q, keys, values = (torch.randn(b, h, rows, hd, generator=g) for rows in (k, t, t))
        mask = torch.rand(b, 1, k, t, generator=g) > 0.3
        mask[..., 0] = True
        times = {}
        for name, attend in (("two", attention.attend), ("fused", attention.fused_attention)):
            for _ in range(20):
                attend(q, keys, values, mask)
            runs = []
            for _ in range(repeat):
                start = time.perf_counter()
                attend(q, keys, values, mask)
                runs.append(time.perf_counter() - start)
            times[name] = statistics.median(runs) * 1e6
        print(
            f"| {b}, {h}, {k}, {t}, {hd} | {times['two']:.0f} | {times['fused']:.0f} "
            f"| {times['fused'] / times['two']:.2f} |"
        )


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shape", default="marian-base", choices=SHAPES)
    parser.add_argument("--beam", type=int, default=5)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--time-attention", action="store_true", help="time a step's attention both ways instead")
    args = parser.parse_args()
    if args.time_attention:
        return time_attention()
    model = build(SHAPES[args.shape])
    g = torch.Generator().manual_seed(1)
    vocab = model.cfg.src_vocab_size
    sources = [
        torch.randint(4, vocab, (int(torch.randint(8, 30, (1,), generator=g)),), generator=g).tolist() + [3]
        for _ in range(args.batch)
    ]
    layers = model.cfg.decoder_layers
    print(
        f"{args.shape} ({layers} decoder layers), beam {args.beam}, batch {args.batch}, {args.steps} steps, "
        f"torch {torch.__version__}; operators per step: all / computing (the GPU's kernels)"
    )
    print("| runner | attention | search | model step | per decoder layer | search |")
    print("| --- | --- | --- | ---: | ---: | ---: |")
    for fixed in (False, True):
        for fused in (False, True):
            for on_device in (False, True):
                counts = count(model, sources, args.beam, args.steps, fused, fixed, on_device)
                (step, step_computing), (search, search_computing) = counts[MODEL], counts[SEARCH]
                print(
                    f"| {'fixed shape' if fixed else 'eager'} | {'fused' if fused else 'attend'} "
                    f"| {'device' if on_device else 'host'} | {step:.0f} / {step_computing:.0f} "
                    f"| {step_computing / layers:.1f} | {search:.0f} / {search_computing:.0f} |"
                )


if __name__ == "__main__":
    main()
