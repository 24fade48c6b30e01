"""Marian's files as Marian and the OPUS-MT / Tatoeba releases write them: vocabularies written by
yaml-cpp's emitter (any piece: control characters raw or escaped, quotes, long keys), read piece
for piece as Marian reads them (models/formats/marian_yaml.py), a vocabulary PyYAML refuses
decoded as the same vocabulary written escaped, and a Tatoeba `tc-big` directory (12 encoder and
6 decoder layers, separate source and target vocabularies under Tatoeba's names, decoder.yml
naming them relative to itself) decoded as CTranslate2's own Marian converter reads it."""

import re
import shutil

import numpy as np
import pytest
import torch
import yaml

from nmtdecode.models.checkpoint import ModelError
from nmtdecode.models.formats import marian_yaml
from nmtdecode.models.formats.marian_vocab import read_vocabulary
from nmtdecode.models.formats.marian_yaml import VocabularyError, yaml_entries
from nmtdecode.models.loading import load_model

from tests.models.formats.marian_files import (
    OPTIONS,
    random_hf_state,
    to_marian,
    train_spm,
    vocabulary,
    write_model,
    write_vocabulary_as_marian,
)

# Every character below U+0800 (C0 and C1 controls among them; one piece each), and pieces that are
# hard to write in YAML.
TRICKY = [chr(c) for c in range(1, 0x800)] + [  # each once (a piece is one entry)
    "\u2028",
    "\u3000",
    "\U0001f600",
    "a b",
    "a: b",
    "a #b",
    "-x",
    "? y",
    ": z",
    "yes",
    "null",
    "\\x96",
    " lead",
    "trail ",
    "x\ty",
    "x\u2028y",
    "x\x85y",
    "x\x0cy",
    "\ufeffbom",
    "k" * 1500,
]


@pytest.mark.parametrize("escape_c1", [False, True], ids=["older yaml-cpp (raw C1)", "newer yaml-cpp (\\x escapes)"])
def test_a_vocabulary_written_as_marian_writes_it_is_read_piece_for_piece(tmp_path, escape_c1):
    tokens = ["</s>", "<unk>"] + TRICKY
    path = tmp_path / "vocab.yml"
    write_vocabulary_as_marian(path, tokens, escape_c1)
    with pytest.raises(yaml.YAMLError, match="unacceptable character" if not escape_c1 else "."):
        yaml.load(path.read_text(encoding="utf-8"), Loader=yaml.BaseLoader)  # what the issue met
    assert read_vocabulary(str(path)) == {t: i for i, t in enumerate(tokens)}


def test_a_vocabulary_pyyaml_writes_on_one_line_a_piece_is_read_piece_for_piece(tmp_path):
    """PyYAML's own dumper (escapes of its choice, single quotes) on the pieces it writes on one line."""
    tokens = ["</s>", "<unk>"] + [t for t in TRICKY if not re.search("[\n\r\x85\u2028\u2029]", t)]
    path = tmp_path / "vocab.yml"
    path.write_text(yaml.safe_dump({t: i for i, t in enumerate(tokens)}, allow_unicode=True, width=10**9))
    assert read_vocabulary(str(path)) == {t: i for i, t in enumerate(tokens)}


def test_what_yaml_reads_as_one_entry_is_read_the_same_or_refused_by_its_line():
    """Every short mix of YAML's indicators, spaces and letters: where PyYAML reads `KEY: 7` as one
    entry, the line reader reads the same piece or refuses the line; it never reads another piece,
    and takes the plain pieces Marian writes."""
    chars = "-?:,[]{}#&*!|>'\"%@` .~a1\\▁é\t"
    keys = [a + b + c for a in chars for b in chars for c in ("", "x", ": ", "#", " ")] + ["...", "---", "yes"]
    read = 0
    for key in keys:
        try:
            theirs = yaml.load(f"{key}: 7", Loader=yaml.BaseLoader)
        except yaml.YAMLError:
            theirs = None
        try:
            ours = dict(yaml_entries(f"{key}: 7"))
        except VocabularyError:
            continue
        read += 1
        assert {k: str(v) for k, v in ours.items()} == (theirs or {}), key
    assert read > 1000


