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
        return cls(**{name: values[name] for name in own},
                   attached={name: value for name, value in values.items() if name not in own})


class FinishedPool:
    """The `size` best ended hypotheses of each of `sentences` sentences, best first, on `device`."""

    def __init__(self, sentences: int, size: int, device: torch.device | str) -> None:
        def zeros(dtype: torch.dtype) -> torch.Tensor:
            return torch.zeros((sentences, size), dtype=dtype, device=device)

        self.size = size
        self.entries = Ended(score=zeros(torch.float64).fill_(NEG_INF), total=zeros(torch.float32),
                             step=zeros(torch.long), prev=zeros(torch.long), token=zeros(torch.long),
                             valid=zeros(torch.bool))

    def add(self, rows: torch.Tensor, new: Ended) -> None:
        """Merge the candidates `new` (n, c) of sentences `rows` (n,) into their pools; those not
        `valid` are not hypotheses and change nothing."""
        pool = self.entries.values()
        for name, value in new.attached.items():  # the first time a fact is attached: room for it
            if name not in pool:
                shape = (pool["valid"].size(0), self.size, *value.shape[2:])
                pool[name] = self.entries.attached[name] = value.new_zeros(shape)
        both = {name: torch.cat([pool[name][rows], value], dim=1) for name, value in new.values().items()}
        order = ranked(both["score"], both["valid"])[:, : self.size]
        for name, value in both.items():
            index = order.view(*order.shape, *[1] * (value.dim() - 2)).expand(*order.shape, *value.shape[2:])
            pool[name].index_copy_(0, rows, value.gather(1, index))

    def count(self, rows: torch.Tensor) -> torch.Tensor:
        """(n,) how many hypotheses the pools of `rows` hold."""
        return self.entries.valid[rows].sum(dim=1)

    def worst(self, rows: torch.Tensor) -> torch.Tensor:
        """(n,) float64 the score of the last entry of each pool of `rows` (a hypothesis when full)."""
        return self.entries.score[rows, -1]


def ranked(score: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
    """(n, m) the order of each row's entries: hypotheses by score, best first, then the rest;
    equal ones in the order given (two stable sorts: a hypothesis may score -inf too, under an
    infinite coverage penalty, and it still counts)."""
    by_score = score.argsort(dim=1, descending=True, stable=True)
    invalid_first = (~valid.gather(1, by_score)).to(torch.uint8)
    return by_score.gather(1, invalid_first.argsort(dim=1, stable=True))
