"""Decoder state for incremental decoding.

Rows are hypotheses, sentence-major: sentence b has `width` consecutive rows
(one at the first step; k after it in beam search; the search decides). Two
kinds of state live here:

* self-attention keys/values, for all layers in one tensor
  (layers, 2, B, H, capacity, width, hd): position-major within a sentence, so
  that the keys of all of a sentence's rows up to position t form one
  contiguous block. The capacity doubles when full, so appending is an
  in-place write, not a concatenation of the whole past.
* cross-attention keys/values of the encoder output, computed once per batch by
  `Transformer.init_cache`, kept once per sentence (B, not B x k), with the
  source mask.

A beam search reorders its hypotheses every step. What was written stays where
it is and each row keeps its ancestry (models/state.py), `ancestry[row, position,
slot]`: a row attends over all of its sentence's slots with the others masked
out (`self_mask`). Only when finished sentences leave the batch, or the first
step widens it to the beam, are keys and values copied.

Cross-attention weights are kept only when asked (`record_attention`, set by the
translator for coverage penalties and alignments): then, after each step,
`attention` (N, S) holds the weights of the alignment layer (the model's
`alignment_layer`, averaged over its first `alignment_heads` heads) for every row.

`follow(out)` tracks one search step (search/base.py:StepOutput): row r of the
next step continues row out.origin[r]; only the sentences out.keep stay. The
cache is a `DecoderState` and a `LayerState` (models/state.py).

When the cache grows, widens to the beam or drops finished sentences, it is
copied into a new tensor. On the CPU those tensors come from `Scratch`, memory
kept from copy to copy and from batch to batch, not from the operating system.
"""

from __future__ import annotations

import math
import threading
import weakref
from typing import TYPE_CHECKING, Sequence, TypeVar

import torch

from .state import ancestry_mask, own_slots

from . import memory

if TYPE_CHECKING:  # the model does not depend on the search, only on this shape of its output
    from ..search.base import StepOutput

INITIAL_CAPACITY = 16
SENTENCES, POSITIONS, SLOTS = 2, 4, 5  # axes of self_kv


def by_slot(kv: torch.Tensor, width: int) -> torch.Tensor:
    """One step's keys and values, kv (N, 2, H, hd), laid out as the caches hold them:
    (2, B, H, width, hd), row b*width + j going to sentence b, slot j."""
    _, _, heads, hd = kv.shape
    return kv.view(-1, width, 2, heads, hd).permute(2, 0, 3, 1, 4)


class Scratch:
    """Where a cache's copies of itself go on the CPU. A new tensor of the cache's size is new
    memory from the operating system, and each of its pages faults on its first write, which on
    a small VM costs more than the copy (docs/speed.md#measurements-behind-design-choices). So
    each kind of tensor ("self", "cross") alternates between two flat buffers: a copy goes into
    the one that does not hold the current data. The buffers only grow; they are kept for the next batch
    (`borrow`), so a process holds up to twice its largest cache per batch decoded at once.
    A copy larger than KEPT_BYTES gets memory of its own instead, freed with the cache: a second
    copy of a real-size model's cache would be hundreds of megabytes held for a rare grow, and
    glibc's heap keeps such blocks for reuse anyway (memory.tune_allocator).
    CUDA tensors are allocated as before: its caching allocator reuses memory already."""

    KEPT_BYTES = 64 << 20

    _free: list["Scratch"] = []  # not in use: each cache borrows one, and it comes back with the cache
    _lock = threading.Lock()  # --inter-threads decodes batches at once

    def __init__(self) -> None:
        self.pairs: dict[str, list] = {}  # kind -> [buffer, buffer, index of the one to use next]

    @classmethod
    def borrow(cls, owner: object) -> Scratch:
        """A Scratch for `owner` alone, given back when the owner is garbage."""
        with cls._lock:
            scratch = cls._free.pop() if cls._free else cls()
        weakref.finalize(owner, cls._give_back, scratch)
        return scratch

    @classmethod
    def _give_back(cls, scratch: "Scratch") -> None:
        with cls._lock:
            cls._free.append(scratch)

    def next(self, kind: str, like: torch.Tensor, shape: Sequence[int]) -> torch.Tensor:
        """An uninitialised tensor of `shape`, with `like`'s dtype and device, that is not the
        memory of the tensor this `kind` got last time (which the caller is copying from)."""
        size = math.prod(shape)
        if like.device.type != "cpu" or size * like.element_size() > self.KEPT_BYTES:
            self.pairs.pop(kind, None)  # what it kept is smaller than what is now needed
            return like.new_empty(shape)
        pair = self.pairs.setdefault(kind, [None, None, 0])
        i = pair[2]
        pair[2] = 1 - i
        if pair[i] is None or pair[i].numel() < size or pair[i].dtype != like.dtype:
            with torch.inference_mode(False):  # a normal tensor: batches decoded outside inference mode write it too
                pair[i] = torch.empty(size, dtype=like.dtype)
        return pair[i][:size].view(shape)


