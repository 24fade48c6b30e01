"""nmtdecode.compat.ctranslate2 against CTranslate2 itself, on the demo model: CTranslate2 reads it
converted (bench/convert.py; its config says to append EOS to a source, as the demo's tokenizer
does), the compat module reads data/demo as it is. The common options give the same hypotheses
and scores (to 1e-4 of their size), the same per-token scores, tokens one at a time and
translated files; and two scripts of CTranslate2's documentation, run unchanged, print the same."""

import json
import os
import runpy
import sys

import pytest

from nmtdecode.compat import ctranslate2 as compat

from tests.helpers import REPO

pytestmark = pytest.mark.parity  # against a peer library: in make test, not in make test-fast
ctranslate2 = pytest.importorskip("ctranslate2")  # in the test extra: never skipped by `make test`

DEMO = REPO / "data" / "demo"
SCORE_RELATIVE = 1e-4  # float32 rounding: the bans act on the logits, as CTranslate2's (decoding.BatchDecoder.bans)


@pytest.fixture(scope="module")
def converted(tmp_path_factory):
    sys.path.insert(0, str(REPO / "bench"))
    from convert import to_ctranslate2

    from nmtdecode.models.loading import load_model

    loaded = load_model(str(DEMO))
    sp = loaded.tokenizer.target
    path = to_ctranslate2(
        loaded.model,
        [sp.id_to_piece(i) for i in range(sp.get_piece_size())],
        str(tmp_path_factory.mktemp("ct2") / "demo"),
    )
    config_file = os.path.join(path, "config.json")
    with open(config_file, encoding="utf-8") as f:
        config = json.load(f)
    config["add_source_eos"] = True  # the demo's sources end with EOS, as its tokenizer writes them
    with open(config_file, "w", encoding="utf-8") as f:
        json.dump(config, f)
    return path


@pytest.fixture(scope="module")
def both(converted):
    return (
        ctranslate2.Translator(converted, device="cpu", intra_threads=1),
        compat.Translator(str(DEMO), device="cpu", intra_threads=1),
    )


@pytest.fixture(scope="module")
def sources():
    import sentencepiece as spm

    sp = spm.SentencePieceProcessor(model_file=str(DEMO / "spm.model"))
    with open(DEMO / "test.en", encoding="utf-8") as f:
        lines = f.read().splitlines()[:100]
    return [sp.encode(line, out_type=str) for line in lines + ["", "good morning"]]


def agreement(theirs, ours) -> tuple[float, float]:
    """(the share of sources with the same hypotheses, the largest relative score difference among them)."""
    same = [(a, b) for a, b in zip(theirs, ours) if a.hypotheses == b.hypotheses]
    worst = max((abs(x - y) / max(abs(x), 1e-6) for a, b in same for x, y in zip(a.scores, b.scores)), default=0.0)
    return len(same) / len(theirs), worst


@pytest.mark.parametrize(
    "options",
    [
        {},
        {"return_scores": True},
        {"beam_size": 4, "num_hypotheses": 3, "return_scores": True},
        {"beam_size": 1, "return_scores": True},
        {"beam_size": 5, "length_penalty": 0.6, "return_scores": True},
        {"beam_size": 4, "length_penalty": 0, "return_scores": True},
        {"max_decoding_length": 4, "min_decoding_length": 3, "return_scores": True},
        {"repetition_penalty": 1.3, "return_scores": True},
        {"no_repeat_ngram_size": 2, "beam_size": 4},
        {"disable_unk": True, "max_batch_size": 7, "return_scores": True},
        {"max_batch_size": 64, "batch_type": "tokens", "beam_size": 3},
    ],
)
def test_translate_batch_gives_ctranslate2s_hypotheses_and_scores(both, sources, options):
    theirs, ours = (translator.translate_batch(sources, **options) for translator in both)
    same, worst = agreement(theirs, ours)
    assert same >= 0.99 and worst <= SCORE_RELATIVE, (same, worst)
    assert all(len(a.scores) == len(b.scores) for a, b in zip(theirs, ours))


def test_prefixes_and_attention_are_ctranslate2s(both, sources):
    """The same hypotheses, scores and attention rows, with target prefixes. CTranslate2's beam
    search gives a batch's first step the attention of another of its sentences (it reads the
    step before the batch is expanded to the beam): its first rows are compared one sentence at
    a time, the others in the batch."""
    prefixes = [source[:1] if i % 2 else None for i, source in enumerate(sources)]
    theirs, ours = (
        t.translate_batch(sources, target_prefix=prefixes, return_scores=True, return_attention=True) for t in both
    )
    same, worst = agreement(theirs, ours)
    assert same >= 0.99 and worst <= SCORE_RELATIVE, (same, worst)
    rows = [(a.attention[0][1:], b.attention[0][1:]) for a, b in zip(theirs, ours) if a.hypotheses == b.hypotheses]
    assert all(len(x) == len(y) for x, y in rows)
    theirs_rows, ours_rows = ([v for pair in rows for row in pair[side] for v in row] for side in (0, 1))
    assert theirs_rows == pytest.approx(ours_rows, abs=1e-4)
    for source, prefix in zip(sources[:12], prefixes):
        alone = [t.translate_batch([source], target_prefix=[prefix], return_attention=True)[0] for t in both]
        assert alone[0].hypotheses == alone[1].hypotheses
        assert [v for row in alone[0].attention[0] for v in row] == pytest.approx(
            [v for row in alone[1].attention[0] for v in row], abs=1e-4
        )


