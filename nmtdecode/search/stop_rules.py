"""The stop rules of beam search as tensor operations: `Beam.cannot_improve`, for every sentence
of a batch at once (search/beam.py defines each rule; the device search, device_beam.py, asks
them here). Each rule is a small function of `PoolFacts`, chosen by name, as the penalties are:

    top    the top-ranked candidate of a step has ended and n_best hypotheses are finished
    true   the pool holds beam_size finished hypotheses
    false  the pool is full and the best alive total, penalised at the current length, does
           not beat the worst finished score
    never  the pool is full and it beats it at no length up to the step limit

Scores are float64, computed as total / divisor (penalties.py), as the host computes them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch


@dataclass
class PoolFacts:
    """What the rules read, one value per sentence still searched (n,)."""

    count: torch.Tensor  # finished hypotheses in the pool
    full: torch.Tensor  # bool: the pool holds beam_size of them
    worst: torch.Tensor  # float64: the score of the pool's last one (a hypothesis when full)
    best: torch.Tensor  # float64: the best alive total (log-prob sum), -inf when none is alive
    divisor_now: torch.Tensor  # float64: the length penalty's divisor at the current length
    divisor_limit: torch.Tensor  # float64: ... at the sentence's step limit
    top_ended: torch.Tensor  # bool: the top-ranked candidate of a step has ended (see device_beam.py)
    n_best: int


def stop_top(facts: PoolFacts) -> torch.Tensor:
    return facts.top_ended & (facts.count >= facts.n_best)


def stop_true(facts: PoolFacts) -> torch.Tensor:
    return facts.full


def stop_false(facts: PoolFacts) -> torch.Tensor:
    return facts.full & (facts.best / facts.divisor_now <= facts.worst)


def stop_never(facts: PoolFacts) -> torch.Tensor:
    """Penalties are monotone in the length, so the best reachable score is at one end."""
    bound = torch.maximum(facts.best / facts.divisor_now, facts.best / facts.divisor_limit)
    return facts.full & (bound <= facts.worst)


STOP_RULES: dict[str, Callable[[PoolFacts], torch.Tensor]] = {
    "top": stop_top,
    "true": stop_true,
    "false": stop_false,
    "never": stop_never,
}
