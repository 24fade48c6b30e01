"""Each sentence's pool of finished hypotheses: its `size` best ended ones, best first, as
(sentences, size) tensors. The one definition of the pool for the host search and the device
search (endings.py applies it at the end of every step).

A step's ended candidates are merged in with one stable sort:

    both  = pool entries, then this step's ended candidates in rank order   (n, size + c)
    order = stable sort of `both` by score, best first; entries that are not hypotheses last
    pool  = the first `size` of `both` in that order

so a new hypothesis goes after an old one of equal score, as `bisect.insort_right` puts it.
What the pool keeps of each hypothesis beside its score is the caller's: the device search
keeps every fact of it (its total, step, backpointer, token, attached facts: `Ended`) and walks
them back at the end (history.py); the host search keeps the scores alone, and each sentence's
`Beam` (beam.py) orders its own records by its row of `order`. Nothing here reads a value on
the host.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields

import torch

from .base import NEG_INF


@dataclass
class Ended:
    """Ended hypotheses as the device search keeps them, each field (n, c); those of `attached`
    (n, c) or (n, c, S)."""

    score: torch.Tensor  # float64: the ranking score (length-penalised total, less the coverage penalty)
    total: torch.Tensor  # float32: the sum of the token log-probabilities
    step: torch.Tensor  # long: the step that chose the last token
    prev: torch.Tensor  # long: the slot of step - 1 that it extends
    token: torch.Tensor  # long: the last token (EOS unless cut at the step limit)
    valid: torch.Tensor  # bool: a hypothesis (False: an empty entry, or an impossible continuation)
    attached: dict[str, torch.Tensor] = field(default_factory=dict)  # alignment, attention (base.py:ATTACHED)

    def values(self) -> dict[str, torch.Tensor]:
        """Every field by name, the attached ones included."""
        named = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "attached"}
        return {**named, **self.attached}

    @classmethod
    def of(cls, values: dict[str, torch.Tensor]) -> "Ended":
        own = {f.name for f in fields(cls)} - {"attached"}
        return cls(
            **{name: values[name] for name in own},
            attached={name: value for name, value in values.items() if name not in own},
        )


class FinishedPool:
    """The `size` best ended hypotheses of each sentence in the batch, best first, on `device`:
    `entries` (n, size[, ...]) by name for the n sentences still in the batch: "score"
    (float64), "valid" (bool: a hypothesis; the hypotheses come first) and whatever else the
    caller keeps (`kept`: name -> dtype, zeros until filled; or added by the first `add`)."""

    def __init__(
        self, sentences: int, size: int, device: torch.device | str, kept: dict[str, torch.dtype] | None = None
    ) -> None:
        def zeros(dtype: torch.dtype) -> torch.Tensor:
            return torch.zeros((sentences, size), dtype=dtype, device=device)

        self.sentences, self.size = sentences, size
        self.entries = {"score": zeros(torch.float64).fill_(NEG_INF), "valid": zeros(torch.bool)}
        self.entries.update({name: zeros(dtype) for name, dtype in (kept or {}).items()})
        self.stored: dict[str, torch.Tensor] = {}  # by the batch's first numbering (`store`)

    def add(self, score: torch.Tensor, valid: torch.Tensor, **kept: torch.Tensor) -> torch.Tensor:
        """Merge each sentence's candidates (n, c) into its pool: their `score` (float64), whether
        each is a hypothesis (`valid`: those that are not change nothing), and what the pool
        keeps of them (n, c[, ...]), every call the same names. Returns `order` (n, size): each
        entry of the new pool as a position in [the pool before, then the candidates]."""
        both = {}
        for name, value in dict(score=score, valid=valid, **kept).items():
            old = self.entries.get(name)
            if old is None:  # the first step's attached facts
                old = value.new_zeros((value.size(0), self.size, *value.shape[2:]))
            both[name] = torch.cat([old, value], dim=1)
        order = ranked(both["score"], both["valid"])[:, : self.size]
        self.entries = {name: value.gather(1, spread(order, value)) for name, value in both.items()}
        return order

    def first(self, score: torch.Tensor, valid: torch.Tensor, **kept: torch.Tensor) -> None:
        """`add` for pools of one that each sentence fills once (greedy search): the `valid`
        candidates (n, 1) become their sentence's pool, the others leave it as it is."""
        for name, value in dict(score=score, valid=valid, **kept).items():
            old = self.entries.get(name)
            chosen = valid.view(-1, 1, *[1] * (value.dim() - 2))
            self.entries[name] = torch.where(chosen, value, torch.zeros_like(value) if old is None else old)

    def holds(self, m: int) -> torch.Tensor:
        """(n,) bool: each pool holds m hypotheses or more (they come first: its m-th entry is one)."""
        return self.entries["valid"][:, m - 1]

    def worst(self) -> torch.Tensor:
        """(n,) float64 the score of the last entry of each pool (a hypothesis when full)."""
        return self.entries["score"][:, -1]

    def keep(self, keep: torch.Tensor) -> None:
        """Only the sentences at positions `keep` stay in the batch."""
        self.entries = {name: value[keep] for name, value in self.entries.items()}

    def store(self, rows: torch.Tensor) -> Ended:
        """Every pool of the batch, `rows` by their first numbering, into `stored`, kept when
        they leave the batch (the device search's); returns all of them."""
        for name, value in self.entries.items():
            if name not in self.stored:
                self.stored[name] = value.new_zeros((self.sentences, *value.shape[1:]))
            self.stored[name].index_copy_(0, rows, value)
        return Ended.of(self.stored)


def spread(index: torch.Tensor, value: torch.Tensor) -> torch.Tensor:
    """index (n, m) expanded over the trailing axes of value (n, c, ...), for a gather on axis 1."""
    if value.dim() == 2:
        return index
    return index.view(*index.shape, *[1] * (value.dim() - 2)).expand(*index.shape, *value.shape[2:])


LOWEST = -1e308  # below any score of a float32 total, above -inf


def ranked(score: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
    """(n, m) the order of each row's entries: hypotheses by score, best first, then the rest;
    equal ones in the order given (a stable sort). A hypothesis may score -inf (under an infinite
    coverage penalty) and still count: it ranks as LOWEST, after every other and before the rest."""
    key = torch.where(valid, score.clamp(min=LOWEST), NEG_INF)
    return key.argsort(dim=1, descending=True, stable=True)
