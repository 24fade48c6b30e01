"""Stage 5: the native model directory, its held-out scores with the project's
own decoder, and the files picked from its output (common_words.tsv, sample.en)."""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
import time
from collections import Counter
from pathlib import Path

import torch

from .common import BOS, PAD, REPO, log, read_lines, write_lines
from .tokenizer import without_training_paths

# Decoding defaults shipped with the model: beam 5, and at most 2 target tokens
# per source token + 10, so that a rare runaway output stays short.
DECODING = {"beam_size": 5, "max_len_a": 2.0, "max_len_b": 10}


def export(model, scratch: Path, model_dir: Path):
    """Stage 5a: the native directory, fp16 weights. Dropout is a training setting:
    the exported config says 0."""
    from dataclasses import replace

    from nmtdecode.models.formats import native
    from nmtdecode.models.transformer import Transformer

    inference = Transformer(replace(model.cfg, dropout=0.0))
    inference.load_state_dict(model.state_dict())
    inference.eval()
    model_dir.mkdir(parents=True, exist_ok=True)
    native.save(
        str(model_dir),
        inference,
        spm_files={"source": "spm.model"},
        decoding=DECODING,
        banned_ids=[PAD, BOS],
        dtype=torch.float16,
    )
    (model_dir / "spm.model").write_bytes(without_training_paths((scratch / "spm.model").read_bytes()))
    kept = ("model.safetensors", "config.yaml", "spm.model")
    size = sum(f.stat().st_size for f in model_dir.iterdir() if f.name in kept)
    log(f"exported {os.path.relpath(model_dir, REPO)}: {size / 1e6:.1f} MB")
    return size


def translate(model_dir: Path, src: Path, beam_size: int, threads: int, *options: str) -> list[str]:
    """Run the project's decoder exactly as a user would (the `nmtdecode translate` CLI)."""
    import subprocess

    command = [
        sys.executable,
        "-m",
        "nmtdecode",
        "translate",
        "--model",
        str(model_dir),
        "--src",
        str(src),
        "--beam-size",
        str(beam_size),
        "--threads",
        str(threads),
        "--quiet",
        *options,
    ]
    result = subprocess.run(command, cwd=REPO, capture_output=True, text=True, encoding="utf-8")
    if result.returncode != 0:
        raise SystemExit(f"nmtdecode translate failed ({result.returncode}): {result.stderr.strip()}")
    return result.stdout.split("\n")[:-1]


def scores(sources, hyps, refs, accepted) -> dict:
    import sacrebleu

    return {
        "bleu": round(sacrebleu.corpus_bleu(hyps, [refs]).score, 1),
        "chrf": round(sacrebleu.corpus_chrf(hyps, [refs]).score, 1),
        "exact": round(100 * sum(h == r for h, r in zip(hyps, refs)) / len(refs), 1),
        "accepted": round(100 * sum(h in accepted[s] for s, h in zip(sources, hyps)) / len(refs), 1),
    }


def evaluate(args, scratch: Path, model_dir: Path) -> tuple[dict, list[str], list[str], dict]:
    """Stage 5b: BLEU and chrF of beam-5 output on the held-out test split, with the decoder's
    defaults (stop rule `top`) and, for comparison, with `--early-stopping false`."""
    shutil.copyfile(scratch / "test.en", model_dir / "test.en")
    shutil.copyfile(scratch / "test.de", model_dir / "test.de")
    sources, refs = read_lines(model_dir / "test.en"), read_lines(model_dir / "test.de")
    with open(scratch / "accepted.json", encoding="utf-8") as f:
        accepted = json.load(f)
    started = time.monotonic()
    hyps = translate(model_dir, model_dir / "test.en", 5, args.threads)
    seconds = time.monotonic() - started
    write_lines(scratch / "test.hyp.de", hyps)
    metrics = {**scores(sources, hyps, refs, accepted), "decode_seconds": round(seconds, 1)}
    searched_on = translate(model_dir, model_dir / "test.en", 5, args.threads, "--early-stopping", "false")
    metrics["false"] = scores(sources, searched_on, refs, accepted)
    log(f"test (beam 5): {metrics}")
    return metrics, sources, hyps, accepted


def common_words(scratch: Path, model_dir: Path, sources, hyps, accepted, count: int = 20):
    """Held-out test sources of at most three everyday words that the model translates
    to one of the dictionary's translations: common_words.tsv (english<TAB>a|b|c).
    Everyday = every word occurs in many training sources."""
    frequency = Counter(w.lower() for line in read_lines(scratch / "train.en") for w in set(line.split()))
    found = []
    for src, hyp in zip(sources, hyps):
        words = src.split()
        if len(words) > 3 or re.search(r"[\d.]", src) or hyp not in accepted[src]:
            continue
        found.append((min(frequency[w.lower()] for w in words), src))
    found.sort(key=lambda x: (-x[0], x[1]))
    chosen = [src for _, src in found[:count]]
    write_lines(model_dir / "common_words.tsv", [f"{src}\t{'|'.join(accepted[src])}" for src in chosen])
    log(f"common_words.tsv: {len(chosen)} of {len(found)} correctly translated short test sources")
    return chosen


# Demo phrases and the translations counted as right; sample.en gets the first ten
# the model gets right (what `nmtdecode translate --src data/demo/sample.en` shows).
DEMO = {
    "good morning": ["Guten Morgen"],
    "thank you": ["danke", "Danke", "Dankeschön", "Danke schön", "vielen Dank", "Vielen Dank"],
    "the house": ["das Haus"],
    "water": ["Wasser"],
    "cat": ["Katze"],
    "dog": ["Hund"],
    "good night": ["Gute Nacht"],
    "the children": ["die Kinder"],
    "How are you?": ["Wie geht es Ihnen?", "Wie geht es dir?", "Wie geht's?", "Wie geht es euch?"],
    "I love you.": ["Ich liebe dich.", "Ich liebe Sie."],
    "beer": ["Bier"],
    "red wine": ["Rotwein"],
    "good evening": ["Guten Abend"],
    "the old man": ["der alte Mann"],
    "book": ["Buch"],
    "apple": ["Apfel"],
    "Good luck!": ["Viel Glück!"],
    "my friend": ["mein Freund", "meine Freundin"],
}


def demo_sample(args, scratch: Path, model_dir: Path, count: int = 10):
    phrases = list(DEMO)
    write_lines(scratch / "demo.en", phrases)
    outputs = translate(model_dir, scratch / "demo.en", 5, args.threads)
    right = [p for p, o in zip(phrases, outputs) if o in DEMO[p]]
    for p, o in zip(phrases, outputs):
        log(f"demo: {p} -> {o}{'' if o in DEMO[p] else '   (not one of ' + ', '.join(DEMO[p]) + ')'}")
    write_lines(model_dir / "sample.en", right[:count])
    return list(zip(phrases, outputs)), right[:count]
