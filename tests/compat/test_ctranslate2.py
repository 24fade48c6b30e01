"""nmtdecode.compat.ctranslate2 on the demo model, without CTranslate2: its arguments become the
API's options (the results are the API's, in CTranslate2's shapes), what it cannot do is refused
by name, and its asynchronous calls, callbacks, iterables and files behave as CTranslate2's.
test_ctranslate2_parity.py compares it with CTranslate2 itself."""

import pytest
import sentencepiece as spm

import nmtdecode
from nmtdecode.compat import ctranslate2
from nmtdecode.compat.ctranslate2_options import UnsupportedArgument

from tests.helpers import REPO

DEMO = REPO / "data" / "demo"

LINES = ["good morning", "the red house", "", "thank you very much", "water"]


@pytest.fixture(scope="module")
def sp():
    return spm.SentencePieceProcessor(model_file=str(DEMO / "spm.model"))


@pytest.fixture(scope="module")
def translator():
    return ctranslate2.Translator(str(DEMO), device="cpu", intra_threads=1)


@pytest.fixture(scope="module")
def sources(sp):
    return [sp.encode(line, out_type=str) for line in LINES]


@pytest.mark.parametrize("beam", [1, 4])
def test_results_are_the_apis_under_ctranslate2s_defaults(translator, sources, sp, beam):
    """CTranslate2's defaults are its stop rule with the average length penalty of exponent 1, its
    step limit alone (not the demo's 2|src|+10) and no EOS first; the hypotheses are the pieces of
    the API's tokens, and the scores its ranking scores."""
    api = nmtdecode.Translator.load(str(DEMO), device="cpu")
    expected = api.translate_batch(
        sources,
        beam_size=beam,
        n_best=min(beam, 2),
        early_stopping="ctranslate2",
        length_penalty="avg",
        alpha=1.0,
        max_len_b=None,
        min_length=1,
    )
    results = translator.translate_batch(sources, beam_size=beam, num_hypotheses=min(beam, 2), return_scores=True)
    assert [r.hypotheses for r in results] == [
        [[sp.id_to_piece(t) for t in h.tokens] for h in hyps] for hyps in expected
    ]
    assert [r.scores for r in results] == [[h.score for h in hyps] for hyps in expected]
    assert results[2].hypotheses == [[]] * min(beam, 2) and results[2].scores == [0.0] * min(beam, 2)
    plain = translator.translate_batch(sources, beam_size=beam)
    assert [r.hypotheses[0] for r in plain] == [r.hypotheses[0] for r in results] and plain[0].scores == []
    assert len(plain[0]) == 1 and plain[0].attention == plain[0].logits == []


def test_unsupported_arguments_are_named_in_one_error_unless_at_their_defaults(translator, sources):
    with pytest.raises(UnsupportedArgument) as refused:
        translator.translate_batch(sources, patience=2, use_vmap=True, prefix_bias_beta=0.5, return_alternatives=True)
    assert all(name in str(refused.value) for name in ("patience=2", "use_vmap=True", "prefix_bias_beta=0.5"))
    assert translator.translate_batch(sources[:1], patience=1, use_vmap=False, end_token="</s>")
    with pytest.raises(UnsupportedArgument, match="suppress_sequences"):
        translator.translate_batch(sources, suppress_sequences=[["\u2581Guten", "\u2581Morgen"]])
    with pytest.raises(TypeError, match="unexpected keyword argument 'num_beams'"):
        translator.translate_batch(sources, num_beams=4)
    with pytest.raises(UnsupportedArgument, match="flash_attention=True"):
        ctranslate2.Translator(str(DEMO), flash_attention=True)
    with pytest.raises(UnsupportedArgument, match="compute_type='int8_float16'"):
        ctranslate2.Translator(str(DEMO), compute_type="int8_float16")


def test_a_damaged_converted_model_is_refused_in_one_line(tmp_path):
    """A CTranslate2 folder is read (test_ctranslate2_folders.py); an empty model.bin says so."""
    from nmtdecode.models.checkpoint import ModelError

    (tmp_path / "model.bin").write_bytes(b"")
    (tmp_path / "config.json").write_text("{}")
    (tmp_path / "shared_vocabulary.json").write_text("[]")
    with pytest.raises(ModelError, match="model.bin is incomplete: it ends inside the binary version"):
        ctranslate2.Translator(str(tmp_path))
    assert ctranslate2.contains_model(str(tmp_path))


def test_suppressed_tokens_and_the_eos_a_converted_model_needs(translator, sources):
    best = translator.translate_batch(sources[:1])[0].hypotheses[0]
    other = translator.translate_batch(sources[:1], suppress_sequences=[[best[0]]])[0].hypotheses[0]
    assert other[0] != best[0]
    assert translator.translate_batch([sources[0] + ["</s>"]])[0].hypotheses[0] == best


def test_asynchronous_calls_give_futures_of_the_same_results(translator, sources):
    pending = translator.translate_batch(sources, asynchronous=True, beam_size=3)
    assert [type(p).__name__ for p in pending] == ["AsyncTranslationResult"] * len(sources)
    assert [p.result() for p in pending] == translator.translate_batch(sources, beam_size=3)
    assert all(p.done() for p in pending)
    scored = translator.score_batch(sources, [["\u2581Gut", "en"]] * len(sources), asynchronous=True)
    assert [s.result() for s in scored] == translator.score_batch(sources, [["\u2581Gut", "en"]] * len(sources))


