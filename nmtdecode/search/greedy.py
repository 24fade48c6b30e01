"""Greedy search: one row per sentence, the most probable token at every step.

It keeps the same per-sentence `Beam` records as beam search (with one slot),
so hypotheses, per-token scores and n-best output come from one place. A
sentence ends at its first EOS or at its step limit.
"""

from __future__ import annotations

from typing import Protocol

import torch

from .base import RowFacts, SentenceRecords, StepOutput, attached_per_slot, facts_by_sentence, to_host
from .beam import Beam
from .penalties import LengthPenalty


class GreedySearch(SentenceRecords):
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
    ) -> None:
        self.eos_id = eos_id
        self.beams = [Beam(1, m, penalty) for m in max_steps]
        self.active = list(range(batch_size))
        self.alive_scores = torch.zeros(batch_size, device=device)
        self.start_tokens = torch.full((batch_size,), start_id, dtype=torch.long, device=device)

    def advance(self, logprobs: torch.Tensor, step: int, facts: RowFacts | None = None) -> StepOutput:
        """logprobs (n, V): each row takes its arg-max (the first of equal maxima, as argmax; one
        `max` gives the token and its log-prob in one pass, where argmax and a gather take two)."""
        best, tokens = logprobs.max(dim=1)
        totals = self.alive_scores + best
        host = to_host(totals=totals[:, None], tokens=tokens[:, None], **facts_by_sentence(facts, len(self.active)))
        for i, sentence in enumerate(self.active):
            beam = self.beams[sentence]
            if beam.done:
                continue
            [total], [token] = host["totals"][i], host["tokens"][i]
            attached = attached_per_slot({name: rows[i] for name, rows in host.items()}, "", 1) if facts else None
            if token == self.eos_id or beam.is_last_step(step):
                penalty = host["penalty"][i][0] if "penalty" in host else 0.0
                beam.add_finished(step, 0, token, total, penalty, attached[0] if attached else None)
                beam.done = True
            else:
                beam.extend([token], [0], [total], attached)
        return next_greedy_rows(self, tokens, totals)


class GreedyRows(Protocol):
    """What `next_greedy_rows` reads and sets of a greedy search, the host's or the device's."""

    alive_scores: torch.Tensor

    def leaving(self) -> torch.Tensor | None: ...


def next_greedy_rows(search: GreedyRows, tokens: torch.Tensor, totals: torch.Tensor) -> StepOutput:
    """Rows of the next step: each sentence that stays (`search.leaving()`) continues its one row."""
    keep = search.leaving()
    if keep is None:
        search.alive_scores = totals
        return StepOutput(tokens=tokens)
    search.alive_scores = totals[keep]
    return StepOutput(tokens=tokens[keep], origin=keep, keep=keep)
