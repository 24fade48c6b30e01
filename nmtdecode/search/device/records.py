"""What the device strategies share: a batch's records as tensors, and the host's view of them.

The host strategies keep one `Beam` per sentence, Python lists, and copy each step's choices
to the host to fill them (base.py: SentenceRecords). The device strategies (device/beam.py,
greedy.py, sampling.py) keep the same records for the whole batch on the device:

    ends      each sentence's pool of finished hypotheses, and     endings.py (the same as the
              whether it is done                                   host search's, on the device)
    history   the token, backpointer and total of every step       history.py
    flags     the host's view of who is done, every few steps      done_flags.py

and rows are sentence-major as in the host search. The step number is a tensor on the device
as well, so that a step's operations depend on no value read on the host.
"""

from __future__ import annotations

import torch

from ..base import Hypothesis, named, part, survivors
from ..endings import Endings
from ..history import StepHistory, finished_hypotheses
from .done_flags import DoneFlags

HISTORY = ("tokens", "prev", "totals")  # StepHistory's own buffers, beside those of attached facts
KEPT = {"total": torch.float32, "step": torch.long, "prev": torch.long, "token": torch.long}
"""What a pool keeps of each hypothesis beside its score, to walk it back at the end (finished.py:
Ended); attached facts join at the first step that records them."""


class DeviceRecords:
    """The records of a batch's sentences, `slots` hypotheses each, up to their step limits.

    State of the sentences in the batch is kept for them alone, (n, ...), position i being the
    batch's i-th sentence, as the rows are; it is compacted with them when finished sentences
    leave (at a check), so that a step indexes nothing by sentence. `rows` (n,) numbers them as
    the batch first did, which the history and the results are kept by. `ends`: the strategy's
    Endings, made with KEPT on the device."""

    def __init__(
        self,
        *,
        ends: Endings,
        slots: int,
        max_steps: list[int],
        start_id: int,
        eos_id: int,
        device: torch.device | str,
        check_every: int,
    ) -> None:
        batch_size = len(max_steps)
        self.eos_id = eos_id
        self.ends = ends
        self.history = StepHistory(max(max_steps), batch_size, slots, device)
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

    def commit(
        self, tokens: torch.Tensor, prev: torch.Tensor, totals: torch.Tensor, attached: dict[str, torch.Tensor]
    ) -> None:
        """The end of a step (its ended hypotheses in the pools, the done flags set): each slot's
        token, backpointer, total and attached facts (n, slots[, S]) into the history."""
        self.history.write(self.step, self.rows, tokens, prev, totals, attached)
        self.step += 1
        self.length += 1

    def leaving(self) -> torch.Tensor | None:
        """At a check of the done flags: the positions (kept,) in the batch of the sentences that
        stay (as the host search's `survivors`), every piece of state here compacted to them
        (`compact`); None when the batch stays as it is. The host's count of the steps is kept
        here, after the step's device work, which a CUDA graph may replay (device/graphs.py)."""
        self.steps += 1
        known = self.flags.check(self.steps, self.ends.done)
        if known is None:
            return None
        self.all_done = all(known)
        still = survivors(known, self.shrink)
        keep = None
        if len(still) < len(self.active):
            keep = torch.tensor(still, dtype=torch.long, device=self.rows.device)
            self.compact(keep)
            self.active = [self.active[i] for i in still]
        self.flags.post(self.ends.done)
        return keep

    def compact(self, keep: torch.Tensor) -> None:
        """Only the sentences at positions `keep` stay in the batch (a strategy adds its own state);
        the pools of all of them are stored first, by the batch's first numbering."""
        self.ends.pool.store(self.rows)
        self.ends.compact(keep)
        self.rows = self.rows[keep]

    def state(self) -> dict[str, torch.Tensor]:
        """Every tensor a step reads or writes that outlives it, by name: what a captured step
        holds in place (device/graphs.py); `bind` puts such tensors in their places."""
        history = {name: getattr(self.history, name) for name in HISTORY} | named("attached.", self.history.attached)
        own = dict(step=self.step, length=self.length, rows=self.rows)
        return own | named("history.", history) | named("ends.", self.ends.state())

    def bind(self, state: dict[str, torch.Tensor]) -> None:
        """`state` as `state()` names it; a name without a part is an attribute of the search's own."""
        history = part("history.", state)
        self.history.attached.update(part("attached.", history))
        for name in HISTORY:
            setattr(self.history, name, history[name])
        self.ends.bind(part("ends.", state))
        for name, value in state.items():
            if "." not in name:
                setattr(self, name, value)

    def results(self, n_best: int) -> list[list[Hypothesis]]:
        return finished_hypotheses(self.ends.pool.store(self.rows), self.history, self.steps, n_best, self.eos_id)
