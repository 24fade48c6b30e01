"""Does a CTranslate2 folder stored in int8 decode to CTranslate2's own int8 outputs, and how often
does int8 change an output against float32?

    python bench/experiments/ct2_int8.py [--lines 1000] [--beam-size 4] [--repeat 1]

The demo model (trained) converted for CTranslate2 as stored and in int8 (bench/convert.py; its
sources end with EOS), the first --lines lines of data/demo/test.en cut by its SentencePiece model,
translated by the ctranslate2 package and by nmtdecode.compat.ctranslate2 on the same folders
(beam --beam-size, CTranslate2's defaults otherwise). Prints the share of identical outputs for:
nmtdecode and CTranslate2 in float32, in int8, CTranslate2's int8 against its float32, and
nmtdecode's int8 with fbgemm's dynamic layers instead (the activations of a batch quantized with
one scale, where CTranslate2 quantizes each row alone), with the time of each int8 run (the
median of --repeat, after a warm-up), and which CPU.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # bench/, for common
from common import DEMO, median_seconds  # noqa: E402
from convert import to_ctranslate2  # noqa: E402

from nmtdecode.compat import ctranslate2 as compat  # noqa: E402
from nmtdecode.models import placement  # noqa: E402
from nmtdecode.models.gemm import cpu_description  # noqa: E402
from nmtdecode.models.loading import load_model  # noqa: E402
from nmtdecode.models.quantize import int8_linear, quantized_rows  # noqa: E402


def folders(tmp: str) -> dict:
    """The demo converted as stored (None) and in int8, its config asking for EOS after a source."""
    loaded = load_model(DEMO)
    sp = loaded.tokenizer.target
    tokens = [sp.id_to_piece(i) for i in range(sp.get_piece_size())]
    paths = {}
    for quantization in (None, "int8"):
        path = to_ctranslate2(loaded.model, tokens, os.path.join(tmp, f"demo-{quantization}"), quantization)
        with open(os.path.join(path, "config.json"), encoding="utf-8") as f:
            config = json.load(f)
        with open(os.path.join(path, "config.json"), "w", encoding="utf-8") as f:
            json.dump({**config, "add_source_eos": True}, f)
        paths[quantization] = path
    return paths


def fbgemm_layers(weight, bias):
    """An int8 linear layer of fbgemm's dynamic kind over the stored rows (per-batch activation scale)."""
    values, scales = weight.int8_rows() if hasattr(weight, "int8_rows") else quantized_rows(weight)
    return int8_linear(values, scales, bias)


def main():
    import ctranslate2

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lines", type=int, default=1000)
    parser.add_argument("--beam-size", type=int, default=4)
    parser.add_argument("--repeat", type=int, default=1)
    args = parser.parse_args()
    with open(os.path.join(DEMO, "test.en"), encoding="utf-8") as f:
        lines = f.read().splitlines()[: args.lines]
    sp = load_model(DEMO).tokenizer.source
    batch = [sp.encode(line, out_type=str) for line in lines]
    outputs, seconds = {}, {}
    with tempfile.TemporaryDirectory() as tmp:
        paths = folders(tmp)
        translators = {
            ("ctranslate2", "float32"): ctranslate2.Translator(paths[None], intra_threads=1),
            ("ctranslate2", "int8"): ctranslate2.Translator(paths["int8"], intra_threads=1),
            ("nmtdecode", "float32"): compat.Translator(paths[None], intra_threads=1),
            ("nmtdecode", "int8"): compat.Translator(paths["int8"], intra_threads=1),
        }
        built = placement._int8_linear
        placement._int8_linear = fbgemm_layers  # the design not taken, for the comparison
        translators["nmtdecode fbgemm", "int8"] = compat.Translator(paths["int8"], intra_threads=1)
        placement._int8_linear = built
        for key, translator in translators.items():
            translator.translate_batch(batch[:32], beam_size=args.beam_size)  # warm-up
            seconds[key] = median_seconds(lambda: outputs.__setitem__(key, run(translator, batch, args)), args.repeat)
    print(f"CPU: {cpu_description()}; ctranslate2 {ctranslate2.__version__}; {len(lines)} lines, beam {args.beam_size}")
    for a, b in [
        (("nmtdecode", "float32"), ("ctranslate2", "float32")),
        (("nmtdecode", "int8"), ("ctranslate2", "int8")),
        (("ctranslate2", "int8"), ("ctranslate2", "float32")),
        (("nmtdecode", "int8"), ("ctranslate2", "float32")),
        (("nmtdecode fbgemm", "int8"), ("ctranslate2", "int8")),
    ]:
        same = sum(x == y for x, y in zip(outputs[a], outputs[b]))
        print(f"{' '.join(a)} vs {' '.join(b)}: {same}/{len(lines)} identical ({same / len(lines):.1%})")
    for key in (("ctranslate2", "int8"), ("nmtdecode", "int8"), ("nmtdecode fbgemm", "int8")):
        print(f"{' '.join(key)}: {seconds[key]:.2f} s")


def run(translator, batch: list[list[str]], args) -> list[list[str]]:
    return [r.hypotheses[0] for r in translator.translate_batch(batch, beam_size=args.beam_size)]


if __name__ == "__main__":
    main()
