"""What every search strategy shares: the hypothesis record and the step contract.

The translator drives a strategy with one call per decoding step:

    out = search.advance(logprobs, step)   # logprobs (rows, V), rows = active sentences x width
    # then reorders its state with out.origin (see StepOutput)

and reads `search.last_tokens` (the tokens to feed next), `search.done` and,
at the end, `search.results()`: one n-best list per input sentence.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch


@dataclass
class Hypothesis:
    tokens: list[int]  # output token ids, without the final EOS
    score: float  # ranking score (total log-prob after the length penalty)
    total: float  # sum of the token log-probabilities, EOS included
    token_scores: list[float] = field(default_factory=list)  # per generated token, EOS included
    ended: bool = True  # False when the step limit cut the hypothesis before EOS


@dataclass
class StepOutput:
    """How the rows of the next step relate to the rows of this one.

    origin: (new_rows,) row of this step that each new row continues, or None
        when every row simply continues itself.
    shrunk: True when finished sentences left the batch; origin then lists only
        the surviving rows, so state must be gathered with it (cache.select).
    moved: when not shrunk, the rows whose origin is another row (the others
        continue themselves), if the strategy knows them; None: assume all.
    """

    origin: torch.Tensor | None
    shrunk: bool = False
    moved: list[int] | None = None


class Search:
    """Shared by the strategies: `beams` holds one per-sentence record (search/beam.py:Beam)
    for every input sentence; `active` the sentence index of every sentence still searched."""

    beams: list
    active: list[int]
    eos_id: int
    shrink: bool = True  # finished sentences leave the batch (off only to test that it changes nothing)

    @property
    def done(self) -> bool:
        return all(self.beams[s].done for s in self.active)

    def survivors(self) -> list[int]:
        """Positions in `active` of the sentences that stay in the batch after this step."""
        if not self.shrink:
            return list(range(len(self.active)))
        return [i for i, s in enumerate(self.active) if not self.beams[s].done]

    def results(self, n_best: int) -> list[list[Hypothesis]]:
        """The n best finished hypotheses of every sentence, best first."""
        return [beam.nbest(n_best, self.eos_id) for beam in self.beams]
