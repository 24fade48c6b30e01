"""Backtracking: a hypothesis' tokens and attached facts read along its backpointers.

OpenNMT's `Beam` keeps, per sentence, the token of every step and slot (`next_ys`) and the
slot of the previous step it extends (`prev_ks`); `get_hyp` follows them back. `walk_back` is
that walk, once, for both searches: the host's `Beam.get_hyp` (beam.py) follows its lists for
one hypothesis, and the device search (device/records.py) follows `StepHistory`, the same
records for every sentence of a batch in (steps, sentences, slots) tensors, for every
finished hypothesis of the batch at once: one gather per step, once per batch.

A `StepHistory` is written once per step, at the step number it holds on the device. Its rows
are the batch's sentences as it started (sentence i is row i however the batch shrinks), so
nothing is copied when finished sentences leave the batch.
"""

from __future__ import annotations

from typing import Callable, TypeVar

import torch

from .base import Hypothesis, path_hypothesis, unreachable
from .finished import Ended


Slot = TypeVar("Slot", int, torch.Tensor)


def walk_back(step: int, slot: Slot, prev_of: Callable[[int, Slot], Slot]) -> list[Slot]:
    """The slot a hypothesis held at each step 0..`step`, given the one it holds at `step`:
    `prev_of(t, slot)` is the slot of step t - 1 that `slot` extends at step t (prev_ks[t][slot])."""
    slots = [slot]
    for t in range(step, 0, -1):
        slot = prev_of(t, slot)
        slots.append(slot)
    slots.reverse()
    return slots


class StepHistory:
    """next_ys, prev_ks and the running total of every (step, sentence, slot), and what is
    attached to each token (alignment, attention: base.py:ATTACHED)."""

    def __init__(self, steps: int, sentences: int, slots: int, device: torch.device | str) -> None:
        shape = (steps, sentences, slots)
        self.tokens = torch.zeros(shape, dtype=torch.long, device=device)
        self.prev = torch.zeros(shape, dtype=torch.long, device=device)  # zeros: a walk may read unwritten steps
        self.totals = torch.zeros(shape, dtype=torch.float32, device=device)
        self.attached: dict[str, torch.Tensor] = {}

    def write(
        self,
        step: torch.Tensor,
        rows: torch.Tensor,
        tokens: torch.Tensor,
        prev: torch.Tensor,
        totals: torch.Tensor,
        attached: dict[str, torch.Tensor],
    ) -> None:
        """Record step `step` (a one-element tensor) of sentences `rows` (n,): each (n, slots)."""
        steps, sentences, slots = self.tokens.shape
        flat = step * sentences + rows  # (n,): the rows of a (steps * sentences, slots) view
        values = dict(tokens=tokens, prev=prev, totals=totals, **attached)
        for name, value in values.items():
            buffer = getattr(self, name) if name in ("tokens", "prev", "totals") else self.attached.get(name)
            if buffer is None:
                buffer = self.attached[name] = value.new_zeros((steps, sentences, *value.shape[1:]))
            buffer.view(steps * sentences, *buffer.shape[2:]).index_copy_(0, flat, value)

    def paths(self, ended: Ended, length: int) -> dict[str, torch.Tensor]:
        """Every hypothesis of `ended` (sentences, P) walked back over the first `length` steps:
        {"tokens", "totals", and each attached name} as (sentences, P, length[, S]), position t
        the token chosen at step t (up to the hypothesis' own step, which holds its last token;
        later positions are meaningless)."""

        def prev_of(t: int, slot: torch.Tensor) -> torch.Tensor:  # up to its own step, a hypothesis stays at `prev`
            return torch.where(t < ended.step, self.prev[t].gather(1, slot), slot)

        slots = torch.stack(walk_back(length - 1, ended.prev, prev_of))  # (length, sentences, P)
        own = {"tokens": ended.token, "totals": ended.total, **ended.attached}
        buffers = {"tokens": self.tokens, "totals": self.totals, **self.attached}
        return {name: along(buffers[name][:length], slots, ended.step, own[name]) for name in own}


def along(buffer: torch.Tensor, slots: torch.Tensor, step: torch.Tensor, last: torch.Tensor) -> torch.Tensor:
    """buffer (T, B, slots[, S]) read at `slots` (T, B, P), with each hypothesis' own last value
    (B, P[, S]) at its `step` -> (B, P, T[, S])."""
    extra = buffer.shape[3:]
    index = slots.view(*slots.shape, *[1] * len(extra)).expand(*slots.shape, *extra)
    values = buffer.gather(2, index).movedim(0, 2)  # (B, P, T[, S])
    at = step.view(*step.shape, 1, *[1] * len(extra)).expand(*step.shape, 1, *extra)
    return values.scatter(2, at, last.unsqueeze(2))


def finished_hypotheses(
    pools: Ended, history: StepHistory, length: int, n_best: int, eos_id: int
) -> list[list[Hypothesis]]:
    """The n best hypotheses of every sentence, best first, from its pool (pools: (sentences,
    size)) and the first `length` steps of the history (`SentenceRecords.results`, search/base.py):
    walked back on the device, then one copy to the host, which builds them as the host search does."""
    best = Ended.of({name: value[:, :n_best] for name, value in pools.values().items()})
    paths = {name: value.cpu() for name, value in history.paths(best, length).items()}
    host = {name: value.tolist() for name, value in paths.items()}
    score, step, valid = best.score.tolist(), best.step.tolist(), best.valid.tolist()
    results = []
    for b, hypotheses in enumerate(valid):
        made = []
        for j in range(sum(hypotheses)):  # the hypotheses come first in a pool
            end = step[b][j] + 1
            along = {name: host[name][b][j][:end] for name in best.attached}
            made.append(
                path_hypothesis(host["tokens"][b][j][:end], host["totals"][b][j][:end], along, score[b][j], eos_id)
            )
        results.append(made + unreachable(n_best - len(made)))
    return results
