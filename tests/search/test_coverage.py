"""--coverage-penalty on a table model with hand-written attention: scores checked on paper."""

import math

import pytest
import torch

from nmtdecode.options.config import DecodingConfig
from nmtdecode.engine.decoding import BatchDecoder
from nmtdecode.models.checkpoint import ModelRules
from nmtdecode.search.penalties import coverage_summary, coverage_wu

from tests.helpers import EOS, TableModel

A, B = 4, 5
BAN_SPECIALS = ModelRules(banned_ids=(0, 1, 2))

# Source of 3 tokens. "a" is likelier, "b" covers the source better:
#   ()  -> a .6, b .4      attention [.1, .6, .3]
#   (a) -> eos             attention [.1, .8, .1]   coverage of "a eos": [.2, 1.4, .4]
#   (b) -> eos             attention [.8, .1, .1]   coverage of "b eos": [.9, .7, .4]
TABLE = {(): {A: 0.6, B: 0.4}, (A,): {EOS: 1.0}, (B,): {EOS: 1.0}}
ATTENTION = {(): [0.1, 0.6, 0.3], (A,): [0.1, 0.8, 0.1], (B,): [0.8, 0.1, 0.1]}
SOURCE = [0, 7, EOS]
# wu: -beta * sum log(min(c, 1)); summary: beta * sum (max(c, 1) - 1)
WU = {A: -(math.log(0.2) + math.log(0.4)), B: -(math.log(0.9) + math.log(0.7) + math.log(0.4))}
SUMMARY = {A: 0.4, B: 0.0}
LOGPROB = {A: math.log(0.6), B: math.log(0.4)}


def decode(beam=2, tables=(TABLE,), attention=(ATTENTION,), sources=(SOURCE,), **options):
    cfg = DecodingConfig(**{"beam_size": beam, "n_best": beam, "max_length": 5, "length_penalty": "none", **options})
    model = TableModel(8, list(tables), list(attention))
    return BatchDecoder(model, cfg, BAN_SPECIALS).decode(list(sources)).nbests


def test_penalty_functions_by_hand():
    coverage = torch.tensor([[0.2, 1.4, 0.4], [0.9, 0.7, 0.4]])
    assert coverage_wu(coverage, 0.5).tolist() == pytest.approx([0.5 * WU[A], 0.5 * WU[B]])
    assert coverage_summary(coverage, 2.0).tolist() == pytest.approx([0.8, 0.0])


@pytest.mark.parametrize(
    "name, beta, table", [("wu", 1.0, WU), ("wu", 0.3, WU), ("summary", 2.0, SUMMARY), ("summary", 0.5, SUMMARY)]
)
def test_finished_scores_are_logprob_minus_coverage_penalty(name, beta, table):
    [hyps] = decode(coverage_penalty=name, beta=beta)
    expected = {t: LOGPROB[t] - beta * table[t] for t in (A, B)}
    ranking = sorted(expected, key=expected.get, reverse=True)
    assert [h.tokens for h in hyps] == [[t] for t in ranking]
    assert [h.score for h in hyps] == pytest.approx([expected[t] for t in ranking], abs=1e-6)
    assert [h.total for h in hyps] == pytest.approx([LOGPROB[t] for t in ranking])  # log_prob unchanged


def test_penalty_flips_the_ranking():
    """Without a penalty "a" wins (.6 > .4); wu with beta 1: ln .6 - 2.53 < ln .4 - 1.38."""
    [plain] = decode()
    [covered] = decode(coverage_penalty="wu", beta=1.0)
    assert [h.tokens for h in plain] == [[A], [B]]
    assert [h.tokens for h in covered] == [[B], [A]]


def test_length_penalty_then_coverage_penalty():
    """score = total / length - coverage penalty (OpenNMT-py's GNMTGlobalScorer): "b" ln .4 / 2
    beats "a" ln .6 / 2 - .4; greedy only sees "a", and scores it the same way."""
    [hyps] = decode(coverage_penalty="summary", beta=1.0, length_penalty="avg")
    assert [h.tokens for h in hyps] == [[B], [A]]
    assert [h.score for h in hyps] == pytest.approx([LOGPROB[B] / 2, LOGPROB[A] / 2 - SUMMARY[A]])
    [[greedy]] = decode(beam=1, coverage_penalty="summary", beta=1.0, length_penalty="avg")
    assert greedy.tokens == [A] and greedy.score == pytest.approx(LOGPROB[A] / 2 - SUMMARY[A])


