"""The end of a search step, one definition for the host search and the device search: which
candidates end, scored and merged into their sentence's pool (finished.py), and which
sentences are done (beam search: by its stop rule, stop_rules.py).

The state is one row per sentence of the batch, as tensors: the pools, the done flags and
what rule `top` remembers. The device search keeps them on the model's device and reads none
of them on the host within a step. The host search keeps them on the host: it computes them
from its one copy a step, batched over its sentences, and each sentence's `Beam` (beam.py)
reads its row: where its new finished hypotheses go in its pool, and whether it is done.
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from .base import NEG_INF, named, part
from .finished import FinishedPool
from .penalties import LengthPenalty
from .stop_rules import STOP_RULES, PoolFacts


class Merged(NamedTuple):
    """What became of a step's candidates (n, c) that `Endings.end` was given."""

    valid: torch.Tensor  # (n, c) bool: which are hypotheses (ended, reachable, of a sentence not done)
    score: torch.Tensor  # (n, c) float64: the score each is ranked by
    order: torch.Tensor  # (n, size): the pool's entries as positions in [the pool before, the candidates]


class Endings:
    """The pools and done flags of a batch's sentences: (n, ...) for the n sentences in the
    batch, position i its i-th, compacted with it when finished sentences leave. `kept`: what
    the pools keep of a hypothesis beside its score (finished.py)."""

    STATE: tuple[str, ...] = ("divisors", "max_steps", "divisor_limit", "done")  # besides the pool's entries

    def __init__(
        self,
        *,
        sentences: int,
        size: int,
        max_steps: list[int],
        penalty: LengthPenalty,
        device: torch.device | str,
        kept: dict[str, torch.dtype] | None = None,
    ) -> None:
        self.divisors = penalty.divisors(max(max_steps), device)  # float64, by length
        self.max_steps = torch.tensor(max_steps, device=device)  # (n,)
        self.divisor_limit = self.divisors[self.max_steps]  # (n,) each sentence's divisor at its step limit
        self.pool = FinishedPool(sentences, size, device, kept)
        self.done = torch.zeros(sentences, dtype=torch.bool, device=device)  # (n,) a sentence stays done

    def at_limit(self, length: int | torch.Tensor) -> torch.Tensor:
        """(n,) bool: hypotheses of `length` tokens have reached their sentence's step limit."""
        return self.max_steps <= length

    def scored(
        self, totals: torch.Tensor, length: int | torch.Tensor, coverage_penalty: torch.Tensor | None = None
    ) -> torch.Tensor:
        """The score (float64) of hypotheses of `length` tokens with these totals (n, c): the total
        over the length penalty's divisor (penalties.py), less the coverage penalty."""
        score = totals.double() / self.divisors[length]
        return score if coverage_penalty is None else score - coverage_penalty.double()

    def end(
        self,
        length: int | torch.Tensor,
        totals: torch.Tensor,
        ends: torch.Tensor,
        coverage_penalty: torch.Tensor | None = None,
        **kept: torch.Tensor,
    ) -> Merged:
        """Candidates (n, c) of `length` tokens, ranked by `totals`, that end where `ends` says:
        those reachable (above -inf) of a sentence not done are hypotheses, merged into its pool
        with what it keeps of them (finished.py)."""
        valid, score = self.hypotheses(length, totals, ends, coverage_penalty)
        return Merged(valid, score, self.pool.add(score, valid, **kept))

    def end_once(
        self,
        length: int | torch.Tensor,
        totals: torch.Tensor,
        ends: torch.Tensor,
        coverage_penalty: torch.Tensor | None = None,
        **kept: torch.Tensor,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """`end` for pools of one that a sentence fills once (greedy search): (valid, score)."""
        valid, score = self.hypotheses(length, totals, ends, coverage_penalty)
        self.pool.first(score, valid, **kept)
        return valid, score

    def hypotheses(
        self,
        length: int | torch.Tensor,
        totals: torch.Tensor,
        ends: torch.Tensor,
        coverage_penalty: torch.Tensor | None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Which candidates are hypotheses (n, c), and their scores."""
        valid = ends & (totals > NEG_INF)
        return valid.masked_fill_(self.done[:, None], False), self.scored(totals, length, coverage_penalty)

    def state(self) -> dict[str, torch.Tensor]:
        """The tensors a step reads or writes, by name (the device search's `state`)."""
        return {name: getattr(self, name) for name in self.STATE} | named("pool.", self.pool.entries)

    def bind(self, state: dict[str, torch.Tensor]) -> None:
        self.pool.entries.update(part("pool.", state))
        for name in self.STATE:
            setattr(self, name, state[name])

    def compact(self, keep: torch.Tensor) -> None:
        """Only the sentences at positions `keep` stay in the batch."""
        self.pool.keep(keep)
        self.max_steps, self.divisor_limit, self.done = self.max_steps[keep], self.divisor_limit[keep], self.done[keep]


class BeamEndings(Endings):
    """`Endings` of a beam search: its stop rule (`rule`, a name of STOP_RULES; `n_best` at most
    the pool's size), and what rule `top` remembers, whether the top-ranked candidate of a step
    has ended: since any earlier step (`top_sticks`), or at this one only (OpenNMT-py's beam)."""

    STATE = (*Endings.STATE, "top_ended")

    def __init__(self, *, rule: str, n_best: int, eos_id: int, top_sticks: bool = True, **common) -> None:
        super().__init__(**common)
        self.rule, self.n_best, self.eos_id, self.top_sticks = STOP_RULES[rule], n_best, eos_id, top_sticks
        self.top_ended = torch.zeros_like(self.done)

    def step(
        self,
        length: int | torch.Tensor,
        scores: torch.Tensor,
        tokens: torch.Tensor,
        best: torch.Tensor,
        coverage_penalty: torch.Tensor | None = None,
        **kept: torch.Tensor,
    ) -> Merged:
        """The end of a step whose hypotheses have `length` tokens, given each sentence's top k
        candidates (n, k), best first: the totals they are ranked by (`scores`) and their last
        tokens. Those that end (EOS; every one at the step limit) go to the pools; a sentence is
        then done at its step limit or by the rule, `best` (n,) the ranked total it bounds with."""
        last, eos = self.at_limit(length), tokens == self.eos_id
        merged = self.end(length, scores, eos | last[:, None], coverage_penalty, **kept)
        top = eos[:, 0] | last
        self.top_ended = top | self.top_ended if self.top_sticks else top
        self.done |= last | self.rule(self.facts(length, best))
        return merged

    def facts(self, length: int | torch.Tensor, best: torch.Tensor) -> PoolFacts:
        """What the rule reads of each sentence, this step's hypotheses in the pools."""
        return PoolFacts(
            full=self.pool.holds(self.pool.size),
            has_n_best=self.pool.holds(self.n_best),
            worst=self.pool.worst(),
            best=best.double(),
            divisor_now=self.divisors[length],
            divisor_limit=self.divisor_limit,
            top_ended=self.top_ended,
        )

    def compact(self, keep: torch.Tensor) -> None:
        super().compact(keep)
        self.top_ended = self.top_ended[keep]
