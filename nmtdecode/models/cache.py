"""Decoder state for incremental decoding.

Rows are hypotheses, sentence-major (a sentence's rows are consecutive); how
many rows a sentence has is the search's business (one at the first step,
k after it in beam search). Two kinds of state live here:

* self-attention keys/values, one slot per decoded position. They are stored for
  all layers in one tensor (layers, 2, N, H, capacity, hd) so that following
  the search is a single `index_select`, and only the filled positions are
  copied, into a second buffer that then takes the first one's place (no
  allocation per step). The capacity doubles when full, so appending is an
  in-place write, not a concatenation of the whole past.
* cross-attention keys/values of the encoder output, computed once per batch by
  `Transformer.init_cache`. They are the same for every row of a sentence, so
  they are kept once per sentence (B, not B x k), with the source mask.

`follow(out)` tracks one search step (search/base.py:StepOutput): row r of the
next step continues row out.origin[r]; only the sentences out.keep stay.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:  # the model does not depend on the search, only on this shape of its output
    from ..search.base import StepOutput

INITIAL_CAPACITY = 16
ROWS = 2  # the row (batch x beam) axis of the stacked tensors


class DecoderCache:
    def __init__(self, cross_kv: torch.Tensor, memory_mask: torch.Tensor):
        self.cross_kv = cross_kv  # (L, 2, B, H, S, hd), one entry per sentence
        self.memory_mask = memory_mask  # (B, 1, 1, S) bool, True = real source token
        self.self_kv = None  # (L, 2, N, H, capacity, hd), allocated at the first step
        self.spare = None  # a second buffer of the same shape, the target of the next gather
        self.length = 0  # positions decoded so far

    def cross(self, layer: int):
        """Encoder keys, values (B, H, S, hd) for `layer`."""
        return self.cross_kv[layer, 0], self.cross_kv[layer, 1]

    def append_self(self, layer: int, k: torch.Tensor, v: torch.Tensor):
        """Store this step's k, v (N, H, 1, hd) for `layer`; return all keys/values so far."""
        if self.self_kv is None or self.length == self.self_kv.size(4):
            self._grow(k)
        t = self.length
        self.self_kv[layer, 0, :, :, t : t + 1] = k
        self.self_kv[layer, 1, :, :, t : t + 1] = v
        return self.self_kv[layer, 0, :, :, : t + 1], self.self_kv[layer, 1, :, :, : t + 1]

    def advance(self):
        """Called by the model once all layers have appended the current step."""
        self.length += 1

    def _grow(self, like: torch.Tensor):
        n, h, _, hd = like.shape
        layers = self.cross_kv.size(0)
        capacity = max(INITIAL_CAPACITY, 2 * self.length)
        grown = like.new_empty((layers, 2, n, h, capacity, hd))
        if self.self_kv is not None:
            grown[..., : self.length, :] = self.self_kv[..., : self.length, :]
        self.self_kv, self.spare = grown, None

    def follow(self, out: "StepOutput"):
        """Track one search step: gather rows by out.origin, sentences by out.keep."""
        if out.keep is not None:
            self.cross_kv = self.cross_kv.index_select(ROWS, out.keep)
            self.memory_mask = self.memory_mask.index_select(0, out.keep)
        if out.origin is not None and self.self_kv is not None:
            self._gather_self(out.origin)

    def _gather_self(self, origin: torch.Tensor):
        """self_kv rows <- rows `origin` of the filled positions, written into the spare buffer."""
        shape = list(self.self_kv.shape)
        shape[ROWS] = origin.numel()
        if self.spare is None or list(self.spare.shape) != shape:
            self.spare = self.self_kv.new_empty(shape)
        t = self.length
        torch.index_select(self.self_kv[..., :t, :], ROWS, origin, out=self.spare[..., :t, :])
        self.self_kv, self.spare = self.spare, self.self_kv
        if self.spare.size(ROWS) != origin.numel():
            self.spare = None  # the number of rows changed: the old buffer has the wrong size
