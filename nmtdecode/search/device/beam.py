"""Beam search with its bookkeeping on the device: the host search's tokens and scores, with no
copy to the host in a step.

The host search (beam.py) copies each step's chosen candidates to the host and hands each
sentence's share to its `Beam`, a Python object. Here the same step is tensor operations over
the whole batch, in buffers of a fixed size, so that no shape within a step depends on a value
read on the host (as a CUDA graph needs); the arithmetic and the rules are the host search's
own functions:

    candidates = top 2k of (alive totals + log-probs)        candidates.py: best_continuations
    alive      = the k best not ending in EOS                 candidates.py: keep_alive
    pools     += the top k candidates that end                endings.py, finished.py
    done      |= step limit | stop rule(pools, best alive)    endings.py, stop_rules.py
    history   += alive tokens, backpointers, totals           history.py: next_ys, prev_ks
    every few steps: the host reads the done flags            done_flags.py: drop, or stop

and `results` walks the backpointers of every finished hypothesis back at once
(history.py: `get_hyp`'s walk as a gather), then copies the batch's n-best to the host once.

A step reads nothing on the host: its only host values are the rows per sentence and which
sentences are in the batch, which change only when the host has read the flags. The tests
compare both searches token for token and score for score (tests/search/test_device_search.py).
docs/search.md says which options it holds; docs/speed.md has its measurements.
"""

from __future__ import annotations

import torch

from ..base import RowFacts, StepOutput
from ..candidates import Candidates, best_continuations, extended_rows, keep_alive, next_beam_rows
from ..endings import BeamEndings
from ..penalties import LengthPenalty
from .records import KEPT, DeviceRecords


class DeviceBeamSearch(DeviceRecords):
    """Beam search over a batch, every record a tensor. `opennmt`: OpenNMT-py's beam (an ended
    slot stays empty, `top` asks the top candidate of the stopping step to end), as beam.py.
    Beam size 1 with `opennmt` is greedy search: the top candidate, ended at EOS."""

    kind = "beam"
    ends: BeamEndings

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
        ends = BeamEndings(
            rule=early_stopping,
            n_best=n_best,
            eos_id=eos_id,
            top_sticks=not opennmt,
            sentences=batch_size,
            size=beam_size,
            max_steps=max_steps,
            penalty=penalty,
            device=device,
            kept=KEPT,
        )
        super().__init__(
            ends=ends,
            slots=beam_size,
            max_steps=max_steps,
            start_id=start_id,
            eos_id=eos_id,
            device=device,
            check_every=check_every,
        )
        self.k, self.refill = beam_size, not opennmt
        self.width = 1  # rows per sentence in the current step
        self.alive_scores = torch.zeros(batch_size, device=device)

    def advance(self, logprobs: torch.Tensor, step: int, facts: RowFacts | None = None) -> StepOutput:
        """logprobs (n*width, V) of this step, consumed (turned into totals in place); the step number
        is the device's own."""
        return self.next_rows(self.choose(logprobs, facts))

    def choose(self, logprobs: torch.Tensor, facts: RowFacts | None = None) -> Candidates:
        """The step's work on the device, which reads nothing on the host: the candidates, the
        pools, the done flags and the history; returns the alive slots (n, k). A CUDA graph may
        replay it (device/graphs.py)."""
        candidates = best_continuations(logprobs, self.alive_scores, len(self.active), self.k, self.eos_id, host=False)
        alive = keep_alive(candidates, self.k, self.eos_id, self.refill)
        self.record(candidates.first(self.k), alive, facts)
        return alive

    def next_rows(self, alive: Candidates) -> StepOutput:
        """The step's end on the host: at a check of the done flags, finished sentences leave."""
        return next_beam_rows(self, alive)[0]

    def state(self) -> dict[str, torch.Tensor]:
        return dict(super().state(), alive_scores=self.alive_scores)

    def record(self, top: Candidates, alive: Candidates, facts: RowFacts | None) -> None:
        """The end of the step for every sentence in the batch (endings.py, as the host search's):
        those of the top k candidates that end go to the pools, with every fact of them, and the
        stop rule says which sentences are done; then the alive slots go to the history."""
        attached = {} if facts is None else facts.attached()
        self.ends.step(
            self.length,
            top.scores,
            top.tokens,
            best=alive.scores.amax(dim=1),
            coverage_penalty=None if facts is None or facts.penalty is None else self.of(facts.penalty, top.prev),
            total=top.scores,
            step=self.step.expand_as(top.prev),
            prev=top.prev,
            token=top.tokens,
            **{name: self.of(fact, top.prev) for name, fact in attached.items()},
        )
        self.commit(
            alive.tokens, alive.prev, alive.scores, {name: self.of(fact, alive.prev) for name, fact in attached.items()}
        )

    def of(self, fact: torch.Tensor, prev: torch.Tensor) -> torch.Tensor:
        """A fact of each row, (rows,) or (rows, S), read for candidates (n, c) from the row each extends."""
        return fact[extended_rows(prev, self.width)]
