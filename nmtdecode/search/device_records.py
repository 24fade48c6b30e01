"""What the device strategies share: a batch's records as tensors, and the host's view of them.

The host strategies keep one `Beam` per sentence, Python lists, and copy each step's choices
to the host to fill them (base.py: SentenceRecords). The device strategies (device_beam.py,
device_sampling.py) keep the same records for the whole batch on the device:

    pool      the best ended hypotheses of each sentence         finished.py
    history   the token, backpointer and total of every step     history.py
    finished  which sentences are done                           read every few steps: done_flags.py

and rows are sentence-major as in the host search. The step number is a tensor on the device
as well, so that a step's operations depend on no value read on the host.
"""

from __future__ import annotations

import torch

from .base import Hypothesis, survivors
from .done_flags import DoneFlags
from .finished import FinishedPool
from .history import StepHistory, finished_hypotheses
from .penalties import LengthPenalty


class DeviceRecords:
    """The records of `batch_size` sentences of `slots` hypotheses each, up to their `max_steps`."""

    def __init__(self, *, batch_size: int, slots: int, max_steps: list[int], start_id: int, eos_id: int,
                 penalty: LengthPenalty, device: torch.device | str, check_every: int) -> None:
        self.eos_id = eos_id
        self.divisors = penalty.divisors(max(max_steps), device)  # float64, by length
        self.max_steps = torch.tensor(max_steps, device=device)
        self.pool = FinishedPool(batch_size, slots, device)
        self.history = StepHistory(max(max_steps), batch_size, slots, device)
        self.finished = torch.zeros(batch_size, dtype=torch.bool, device=device)  # done, on the device
        self.flags = DoneFlags(self.finished, check_every)
        self.step = torch.zeros(1, dtype=torch.long, device=device)  # the step being decoded
        self.steps = 0  # steps decoded, as the host counts them
        self.active = list(range(batch_size))  # the batch's sentences still in it
        self.rows = torch.arange(batch_size, device=device)  # the same, on the device
        self.start_tokens = torch.full((batch_size,), start_id, dtype=torch.long, device=device)
        self.all_done = False  # as the host last read it
        self.shrink = True  # finished sentences leave the batch (off only to test that it changes nothing)

    @property
    def done(self) -> bool:
        return self.all_done

    def at_limit(self) -> torch.Tensor:
        """(n,) bool: this step is the step limit of each sentence in the batch (`Beam.is_last_step`)."""
        return self.max_steps[self.rows] <= self.step + 1

    def scored(self, totals: torch.Tensor, coverage_penalty: torch.Tensor | None) -> torch.Tensor:
        """The ranking score (float64) of hypotheses ending at this step with `totals` (n, c):
        `Beam.add_finished`'s arithmetic, in the same precision."""
        score = totals.double() / self.divisors[self.step + 1]
        return score if coverage_penalty is None else score - coverage_penalty.double()

    def commit(self, tokens: torch.Tensor, prev: torch.Tensor, totals: torch.Tensor,
               attached: dict[str, torch.Tensor], done: torch.Tensor) -> None:
        """The end of a step of the sentences in the batch (their ended hypotheses are in the
        pools): each slot's token, backpointer, total and attached facts (n, slots[, S]) into the
        history, and `done` (n,) into the flags (a sentence stays done)."""
        rows = self.rows
        self.history.write(self.step, rows, tokens, prev, totals, attached)
        self.finished.index_copy_(0, rows, self.finished[rows] | done)
        self.step += 1
        self.steps += 1

    def leaving(self) -> list[int] | None:
        """At a check of the done flags: the positions in the batch of the sentences that stay
        (as the host search's `survivors`), or None when the batch stays as it is."""
        known = self.flags.check(self.steps)
        if known is None:
            return None
        self.all_done = all(known[s] for s in self.active)
        still = survivors([known[s] for s in self.active], self.shrink)
        if len(still) == len(self.active):
            return None
        self.active = [self.active[i] for i in still]
        self.rows = self.rows[torch.tensor(still, dtype=torch.long, device=self.rows.device)]
        return still

    def results(self, n_best: int) -> list[list[Hypothesis]]:
        return finished_hypotheses(self.pool, self.history, self.steps, n_best, self.eos_id)
