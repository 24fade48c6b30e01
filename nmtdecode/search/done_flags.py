"""What the host knows of which sentences are done, when the search runs on the device.

The device search keeps each sentence's done flag in a tensor (device_beam.py). Reading it on
the host every step would be the device-to-host copy (and the wait for the step to finish)
that the device search exists to remove, so the host asks every `every` steps. On a GPU the
copy goes into pinned memory asynchronously and is read at the next check, one interval
later, when it has long arrived: the host never waits for the GPU, and learns that a sentence
is done at most 2 x `every` steps late. A sentence that is done stays done (its pool no longer
changes), so the steps decoded meanwhile change no result, only cost time. On a CPU there
is nothing to wait for, and the flags are read at once.
"""

from __future__ import annotations

import torch

CUDA_CHECK_EVERY = 4  # steps between two reads of the flags on a GPU (docs/search.md)


def check_interval(device: torch.device) -> int:
    """Steps between two reads of the flags: every step on a CPU, where a read costs nothing."""
    return CUDA_CHECK_EVERY if device.type == "cuda" else 1


class DoneFlags:
    """The host's view of a (sentences,) bool tensor that only ever turns True."""

    def __init__(self, done: torch.Tensor, every: int) -> None:
        self.done, self.every = done, every
        self.known = [False] * done.numel()  # per sentence, as last read
        self.asynchronous = done.device.type == "cuda"
        self.pinned: torch.Tensor | None = None
        self.posted: torch.cuda.Event | None = None

    def check(self, steps: int) -> list[bool] | None:
        """After `steps` steps: at every `every`-th, the flags as the host now knows them; else None."""
        if steps % self.every:
            return None
        if not self.asynchronous:
            self.known = self.done.tolist()
            return self.known
        if self.posted is not None:
            self.posted.synchronize()  # posted `every` steps ago: arrived
            self.known = self.pinned.tolist()
        self._post()
        return self.known

    def _post(self) -> None:
        """Start copying the flags to the host, to be read at the next check."""
        if self.pinned is None:
            self.pinned = torch.empty(self.done.shape, dtype=torch.bool, pin_memory=True)
            self.posted = torch.cuda.Event()
        self.pinned.copy_(self.done, non_blocking=True)
        self.posted.record()