def test_score_batch_gives_ctranslate2s_tokens_and_log_probs(both, sources):
    targets = [t.hypotheses[0] for t in both[0].translate_batch(sources[::-1])]
    theirs, ours = (t.score_batch(sources, targets, offset=1) for t in both)
    assert [a.tokens for a in theirs] == [b.tokens for b in ours]
    assert [x for a in theirs for x in a.log_probs] == pytest.approx([x for b in ours for x in b.log_probs], abs=1e-4)


def test_generate_tokens_gives_ctranslate2s_steps(both, sources):
    for source in sources[:10] + sources[-2:]:
        theirs, ours = (list(t.generate_tokens(source, return_log_prob=True, max_decoding_length=12)) for t in both)
        assert [(s.step, s.token_id, s.token, s.is_last) for s in theirs] == [
            (s.step, s.token_id, s.token, s.is_last) for s in ours
        ]
        assert [s.log_prob for s in theirs] == pytest.approx([s.log_prob for s in ours], abs=1e-4)


def test_translate_file_writes_ctranslate2s_file(both, sources, tmp_path):
    source = tmp_path / "in.tok"
    source.write_text("".join(" ".join(s) + "\n" for s in sources), encoding="utf-8")
    for name, translator in zip(("theirs", "ours"), both):
        stats = translator.translate_file(str(source), str(tmp_path / name), beam_size=3)
        assert stats.num_examples == len(sources)
    assert (tmp_path / "ours").read_text(encoding="utf-8") == (tmp_path / "theirs").read_text(encoding="utf-8")


# Scripts of CTranslate2's documentation, as it gives them (docs/quickstart.md and docs/translation.md
# in OpenNMT/CTranslate2, MIT license): they load "ende_ctranslate2/" and "sentencepiece.model".
QUICKSTART = """import ctranslate2
import sentencepiece as spm

translator = ctranslate2.Translator("ende_ctranslate2/", device="cpu")
sp = spm.SentencePieceProcessor("sentencepiece.model")

input_text = "Hello world!"
input_tokens = sp.encode(input_text, out_type=str)

results = translator.translate_batch([input_tokens])

output_tokens = results[0].hypotheses[0]
output_text = sp.decode(output_tokens)

print(output_text)
"""
TRANSLATION = """import ctranslate2

translator = ctranslate2.Translator("ende_ctranslate2/", device="cpu")
results = translator.translate_batch([["\u2581H", "ello", "\u2581world", "!"]])

print(results[0].hypotheses[0])
"""


@pytest.mark.parametrize("script", [QUICKSTART, TRANSLATION], ids=["quickstart", "translation"])
@pytest.mark.parametrize("ours_on", ["the original", "the converted folder"])
def test_a_script_of_ctranslate2s_docs_runs_unchanged_and_prints_the_same(
    script, ours_on, converted, tmp_path, monkeypatch, capsys
):
    """Once with CTranslate2 on the converted model, once with `ctranslate2` being this module and
    ende_ctranslate2/ the original checkpoint (data/demo) or the converted folder itself: the same
    lines printed."""
    printed = []
    ours = str(DEMO) if ours_on == "the original" else converted
    for name, module, model in (("theirs", ctranslate2, converted), ("ours", compat, ours)):
        folder = tmp_path / name
        folder.mkdir()
        (folder / "ende_ctranslate2").symlink_to(model, target_is_directory=True)
        (folder / "sentencepiece.model").symlink_to(DEMO / "spm.model")
        (folder / "script.py").write_text(script, encoding="utf-8")
        with monkeypatch.context() as patch:
            patch.chdir(folder)
            patch.setitem(sys.modules, "ctranslate2", module)
            runpy.run_path("script.py", run_name="__main__")
        printed.append(capsys.readouterr().out)
    assert printed[0] == printed[1] and printed[0].strip()


WRONG_TYPES = {  # calls whose sources are not lists of pieces: CTranslate2 raises TypeError for each
    "a string for a source": lambda t: t.translate_batch(["good morning"]),
    "None for a source": lambda t: t.translate_batch([["▁good"], None]),
    "a string for the batch": lambda t: t.translate_batch("good morning"),
    "a string for a prefix": lambda t: t.translate_batch([["▁good"]], target_prefix=["Guten"]),
    "a string for a scored target": lambda t: t.score_batch([["▁good"]], ["Guten Morgen"]),
    "a string for generate_tokens": lambda t: list(t.generate_tokens("good morning")),
}


@pytest.mark.parametrize("call", list(WRONG_TYPES))
def test_a_source_that_is_not_a_list_of_pieces_is_a_type_error_as_in_ctranslate2(both, call):
    """Before: a string was split into characters, each decoded as a piece (CTranslate2 refuses it)."""
    theirs, ours = both
    for translator in (theirs, ours):
        with pytest.raises(TypeError):
            WRONG_TYPES[call](translator)
