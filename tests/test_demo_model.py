"""The bundled demo model (data/demo): it loads, gets common words right, and its held-out
chrF is the one its model card reports."""

import functools
import os
import re

import pytest
import sacrebleu

from nmtdecode.options.config import Config
from nmtdecode.engine.engine import Engine
from nmtdecode.engine.resolve import resolve

from tests.helpers import DEMO


@functools.lru_cache(maxsize=None)
def demo_decoder(beam: int):
    """The demo model's engine and a decoder, loaded once for all tests of this file."""
    config = Config.from_values({"model": DEMO, "beam_size": beam})
    engine = Engine.load(config)
    job = resolve(config, engine)
    return engine, job.decoder


def translate(lines, beam=5):
    engine, decoder = demo_decoder(beam)
    examples = [engine.make_example(i, line, None) for i, line in enumerate(lines)]
    outputs = []
    for start in range(0, len(examples), 32):
        batch = examples[start : start + 32]
        nbests = decoder.decode([e.ids for e in batch]).nbests
        outputs += [engine.loaded.tokenizer.decode(n[0].tokens) for n in nbests]
    return outputs


def test_common_words_come_out_right():
    with open(os.path.join(DEMO, "common_words.tsv"), encoding="utf-8") as f:
        entries = [line.rstrip("\n").split("\t") for line in f if line.strip()]
    assert len(entries) >= 15
    sources = [english for english, _ in entries]
    for (english, accepted), output in zip(entries, translate(sources)):
        assert output in accepted.split("|"), f"{english!r} -> {output!r}, expected one of {accepted!r}"


def test_common_words_are_held_out():
    with open(os.path.join(DEMO, "common_words.tsv"), encoding="utf-8") as f:
        words = {line.split("\t")[0] for line in f if line.strip()}
    with open(os.path.join(DEMO, "test.en"), encoding="utf-8") as f:
        test = set(f.read().splitlines())
    assert words <= test


def card_value(metric: str) -> float:
    with open(os.path.join(DEMO, "README.md"), encoding="utf-8") as f:
        match = re.search(rf"^\| {metric} \| ([0-9.]+) \|", f.read(), flags=re.MULTILINE)
    assert match, f"the model card has no {metric} row"
    return float(match.group(1))


@pytest.mark.slow  # 1,000 sentences at beam 5: ~5 s
def test_heldout_chrf_matches_the_model_card():
    with open(os.path.join(DEMO, "test.en"), encoding="utf-8") as f:
        sources = f.read().splitlines()
    with open(os.path.join(DEMO, "test.de"), encoding="utf-8") as f:
        references = f.read().splitlines()
    chrf = sacrebleu.corpus_chrf(translate(sources), [references]).score
    assert abs(chrf - card_value("chrF")) <= 1.0


def test_demo_command_translates_the_sample(cli):
    with open(os.path.join(DEMO, "sample.en"), encoding="utf-8") as f:
        sample = f.read().splitlines()
    run = cli(
        "translate",
        "-c",
        "configs/demo.yaml",
        "--src",
        "data/demo/sample.en",
        "--quiet",
        cwd=os.path.dirname(os.path.dirname(DEMO)),
        text=True,
    )
    assert run.returncode == 0, run.stderr
    outputs = run.stdout.splitlines()
    assert len(outputs) == len(sample) and all(outputs)
    assert outputs == translate(sample)  # the config's settings are the ones the tests use


# What a first-time user types (data/demo/sample.en, what `make demo` translates), with the
# translations a German speaker accepts; written by hand, not taken from the model's output.
EVERYDAY = {
    "good morning": {"Guten Morgen"},
    "thank you": {"Danke", "danke", "Dankeschön", "Danke schön", "Vielen Dank"},
    "the house": {"das Haus"},
    "water": {"Wasser"},
    "cat": {"Katze"},
    "dog": {"Hund"},
    "the children": {"die Kinder"},
    "I love you.": {"Ich liebe dich.", "Ich liebe Sie."},
    "beer": {"Bier"},
    "red wine": {"Rotwein"},
}


def test_everyday_phrases_come_out_right():
    with open(os.path.join(DEMO, "sample.en"), encoding="utf-8") as f:
        assert set(f.read().splitlines()) == set(EVERYDAY)
    phrases = list(EVERYDAY)
    for phrase, output in zip(phrases, translate(phrases)):
        assert output in EVERYDAY[phrase], f"{phrase!r} -> {output!r}"