def test_padded_source_positions_add_no_penalty():
    """A shorter source in the same batch (padded to 3): its results equal decoding it alone."""
    short_table = {(): {A: 1.0}, (A,): {EOS: 1.0}}
    short_attention = {(): [0.3, 0.7], (A,): [0.5, 0.5]}  # coverage [.8, 1.2]: wu -ln .8, summary .2
    for name, expected in (("wu", -math.log(0.8)), ("summary", 0.2)):
        both = decode(
            tables=(TABLE, short_table),
            attention=(ATTENTION, short_attention),
            sources=(SOURCE, [1, EOS]),
            coverage_penalty=name,
            beta=1.0,
        )
        [alone] = decode(
            tables=({}, short_table),
            attention=({}, short_attention),
            sources=([1, EOS],),
            coverage_penalty=name,
            beta=1.0,
        )
        assert both[1][0].tokens == alone[0].tokens == [A]
        assert both[1][0].score == pytest.approx(alone[0].score) == pytest.approx(-expected)


def test_beta_zero_or_no_penalty_records_no_attention():
    model = TableModel(8, [TABLE], [ATTENTION])
    for options in ({"coverage_penalty": "wu", "beta": 0.0}, {"coverage_penalty": "none", "beta": 1.0}):
        translator = BatchDecoder(model, DecodingConfig(beam_size=2, **options), BAN_SPECIALS)
        cache = model.init_cache(torch.zeros(1, 1), torch.ones(1, 3, dtype=torch.bool))
        assert translator.make_attention(cache, torch.ones(1, 3, dtype=torch.bool)) is None
        assert not cache.record_attention


def test_coverage_follows_the_beam_reorder():
    """Three steps; at step 1 the slots swap ("b b" takes slot 0 from slot 1) and "a eos" ends.
        ()    -> a .6, b .4     attention [.2, .3, .5]
        (a)   -> eos .7, a .3   attention [.1, .1, .8]
        (b)   -> b .9, eos .1   attention [.8, .1, .1]
        (a a) -> eos            attention [.1, .1, .8]
        (b b) -> eos            attention [.1, .8, .1]
    coverage: "a" [.3, .4, 1.3], "b b" [1.1, 1.2, .7], "a a" [.4, .5, 2.1]; had "b b" kept the
    coverage of the slot it landed in, it would be [.4, 1.2, 1.4]."""
    table = {(): {A: 0.6, B: 0.4}, (A,): {EOS: 0.7, A: 0.3}, (B,): {B: 0.9, EOS: 0.1}}
    attention = {
        (): [0.2, 0.3, 0.5],
        (A,): [0.1, 0.1, 0.8],
        (B,): [0.8, 0.1, 0.1],
        (A, A): [0.1, 0.1, 0.8],
        (B, B): [0.1, 0.8, 0.1],
    }
    [hyps] = decode(tables=(table,), attention=(attention,), coverage_penalty="wu", beta=1.0)
    a = math.log(0.42) + math.log(0.3) + math.log(0.4)
    bb = math.log(0.36) + math.log(0.7)
    assert [h.tokens for h in hyps] == [[B, B], [A]]
    assert [h.score for h in hyps] == pytest.approx([bb, a], abs=1e-6)


@pytest.mark.parametrize("beam", [1, 4])
def test_coverage_and_alignment_do_not_depend_on_the_batch(beam):
    """A padded batch of sentences of different lengths gives each the results it gets alone."""
    from tests.helpers import random_sources, tiny_transformer

    model = tiny_transformer(5, vocab=20, eos_bias=1.0)
    sources = random_sources(6, 20, seed=8)
    cfg = DecodingConfig(
        beam_size=beam, n_best=beam, max_length=12, coverage_penalty="summary", beta=0.4, alignment=True
    )
    together = BatchDecoder(model, cfg).decode(sources).nbests
    for source, hyps in zip(sources, together):
        [alone] = BatchDecoder(model, cfg).decode([source]).nbests
        assert [(h.tokens, h.alignment) for h in hyps] == [(h.tokens, h.alignment) for h in alone]
        assert [h.score for h in hyps] == pytest.approx([h.score for h in alone], abs=1e-5)
    plain = BatchDecoder(model, DecodingConfig(beam_size=beam, n_best=beam, max_length=12)).decode(sources).nbests
    assert [[h.score for h in n] for n in plain] != [[h.score for h in n] for n in together]
