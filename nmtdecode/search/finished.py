"""Ended hypotheses in fixed-size buffers, one pool per sentence: `Beam.finished` as tensors.

The host search keeps each sentence's best finished hypotheses in a sorted Python list
(search/beam.py, `Beam.add_finished`: `bisect.insort_right` on the score, then cut to the
pool's size). The device search (device_beam.py) keeps the same records for every sentence of
a batch in (sentences, size) tensors and merges a step's ended candidates in with one stable
sort, so that the pools hold the same hypotheses in the same order:

    both  = pool entries, then this step's ended candidates in rank order   (n, size + c)
    order = stable sort of `both` by score, best first; entries that are not hypotheses last
    pool  = the first `size` of `both` in that order

A stable sort puts a new hypothesis after an old one of equal score, as `insort_right` does.
Nothing here reads a value on the host.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields

import torch

from .base import NEG_INF


@dataclass
class Ended:
    """Ended hypotheses, each field (n, c); those of `attached` (n, c) or (n, c, S)."""

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
    `entries` (n, size) for the n sentences still in the batch, and `stored` (sentences, size) by
    the batch's first numbering, where a sentence's pool goes when it leaves the batch."""

    def __init__(self, sentences: int, size: int, device: torch.device | str) -> None:
        def zeros(dtype: torch.dtype) -> torch.Tensor:
            return torch.zeros((sentences, size), dtype=dtype, device=device)

        self.size = size
        self.entries = Ended(
            score=zeros(torch.float64).fill_(NEG_INF),
            total=zeros(torch.float32),
            step=zeros(torch.long),
            prev=zeros(torch.long),
            token=zeros(torch.long),
            valid=zeros(torch.bool),
        )
        self.stored = Ended.of({name: value.clone() for name, value in self.entries.values().items()})

    def add(self, new: Ended) -> None:
        """Merge each sentence's candidates `new` (n, c) into its pool; those not `valid` are not
        hypotheses and change nothing."""
        pool = self.entries.values()
        both = {
            name: torch.cat([pool[name], value], dim=1)
            if name in pool
            else torch.cat(
                [value.new_zeros((value.size(0), self.size, *value.shape[2:])), value], dim=1
            )  # first attached
            for name, value in new.values().items()
        }
        order = ranked(both["score"], both["valid"])[:, : self.size]
        self.entries = Ended.of({name: value.gather(1, spread(order, value)) for name, value in both.items()})

    def first(self, new: Ended) -> None:
        """For pools of one hypothesis that each sentence ends once (greedy search): the `valid`
        ones of `new` (n, 1) become their sentence's pool, without a merge."""
        pool = self.entries.values()
        self.entries = Ended.of(
            {
                name: torch.where(
                    new.valid.view(-1, 1, *[1] * (value.dim() - 2)),
                    value,
                    pool[name] if name in pool else torch.zeros_like(value),
                )
                for name, value in new.values().items()
            }
        )

    def count(self) -> torch.Tensor:
        """(n,) how many hypotheses each pool holds."""
        return self.entries.valid.sum(dim=1)

    def worst(self) -> torch.Tensor:
        """(n,) float64 the score of the last entry of each pool (a hypothesis when full)."""
        return self.entries.score[:, -1]

    def keep(self, rows: torch.Tensor, keep: torch.Tensor) -> None:
        """The batch's sentences, `rows` by their first numbering, are about to become those at
        positions `keep`: every pool is stored, the kept ones stay."""
        self.store(rows)
        self.entries = Ended.of({name: value[keep] for name, value in self.entries.values().items()})

    def store(self, rows: torch.Tensor) -> Ended:
        """Every pool of the batch, `rows` by their first numbering, into `stored`; returns it."""
        stored = self.stored.values()
        for name, value in self.entries.values().items():
            if name not in stored:
                stored[name] = self.stored.attached[name] = value.new_zeros((stored["valid"].size(0), *value.shape[1:]))
            stored[name].index_copy_(0, rows, value)
        return self.stored


def spread(index: torch.Tensor, value: torch.Tensor) -> torch.Tensor:
    """index (n, m) expanded over the trailing axes of value (n, c, ...), for a gather on axis 1."""
    return index.view(*index.shape, *[1] * (value.dim() - 2)).expand(*index.shape, *value.shape[2:])


LOWEST = -1e308  # below any score of a float32 total, above -inf


def ranked(score: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
    """(n, m) the order of each row's entries: hypotheses by score, best first, then the rest;
    equal ones in the order given (a stable sort). A hypothesis may score -inf (under an infinite
    coverage penalty) and still count: it ranks as LOWEST, after every other and before the rest."""
    key = torch.where(valid, score.clamp(min=LOWEST), NEG_INF)
    return key.argsort(dim=1, descending=True, stable=True)
