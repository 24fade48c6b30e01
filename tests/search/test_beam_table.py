"""Beam search on a hand-written probability table: every n-best list and score checked on paper."""

import math

import pytest
import torch

from nmtdecode.options.config import DecodingConfig
from nmtdecode.engine.decoding import BatchDecoder
from nmtdecode.models.checkpoint import ModelRules
from nmtdecode.search.endings import BeamEndings
from nmtdecode.search.penalties import LengthPenalty

from tests.helpers import EOS, TableModel

A, B = 4, 5
BAN_SPECIALS = ModelRules(banned_ids=(0, 1, 2))

# Sentence 0: two short hypotheses end at step 1 and fill the pool of 2.
#   ()   -> a .6, b .3, eos .1
#   (a)  -> eos .4, a .35, b .25
#   (b)  -> eos .9, a .05, b .05
TABLE_SHORT = {(): {A: 0.6, B: 0.3, EOS: 0.1}, (A,): {EOS: 0.4, A: 0.35, B: 0.25}, (B,): {EOS: 0.9, A: 0.05, B: 0.05}}
# Sentence 1: the empty output has the best total, "a a a" the best per-token average.
#   ()      -> eos .45, a .55
#   (a)     -> eos .1, a .9
#   (a a)   -> eos .1, a .9
#   (a a a) -> eos 1
TABLE_LENGTH = {(): {EOS: 0.45, A: 0.55}, (A,): {EOS: 0.1, A: 0.9}, (A, A): {EOS: 0.1, A: 0.9}}


def run(tables, sources, beam_size=2, n_best=2, **decoding):
    model = TableModel(6, tables)
    cfg = DecodingConfig(beam_size=beam_size, n_best=n_best, max_length=10, **decoding)
    return BatchDecoder(model, cfg, BAN_SPECIALS).decode(sources).nbests


@pytest.mark.parametrize("penalty", ["none", "avg"])
def test_hand_computed_nbest(penalty):
    [hyps] = run([TABLE_SHORT], [[0, EOS]], length_penalty=penalty)
    # step 1 candidates: (b eos) .27, (a eos) .24, (a a) .21, (a b) .15: both EOS ones finish,
    # and the best alive (a a) .21 cannot beat .24, so the search stops there.
    assert [h.tokens for h in hyps] == [[B], [A]]
    divisor = 2 if penalty == "avg" else 1  # two generated tokens each, EOS counted
    assert [h.score for h in hyps] == pytest.approx([math.log(0.27) / divisor, math.log(0.24) / divisor])
    assert [h.total for h in hyps] == pytest.approx([math.log(0.27), math.log(0.24)])
    assert hyps[0].token_scores == pytest.approx([math.log(0.3)])  # one per token; EOS's apart
    assert hyps[0].eos_score == pytest.approx(math.log(0.9))


def test_length_penalty_flips_the_ranking():
    [short] = run([{}, TABLE_LENGTH], [[1, EOS]], length_penalty="none")
    [long] = run([{}, TABLE_LENGTH], [[1, EOS]], length_penalty="avg", alpha=1.0)
    long_total = math.log(0.55 * 0.9 * 0.9)
    assert [h.tokens for h in short] == [[], [A, A, A]]
    assert [h.score for h in short] == pytest.approx([math.log(0.45), long_total])
    assert long[0].tokens == [A, A, A]
    assert long[0].score == pytest.approx(long_total / 4)  # three tokens + EOS
    assert long[1].tokens == []
    assert long[1].score == pytest.approx(math.log(0.45) / 1)


def test_wu_penalty_is_gnmt_formula():
    penalty = LengthPenalty("wu", 0.6)
    assert penalty(-3.0, 4) == pytest.approx(-3.0 / ((5 + 4) / 6) ** 0.6)


def test_two_sentences_in_one_batch_keep_their_own_results():
    both = run([TABLE_SHORT, TABLE_LENGTH], [[0, EOS], [1, EOS]], length_penalty="avg")
    alone = [
        run([TABLE_SHORT], [[0, EOS]], length_penalty="avg")[0],
        run([{}, TABLE_LENGTH], [[1, EOS]], length_penalty="avg")[0],
    ]
    assert [[h.tokens for h in n] for n in both] == [[h.tokens for h in n] for n in alone]


def pool_of(mode, totals, penalty, n_best=1):
    """One sentence of beam 2 (step limit 10) whose finished hypotheses have these (length, total)."""
    ends = BeamEndings(
        rule=mode, n_best=n_best, eos_id=EOS, sentences=1, size=2, max_steps=[10], penalty=penalty, device="cpu"
    )
    for length, total in totals:
        ends.end(length, torch.tensor([[total]]), torch.tensor([[True]]))
    return ends


def stops_at_step_3(ends, best_alive):
    """After step 3 (4 tokens), where no candidate ends and the best alive total is `best_alive`."""
    ends.step(4, torch.tensor([[-50.0, -51.0]]), torch.tensor([[A, B]]), best=torch.tensor([best_alive]))
    return bool(ends.done[0])


def make_pool(mode):
    """Pool of 2 finished: totals -2.0 (2 tokens: -1.0 avg) and -4.5 (3 tokens: -1.5 avg)."""
    return pool_of(mode, [(2, -2.0), (3, -4.5)], LengthPenalty("avg", 1.0))


@pytest.mark.parametrize(
    "mode, best_alive, stops",
    [
        ("true", -1.0, True),  # full pool is enough
        ("false", -5.0, False),  # -5/4 = -1.25 beats the worst, -1.5
        ("false", -7.0, True),  # -7/4 = -1.75 does not
        ("false", -6.0, True),  # -6/4 = -1.5 only ties it
        ("never", -7.0, False),  # at the step limit -7/10 = -0.7 still could
        ("never", -16.0, True),  # -16/10 = -1.6 cannot, at any length
    ],
)
def test_early_stopping_modes(mode, best_alive, stops):
    assert stops_at_step_3(make_pool(mode), best_alive) is stops


