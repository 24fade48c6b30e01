"""Random sampling with its bookkeeping on the device: the host strategy's samples and scores
(sampling.py), with no copy to the host in a step.

The draws are the host strategy's own (`Draws`: the same streams, filters and inverse-CDF
draw); what changes is where a sample's ending is recorded. Sample j of a sentence is slot j
of its records, its rows never reorder (each continues itself), and a sentence is done when
every sample has ended, EOS or its step limit (`SamplingSearch._record`):

    tokens, totals = draws(logprobs)                     sampling.py
    pool      += the samples that end at this step        endings.py, in sample order
    history   += each sample's token and total            history.py
    done      |= step limit | no sample going
"""

from __future__ import annotations

import torch

from ..base import RowFacts, StepOutput
from ..endings import Endings
from ..penalties import LengthPenalty
from ..sampling import Draws, Filters, next_sample_rows
from .records import KEPT, DeviceRecords


class DeviceSampling(DeviceRecords):
    kind = "sampling"

    def __init__(
        self,
        *,
        batch_size: int,
        samples: int,
        max_steps: list[int],
        start_id: int,
        eos_id: int,
        penalty: LengthPenalty,
        device: torch.device | str,
        filters: Filters,
        seed: int,
        line_ids: list[int],
        check_every: int = 1,
    ) -> None:
        super().__init__(
            ends=Endings(
                sentences=batch_size, size=samples, max_steps=max_steps, penalty=penalty, device=device, kept=KEPT
            ),
            slots=samples,
            max_steps=max_steps,
            start_id=start_id,
            eos_id=eos_id,
            device=device,
            check_every=check_every,
        )
        self.n = samples
        self.draws = Draws(samples=samples, filters=filters, seed=seed, line_ids=line_ids, eos_id=eos_id, device=device)
        self.slots = torch.arange(samples, device=device)  # sample j continues slot j

    def advance(self, logprobs: torch.Tensor, step: int, facts: RowFacts | None = None) -> StepOutput:
        """logprobs (n, V) at step 0, (n*N, V) after: one token per sample."""
        n, last = len(self.active), self.ends.at_limit(self.length)
        going = self.draws.alive.view(n, self.n)  # the samples not ended before this step's draw
        tokens, totals, origin = self.draws(logprobs, step)
        tokens, totals = tokens.view(n, self.n), totals.view(n, self.n)
        attached = (
            {} if facts is None else {name: self.per_sample(fact, n, origin) for name, fact in facts.attached().items()}
        )
        penalty = None if facts is None or facts.penalty is None else self.per_sample(facts.penalty, n, origin)
        prev = self.slots.expand(n, self.n)
        ends = going & ((tokens == self.eos_id) | last[:, None])
        step_of = self.step.expand_as(prev)
        self.ends.end(
            self.length, totals, ends, penalty, total=totals, step=step_of, prev=prev, token=tokens, **attached
        )
        self.ends.done |= last | ~self.draws.alive.view(n, self.n).any(dim=1)  # the draw has just ended its EOS rows
        self.commit(tokens, prev, totals, attached)
        return next_sample_rows(self, tokens.view(-1), origin)  # at a check of the done flags, finished ones leave

    def per_sample(self, fact: torch.Tensor, n: int, origin: torch.Tensor | None) -> torch.Tensor:
        """A fact of each row (rows,) or (rows, S) -> of each sample, (n, N) or (n, N, S)."""
        fact = fact if origin is None else fact[origin]
        return fact.view(n, self.n, *fact.shape[1:])
