"""Multi-head attention for `transformer.py`: the encoder's and decoder's self-attention and
the decoder's attention over the encoder output, each in a full-sequence form (training,
scoring, encoding) and a one-step form that reads the decoder state (`models/state.py`: LayerState).

Shapes: N rows (B sentences x k rows each when decoding), S source length, T keys,
Q queries, d model width, H heads, hd = d / H.
"""

from __future__ import annotations

import threading

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.attention import SDPBackend, sdpa_kernel

from .relative import StepBias
from .state import AttentionProbe, LayerState

# Every fused attention kernel but cuDNN's. torch picks cuDNN's for float16 on recent GPUs, and
# cuDNN builds a plan for every new shape, which nearly every batch brings (a new source length):
# a large share of a first pass over a file (docs/speed.md#measurements-behind-design-choices).
# The memory-efficient kernel takes the same masks without a plan, flash attention the unmasked case.
WITHOUT_CUDNN = [SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH]
# sdpa_kernel sets process-wide flags and restores them on leaving: two threads inside it at once
# (API callers decoding on a GPU from several threads) could restore each other's. The CLI encodes
# one batch at a time on a GPU, so the lock never waits there.
SDPA_FLAGS = threading.Lock()


def split_heads(x: torch.Tensor, heads: int) -> torch.Tensor:
    b, t, d = x.shape
    return x.view(b, t, heads, d // heads).transpose(1, 2)  # (B, H, T, hd)


def merge_heads(x: torch.Tensor) -> torch.Tensor:
    b, h, t, hd = x.shape
    return x.transpose(1, 2).reshape(b, t, h * hd)  # (B, T, d)


def without_padding(x: torch.Tensor, places: torch.Tensor) -> torch.Tensor:
    """x (B, S, w) -> the rows (N, w) at `places` of its (B*S) positions: a batch without its padding."""
    return x.reshape(-1, x.size(-1)).index_select(0, places)


def with_padding(rows: torch.Tensor, places: torch.Tensor, shape: tuple[int, int]) -> torch.Tensor:
    """`without_padding` undone: rows (N, w) back at their places in (B, S, w), zeros elsewhere."""
    return rows.new_zeros(shape[0] * shape[1], rows.size(-1)).index_copy_(0, places, rows).view(*shape, -1)


def fused_attention(
    q: torch.Tensor,
    keys: torch.Tensor,
    values: torch.Tensor,
    mask: torch.Tensor | None = None,
    causal: bool = False,
    dropout: float = 0.0,
    scale: float | None = None,
) -> torch.Tensor:
    """scaled_dot_product_attention, on a GPU without cuDNN's kernel (WITHOUT_CUDNN). mask: bool
    (True = attend) or a float bias added to the scores (`with_bias`); scale None: 1/sqrt(hd)."""
    if not q.is_cuda:
        return F.scaled_dot_product_attention(
            q, keys, values, attn_mask=mask, is_causal=causal, dropout_p=dropout, scale=scale
        )
    with SDPA_FLAGS, sdpa_kernel(WITHOUT_CUDNN):
        return F.scaled_dot_product_attention(
            q, keys, values, attn_mask=mask, is_causal=causal, dropout_p=dropout, scale=scale
        )


def with_bias(mask: torch.Tensor | None, bias: torch.Tensor) -> torch.Tensor:
    """A bool mask (True = attend, or None) and a float bias added to the scores, as one float mask."""
    return bias if mask is None else torch.where(mask, bias, float("-inf"))


def attend(
    q: torch.Tensor,
    keys: torch.Tensor,
    values: torch.Tensor,
    mask: torch.Tensor | None = None,
    scale: float | None = None,
    bias: torch.Tensor | None = None,
) -> torch.Tensor:
    """Unmasked-in-time attention as two batched matmuls: q (N, H, Q, hd) over keys (N, H, T, hd);
    mask (N, 1, 1, T) bool (True = attend) or None; bias: added to the scores, or None.

    Same result as scaled_dot_product_attention; on CPU the fused kernel is
    slower for the few queries against cache slices that a decoding step has.
    """
    return torch.matmul(attention_weights(q, keys, mask, scale, bias), values)  # (N, H, Q, hd)


def step_attend(
    q: torch.Tensor,
    keys: torch.Tensor,
    values: torch.Tensor,
    mask: torch.Tensor | None,
    scale: float | None = None,
    bias: torch.Tensor | None = None,
) -> torch.Tensor:
    """A decoding step's attention, q (B, H, k, hd) over keys (B, H, T, hd), mask broadcast to
    (B, H, k, T) (True = attend) or None, bias (1, H, 1, T) or None: on a GPU one fused kernel
    instead of the five of `attend` (scale, product, mask, softmax, product; every row attends
    somewhere, so no row is all masked); on a CPU `attend`, faster there for a step's few queries
    (docs/speed.md)."""
    if not q.is_cuda:
        return attend(q, keys, values, mask, scale, bias)
    return fused_attention(q, keys, values, mask if bias is None else with_bias(mask, bias), scale=scale)


def attention_weights(
    q: torch.Tensor,
    keys: torch.Tensor,
    mask: torch.Tensor | None = None,
    scale: float | None = None,
    bias: torch.Tensor | None = None,
) -> torch.Tensor:
    """softmax(q k^T * scale + bias) with masked keys at 0: (N, H, Q, T); scale None: 1/sqrt(hd)."""
    if scale is None:  # a size is a tensor while the step is traced: never compared as a number
        q = q * q.size(-1) ** -0.5
    elif scale != 1:
        q = q * scale
    scores = torch.matmul(q, keys.transpose(-1, -2))  # (N, H, Q, T)
    if bias is not None:
        scores = scores + bias
    if mask is not None:
        scores.masked_fill_(~mask, float("-inf"))
    return torch.softmax(scores, dim=-1)


class Attention(nn.Module):
    """What both attentions are built from: heads `head_size` wide (d_model / heads unless given),
    the projections of the input into them (INPUTS: each one's name and how many heads-wide
    blocks it fuses in one product), `out` back to d_model; scale: what the scores q.k are
    multiplied by (None: 1/sqrt(head_size); T5: 1)."""

    INPUTS: dict[str, int] = {}

    def __init__(
        self,
        d_model: int,
        heads: int,
        dropout: float = 0.0,
        bias: bool = True,
        head_size: int | None = None,
        scale: float | None = None,
    ) -> None:
        super().__init__()
        self.heads, self.dropout, self.scale = heads, dropout, scale
        inner = heads * (head_size or d_model // heads)
        for name, blocks in self.INPUTS.items():
            setattr(self, name, nn.Linear(d_model, blocks * inner, bias=bias))
        self.out = nn.Linear(inner, d_model, bias=bias)


class SelfAttention(Attention):
    """Multi-head self-attention with the q, k and v projections fused in one matmul."""

    INPUTS = {"qkv": 3}
    qkv: nn.Linear

    def forward(
        self,
        x: torch.Tensor,
        mask: torch.Tensor | None = None,
        causal: bool = False,
        position_bias: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Full-sequence attention; mask (B, 1, 1, T) bool, True = attend; position_bias (1, H, T, T)
        added to the scores (models/relative.py), or None. The encoder's short sentences go faster
        through two matmuls than through the fused kernel on CPUs."""
        return self.out(self._attend(self.qkv(x), mask, causal, position_bias))

    def forward_unpadded(
        self,
        x: torch.Tensor,
        places: torch.Tensor,
        shape: tuple[int, int],
        mask: torch.Tensor | None,
        position_bias: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """The encoder's attention over a batch held without its padding: x (N, d), the real
        positions' rows, `places` their rows in the padded batch of `shape` (B, S). The projections
        multiply the N rows only; the attention sees them padded (zeros where the mask hides)."""
        y = self._attend(with_padding(self.qkv(x), places, shape), mask, False, position_bias)
        return self.out(without_padding(y, places))

    def _attend(
        self, qkv: torch.Tensor, mask: torch.Tensor | None, causal: bool, position_bias: torch.Tensor | None
    ) -> torch.Tensor:
        """qkv (B, T, 3d) -> the heads' attention, merged: (B, T, d)."""
        q, k, v = (split_heads(t, self.heads) for t in qkv.chunk(3, dim=-1))
        if position_bias is not None and causal:  # the future masked in the bias: one mask for the kernel
            future = torch.ones(qkv.size(1), qkv.size(1), dtype=torch.bool, device=qkv.device).triu(1)
            position_bias, causal = position_bias.masked_fill(future, float("-inf")), False
        if self.training or causal or qkv.is_cuda:
            p = self.dropout if self.training else 0.0
            if position_bias is not None:
                mask = with_bias(mask, position_bias)
            y = fused_attention(q, k, v, mask, causal, p, self.scale)
        else:
            y = attend(q, k, v, mask, self.scale, position_bias)
        return merge_heads(y)

    def step(
        self, x: torch.Tensor, cache: LayerState, layer: int, position_bias: StepBias | None = None
    ) -> torch.Tensor:
        """One new position per row, x (N, d): attend over the cached past and itself.

        As in cross-attention, the rows of a sentence ask together: the cache hands
        back every slot of the sentence, masked down to each row's own ancestors.
        position_bias: the step's relative position bias, asked for the keys' layout.
        """
        n = x.size(0)
        qkv = self.qkv(x).view(n, 3, self.heads, -1)  # (N, 3, H, hd): one query, key and value per row
        keys, values, mask = cache.append_self(layer, qkv[:, 1:])  # (B, H, T*width, hd)
        sentences = keys.size(0)
        width = n // sentences
        q = qkv[:, 0].view(sentences, width, self.heads, -1).transpose(1, 2)  # (B, H, width, hd)
        bias = None if position_bias is None else position_bias(keys.size(2), width)
        y = step_attend(q, keys, values, mask, self.scale, bias).transpose(1, 2)  # (B, width, H, hd)
        return self.out(y.reshape(n, -1))


class CrossAttention(Attention):
    """Decoder-to-encoder attention; keys/values of the memory are projected once per batch."""

    INPUTS = {"q": 1, "kv": 2}
    q: nn.Linear
    kv: nn.Linear

    def project_memory(self, memory: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """memory (B, S, d) -> keys, values (B, H, S, hd)."""
        k, v = self.kv(memory).chunk(2, dim=-1)
        return split_heads(k, self.heads), split_heads(v, self.heads)

    def forward(
        self, x: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, mask: torch.Tensor | None
    ) -> torch.Tensor:
        """x (B, T, d) against one sentence's memory per row; keys, values (B, H, S, hd)."""
        q = split_heads(self.q(x), self.heads)
        p = self.dropout if self.training else 0.0
        return self.out(merge_heads(fused_attention(q, keys, values, mask, dropout=p, scale=self.scale)))

    def step(
        self,
        x: torch.Tensor,
        keys: torch.Tensor,
        values: torch.Tensor,
        mask: torch.Tensor | None,
        probe: AttentionProbe | None = None,
    ) -> torch.Tensor:
        """One position for each of the k rows (beams) of every sentence, x (B*k, d).

        The k rows of a sentence attend over the same memory, so they are
        asked together, as k queries: keys/values (B, H, S, hd) are read once
        per sentence, not once per row. mask: None when no source is padded.
        probe: given, it keeps this step's attention weights (coverage, alignment).
        """
        rows, sentences = x.size(0), keys.size(0)
        q = self.q(x).view(sentences, rows // sentences, self.heads, -1).transpose(1, 2)  # (B, H, k, hd)
        if probe is None:
            y = step_attend(q, keys, values, mask, self.scale)
        else:
            weights = attention_weights(q, keys, mask, self.scale)  # (B, H, k, S)
            probe.keep_attention(weights)
            y = torch.matmul(weights, values)
        y = y.transpose(1, 2)  # (B, k, H, hd)
        return self.out(y.reshape(rows, -1))
