"""Greedy search: one row per sentence, the most probable token at every step.

It keeps the same per-sentence `Beam` records as beam search (with one slot),
so hypotheses, per-token scores and n-best output come from one place. A
sentence ends at its first EOS or at its step limit.
"""

from __future__ import annotations

from typing import Protocol

import torch

from .base import RowFacts, SentenceRecords, StepOutput, attached_by_sentence, facts_by_sentence, to_host
from .beam import HOST, Beam, Finished
from .endings import Endings
from .penalties import LengthPenalty


class GreedySearch(SentenceRecords):
    kind = "greedy"
    ends: Endings

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
        self.beams = [Beam(1, m) for m in max_steps]
        self.ends = Endings(sentences=batch_size, size=1, max_steps=max_steps, penalty=penalty, device=HOST)
        self.active = list(range(batch_size))
        self.alive_scores = torch.zeros(batch_size, device=device)
        self.start_tokens = torch.full((batch_size,), start_id, dtype=torch.long, device=device)

    def advance(self, logprobs: torch.Tensor, step: int, facts: RowFacts | None = None) -> StepOutput:
        """logprobs (n, V): each row takes its arg-max (the first of equal maxima, as argmax; one
        `max` gives the token and its log-prob in one pass, where argmax and a gather take two)."""
        best, tokens = logprobs.max(dim=1)
        totals = self.alive_scores + best
        host = to_host(totals=totals[:, None], tokens=tokens[:, None], **facts_by_sentence(facts, len(self.active)))
        ends = (host["tokens"] == self.eos_id) | self.ends.at_limit(step + 1)[:, None]
        valid, score = self.ends.hypotheses(step + 1, host["totals"], ends, host.get("penalty"))  # its Beam is its pool
        self.ends.done |= ends[:, 0]
        rows = {name: value.tolist() for name, value in host.items() if name != "penalty"}
        columns = zip(rows["tokens"], rows["totals"], ends.tolist(), valid.tolist(), score.tolist())
        for sentence, attached, ([token], [total], [end], [hypothesis], [score_]) in zip(
            self.active, attached_by_sentence(rows, "", 1), columns
        ):
            beam = self.beams[sentence]
            if beam.done:
                continue
            if not end:
                beam.extend([token], [0], [total], attached)
                continue
            if hypothesis:
                beam.first(Finished(score_, total, step, 0, token, attached[0] if attached else {}))
            beam.done = True
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
