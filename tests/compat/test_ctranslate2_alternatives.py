"""return_alternatives and sampling at CTranslate2's default beam, on the demo model, without
CTranslate2: the alternatives are the most probable next tokens after the prefix (checked
against the model's own distribution, by teacher forcing), each continued, and scored as
CTranslate2 scores them; `sampling_topk` at beam 2 samples. test_ctranslate2_parity.py compares
both with CTranslate2 itself."""

import math

import pytest
import sentencepiece as spm
import torch

import nmtdecode
from nmtdecode.compat import ctranslate2
from nmtdecode.compat.ctranslate2_options import UnsupportedArgument

from tests.helpers import REPO

DEMO = REPO / "data" / "demo"


@pytest.fixture(scope="module")
def translator():
    return ctranslate2.Translator(str(DEMO), device="cpu", intra_threads=1)


@pytest.fixture(scope="module")
def api():
    return nmtdecode.Translator.load(str(DEMO), device="cpu")


@pytest.fixture(scope="module")
def sources():
    sp = spm.SentencePieceProcessor(model_file=str(DEMO / "spm.model"))
    with open(DEMO / "test.en", encoding="utf-8") as f:
        return [sp.encode(line, out_type=str) for line in f.read().splitlines()[:8]]


def next_tokens(translator, source: list[str], prefix: list[str]) -> list[tuple[str, float]]:
    """The target pieces that may follow `prefix`, most probable first, with their log-probabilities
    with EOS banned (renormalised without it) and the model's own bans (pad, start) left out:
    one forward pass of the model over the source and the prefix, no search."""
    engine = translator._slot.api.engine
    model, tokenizer = engine.loaded.model, engine.loaded.tokenizer
    src = engine.encode_source(source, None)[0]
    tgt = [model.cfg.decoder_start_id] + engine.target_ids(prefix)
    with torch.inference_mode():
        logits = model(torch.tensor([src]), torch.ones(1, len(src), dtype=torch.bool), torch.tensor([tgt]))[0, -1]
    logits = logits.float().clone()
    logits[model.cfg.eos_id] = -math.inf
    log_probs = logits.log_softmax(-1)
    log_probs[list(engine.loaded.rules.banned_ids)] = -math.inf
    values, ids = log_probs.topk(10)
    return [(tokenizer.target_piece(i), v) for i, v in zip(ids.tolist(), values.tolist())]


def greedy_continuation(api, source: list[str], start: list[str]) -> tuple[list[str], float]:
    """The greedy search's hypothesis from `start` (pieces) on, as the API gives it, and its score
    as CTranslate2 scores a continuation: its log-probability (EOS included) per token."""
    [[hyp]] = api.translate_batch(
        [source], [start], beam_size=1, early_stopping="ctranslate2", max_len_b=None, min_length=1
    )
    sp = api.engine.loaded.tokenizer
    after = hyp.token_scores[len(start) :] + [hyp.eos_score]
    return [sp.target_piece(t) for t in hyp.tokens], sum(after) / len(after)


@pytest.mark.parametrize("prefix_length", [0, 1, 2])
def test_alternatives_are_the_most_probable_next_tokens_each_continued(translator, api, sources, prefix_length):
    for source in sources[:3]:
        prefix = translator.translate_batch([source])[0].hypotheses[0][:prefix_length]
        [result] = translator.translate_batch(
            [source], [prefix], beam_size=1, num_hypotheses=4, return_alternatives=True, return_scores=True
        )
        expected = next_tokens(translator, source, prefix)[:4]
        assert [h[:prefix_length] for h in result.hypotheses] == [prefix] * 4
        assert [h[prefix_length] for h in result.hypotheses] == [piece for piece, _ in expected]
        for hypothesis, score, (piece, log_prob) in zip(result.hypotheses, result.scores, expected):
            continued, continued_score = greedy_continuation(api, source, prefix + [piece])
            assert hypothesis == continued
            assert score == pytest.approx(log_prob + continued_score, abs=1e-4)


