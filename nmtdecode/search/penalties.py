"""Length and coverage penalties: turn a hypothesis' total log-probability into the score it is
ranked by, score = length_penalty(total, length) - coverage_penalty(coverage) (OpenNMT-py's
GNMTGlobalScorer, onmt/translate/beam_search.py and penalties.py).

Length penalties.
`length` is the number of generated tokens including the final EOS (the
decoder start token is not counted), the convention of Hugging Face's
`BeamHypotheses`; a hypothesis cut at the step limit counts its tokens only.
Each penalty divides the total by a number that depends on the length alone:
each function is (length, alpha) -> that divisor, chosen by name. Both searches
read the divisors from one table (`divisors`, endings.py), so that they compute
every score with the same division.
"""

from __future__ import annotations

import torch

from .base import StepOutput


def length_none(length: int, alpha: float) -> float:
    """No normalisation: rank by total log-probability (favours short outputs)."""
    return 1.0


def length_average(length: int, alpha: float) -> float:
    """total / length**alpha. alpha=1 is the plain per-token average (OpenNMT-py's `avg`);
    other values reproduce Hugging Face's `length_penalty` exponent."""
    return length**alpha


def length_wu(length: int, alpha: float) -> float:
    """GNMT: total / ((5 + length) / 6)**alpha (Wu et al. 2016, arXiv:1609.08144, eq. 14)."""
    return ((5.0 + length) / 6.0) ** alpha


LENGTH_PENALTIES = {"none": length_none, "avg": length_average, "wu": length_wu}


class LengthPenalty:
    """A named length penalty with its alpha, as a callable (total, length) -> score.

    `offset` is added to every length: OpenNMT-py 3.x divides by one more than the
    generated tokens (its `len(self)` counts the start token, onmt/translate/beam_search.py
    `advance`), so its checkpoints are decoded with offset 1 (models/formats/opennmt.py).
    """

    def __init__(self, name: str = "none", alpha: float = 1.0, offset: int = 0) -> None:
        self.name, self.alpha, self.offset = name, alpha, offset
        self.function = LENGTH_PENALTIES[name]

    def divisor(self, length: int) -> float:
        return self.function(length + self.offset, self.alpha)

    def __call__(self, total: float, length: int) -> float:
        return total / self.divisor(length)

    def divisors(self, longest: int, device: torch.device | str) -> torch.Tensor:
        """(longest + 1,) float64: the divisor of every length 1..longest (at 0, unused, 1), for
        scores computed on the device as total / divisors[length], the very division above."""
        return torch.tensor(
            [1.0] + [self.divisor(length) for length in range(1, longest + 1)], dtype=torch.float64, device=device
        )


# Coverage penalties. `coverage` (N, S) is, per hypothesis, the sum over its decoding steps (the
# one that chose EOS included) of its cross-attention weights on each source token; each function
# is (coverage, beta) -> (N,) penalty >= 0, subtracted from the score of a finished hypothesis.


def coverage_none(coverage: torch.Tensor, beta: float) -> torch.Tensor:
    return coverage.new_zeros(coverage.size(0))


def coverage_wu(coverage: torch.Tensor, beta: float) -> torch.Tensor:
    """GNMT: beta * -sum_i log(min(coverage_i, 1)) (Wu et al. 2016, eq. 14, with the sign that
    makes it a penalty): source tokens attended less than once in total cost."""
    return -beta * coverage.clamp(max=1.0).log().sum(dim=-1)


def coverage_summary(coverage: torch.Tensor, beta: float) -> torch.Tensor:
    """OpenNMT-py's summary penalty: beta * sum_i (max(coverage_i, 1) - 1): source tokens attended
    more than once in total cost (repetition, for summarisation)."""
    return beta * (coverage.clamp(min=1.0) - 1.0).sum(dim=-1)


COVERAGE_PENALTIES = {"none": coverage_none, "wu": coverage_wu, "summary": coverage_summary}


class Coverage:
    """Each row's coverage of its source, on the device, following the search (a RowState).

    Padded source positions start at 1, where both penalties count nothing (their attention is
    0, and OpenNMT-py's -log(0) there would make every penalty infinite).
    """

    def __init__(self, name: str, beta: float, src_mask: torch.Tensor) -> None:
        self.function, self.beta = COVERAGE_PENALTIES[name], beta
        self.total = (~src_mask).float()  # (B, S): one row per sentence at step 0
        self.current = self.total

    def add(self, attention: torch.Tensor) -> torch.Tensor:
        """Add this step's attention (N, S); returns each row's penalty (N,) with it."""
        self.current = self.total + attention
        return self.function(self.current, self.beta)

    def follow(self, out: StepOutput) -> None:
        """Row r of the next step continues row out.origin[r] (this step's coverage included)."""
        self.total = self.current if out.origin is None else self.current.index_select(0, out.origin)
