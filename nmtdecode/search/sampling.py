"""Greedy search: one row per sentence, the most probable token at every step.

It keeps the same per-sentence `Beam` records as beam search (with one slot),
so hypotheses, per-token scores and n-best output come from one place. A
sentence ends at its first EOS or at its step limit.
"""

from __future__ import annotations

import torch

from .base import Search, StepOutput
from .beam import Beam
from .penalties import LengthPenalty


class GreedySearch(Search):
    width = 1

    def __init__(self, *, batch_size, max_steps, start_id, eos_id, penalty: LengthPenalty, device):
        self.eos_id = eos_id
        self.beams = [Beam(1, m, penalty) for m in max_steps]
        self.active = list(range(batch_size))
        self.alive_scores = torch.zeros(batch_size, device=device)
        self.last_tokens = torch.full((batch_size,), start_id, dtype=torch.long, device=device)

    def choose(self, logprobs: torch.Tensor) -> torch.Tensor:
        """The next token of every row: the arg-max."""
        return logprobs.argmax(dim=1)

    def advance(self, logprobs: torch.Tensor, step: int) -> StepOutput:
        tokens = self.choose(logprobs)
        totals = self.alive_scores + logprobs.gather(1, tokens[:, None])[:, 0]
        host = torch.stack([totals.double(), tokens.double()]).cpu().tolist()  # one host copy
        for sentence, total, token in zip(self.active, *host):
            beam, token = self.beams[sentence], int(token)
            if beam.done:
                continue
            if token == self.eos_id or beam.is_last_step(step):
                beam.add_finished(step, 0, token, total)
                beam.done = True
            else:
                beam.extend([token], [0], [total])
        self.alive_scores, self.last_tokens = totals, tokens
        still = self.survivors()
        if len(still) == len(self.active):
            return StepOutput(origin=None)
        index = torch.tensor(still, dtype=torch.long, device=tokens.device)
        self.alive_scores, self.last_tokens = totals[index], tokens[index]
        self.active = [self.active[i] for i in still]
        return StepOutput(origin=index, shrunk=True)