def test_unlikely_alternatives_are_left_out(translator, sources):
    source = sources[1]
    expected = next_tokens(translator, source, [])
    threshold = math.exp((expected[1][1] + expected[2][1]) / 2)  # between the second and third
    [result] = translator.translate_batch(
        [source], num_hypotheses=5, return_alternatives=True, min_alternative_expansion_prob=threshold
    )
    assert [h[0] for h in result.hypotheses] == [expected[0][0], expected[1][0]]
    [none] = translator.translate_batch([source], return_alternatives=True, min_alternative_expansion_prob=1.0)
    assert none.hypotheses == [] and none.scores == []  # CTranslate2 4.8.5 stops with SIGFPE here


def test_at_the_step_limit_the_prefix_or_the_alternative_ends_the_hypothesis(translator, sources):
    source = sources[2]
    prefix = translator.translate_batch([source])[0].hypotheses[0][:2]
    options = dict(num_hypotheses=3, return_alternatives=True, return_scores=True)
    [full] = translator.translate_batch([source], [prefix], max_decoding_length=2, **options)
    assert full.hypotheses == [prefix] * 3 and full.scores == [0.0] * 3
    [one] = translator.translate_batch([source], [prefix], max_decoding_length=3, **options)
    expected = next_tokens(translator, source, prefix)[:3]
    assert one.hypotheses == [prefix + [piece] for piece, _ in expected]
    assert one.scores == pytest.approx([log_prob for _, log_prob in expected], abs=1e-4)
    [empty] = translator.translate_batch([[]], **options)  # an empty source: nothing after its prefix
    assert empty.hypotheses == [[]] * 3 and empty.scores == [0.0] * 3


def test_alternatives_keep_attention_and_refuse_what_ctranslate2_refuses(translator, sources):
    [result] = translator.translate_batch(
        sources[:1], [["\u2581vor"]], num_hypotheses=3, return_alternatives=True, return_attention=True
    )
    assert [len(a) for a in result.attention] == [len(h) for h in result.hypotheses]
    assert all(len(row) == len(sources[0]) for a in result.attention for row in a)
    with pytest.raises(ValueError, match="between 0 and 1"):
        translator.translate_batch(sources[:1], return_alternatives=True, min_alternative_expansion_prob=1.5)
    with pytest.raises(UnsupportedArgument, match="callback"):
        translator.translate_batch(sources[:1], beam_size=1, return_alternatives=True, callback=lambda step: False)


def test_sampling_at_the_default_beam_draws_beam_size_samples_and_keeps_the_best(translator, api, sources):
    """sampling_topk at beam 2 (CTranslate2's default) samples: here two samples of the API's
    sampling (its streams, seeded by set_random_seed), the better by score kept; temperature 0
    is no sampling, as in CTranslate2 (its best-token sampler)."""
    ctranslate2.set_random_seed(3)
    try:
        results = translator.translate_batch(sources, sampling_topk=10, return_scores=True)
        samples = api.translate_batch(
            sources, sampling=True, top_k=10, n_best=2, seed=3, length_penalty="avg", alpha=1.0, max_len_b=None
        )
        assert [r.hypotheses for r in results] == [
            [[api.engine.loaded.tokenizer.target_piece(t) for t in pair[0].tokens]] for pair in samples
        ]
        assert [r.scores for r in results] == [[pair[0].score] for pair in samples]
        ctranslate2.set_random_seed(4)
        assert translator.translate_batch(sources, sampling_topk=10) != results
        assert translator.translate_batch(sources, sampling_topk=10, sampling_temperature=0) == (
            translator.translate_batch(sources)
        )
        with pytest.raises(ValueError, match="cannot be greater than beam_size"):
            translator.translate_batch(sources, sampling_topk=10, num_hypotheses=3)
    finally:
        ctranslate2.set_random_seed(0)
