"""What the host knows of which sentences are done, when the search runs on the device.

The device search keeps each sentence's done flag in a tensor (beam.py). Reading it on
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
    """The host's view of the done flags (n,) of the sentences in the batch, which only turn True.
    The batch changes only at a check, right after the flags are read; the copy posted after it
    holds the flags of the batch as the next check finds it."""

    def __init__(self, sentences: int, every: int, device: torch.device | str) -> None:
        self.every = every
        self.asynchronous = torch.device(device).type == "cuda"
        # (sentences,) pinned, the first n posted; the event of the last copy into it: both made at the first post
        self.copy: tuple[torch.Tensor, torch.cuda.Event] | None = None
        self.sentences = sentences

    def check(self, steps: int, done: torch.Tensor) -> list[bool] | None:
        """After `steps` steps: at every `every`-th, the flags of the batch's sentences (n,) as the
        host now knows them; else None."""
        if steps % self.every:
            return None
        if not self.asynchronous:
            return done.tolist()
        if self.copy is None:
            return [False] * done.numel()
        pinned, posted = self.copy
        posted.synchronize()  # posted `every` steps ago: arrived
        return pinned[: done.numel()].tolist()

    def post(self, done: torch.Tensor) -> None:
        """After a check (and the batch's change it led to): start copying the flags to the host,
        to be read at the next check (on a GPU; on a CPU the check reads them)."""
        if not self.asynchronous:
            return
        if self.copy is None:
            self.copy = (torch.empty(self.sentences, dtype=torch.bool, pin_memory=True), torch.cuda.Event())
        pinned, posted = self.copy
        pinned[: done.numel()].copy_(done, non_blocking=True)
        posted.record()
