"""The decoder state of one batch: one contract for every cache, and one record of beam ancestry.

A batch's decoder state is made by a step runner (models/steps.py) and read by two sides:

* the decoding loop (decoding.py) lets it follow the search (`follow`), and asks it to keep
  the cross-attention when a search option reads it (`record_attention`, then `attention`);
  `DecoderState` is that side, which every state implements: the model's cache (cache.py),
  the fixed-shape step's (fixed_step.py), the traced step's view of a cache (traced_step.py)
  and an ensemble's states together (ensemble.py);
* the model's step (transformer.py, attention.py) reads and appends keys and values through
  `LayerState`, which the states of one model implement: the model's cache, the fixed-shape
  step's, and the traced step's view of the recorded inputs.

A beam search reorders its hypotheses every step. No state copies a row's past to where its
hypothesis went: keys and values stay where they were written, and each row keeps its
ancestry, `ancestry[row, position, slot]` (bool), true at the slot (row of its sentence) that
held its ancestor at that position. A row attends over all of its sentence's slots with that
mask, which is the same attention (the measurement: docs/speed.md#measurements-behind-design-choices).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

import torch

if TYPE_CHECKING:  # the model does not depend on the search, only on this shape of its output
    from ..search.base import StepOutput


class DecoderState(Protocol):
    """What the decoding loop asks of a batch's decoder state."""

    record_attention: bool  # set when a search option reads the cross-attention
    attention: torch.Tensor | None  # (rows, S) float32: this step's alignment-layer weights, when recorded

    def follow(self, out: StepOutput) -> None: ...  # row r continues row out.origin[r]; out.keep stay


class AttentionProbe(Protocol):
    """Where a cross-attention layer leaves its weights when they are kept (`LayerState.attention_probe`)."""

    def keep_attention(self, weights: torch.Tensor) -> None: ...  # (B, H, width, S) of the alignment layer


class LayerState(Protocol):
    """What the model's step (Transformer.decode_step and its decoder layers) asks of the state."""

    @property
    def position(self) -> int | torch.Tensor: ...  # of this step's tokens: a number, or (1,) on the device

    @property
    def memory_mask(self) -> torch.Tensor | None: ...  # (B, 1, 1, S) bool, True = real source token; None: no padding

    def cross(self, layer: int) -> tuple[torch.Tensor, torch.Tensor]: ...  # encoder keys, values

    def append_self(
        self, layer: int, kv: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]: ...  # keys, values, ancestry mask so far

    def attention_probe(self, layer: int) -> AttentionProbe | None: ...  # itself when this layer's weights are kept

    def advance(self) -> None: ...  # every layer has appended this step


def own_slots(rows: int, width: int, device: torch.device) -> torch.Tensor:
    """(rows, 1, width) bool: each row's own slot, row % width, as one position of an ancestry."""
    return torch.eye(width, dtype=torch.bool, device=device).repeat(rows // width, 1)[:, None]


def ancestry_mask(ancestry: torch.Tensor, positions: int) -> torch.Tensor:
    """An ancestry (rows, capacity, width) -> the self-attention mask of its first `positions`
    positions, (sentences, 1, width, positions * width): each row's allowed (position, slot)
    keys, laid out as the cache lays out a sentence's keys. A view."""
    rows, capacity, width = ancestry.shape
    return ancestry.view(rows // width, width, capacity, width)[:, :, :positions].flatten(2, 3)[:, None]
