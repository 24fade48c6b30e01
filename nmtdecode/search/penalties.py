"""Length penalties: turn a hypothesis' total log-probability into the score it is ranked by.

`length` is the number of generated tokens including the final EOS (the
decoder start token is not counted), the convention of Hugging Face's
`BeamHypotheses`; a hypothesis cut at the step limit counts its tokens only.
Each function is (total log-prob, length, alpha) -> score, chosen by name.
"""

from __future__ import annotations


def length_none(total: float, length: int, alpha: float) -> float:
    """No normalisation: rank by total log-probability (favours short outputs)."""
    return total


def length_average(total: float, length: int, alpha: float) -> float:
    """total / length**alpha. alpha=1 is the plain per-token average (OpenNMT-py's `avg`);
    other values reproduce Hugging Face's `length_penalty` exponent."""
    return total / length**alpha


def length_wu(total: float, length: int, alpha: float) -> float:
    """GNMT: total / ((5 + length) / 6)**alpha (Wu et al. 2016, arXiv:1609.08144, eq. 14)."""
    return total / ((5.0 + length) / 6.0) ** alpha


LENGTH_PENALTIES = {"none": length_none, "avg": length_average, "wu": length_wu}


class LengthPenalty:
    """A named length penalty with its alpha, as a callable (total, length) -> score.

    `offset` is added to every length: OpenNMT-py 3.x divides by one more than the
    generated tokens (its `len(self)` counts the start token, onmt/translate/beam_search.py
    `advance`), so its checkpoints are decoded with offset 1 (models/formats/opennmt.py).
    """

    def __init__(self, name: str = "none", alpha: float = 1.0, offset: int = 0):
        if name not in LENGTH_PENALTIES:
            raise ValueError(f"length penalty {name!r} is not one of {sorted(LENGTH_PENALTIES)}")
        self.name, self.alpha, self.offset = name, alpha, offset
        self.function = LENGTH_PENALTIES[name]

    def __call__(self, total: float, length: int) -> float:
        return self.function(total, length + self.offset, self.alpha)

    def best_possible(self, total: float, length: int, max_length: int) -> float:
        """Highest score a hypothesis at `total` after `length` tokens can still reach.

        Log-probabilities only lower `total`, so the bound is the penalty of
        `total` itself at the most favourable length: every penalty here is
        monotone in the length, so one of the two ends of [length, max_length].
        """
        return max(self(total, length), self(total, max_length))
