"""T5's relative position bias: what its self-attention adds to the scores instead of positions.

Raffel et al. 2020 ("Exploring the Limits of Transfer Learning with a Unified Text-to-Text
Transformer", section 2.1): the score of a query for a key gets a learned scalar per head that
depends only on the key's offset from the query, key position - query position, put in one of
`relative_buckets` buckets. Small offsets get a bucket each; larger ones share buckets of
logarithmically growing width up to `relative_max_distance`, and all farther ones the last. The
encoder's bias is bidirectional (half of the buckets for keys after the query); the decoder's
looks back only. Each stack has one table, which every one of its layers adds (T5 stores it in
its first layer).

The step of incremental decoding asks for the row of its one position (`step`), over the keys as
the decoder state lays them out (models/cache.py: position-major, `width` slots per position).
"""

from __future__ import annotations

import math

import torch
from torch import nn

from .architecture import TransformerConfig


def relative_buckets(offsets: torch.Tensor, bidirectional: bool, buckets: int, max_distance: int) -> torch.Tensor:
    """offsets (key position - query position, any shape, int64) -> their buckets, in [0, buckets).

    Worked example, 32 buckets, max distance 128, looking back (the decoder): offsets 0 .. -15 are
    buckets 0 .. 15; -16 .. -127 share buckets 16 .. 31, more offsets to a bucket the farther back
    (-16 and -17: 16; -113 .. -127: 31); -128 and beyond: 31. Bidirectional (the encoder), keys
    after the query take buckets 16 .. 31 and those before 0 .. 15, each half laid out so.
    The float arithmetic is T5's, operation for operation, so that the buckets are its buckets."""
    if bidirectional:
        buckets //= 2
        first = (offsets > 0).to(torch.long) * buckets  # keys after the query: the upper half
        distance = torch.abs(offsets)
    else:
        first = torch.zeros_like(offsets)
        distance = -torch.min(offsets, torch.zeros_like(offsets))  # keys after the query: masked anyway
    exact = buckets // 2
    # distance 0 takes log(0) = -inf here, which the `where` below never picks
    logarithmic = exact + (torch.log(distance.float() / exact) / math.log(max_distance / exact) * (buckets - exact)).to(
        torch.long
    )
    logarithmic = torch.min(logarithmic, torch.full_like(logarithmic, buckets - 1))
    return first + torch.where(distance < exact, distance, logarithmic)


class RelativePositionBias(nn.Module):
    """One stack's table of biases, (relative_buckets, heads)."""

    def __init__(self, cfg: TransformerConfig, bidirectional: bool) -> None:
        super().__init__()
        self.embedding = nn.Embedding(cfg.relative_buckets, cfg.heads)
        self.bidirectional = bidirectional
        self.buckets, self.max_distance = cfg.relative_buckets, cfg.relative_max_distance

    def _bias(self, offsets: torch.Tensor) -> torch.Tensor:
        """offsets (...) -> (..., H)."""
        return self.embedding(relative_buckets(offsets, self.bidirectional, self.buckets, self.max_distance))

    def forward(self, queries: int, keys: int) -> torch.Tensor:
        """The bias of every query i for every key j of a whole sequence (positions 0 ..):
        (1, H, queries, keys), added to the scores of all sentences."""
        device = self.embedding.weight.device
        offsets = torch.arange(keys, device=device)[None, :] - torch.arange(queries, device=device)[:, None]
        return self._bias(offsets).permute(2, 0, 1)[None]

    def step(self, position: int | torch.Tensor, positions: int, width: int) -> torch.Tensor:
        """The bias of a query at `position` (a number, or a one-element tensor on the device) for
        the keys of positions 0 .. positions - 1, `width` slots each: (1, H, 1, positions * width)."""
        offsets = torch.arange(positions, device=self.embedding.weight.device) - position
        bias = self._bias(offsets).t()  # (H, positions)
        return bias[:, :, None].expand(-1, -1, width).reshape(1, bias.size(0), 1, -1)


class StepBias:
    """The decoder bias of one decoding step, computed when the first layer asks (it knows how many
    positions its keys cover) and handed to the others as it is."""

    def __init__(self, table: RelativePositionBias, position: int | torch.Tensor) -> None:
        self.table, self.position = table, position
        self.bias: torch.Tensor | None = None

    def __call__(self, keys: int, width: int) -> torch.Tensor:
        """keys: the key slots of each sentence (positions x width)."""
        if self.bias is None:
            self.bias = self.table.step(self.position, keys // width, width)
        return self.bias
