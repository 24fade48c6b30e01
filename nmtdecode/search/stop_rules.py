"""When a sentence's beam search stops: the rules, one definition for the host search and the
device search, each a small function of `PoolFacts` (one value per sentence), chosen by name
as the penalties are. The pool holds the beam_size best finished hypotheses (finished.py);
`true`, `false` and `never` are the `early_stopping` modes of Hugging Face's
`GenerationConfig`, `top` is the rule of OpenNMT's `Beam` (`eos_top`), OpenNMT-py and
CTranslate2:

    top    the top-ranked candidate of a step has ended (at this step or an earlier one) and
           the pool holds n_best hypotheses
    true   the pool holds beam_size finished hypotheses
    false  the pool is full and the best alive total, penalised at the current length, does
           not beat the worst finished score (a heuristic)
    never  the pool is full and it beats it at no length up to the step limit (exact)

A sentence also stops at its step limit, where every top-k candidate is finished, ended by
EOS or not (endings.py). The bound leaves the coverage penalty out: it is >= 0, so the bound
stays an upper one. Scores are float64, total / divisor (penalties.py), on host and device.

Peers on `top`: CTranslate2 applies it only without length or coverage penalty (otherwise it
waits for beam_size x patience finished hypotheses) and remembers that the top candidate
ended, as here; OpenNMT-py asks that the top candidate end at the very step it stops, which
only differs for n_best > 1 (its beam: `top_sticks` off, endings.py). CTranslate2's own rule,
`ctranslate2`, is one of these at each penalty: `beam_rule`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch


@dataclass
class PoolFacts:
    """What the rules read, one value per sentence still searched (n,)."""

    full: torch.Tensor  # bool: the pool holds beam_size finished hypotheses
    has_n_best: torch.Tensor  # bool: it holds n_best of them (n_best <= beam_size)
    worst: torch.Tensor  # float64: the score of the pool's last one (a hypothesis when full)
    best: torch.Tensor  # float64: the best alive total (log-prob sum), -inf when none is alive
    divisor_now: torch.Tensor  # float64: the length penalty's divisor at the current length
    divisor_limit: torch.Tensor  # float64: ... at the sentence's step limit
    top_ended: torch.Tensor  # bool: the top-ranked candidate of a step has ended


def stop_top(facts: PoolFacts) -> torch.Tensor:
    return facts.top_ended & facts.has_n_best


def stop_true(facts: PoolFacts) -> torch.Tensor:
    return facts.full


def stop_false(facts: PoolFacts) -> torch.Tensor:
    return facts.full & (facts.best / facts.divisor_now <= facts.worst)


def stop_never(facts: PoolFacts) -> torch.Tensor:
    """Log-probabilities only lower a total, and every length penalty is monotone in the
    length, so the best reachable score is at one end of [now, step limit]."""
    bound = torch.maximum(facts.best / facts.divisor_now, facts.best / facts.divisor_limit)
    return facts.full & (bound <= facts.worst)


STOP_RULES: dict[str, Callable[[PoolFacts], torch.Tensor]] = {
    "top": stop_top,
    "true": stop_true,
    "false": stop_false,
    "never": stop_never,
}


def beam_rule(early_stopping: str, opennmt: bool, penalised: bool) -> tuple[str, bool]:
    """The rule of STOP_RULES a beam search stops by, and whether it runs OpenNMT-py's beam
    (`opennmt`: asked for its checkpoints). `ctranslate2` is CTranslate2's rule at every length
    penalty (src/decoding.cc): it refills ended slots (not OpenNMT-py's beam), and stops at
    the top beam (`top`) only when no length or coverage penalty changes scores (`penalised`
    False); with one, once beam_size hypotheses have ended (`true`)."""
    if early_stopping == "ctranslate2":
        return ("true" if penalised else "top"), False
    return early_stopping, opennmt