_Record = TypeVar("_Record", bound="AttentionRecord")


class AttentionRecord:
    """What a decoder state keeps of the cross-attention, when asked (`record_attention`): the
    weights of one layer averaged over its first heads, one row per hypothesis. Shared by this
    module's cache and the fixed-shape step's (models/fixed_step.py)."""

    def __init__(self, layers: int, heads: int, alignment: tuple[int, int]) -> None:
        self.alignment_layer = alignment[0] % layers  # whose cross-attention `attention` reports
        self.alignment_heads = alignment[1] or heads  # averaged over heads [0, alignment_heads); 0: all
        self.record_attention = False  # set by whoever needs `attention`; off, nothing is kept
        # (N, S) float32, this step's weights of the alignment layer, when recorded
        self.attention: torch.Tensor | None = None

    def attention_probe(self: _Record, layer: int) -> _Record | None:
        """The state itself (its subclass keeps the weights: `keep_attention`) when `layer`'s
        cross-attention weights are to be kept, else None."""
        return self if self.record_attention and layer == self.alignment_layer else None

    def averaged(self, weights: torch.Tensor) -> torch.Tensor:
        """weights (B, H, width, S) of the alignment layer -> (B * width, S) float32."""
        averaged = weights[:, : self.alignment_heads].float().mean(dim=1)  # (B, width, S)
        return averaged.reshape(-1, averaged.size(-1))


