"""Beam search with its bookkeeping on the device: the host search's tokens and scores, with no
copy to the host in a step.

The host search (beam.py) copies each step's chosen candidates to the host and hands each
sentence's share to its `Beam`, a Python object. Here the same step is tensor operations over
the whole batch, in buffers of fixed size (DESIGN.md, the search contract):

    candidates = top 2k of (alive totals + log-probs)          beam.py: top_candidates
    alive      = the k best not ending in EOS                   beam.py: keep_alive
    pool      += the top k candidates that end                  finished.py: a sorted merge
    history   += alive tokens, backpointers, totals             history.py: next_ys, prev_ks
    done      |= step limit | stop rule(pool, best alive)       stop_rules.py
    every few steps: the host reads the done flags              done_flags.py: drop, or stop

and `results` walks the backpointers of every finished hypothesis back at once
(history.py: `get_hyp` as a gather), then copies the batch's n-best to the host once.

A step reads nothing on the host: its only host values are the rows per sentence and which
sentences are in the batch, which change only when the host has read the flags. The logic is
the host search's, rule for rule (`Beam.advance`, `Beam.cannot_improve`); the tests compare
both token for token and score for score (tests/search/test_device_search.py). docs/search.md
says which options it holds; docs/speed.md has its measurements.
"""

from __future__ import annotations

import torch

from ..base import NEG_INF, RowFacts, StepOutput
from ..beam import Candidates, best_continuations, extended_rows, keep_alive, next_beam_rows
from .records import DeviceRecords
from ..finished import Ended
from ..penalties import LengthPenalty
from ..stop_rules import STOP_RULES, PoolFacts


class DeviceBeamSearch(DeviceRecords):
    """Beam search over a batch, every record a tensor. `opennmt`: OpenNMT-py's beam (an ended
    slot stays empty, `top` asks the top candidate of the stopping step to end), as beam.py.
    Beam size 1 with `opennmt` is greedy search: the top candidate, ended at EOS."""

    kind = "beam"

    def __init__(
        self,
        *,
        batch_size: int,
        beam_size: int,
        max_steps: list[int],
        start_id: int,
        eos_id: int,
        penalty: LengthPenalty,
        early_stopping: str,
        device: torch.device | str,
        n_best: int = 1,
        opennmt: bool = False,
        check_every: int = 1,
    ) -> None:
        super().__init__(
            batch_size=batch_size,
            slots=beam_size,
            max_steps=max_steps,
            start_id=start_id,
            eos_id=eos_id,
            penalty=penalty,
            device=device,
            check_every=check_every,
        )
        self.k, self.n_best = beam_size, n_best
        self.refill = self.top_sticks = not opennmt
        self.stop_rule = STOP_RULES[early_stopping]
        self.top_ended = torch.zeros(batch_size, dtype=torch.bool, device=device)  # rule `top`
        self.width = 1  # rows per sentence in the current step
        self.alive_scores = torch.zeros(batch_size, device=device)

    def advance(self, logprobs: torch.Tensor, step: int, facts: RowFacts | None = None) -> StepOutput:
        """logprobs (n*width, V) of this step, consumed; the step number is the device's own."""
        candidates = best_continuations(logprobs, self.alive_scores, len(self.active), self.k, self.eos_id)
        alive = keep_alive(candidates, self.k, self.eos_id, self.refill)
        self.record(candidates, alive, facts)
        return next_beam_rows(self, alive)[0]  # at a check of the done flags, finished sentences leave

    def record(self, candidates: Candidates, alive: Candidates, facts: RowFacts | None) -> None:
        """`Beam.advance` for every sentence in the batch: those of the top k candidates that end
        go to the pools (a done sentence records none), the alive slots to the history, and the
        stop rule says which sentences are done."""
        k, last = self.k, self.at_limit()
        top_scores, top_tokens, top_prev = candidates.scores[:, :k], candidates.tokens[:, :k], candidates.prev[:, :k]
        ends = (top_tokens == self.eos_id) | last[:, None]
        valid = ends & (top_scores > NEG_INF) & ~self.finished[:, None]  # -inf: unreachable, not a hypothesis
        attached = {} if facts is None else facts.attached()
        penalty = None if facts is None or facts.penalty is None else self.of(facts.penalty, top_prev)
        self.pool.add(
            Ended(
                self.scored(top_scores, penalty),
                top_scores,
                self.step.expand_as(top_prev),
                top_prev,
                top_tokens,
                valid,
                {name: self.of(fact, top_prev) for name, fact in attached.items()},
            )
        )
        self.top_ended = last | (top_tokens[:, 0] == self.eos_id) | (self.top_ended & self.top_sticks)
        stop = self.stop_rule(self.pool_facts(alive))
        self.commit(
            alive.tokens,
            alive.prev,
            alive.scores,
            {name: self.of(fact, alive.prev) for name, fact in attached.items()},
            last | stop,
        )

    def pool_facts(self, alive: Candidates) -> PoolFacts:
        """What the stop rule reads, the step's ended hypotheses in the pools; the bound leaves
        the coverage penalty out (beam.py)."""
        count = self.pool.count()
        return PoolFacts(
            count=count,
            full=count >= self.k,
            worst=self.pool.worst(),
            best=alive.scores.amax(dim=1).double(),
            divisor_now=self.divisors[self.length],
            divisor_limit=self.divisor_limit,
            top_ended=self.top_ended,
            n_best=self.n_best,
        )

    def of(self, fact: torch.Tensor, prev: torch.Tensor) -> torch.Tensor:
        """A fact of each row, (rows,) or (rows, S), read for candidates (n, c) from the row each extends."""
        return fact[extended_rows(prev, self.width)]

    def compact(self, keep: torch.Tensor) -> None:
        super().compact(keep)
        self.top_ended = self.top_ended[keep]