def test_pool_not_full_never_stops():
    ends = pool_of("true", [(2, -2.0)], LengthPenalty("none"))
    assert not stops_at_step_3(ends, best_alive=-100.0)


def test_more_than_k_eos_candidates_keep_k_alive():
    """Both slots' best continuation is EOS: they finish, and k non-EOS slots stay alive."""
    table = {(): {A: 0.5, B: 0.5 - 1e-3, EOS: 1e-3}, (A,): {EOS: 0.9, A: 0.1}, (B,): {EOS: 0.9, B: 0.1}}
    [hyps] = run([table], [[0, EOS]], early_stopping="never", length_penalty="none")
    assert [h.tokens for h in hyps] == [[A], [B]]
    assert all(h.ended for h in hyps)


def test_step_limit_returns_cut_hypotheses():
    table = {(): {A: 1.0}, (A,): {A: 1.0}, (A, A): {A: 1.0}, (A, A, A): {A: 1.0}}
    model = TableModel(6, [table])
    for beam in (1, 2):
        cfg = DecodingConfig(beam_size=beam, n_best=1, max_length=3)
        [[hyp]] = BatchDecoder(model, cfg, BAN_SPECIALS).decode([[0, EOS]]).nbests
        assert hyp.tokens == [A, A, A] and not hyp.ended


@pytest.mark.parametrize("beam", [1, 4])
def test_min_length_prevents_early_eos(beam):
    table = {(): {EOS: 0.9, A: 0.1}, (A,): {EOS: 0.9, A: 0.1}, (A, A): {EOS: 0.9, A: 0.1}}
    model = TableModel(6, [table])
    cfg = DecodingConfig(beam_size=beam, n_best=1, max_length=10, min_length=2)
    [[hyp]] = BatchDecoder(model, cfg, BAN_SPECIALS).decode([[0, EOS]]).nbests
    assert hyp.tokens == [A, A]
    assert hyp.total == pytest.approx(math.log(0.1 * 0.1 * 0.9))


# `top`: stop once the top-ranked candidate of a step has ended and n_best are finished.
#   ()    -> a .6, b .4
#   (a)   -> eos .6, a .4     step 1 ranks (a eos) .36 first: `top` stops with "a"
#   (b)   -> b .85, eos .15
#   (b b) -> eos 1            (b b eos) .34 is the better average: log(.34)/3 > log(.36)/2
TABLE_TOP = {(): {A: 0.6, B: 0.4}, (A,): {EOS: 0.6, A: 0.4}, (B,): {B: 0.85, EOS: 0.15}, (B, B): {EOS: 1.0}}


def test_top_stops_when_the_top_candidate_ends():
    [top] = run([TABLE_TOP], [[0, EOS]], n_best=1, early_stopping="top", length_penalty="avg")
    [false] = run([TABLE_TOP], [[0, EOS]], n_best=1, early_stopping="false", length_penalty="avg")
    assert [h.tokens for h in top] == [[A]]
    assert top[0].score == pytest.approx(math.log(0.36) / 2)
    assert [h.tokens for h in false] == [[B, B]]  # the pool of 2 was not full: it searched on
    assert false[0].score == pytest.approx(math.log(0.34) / 3)


def test_top_keeps_searching_until_n_best_are_finished():
    """n_best 2: after step 1 only (a eos) is finished; step 2 ends (b b) and (a a), and the
    pool keeps the two best averages."""
    [hyps] = run([TABLE_TOP], [[0, EOS]], n_best=2, early_stopping="top", length_penalty="avg")
    assert [h.tokens for h in hyps] == [[B, B], [A, A]]
    assert [h.score for h in hyps] == pytest.approx([math.log(0.34) / 3, math.log(0.24) / 3])


def test_top_ignores_endings_below_the_top_candidate():
    """(a eos) ends at step 1 ranked second, behind (b b): the search goes on and finds (b b)."""
    table = {(): {A: 0.5, B: 0.4, EOS: 0.1}, (A,): {EOS: 0.6, A: 0.4}, (B,): {B: 0.9, EOS: 0.1}}
    [hyps] = run([table], [[0, EOS]], n_best=1, early_stopping="top", length_penalty="none")
    # step 1: (b b) .36, (a eos) .30, (a a) .20, (b eos) .04; step 2 ends (b b) at .36
    assert [h.tokens for h in hyps] == [[B, B]]
    assert hyps[0].total == pytest.approx(math.log(0.36))


@pytest.mark.parametrize("top_ended, finished, stops", [(False, 2, False), (True, 0, False), (True, 1, True)])
def test_top_rule_needs_both_conditions(top_ended, finished, stops):
    ends = pool_of("top", [(2, -1.0 - i) for i in range(finished)], LengthPenalty("none"))
    ends.top_ended[0] = top_ended
    assert stops_at_step_3(ends, best_alive=0.0) is stops


def test_greedy_takes_the_first_of_equal_maxima_with_its_log_prob():
    """Greedy search takes argmax's token (the lowest id among equal best ones) and records its
    log-prob; here a and b tie at every step until EOS is certain."""
    tie = {(): {A: 0.4, B: 0.4, EOS: 0.2}, (A,): {B: 0.45, A: 0.45, EOS: 0.1}}
    [[hyp]] = run([tie], [[0, EOS]], beam_size=1, n_best=1)
    assert hyp.tokens == [A, A]
    assert hyp.token_scores == pytest.approx([math.log(0.4), math.log(0.45)])
    assert hyp.eos_score == pytest.approx(0.0)