class DecoderCache(AttentionRecord):
    def __init__(
        self, cross_kv: torch.Tensor, memory_mask: torch.Tensor | None, alignment: tuple[int, int] = (-1, 1)
    ) -> None:
        super().__init__(cross_kv.size(0), cross_kv.size(3), alignment)
        self.cross_kv = cross_kv  # (L, 2, B, H, S, hd), one entry per sentence
        self.memory_mask = memory_mask  # (B, 1, 1, S) bool, True = real source token; None: no padding
        self.self_kv: torch.Tensor | None = None  # (L, 2, B, H, capacity, width, hd), allocated at the first step
        self.width = 1  # rows per sentence
        self.ancestry: torch.Tensor | None = None  # (N, capacity, width) bool (models/state.py); None while width is 1
        self.length = 0  # positions decoded so far
        self._mask: torch.Tensor | None = None  # (B, 1, width, (length+1)*width) bool, this step's self_mask
        self.scratch = Scratch.borrow(self)

    @property
    def position(self) -> int:
        """The position of the tokens the next step feeds."""
        return self.length

    def cross(self, layer: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Encoder keys, values (B, H, S, hd) for `layer`."""
        return self.cross_kv[layer, 0], self.cross_kv[layer, 1]

    def keep_attention(self, weights: torch.Tensor) -> None:
        """weights (B, H, width, S) of the alignment layer -> `attention` (N, S)."""
        self.attention = self.averaged(weights)

    def append_self(self, layer: int, kv: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        """Store this step's keys and values, kv (N, 2, H, hd), for `layer` (one copy). Returns the
        keys and values of every position so far, (B, H, (t+1)*width, hd), each sentence's slots
        side by side, and the mask of what each row may attend to (None when width is 1)."""
        self.make_room()
        self.self_kv[layer, :, :, :, self.length] = by_slot(kv, self.width)
        past = self.past(layer)
        return past[0], past[1], self.self_mask()

    def make_room(self) -> None:
        """Room for position `length` in the self-attention cache."""
        if self.self_kv is None or self.length == self.self_kv.size(POSITIONS):
            self._grow()

    def past(self, layer: int) -> torch.Tensor:
        """Keys and values of every position up to `length`: (2, B, H, (length+1)*width, hd), a view."""
        return self.self_kv[layer, :, :, :, : self.length + 1].flatten(3, 4)

    def self_mask(self) -> torch.Tensor | None:
        """Which (position, slot) each row attends to: its ancestors', and its own at this step."""
        if self.ancestry is None:
            return None
        if self._mask is None or self._mask.size(-1) != (self.length + 1) * self.width:
            if self.length == self.ancestry.size(1):
                self.ancestry = self._moved_ancestry(None, 2 * self.length, self.width)
            n = self.ancestry.size(0)
            self.ancestry[:, self.length : self.length + 1] = own_slots(n, self.width, self.ancestry.device)
            self._mask = ancestry_mask(self.ancestry, self.length + 1)
        return self._mask

    def advance(self) -> None:
        """Called by the model once all layers have appended the current step."""
        self.length += 1

    def _grow(self) -> None:
        """Allocate the cache, or double its capacity. Its sentences, heads, head size, dtype and
        device are the encoder keys' (cross_kv)."""
        layers, _, sentences, heads, _, hd = self.cross_kv.shape
        capacity = max(INITIAL_CAPACITY, 2 * self.length)
        grown = self.scratch.next("self", self.cross_kv, (layers, 2, sentences, heads, capacity, self.width, hd))
        if self.self_kv is not None:
            grown[:, :, :, :, : self.length] = self.self_kv[:, :, :, :, : self.length]
        self._install("self_kv", grown)

    def follow(self, out: "StepOutput") -> None:
        """Track one search step: keep the sentences out.keep, and give row r the path of row
        out.origin[r] (row r itself when origin is None) extended by the slot that row held at the
        step just decoded."""
        if out.keep is not None:
            kept = self._resized("cross", self.cross_kv, SENTENCES, out.keep.numel())
            self._install("cross_kv", torch.index_select(self.cross_kv, SENTENCES, out.keep, out=kept))
            if self.memory_mask is not None:
                self.memory_mask = self.memory_mask.index_select(0, out.keep)
            if self.self_kv is not None:
                self._keep_sentences(out.keep)
        self._mask = None
        if out.origin is None or self.self_kv is None:  # every row continues itself: its own slot is marked
            return
        width = out.origin.numel() // self.cross_kv.size(SENTENCES)
        if width == 1 and self.ancestry is None:
            return  # one row per sentence: every row attends to its own slot only
        self.ancestry = self._moved_ancestry(out.origin, self.self_kv.size(POSITIONS), width)
        if width != self.width:
            self._widen(width)

    def _moved_ancestry(self, origin: torch.Tensor | None, capacity: int, width: int) -> torch.Tensor:
        """The ancestry of the next step's rows (row r: the ancestry of row origin[r] of this step;
        every row its own when origin is None) over the `length` positions decoded, in a tensor of
        `capacity` positions and `width` slots. Without an ancestry yet, every row so far was slot 0."""
        t, device = self.length, self.cross_kv.device
        rows = self.ancestry.size(0) if origin is None else origin.numel()
        moved = torch.zeros((rows, max(capacity, t + 1), width), dtype=torch.bool, device=device)
        if self.ancestry is None:
            moved[:, :t, 0] = True
        else:
            past = self.ancestry[:, :t] if origin is None else self.ancestry[:, :t].index_select(0, origin)
            moved[:, :t, : past.size(2)] = past
        return moved

    def _keep_sentences(self, keep: torch.Tensor) -> None:
        """Copy the filled positions of the sentences `keep` into a buffer of the same capacity."""
        kept = self._resized("self", self.self_kv, SENTENCES, keep.numel())
        t = self.length
        torch.index_select(self.self_kv[:, :, :, :, :t], SENTENCES, keep, out=kept[:, :, :, :, :t])
        self._install("self_kv", kept)

    def _widen(self, width: int) -> None:
        """More rows per sentence (after the first step): same positions, more slots. The new
        slots of the positions already decoded start at zero, not uninitialised: masked-out keys
        must still be finite. Later positions are written whole before they are read, so the rest
        of the buffer is left uninitialised (zeroing it all was measurable:
        docs/speed.md#measurements-behind-design-choices)."""
        if width < self.width:
            raise ValueError(f"rows per sentence went down from {self.width} to {width}")
        wider = self._resized("self", self.self_kv, SLOTS, width)
        wider[:, :, :, :, : self.length, self.width :] = 0
        wider[:, :, :, :, : self.length, : self.width] = self.self_kv[:, :, :, :, : self.length]
        self._install("self_kv", wider)
        self.width = width

    def _install(self, name: str, tensor: torch.Tensor) -> None:
        """`tensor` replaces the copy it was made from. One too large for Scratch to keep goes back
        to the system at once (memory.give_back_freed): in the heap it would stay resident, a hole
        as large as a real-size model's cache."""
        old = getattr(self, name)
        setattr(self, name, tensor)
        if old is not None and old.device.type == "cpu" and old.numel() * old.element_size() > Scratch.KEPT_BYTES:
            del old
            memory.give_back_freed()

    def _resized(self, kind: str, tensor: torch.Tensor, axis: int, size: int) -> torch.Tensor:
        """A Scratch tensor of `kind` shaped like `tensor` but `size` long on `axis`, uninitialised."""
        shape = list(tensor.shape)
        shape[axis] = size
        return self.scratch.next(kind, tensor, shape)
