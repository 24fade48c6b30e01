"""nmtdecode.compat.ctranslate2 against CTranslate2 itself, on the demo model: CTranslate2 reads it
converted (bench/convert.py; its config says to append EOS to a source, as the demo's tokenizer
does), the compat module reads data/demo as it is. The common options give the same hypotheses
and scores (to 1e-4 of their size), the same per-token scores, tokens one at a time and
translated files; and two scripts of CTranslate2's documentation, run unchanged, print the same."""

import json
import math
import os
import runpy
import sys
import time

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


def test_version_device_and_compute_types_are_ctranslate2s(converted):
    """The stand-in answers as the CTranslate2 release it mirrors: its version, the device chosen
    for "auto" and the compute type of "default", "int8" and "auto" (int8 on a CPU that runs it
    natively: where fbgemm is there, as on every x86 CPU with AVX2)."""
    import torch

    assert compat.__version__ == ctranslate2.__version__
    for compute_type in ("default", "int8", "auto"):
        theirs = ctranslate2.Translator(converted, device="auto", compute_type=compute_type)
        ours = compat.Translator(str(DEMO), device="auto", compute_type=compute_type)
        assert (ours.device, ours.device_index) == (theirs.device, theirs.device_index)
        int8_here = "fbgemm" in torch.backends.quantized.supported_engines or compute_type != "auto"
        assert ours.compute_type == (theirs.compute_type if int8_here else "float32")


def test_unload_and_load_are_ctranslate2s(both, sources):
    """CTranslate2 does not unload while a batch is still counted as running, which a call just
    returned may be: it is asked again (the stand-in runs the calls made before first)."""
    results = []
    for translator in both:
        before = [r.hypotheses for r in translator.translate_batch(sources[:5])]
        translator.unload_model(to_cpu=True)  # on a CPU: nothing happens
        assert translator.model_is_loaded
        for _ in range(100):
            translator.unload_model()
            if not translator.model_is_loaded:
                break
            time.sleep(0.01)
        assert not translator.model_is_loaded
        with pytest.raises(RuntimeError, match="The model for this translator was unloaded"):
            translator.translate_batch(sources[:5])
        translator.load_model()
        assert translator.model_is_loaded
        assert [r.hypotheses for r in translator.translate_batch(sources[:5])] == before
        results.append(before)
    assert results[0] == results[1]


def prefixes_of(translator, sources: list) -> list:
    """Target prefixes of 0, 1 or 2 pieces, taken from the translator's own 1-best."""
    best = [r.hypotheses[0] for r in translator.translate_batch(sources)]
    return [hyp[: i % 3] for i, hyp in enumerate(best)]


@pytest.mark.parametrize(
    "options",
    [
        {"num_hypotheses": 3},
        {"num_hypotheses": 5, "beam_size": 1},
        {"num_hypotheses": 4, "beam_size": 4, "length_penalty": 0.6, "return_attention": True},
        {"num_hypotheses": 3, "beam_size": 3, "length_penalty": 0},
        {"num_hypotheses": 6, "min_alternative_expansion_prob": 0.05},
        {"num_hypotheses": 3, "max_decoding_length": 5, "min_decoding_length": 4},
        {"num_hypotheses": 3, "max_decoding_length": 2},  # each prefix length ends its hypotheses differently
        {"num_hypotheses": 2, "disable_unk": True, "max_batch_size": 4},
    ],
)
def test_alternatives_are_ctranslate2s(both, sources, options):
    """return_alternatives after prefixes of 0 to 2 pieces: the same alternatives, in the same
    order, continued the same, with the same scores (and attention rows). CTranslate2 4.8.5 ends
    the process on a source without any alternative above min_alternative_expansion_prob: the
    sources are those whose most probable alternative is above it."""
    theirs, ours = both
    chosen = sources[:24]
    prefixes = prefixes_of(theirs, chosen)
    if options.get("min_alternative_expansion_prob"):
        first = theirs.translate_batch(
            chosen, prefixes, return_alternatives=True, return_scores=True, max_decoding_length=3
        )
        kept = [i for i, r in enumerate(first) if math.exp(r.scores[0]) >= 0.06]
        chosen, prefixes = [chosen[i] for i in kept], [prefixes[i] for i in kept]
    found = [t.translate_batch(chosen, prefixes, return_alternatives=True, return_scores=True, **options) for t in both]
    same = [(a.scores, b.scores) for a, b in zip(*found) if a.hypotheses == b.hypotheses]
    assert len(same) >= 0.95 * len(chosen)
    theirs_scores, ours_scores = ([x for pair in same for x in pair[side]] for side in (0, 1))
    # float32 rounding: a log-probability near 0 (the token is near-certain) has an error near 1e-6
    assert ours_scores == pytest.approx(theirs_scores, rel=SCORE_RELATIVE, abs=1e-5)
    if options.get("return_attention"):
        for source, result in zip(chosen, found[1]):
            expected = [forced_attention(theirs, source, hypothesis) for hypothesis in result.hypotheses]
            assert [v for rows in result.attention for row in rows for v in row] == pytest.approx(
                [v for rows in expected for row in rows for v in row], abs=1e-4
            )


def forced_attention(translator, source: list[str], hypothesis: list[str]) -> list[list[float]]:
    """CTranslate2's attention rows of a hypothesis, forced as the prefix of one source alone. Its
    alternatives give the first piece after an alternative the row of another alternative (the
    first step's, read before the batch is expanded to the beam, as in a batch of sources)."""
    [result] = translator.translate_batch(
        [source], [hypothesis], beam_size=1, max_decoding_length=len(hypothesis), return_attention=True
    )
    assert result.hypotheses[0] == hypothesis
    return result.attention[0]


def test_sampling_at_the_default_beam_samples_from_the_top_k_as_ctranslate2(both, sources):
    """sampling_topk=10 at CTranslate2's default beam of 2: both sample (two seeds give two
    translations of many sources), and each piece is one of the 10 most probable at its step
    given the pieces before it (CTranslate2 draws from the 10 best continuations of its whole
    beam by total score, which are each among the 10 best of their own). The draws themselves
    differ (docs/ctranslate2.md)."""
    chosen, engine = sources[:30], both[1]._slot.api.engine
    try:
        for translator, module in zip(both, (ctranslate2, compat)):
            drawn = []
            for seed in (11, 12):
                module.set_random_seed(seed)
                drawn.append([r.hypotheses[0] for r in translator.translate_batch(chosen, sampling_topk=10)])
            assert sum(a != b for a, b in zip(*drawn)) >= len(chosen) // 4
            assert max(rank for hypotheses in drawn for rank in ranks(engine, chosen, hypotheses)) < 10
    finally:
        compat.set_random_seed(0)


def ranks(engine, sources: list, hypotheses: list) -> list[int]:
    """Each piece's rank (0: the most probable) in the model's distribution at its step, given the
    source and the pieces before it (teacher forcing), EOS left out at the first step, where
    min_decoding_length bans it; a tie within 1e-4 counts for the piece."""
    import torch

    model, found = engine.loaded.model, []
    for source, hypothesis in zip(sources, hypotheses):
        src = engine.encode_source(source, None)[0]
        tgt = [model.cfg.decoder_start_id] + engine.target_ids(hypothesis)
        with torch.inference_mode():
            logits = model(torch.tensor([src]), torch.ones(1, len(src), dtype=torch.bool), torch.tensor([tgt]))[0]
        logits = logits.float().clone()
        logits[0, model.cfg.eos_id] = -torch.inf
        for step, token in enumerate(tgt[1:]):
            found.append(int((logits[step] > logits[step, token] + 1e-4).sum()))
    return found
