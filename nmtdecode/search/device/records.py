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

from ..base import Hypothesis, survivors
from .done_flags import DoneFlags
from ..finished import FinishedPool
from ..history import StepHistory, finished_hypotheses
from ..penalties import LengthPenalty


class DeviceRecords:
    """The records of `batch_size` sentences of `slots` hypotheses each, up to their `max_steps`.

    State of the sentences in the batch is kept for them alone, (n, ...), position i being the
    batch's i-th sentence, as the rows are; it is compacted with them when finished sentences
    leave (at a check), so that a step indexes nothing by sentence. `rows` (n,) numbers them as
    the batch first did, which the history and the results are kept by."""

    def __init__(
        self,
        *,
        batch_size: int,
        slots: int,
        max_steps: list[int],
        start_id: int,
        eos_id: int,
        penalty: LengthPenalty,
        device: torch.device | str,
        check_every: int,
    ) -> None:
        self.eos_id = eos_id
        self.divisors = penalty.divisors(max(max_steps), device)  # float64, by length
        self.max_steps = torch.tensor(max_steps, device=device)  # (n,)
        self.divisor_limit = self.divisors[self.max_steps]  # (n,) each sentence's divisor at its step limit
        self.pool = FinishedPool(batch_size, slots, device)
        self.history = StepHistory(max(max_steps), batch_size, slots, device)
        self.finished = torch.zeros(batch_size, dtype=torch.bool, device=device)  # (n,) done, on the device
        self.flags = DoneFlags(batch_size, check_every, device)
        self.step = torch.zeros(1, dtype=torch.long, device=device)  # the step being decoded
        self.length = self.step + 1  # the hypotheses' length after it
        self.steps = 0  # steps decoded, as the host counts them
        self.active = list(range(batch_size))  # the batch's sentences, by their first numbering
        self.rows = torch.arange(batch_size, device=device)  # the same, on the device
        self.start_tokens = torch.full((batch_size,), start_id, dtype=torch.long, device=device)
        self.all_done = False  # as the host last read it
        self.shrink = True  # finished sentences leave the batch (off only to test that it changes nothing)

    @property
    def done(self) -> bool:
        return self.all_done

    def at_limit(self) -> torch.Tensor:
        """(n,) bool: this step is each sentence's step limit (`Beam.is_last_step`)."""
        return self.max_steps <= self.length

    def scored(self, totals: torch.Tensor, coverage_penalty: torch.Tensor | None) -> torch.Tensor:
        """The ranking score (float64) of hypotheses ending at this step with `totals` (n, c):
        `Beam.add_finished`'s arithmetic, in the same precision."""
        score = totals.double() / self.divisors[self.length]
        return score if coverage_penalty is None else score - coverage_penalty.double()

    def commit(
        self,
        tokens: torch.Tensor,
        prev: torch.Tensor,
        totals: torch.Tensor,
        attached: dict[str, torch.Tensor],
        done: torch.Tensor,
    ) -> None:
        """The end of a step (its ended hypotheses in the pools): each slot's token, backpointer,
        total and attached facts (n, slots[, S]) into the history, and `done` (n,) into the flags
        (a sentence stays done)."""
        self.history.write(self.step, self.rows, tokens, prev, totals, attached)
        self.finished |= done
        self.step += 1
        self.length += 1
        self.steps += 1

    def leaving(self) -> torch.Tensor | None:
        """At a check of the done flags: the positions (kept,) in the batch of the sentences that
        stay (as the host search's `survivors`), every piece of state here compacted to them
        (`compact`); None when the batch stays as it is."""
        known = self.flags.check(self.steps, self.finished)
        if known is None:
            return None
        self.all_done = all(known)
        still = survivors(known, self.shrink)
        keep = None
        if len(still) < len(self.active):
            keep = torch.tensor(still, dtype=torch.long, device=self.rows.device)
            self.compact(keep)
            self.active = [self.active[i] for i in still]
        self.flags.post(self.finished)
        return keep

    def compact(self, keep: torch.Tensor) -> None:
        """Only the sentences at positions `keep` stay in the batch (a strategy adds its own state)."""
        self.pool.keep(self.rows, keep)
        self.rows, self.max_steps, self.finished = self.rows[keep], self.max_steps[keep], self.finished[keep]
        self.divisor_limit = self.divisor_limit[keep]

    def results(self, n_best: int) -> list[list[Hypothesis]]:
        return finished_hypotheses(self.pool.store(self.rows), self.history, self.steps, n_best, self.eos_id)
