"""How often does a CTranslate2 T5 folder stored in int8 decode to CTranslate2's own int8 outputs,
and how often does CTranslate2's int8 give its float32 outputs?

    python bench/experiments/ct2_t5_int8.py [--sources 300] [--variants t5 t5-v1.1 mt5 madlad]

Seeded random T5 models of the test suite (tests/models/formats/t5_models.py: v1.0, v1.1, mT5, a
MADLAD-like start) converted by CTranslate2's TransformersConverter as stored and in int8
(tests/peer_ctranslate2.py), --sources random sources of 1 to 10 pieces each, greedy and beam 4 (2
hypotheses), 20 steps at most, translated by the ctranslate2 package and by
nmtdecode.compat.ctranslate2 on the same folders. Prints, per variant and search, the share of
identical n-best lists: nmtdecode and CTranslate2 in float32, in int8, and CTranslate2's int8
against its float32; and which CPU. Random models' next-token distributions are nearly flat, so
their outputs hang on near-ties that a trained model's seldom do.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # bench/, for common
import common  # noqa: E402, F401  (puts the repository on the path)

from nmtdecode.compat import ctranslate2 as compat  # noqa: E402
from nmtdecode.models.gemm import cpu_description  # noqa: E402
from tests import peer_ctranslate2  # noqa: E402

SEARCHES = {"greedy": {"beam_size": 1}, "beam 4": {"beam_size": 4, "num_hypotheses": 2}}


def main() -> None:
    import ctranslate2

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sources", type=int, default=300)
    parser.add_argument("--variants", nargs="+", default=list(peer_ctranslate2.T5_VARIANTS))
    args = parser.parse_args()
    print(f"CPU: {cpu_description()}; ctranslate2 {ctranslate2.__version__}; {args.sources} sources")
    print(
        "| variant | search | nmtdecode = CTranslate2, float32 | nmtdecode = CTranslate2, int8 | "
        "CTranslate2 int8 = its float32 |"
    )
    print("|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        for variant in args.variants:
            root = Path(tmp) / variant
            paths = {q: str(peer_ctranslate2.convert_t5(variant, root, q)) for q in (None, "int8")}
            words = [p for p in peer_ctranslate2.t5_pieces(variant) if p.startswith("w")]
            batch = peer_ctranslate2.sources(words, ["</s>"], count=args.sources)
            for name, search in SEARCHES.items():
                out = {}
                for q, path in paths.items():
                    for who, translator in (
                        ("theirs", ctranslate2.Translator(path, intra_threads=1)),
                        ("ours", compat.Translator(path)),
                    ):
                        out[who, q] = translator.translate_batch(batch, max_decoding_length=20, **search)
                shares = [
                    peer_ctranslate2.same_share(out["theirs", None], out["ours", None]),
                    peer_ctranslate2.same_share(out["theirs", "int8"], out["ours", "int8"]),
                    peer_ctranslate2.same_share(out["theirs", None], out["theirs", "int8"]),
                ]
                cells = " | ".join(f"{round(s * args.sources)}/{args.sources} ({s:.1%})" for s in shares)
                print(f"| {variant} | {name} | {cells} |", flush=True)


if __name__ == "__main__":
    main()
