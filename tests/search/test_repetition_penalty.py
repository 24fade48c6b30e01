"""--repetition-penalty: CTRL's rule on the logits, against transformers' processor and by hand."""

import math

import pytest
import torch
from transformers.generation.logits_process import RepetitionPenaltyLogitsProcessor

from nmtdecode.options.config import ConfigError, DecodingConfig
from nmtdecode.engine.decoding import BatchDecoder
from nmtdecode.models.checkpoint import ModelRules
from nmtdecode.search.processors import RepetitionPenalty, RowHistory

from tests.helpers import BOS, EOS, TableModel

A, B = 4, 5


def history_of(generated: torch.Tensor) -> RowHistory:
    """Rows whose history is the start token, then `generated` (N, t)."""
    n = generated.size(0)
    rows = RowHistory(torch.full((n,), BOS), torch.full((n,), 99), keep_history=True)
    rows.history = torch.cat([torch.full((n, 1), BOS), generated], dim=1)
    return rows


@pytest.mark.parametrize("penalty", [0.5, 1.3, 2.0])
@pytest.mark.parametrize("seed", range(4))
def test_repetition_penalty_matches_transformers(penalty, seed):
    """Same logits (both signs), same generated ids: the same penalised logits as transformers'
    processor, given the generated ids (our start token is not counted, see the docstring)."""
    g = torch.Generator().manual_seed(seed)
    generated = torch.randint(0, 10, (5, 7), generator=g)  # repeats within a row, ids seen twice
    logits = torch.randn(5, 10, generator=g) * 3
    assert (logits > 0).any() and (logits < 0).any()
    expected = RepetitionPenaltyLogitsProcessor(penalty)(generated, logits.clone())
    got = RepetitionPenalty(penalty)(logits.clone(), step=7, rows=history_of(generated))
    torch.testing.assert_close(got, expected)


def test_repetition_penalty_by_hand():
    """Tokens 0 and 1 were generated: 2 -> 2/2, -2 -> -2*2; the others and the start token's
    own id (BOS = 2, not generated) keep their logits."""
    got = RepetitionPenalty(2.0)(torch.tensor([[2.0, -2.0, 1.0, 0.5]]), step=2, rows=history_of(torch.tensor([[0, 1]])))
    assert got.tolist() == [[1.0, -4.0, 1.0, 0.5]]


def test_penalty_one_changes_nothing_and_first_step_is_untouched():
    logits = torch.randn(3, 8)
    assert torch.equal(RepetitionPenalty(1.0)(logits.clone(), 3, history_of(torch.randint(0, 8, (3, 3)))), logits)
    assert torch.equal(
        RepetitionPenalty(3.0)(logits.clone(), 0, history_of(torch.zeros(3, 0, dtype=torch.long))), logits
    )


@pytest.mark.parametrize("value", [0.0, -1.0])
def test_penalty_must_be_positive(value):
    with pytest.raises(ConfigError, match="repetition_penalty"):
        DecodingConfig(repetition_penalty=value).validate()


# ()  -> a .9, b .1;  (a) -> a .6, b .4;  then EOS.
TABLE = {(): {A: 0.9, B: 0.1}, (A,): {A: 0.6, B: 0.4}}


@pytest.mark.parametrize("beam", [1, 4])
def test_repetition_penalty_in_decoding(beam):
    """Penalty 2 on log-prob logits: after `a`, a's logit ln .6 becomes 2 ln .6 = ln .36, so the
    step's distribution is a .36/.76, b .4/.76 and `a b` wins over `a a`; the scores reported are
    those of the penalised distribution."""

    def decode(**options):
        cfg = DecodingConfig(beam_size=beam, n_best=1, max_length=5, **options)
        decoder = BatchDecoder(TableModel(6, [TABLE]), cfg, ModelRules(banned_ids=(0, 1, 2)))
        [[hyp]] = decoder.decode([[0, EOS]]).nbests
        return hyp

    assert decode().tokens == [A, A]
    hyp = decode(repetition_penalty=2.0)
    assert hyp.tokens == [A, B]
    assert hyp.token_scores == pytest.approx([math.log(0.9), math.log(0.4 / 0.76)])
    assert hyp.eos_score == pytest.approx(0.0)


def test_generation_config_repetition_penalty_is_a_default():
    from nmtdecode.models.formats.hf_config import generation_settings

    from tests.helpers import tiny_config

    defaults, _ = generation_settings({"repetition_penalty": 1.2}, tiny_config())
    assert defaults["repetition_penalty"] == 1.2
    assert "repetition_penalty" not in generation_settings({"repetition_penalty": 1.0}, tiny_config())[0]