def test_a_callback_sees_each_token_and_ends_its_hypothesis(translator, sources):
    """As CTranslate2 (beam_size 1): each chosen token, the end token last (is_last), and a True
    answer ends that source's hypothesis at the token it was told."""
    seen = []

    def stop_at_second(step):
        seen.append(step)
        return step.batch_id == 3 and step.step == 1

    results = translator.translate_batch(sources, beam_size=1, return_scores=True, callback=stop_at_second)
    full = translator.translate_batch(sources, beam_size=1, return_scores=True)
    assert [r.hypotheses for i, r in enumerate(results) if i != 3] == [
        r.hypotheses for i, r in enumerate(full) if i != 3
    ]
    assert results[3].hypotheses == [full[3].hypotheses[0][:2]]
    told = [s for s in seen if s.batch_id == 3]
    assert [s.token for s in told] == full[3].hypotheses[0][:2]
    assert results[3].scores == [pytest.approx(sum(s.log_prob for s in told) / 2)]
    first = [s for s in seen if s.batch_id == 0]
    assert [s.token for s in first] == full[0].hypotheses[0] + ["</s>"] and first[-1].is_last
    with pytest.raises(ValueError, match="callback"):
        translator.translate_batch(sources, beam_size=2, callback=stop_at_second)


def test_generate_tokens_yields_the_greedy_hypothesis_then_its_end(translator, sources):
    steps = list(translator.generate_tokens(sources[3], return_log_prob=True))
    [best] = translator.translate_batch([sources[3]], beam_size=1, return_scores=True)
    assert [s.token for s in steps] == best.hypotheses[0] + ["</s>"]
    assert [s.step for s in steps] == list(range(len(steps))) and [s.is_last for s in steps][-2:] == [False, True]
    assert sum(s.log_prob for s in steps) / len(steps) == pytest.approx(best.scores[0], abs=1e-5)  # EOS counted
    assert {s.log_prob for s in translator.generate_tokens(sources[3])} == {None}
    cut = list(translator.generate_tokens(sources[3], max_decoding_length=2))
    assert len(cut) == 2 and cut[-1].is_last and cut[-1].token != "</s>"


def test_scores_are_each_pieces_log_prob_with_eos_last(translator, sources):
    api = nmtdecode.Translator.load(str(DEMO), device="cpu")
    targets = [["\u2581Gut", "en", "\u2581Mor", "gen"], ["\u2581das"], [], ["\u2581dan", "ke"], ["no-such-piece"]]
    scored = translator.score_batch(sources, targets)
    expected = api.score_batch(sources, targets)
    assert [s.log_probs for s in scored] == [e.token_scores + [e.eos_score] for e in expected]
    assert scored[0].tokens[-1] == "</s>" and scored[4].tokens == ["<unk>", "</s>"]
    assert [s.tokens for s in translator.score_batch(sources, targets, offset=1)] == [s.tokens[1:] for s in scored]


def test_iterables_are_the_batches_in_input_order(translator, sources):
    many = sources * 20
    assert list(translator.translate_iterable(iter(many), max_batch_size=8)) == translator.translate_batch(
        many, max_batch_size=8
    )
    targets = [["\u2581Gut", "en"]] * len(many)
    assert list(translator.score_iterable(iter(many), iter(targets))) == translator.score_batch(
        many, targets, max_batch_size=64
    )
    with pytest.raises(ValueError, match="same length"):
        list(translator.score_iterable(many, targets[:-1]))


def test_translate_file_writes_each_hypothesis_a_line(translator, sources, sp, tmp_path):
    source = tmp_path / "in.tok"
    source.write_text("".join(" ".join(s) + "\n" for s in sources), encoding="utf-8")
    stats = translator.translate_file(
        str(source), str(tmp_path / "out.tok"), beam_size=3, num_hypotheses=2, with_scores=True
    )
    results = translator.translate_batch(sources, beam_size=3, num_hypotheses=2, return_scores=True)
    expected = [f"{score:g} ||| {' '.join(h)}" for r in results for h, score in zip(r.hypotheses, r.scores)]
    assert (tmp_path / "out.tok").read_text(encoding="utf-8").splitlines() == expected
    assert (stats.num_examples, stats.num_tokens) == (len(sources), sum(len(r.hypotheses[0]) for r in results))
    text = tmp_path / "in.txt"
    text.write_text("".join(line + "\n" for line in LINES), encoding="utf-8")
    translator.translate_file(
        str(text),
        str(tmp_path / "out.txt"),
        source_tokenize_fn=lambda line: sp.encode(line, out_type=str),
        target_detokenize_fn=sp.decode,
    )
    assert (tmp_path / "out.txt").read_text(encoding="utf-8").splitlines() == [
        sp.decode(r.hypotheses[0]) for r in translator.translate_batch(sources)
    ]
    with pytest.raises(ValueError, match="both be set"):
        translator.translate_file(str(text), str(tmp_path / "x"), source_tokenize_fn=str.split)
