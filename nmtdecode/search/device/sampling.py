"""Random sampling with its bookkeeping on the device: the host strategy's samples and scores
(sampling.py), with no copy to the host in a step.

The draws are the host strategy's own (`Draws`: the same streams, filters and inverse-CDF
draw); what changes is where a sample's ending is recorded. Sample j of a sentence is slot j
of its records, its rows never reorder (each continues itself), and a sentence is done when
every sample has ended, EOS or its step limit (`SamplingSearch._record`):

    tokens, totals = draws(logprobs)                     sampling.py
    pool      += the samples that end at this step        finished.py, in sample order
    history   += each sample's token and total            history.py
    done      |= step limit | no sample going
"""

from __future__ import annotations

import torch

from ..base import NEG_INF, RowFacts, StepOutput
from .records import DeviceRecords
from ..finished import Ended
from ..penalties import LengthPenalty
from ..sampling import Draws, Filters, next_sample_rows


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
            batch_size=batch_size,
            slots=samples,
            max_steps=max_steps,
            start_id=start_id,
            eos_id=eos_id,
            penalty=penalty,
            device=device,
            check_every=check_every,
        )
        self.n = samples
        self.draws = Draws(samples=samples, filters=filters, seed=seed, line_ids=line_ids, eos_id=eos_id, device=device)
        self.slots = torch.arange(samples, device=device)  # sample j continues slot j

    def advance(self, logprobs: torch.Tensor, step: int, facts: RowFacts | None = None) -> StepOutput:
        """logprobs (n, V) at step 0, (n*N, V) after: one token per sample."""
        n, last = len(self.active), self.at_limit()
        going = self.draws.alive.view(n, self.n)  # before this step's draw
        tokens, totals, origin = self.draws(logprobs, step)
        tokens, totals = tokens.view(n, self.n), totals.view(n, self.n)
        ends = going & ((tokens == self.eos_id) | last[:, None])
        valid = ends & (totals > NEG_INF) & ~self.finished[:, None]
        attached = (
            {} if facts is None else {name: self.per_sample(fact, n, origin) for name, fact in facts.attached().items()}
        )
        penalty = None if facts is None or facts.penalty is None else self.per_sample(facts.penalty, n, origin)
        prev = self.slots.expand(n, self.n)
        self.pool.add(
            Ended(self.scored(totals, penalty), totals, self.step.expand_as(prev), prev, tokens, valid, attached)
        )
        done = last | ~self.draws.alive.view(n, self.n).any(dim=1)  # the draw has just ended its EOS rows
        self.commit(tokens, prev, totals, attached, done)
        return next_sample_rows(self, tokens.view(-1), origin)  # at a check of the done flags, finished ones leave

    def per_sample(self, fact: torch.Tensor, n: int, origin: torch.Tensor | None) -> torch.Tensor:
        """A fact of each row (rows,) or (rows, S) -> of each sample, (n, N) or (n, N, S)."""
        fact = fact if origin is None else fact[origin]
        return fact.view(n, self.n, *fact.shape[1:])
