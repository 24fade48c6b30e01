"""OpenNMT-py's beam conventions, used for its checkpoints, on hand-written probability tables:
a finished candidate's slot stays empty for a step, `top` stops only at a step whose top
candidate ends, and the length penalty counts one token more than were generated."""

import math

import pytest
import torch

from nmtdecode.options.config import DecodingConfig
from nmtdecode.engine.decoding import BatchDecoder
from nmtdecode.models.checkpoint import ModelRules
from nmtdecode.search.endings import BeamEndings
from nmtdecode.search.penalties import LengthPenalty

from tests.helpers import EOS, TableModel

A, B, C = 4, 5, 6
# beam 2, no length penalty:
#   ()    -> a .5, eos .3, b .2      step 0: eos ranks 2nd of the top 2
#   (a)   -> a .36, c .34, eos .30   step 1: a a .18, a c .17, a eos .15
#   (b)   -> b .95, eos .05          step 1: b b .19 beats every continuation of (a)
# then every prefix ends (EOS certain).
TABLE = {(): {A: 0.5, EOS: 0.3, B: 0.2}, (A,): {A: 0.36, C: 0.34, EOS: 0.30}, (B,): {B: 0.95, EOS: 0.05}}


def nbest(opennmt: bool):
    rules = ModelRules(banned_ids=(0, 1, 2), opennmt_beam=opennmt)
    cfg = DecodingConfig(beam_size=2, n_best=2, max_length=10, length_penalty="none")
    [hyps] = BatchDecoder(TableModel(7, [TABLE]), cfg, rules).decode([[0, EOS]]).nbests
    return [(h.tokens, h.score) for h in hyps]


def test_refilled_slots_keep_b_alive():
    # step 0: eos finishes (.3); a and b go on (b refills eos's slot); step 1: b b .19, a a .18 go on;
    # step 2: b b eos .19 is the top candidate and ends, the pool holds [] and b b
    assert nbest(opennmt=False) == [([], pytest.approx(math.log(0.3))), ([B, B], pytest.approx(math.log(0.19)))]


def test_opennmt_leaves_the_finished_slot_empty_for_a_step():
    # step 0: eos finishes, its slot stays empty: only a goes on; step 1: a a .18, a c .17;
    # step 2: both end, the pool holds [] .3, a a .18 (b b is never reached)
    assert nbest(opennmt=True) == [([], pytest.approx(math.log(0.3))), ([A, A], pytest.approx(math.log(0.18)))]


@pytest.mark.parametrize("at_stop_step, done", [(False, True), (True, False)])
def test_top_rule_with_n_best_2(at_stop_step, done):
    """The top candidate ended at step 0 with a pool of 1; at step 1 a second hypothesis ends but
    the top candidate goes on: ours stops (the top has ended), OpenNMT-py's waits for a step
    whose top candidate ends."""
    ends = BeamEndings(
        rule="top",
        n_best=2,
        eos_id=EOS,
        top_sticks=not at_stop_step,
        sentences=1,
        size=2,
        max_steps=[10],
        penalty=LengthPenalty("none"),
        device="cpu",
    )
    # step 0: the top candidate (eos -0.5) ends; step 1: the second one (eos -1.2) ends, the top goes on
    ends.step(1, torch.tensor([[-0.5, -1.0]]), torch.tensor([[EOS, A]]), best=torch.tensor([-1.0]))
    assert not ends.done[0]
    ends.step(2, torch.tensor([[-1.1, -1.2]]), torch.tensor([[A, EOS]]), best=torch.tensor([-1.1]))
    assert bool(ends.done[0]) is done


def test_length_offset_counts_one_more_token():
    """onmt's avg penalty at the step that picks the n-th token divides by n + 1."""
    assert LengthPenalty("avg", 1.0, offset=1)(-3.0, 2) == pytest.approx(-1.0)
    assert LengthPenalty("wu", 0.6, offset=1)(-3.0, 2) == pytest.approx(-3.0 / ((5 + 3) / 6) ** 0.6)