@pytest.mark.parametrize(
    "text, message",
    [
        ("</s>: 0\n&a x: 1\n", "line 2: not a plain piece"),
        ("</s>: 0\n*a: 1\n", "line 2: not a plain piece"),
        ("</s>: 0\n  x: 1\n", "line 2: an indented line"),
        ("</s>: 0\nx: 1: 2\n", "line 2: not a `piece: id` entry"),
        ('</s>: 0\n"\\q": 1\n', "line 2: \\q is not an escape of YAML"),
        ('</s>: 0\n"\\x9": 1\n', "line 2: \\x needs 2 hexadecimal digits"),
        ('</s>: 0\n"open: 1\n', "line 2: no closing quote"),
        ("</s>: 0\n? x\n", "the file ends before the id of 'x'"),
        ("[1, 2]\n", "line 1: not a plain piece"),
    ],
)
def test_a_line_that_is_not_an_entry_is_named(tmp_path, text, message):
    path = tmp_path / "vocab.yml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(ModelError, match=re.escape(f"vocab.yml cannot be read: {message}")):
        read_vocabulary(str(path))


def test_a_vocabulary_is_bounded_in_bytes_and_entries(tmp_path, monkeypatch):
    path = tmp_path / "vocab.yml"
    path.write_text("".join(f"p{i}: {i}\n" for i in range(50)))
    assert len(read_vocabulary(str(path))) == 50
    monkeypatch.setattr(marian_yaml, "MAX_ENTRIES", 49)
    with pytest.raises(ModelError, match="more than 49 entries"):
        read_vocabulary(str(path))
    monkeypatch.setattr(marian_yaml, "MAX_BYTES", 100)
    with pytest.raises(ModelError, match="more than 0 MB"):
        read_vocabulary(str(path))


def test_a_json_vocabulary_is_read_as_json(tmp_path):
    path = tmp_path / "vocab.json"
    path.write_text('{"</s>": 0, "<unk>": 1, "\\u0096": 2, "a: b": 3}')
    assert read_vocabulary(str(path)) == {"</s>": 0, "<unk>": 1, "\x96": 2, "a: b": 3}
    path.write_text('{"</s>": 0, "<unk>": true}')
    with pytest.raises(ModelError, match="'<unk>': expected an id"):
        read_vocabulary(str(path))


D, FFN = 32, 64


def opus_mt(root, tokens: list[str], escape_c1: bool, spm_path):
    """A shared-vocabulary OPUS-MT directory whose vocabulary is written as Marian writes it."""
    state = random_hf_state(0, len(tokens), d=D, ffn=FFN)
    write_model(root, to_marian(state, len(tokens), (2, 2)), OPTIONS, tokens)
    write_vocabulary_as_marian(root / "vocab.yml", tokens, escape_c1)
    for name in ("source.spm", "target.spm"):
        shutil.copy(spm_path, root / name)
    return root


def test_a_raw_c1_piece_no_longer_stops_translate_or_inspect(tmp_path, lines_file, cli):
    """The issue's model: vocab.yml holds a raw U+0096 piece (yaml-cpp before it escaped C1
    controls), which PyYAML refuses. It translates and inspects as the same model whose vocabulary
    writes the piece as an escape."""
    sp = train_spm(tmp_path / "spm.model", seed=0)
    tokens = vocabulary(sp) + ["\x96", "\x85", "x\u2028y"]
    raw = opus_mt(tmp_path / "raw", tokens, escape_c1=False, spm_path=tmp_path / "spm.model")
    escaped = opus_mt(tmp_path / "escaped", tokens, escape_c1=True, spm_path=tmp_path / "spm.model")
    assert "\x96" in (raw / "vocab.yml").read_text(encoding="utf-8")
    source = lines_file(["the cat walks over the river .", "Hello world!", "small fish"])
    outputs = []
    for root in (raw, escaped):
        out = cli("translate", "--model", root, "--src", source, "--max-length", "12", "--quiet", text=True)
        assert out.returncode == 0, out.stderr
        shown = cli("inspect", root, text=True)
        assert shown.returncode == 0 and f"vocabulary:    source {len(tokens) + 1}" in shown.stdout, shown.stderr
        outputs.append(out.stdout)
    assert outputs[0] == outputs[1] and len(outputs[0].splitlines()) == 3


TATOEBA = "opusTCv20210807+bt.spm32k-spm32k"  # the names of Tatoeba-Challenge's tc-big releases
TC_BIG_LAYERS = (12, 6)


