"""Decoder state for incremental decoding.

Rows are hypotheses: batch x beam, sentence-major (rows i*k .. i*k+k-1 belong
to sentence i). Two kinds of state live here:

* self-attention keys/values, one slot per decoded position. They are stored for
  all layers in one tensor (layers, 2, N, H, capacity, hd) so that a beam
  reorder is a single `index_select`, and only the filled positions are
  copied, into a second buffer that then takes the first one's place (no
  allocation per step). The capacity doubles when full, so appending is an
  in-place write, not a concatenation of the whole past.
* cross-attention keys/values of the encoder output, computed once per batch by
  `Transformer.init_cache`. They are the same for every beam of a sentence, so
  they are kept once per sentence (B, not B x k), with the source mask.

`reorder(index)` follows the beams: row r takes the past of row index[r], which
belongs to the same sentence, so only the self-attention state moves.
`select(index)` gathers every piece of state, used when finished sentences
leave the batch (index may be shorter than the number of rows; it keeps whole
sentences, k rows each).
"""

from __future__ import annotations

import torch

INITIAL_CAPACITY = 16
ROWS = 2  # the row (batch x beam) axis of the stacked tensors


class DecoderCache:
    def __init__(self, cross_kv: torch.Tensor, memory_mask: torch.Tensor, width: int = 1):
        self.cross_kv = cross_kv  # (L, 2, B, H, S, hd), one entry per sentence
        self.memory_mask = memory_mask  # (B, 1, 1, S) bool, True = real source token
        self.width = width  # rows per sentence (the beam size)
        self.self_kv = None  # (L, 2, N, H, capacity, hd), allocated at the first step
        self.spare = None  # a second buffer of the same shape, the target of the next reorder
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

    def repeat_rows(self):
        """After a first step computed once per sentence: give each sentence its k rows."""
        self.self_kv = self.self_kv.repeat_interleave(self.width, dim=ROWS)
        self.spare = None

    def _gather_self(self, index: torch.Tensor):
        """self_kv rows <- rows `index` of the filled positions, written into the spare buffer."""
        if self.self_kv is None:
            return
        shape = list(self.self_kv.shape)
        shape[ROWS] = index.numel()
        if self.spare is None or list(self.spare.shape) != shape:
            self.spare = self.self_kv.new_empty(shape)
        t = self.length
        torch.index_select(self.self_kv[..., :t, :], ROWS, index, out=self.spare[..., :t, :])
        self.self_kv, self.spare = self.spare, self.self_kv
        if self.spare.size(ROWS) != index.numel():
            self.spare = None  # the batch shrank: the old buffer has the wrong size

    def reorder(self, index: torch.Tensor, moved: list[int] | None = None):
        """Beam reorder within sentences: row r continues the hypothesis of row index[r].

        `moved` (optional) lists the rows with index[r] != r. When they are few, only
        those rows are copied, in place; otherwise every row is gathered.
        """
        if moved is None or self.self_kv is None or 2 * len(moved) >= index.numel():
            self._gather_self(index)
        elif moved:
            rows = torch.tensor(moved, dtype=torch.long, device=index.device)
            past = self.self_kv[..., : self.length, :]
            past.index_copy_(ROWS, rows, past.index_select(ROWS, index.index_select(0, rows)))

    def select(self, index: torch.Tensor):
        """Keep (and reorder) rows `index` of all state, e.g. to drop finished sentences."""
        self._gather_self(index)
        sentences = index[:: self.width] // self.width  # each kept sentence's first row -> its sentence
        self.cross_kv = self.cross_kv.index_select(ROWS, sentences)
        self.memory_mask = self.memory_mask.index_select(0, sentences)
