"""Greedy search with its bookkeeping on the device: the host strategy's tokens and scores
(greedy.py), with no copy to the host in a step.

One row per sentence, which never reorders: each takes its most probable token, and a
sentence ends at its first EOS or at its step limit, its one hypothesis then recorded:

    best, tokens = max of each row's log-probs                greedy.py
    pool      = the hypothesis of each sentence that ends      endings.py: a pool of one, filled once
    history  += each row's token and total                     history.py
    done     |= EOS | step limit

Beam search of one beam would give the same tokens with twice its operations a step (a topk of
two, slots refilled, a merged pool), which a GPU pays a kernel launch for each.
"""

from __future__ import annotations

import torch

from ..base import RowFacts, StepOutput
from ..endings import Endings
from ..greedy import next_greedy_rows
from ..penalties import LengthPenalty
from .records import KEPT, DeviceRecords


class DeviceGreedySearch(DeviceRecords):
    kind = "greedy"

    def __init__(
        self,
        *,
        batch_size: int,
        max_steps: list[int],
        start_id: int,
        eos_id: int,
        penalty: LengthPenalty,
        device: torch.device | str,
        check_every: int = 1,
    ) -> None:
        super().__init__(
            ends=Endings(sentences=batch_size, size=1, max_steps=max_steps, penalty=penalty, device=device, kept=KEPT),
            slots=1,
            max_steps=max_steps,
            start_id=start_id,
            eos_id=eos_id,
            device=device,
            check_every=check_every,
        )
        self.alive_scores = torch.zeros(batch_size, device=device)
        self.slot = torch.zeros((batch_size, 1), dtype=torch.long, device=device)  # every row is slot 0

    def advance(self, logprobs: torch.Tensor, step: int, facts: RowFacts | None = None) -> StepOutput:
        """logprobs (n, V): each row takes its arg-max (the first of equal maxima, as greedy.py)."""
        return self.next_rows(self.choose(logprobs, facts))

    def choose(self, logprobs: torch.Tensor, facts: RowFacts | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """The step's work on the device (as device/beam.py's): each row's token and total (n,)."""
        best, tokens = logprobs.max(dim=1)
        totals = self.alive_scores + best
        ends = (tokens == self.eos_id) | self.ends.at_limit(self.length)
        attached = {} if facts is None else {name: fact[:, None] for name, fact in facts.attached().items()}
        slot = self.slot[: len(self.active)]
        self.ends.end_once(
            self.length,
            totals[:, None],
            ends[:, None],
            None if facts is None or facts.penalty is None else facts.penalty[:, None],
            total=totals[:, None],
            step=self.step.expand_as(slot),
            prev=slot,
            token=tokens[:, None],
            **attached,
        )
        self.ends.done |= ends
        self.commit(tokens[:, None], slot, totals[:, None], attached)
        return tokens, totals

    def next_rows(self, chosen: tuple[torch.Tensor, torch.Tensor]) -> StepOutput:
        """The step's end on the host: at a check of the done flags, finished sentences leave."""
        return next_greedy_rows(self, *chosen)

    def state(self) -> dict[str, torch.Tensor]:
        return dict(super().state(), alive_scores=self.alive_scores, slot=self.slot)