@pytest.fixture(scope="module")
def tc_big(tmp_path_factory):
    """A Tatoeba tc-big directory in miniature (12 + 6 layers, d_model 32): separate source and target
    vocabularies (`*.src.vocab.yml`, `*.trg.vocab.yml`) written as Marian writes them, a tied target
    output, decoder.yml naming the files relative to itself without `relative-paths`."""
    root = tmp_path_factory.mktemp("tc-big")
    source_sp, target_sp = train_spm(root / "source.spm", seed=0), train_spm(root / "target.spm", seed=1)
    source, target = vocabulary(source_sp), vocabulary(target_sp)
    size = min(len(source), len(target))
    source, target = source[:size], target[: size - 1] + ["\x96"]  # one size for both, as HF's pad row needs
    state = random_hf_state(7, size, d=D, ffn=FFN, layers=TC_BIG_LAYERS, shared=False)
    state["final_logits_bias"][0, 0] = 4.0  # EOS: outputs of different lengths
    arrays = to_marian(state, size, TC_BIG_LAYERS, shared=False, tied_output=True)
    options = {
        **OPTIONS,
        "enc-depth": 12,
        "dec-depth": 6,
        "transformer-ffn-activation": "relu",
        "tied-embeddings-all": False,
        "tied-embeddings": True,
    }
    npz = f"{TATOEBA}.transformer-big.model1.npz.best-perplexity.npz"
    write_model(root, arrays, options, source, target, npz=npz)
    vocabs = [f"{TATOEBA}.src.vocab.yml", f"{TATOEBA}.trg.vocab.yml"]
    for written, name, tokens in zip(("source.vocab.yml", "target.vocab.yml"), vocabs, (source, target)):
        (root / written).unlink()
        write_vocabulary_as_marian(root / name, tokens)
    settings = yaml.safe_load((root / "decoder.yml").read_text())
    del settings["relative-paths"]
    (root / "decoder.yml").write_text(yaml.safe_dump({**settings, "vocabs": vocabs, "beam-size": 4}))
    return root, source, target, vocabs


@pytest.mark.parity
def test_a_tatoeba_tc_big_directory_scores_and_decodes_as_ctranslate2_reads_it(tc_big):
    """CTranslate2's Marian converter on the same files: every target token's log-probability (a
    deep random model's argmax hardly depends on its source; its probabilities do) and the greedy
    tokens."""
    from tests.models.formats.test_marian_parity import convert, ours, sources, theirs_ctranslate2

    root, source, target, vocabs = tc_big
    loaded = load_model(str(root))
    cfg = loaded.model.cfg
    assert (cfg.encoder_layers, cfg.decoder_layers, cfg.share_embeddings, cfg.tie_output) == (12, 6, False, True)
    assert loaded.tokenizer.target_piece(len(target) - 1) == "\x96"
    ct2 = convert(root / next(root.glob("*.best-perplexity.npz")).name, [root / v for v in vocabs], root / "ct2")
    rows, targets = sources(len(source), seed=3), sources(len(target), seed=4)
    pieces = [[source[i] for i in r[:-1]] for r in rows], [[target[i] for i in t[:-1]] for t in targets]
    theirs = ct2.score_batch(*pieces)
    for row, wanted, scored in zip(rows, targets, theirs):
        src = torch.tensor([row])
        tgt_in = torch.tensor([[cfg.decoder_start_id] + wanted[:-1]])
        with torch.no_grad():
            logits = loaded.model(src, torch.ones_like(src, dtype=torch.bool), tgt_in)
        log_probs = torch.log_softmax(logits[0], -1).gather(1, torch.tensor(wanted)[:, None])[:, 0]
        np.testing.assert_allclose(log_probs.numpy(), scored.log_probs, atol=1e-4)
    found, _ = ours(loaded, rows, 1, 1)
    assert found == theirs_ctranslate2(ct2, rows, source, target, 1, 1)[0]


def test_a_tatoeba_npz_given_alone_finds_its_decoder_yml(tc_big):
    root, _, _, _ = tc_big
    npz = next(root.glob("*.best-perplexity.npz"))
    assert load_model(str(npz)).model.cfg.encoder_layers == 12
    assert np.isclose(load_model(str(root)).defaults["alpha"], 1.0)
