"""What an ensemble costs: the decoding time of two models against one, in one process.

    python bench/experiments/ensemble.py [--lines 200] [--repeat 3] [--beam-size 5]

The demo model alone, then an ensemble of it and a second copy of its files (two models of the
demo's shapes; the copy keeps the load from sharing anything), on the first --lines lines of
data/demo/test.en, batch 32, the median of --repeat runs of `Translator.translate` after one
warm-up (model load and import not counted). Prints the times and their ratio, and which CPU.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # bench/, for common
from common import DEMO, median_seconds  # noqa: E402

from nmtdecode.api import Translator  # noqa: E402
from nmtdecode.models.gemm import cpu_description  # noqa: E402


def seconds(translator: Translator, lines: list[str], repeat: int, **options) -> float:
    translator.translate(lines[:32], **options)  # warm-up: oneDNN kernels, allocator
    return median_seconds(lambda: translator.translate(lines, **options), repeat)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lines", type=int, default=200)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--beam-size", type=int, default=5)
    parser.add_argument("--threads", type=int, default=None)
    args = parser.parse_args()
    with open(os.path.join(DEMO, "test.en"), encoding="utf-8") as f:
        lines = [line.rstrip("\n") for line in f][: args.lines]
    options = dict(beam_size=args.beam_size, batch_size=32, batch_type="sents")
    runtime = {"threads": args.threads} if args.threads else {}
    with tempfile.TemporaryDirectory() as tmp:
        copy = shutil.copytree(DEMO, os.path.join(tmp, "demo-copy"))
        one = seconds(Translator.load(DEMO, **runtime), lines, args.repeat, **options)
        two = seconds(Translator.load([DEMO, copy], **runtime), lines, args.repeat, **options)
    print(f"CPU: {cpu_description()}")
    print(
        f"{len(lines)} lines, beam {args.beam_size}, batch 32: one model {one:.2f} s, two models {two:.2f} s, "
        f"ratio {two / one:.2f}x"
    )


if __name__ == "__main__":
    main()
