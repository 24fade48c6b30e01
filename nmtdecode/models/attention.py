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


def fused_attention(
    q: torch.Tensor,
    keys: torch.Tensor,
    values: torch.Tensor,
    mask: torch.Tensor | None = None,
    causal: bool = False,
    dropout: float = 0.0,
) -> torch.Tensor:
    """scaled_dot_product_attention, on a GPU without cuDNN's kernel (WITHOUT_CUDNN)."""
    if not q.is_cuda:
        return F.scaled_dot_product_attention(q, keys, values, attn_mask=mask, is_causal=causal, dropout_p=dropout)
    with SDPA_FLAGS, sdpa_kernel(WITHOUT_CUDNN):
        return F.scaled_dot_product_attention(q, keys, values, attn_mask=mask, is_causal=causal, dropout_p=dropout)


def attend(q: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
    """Unmasked-in-time attention as two batched matmuls: q (N, H, Q, hd) over keys (N, H, T, hd);
    mask (N, 1, 1, T) bool (True = attend) or None.

    Same result as scaled_dot_product_attention; on CPU the fused kernel is
    slower for the few queries against cache slices that a decoding step has.
    """
    return torch.matmul(attention_weights(q, keys, mask), values)  # (N, H, Q, hd)


def step_attend(q: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """A decoding step's attention, q (B, H, k, hd) over keys (B, H, T, hd), mask broadcast to
    (B, H, k, T) (True = attend) or None: on a GPU one fused kernel instead of the five of
    `attend` (scale, product, mask, softmax, product; every row attends somewhere, so no row is
    all masked); on a CPU `attend`, faster there for a step's few queries (docs/speed.md)."""
    return fused_attention(q, keys, values, mask) if q.is_cuda else attend(q, keys, values, mask)


def attention_weights(q: torch.Tensor, keys: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
    """softmax(q k^T / sqrt(hd)) with masked keys at 0: (N, H, Q, T)."""
    scores = torch.matmul(q * q.size(-1) ** -0.5, keys.transpose(-1, -2))  # (N, H, Q, T)
    if mask is not None:
        scores.masked_fill_(~mask, float("-inf"))
    return torch.softmax(scores, dim=-1)


class SelfAttention(nn.Module):
    """Multi-head self-attention with the q, k and v projections fused in one matmul."""

    def __init__(self, d_model: int, heads: int, dropout: float = 0.0, bias: bool = True) -> None:
        super().__init__()
        self.heads, self.dropout = heads, dropout
        self.qkv = nn.Linear(d_model, 3 * d_model, bias=bias)
        self.out = nn.Linear(d_model, d_model, bias=bias)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None, causal: bool = False) -> torch.Tensor:
        """Full-sequence attention; mask (B, 1, 1, T) bool, True = attend. The encoder's short
        sentences go faster through two matmuls than through the fused kernel on CPUs."""
        q, k, v = (split_heads(t, self.heads) for t in self.qkv(x).chunk(3, dim=-1))
        if self.training or causal or x.is_cuda:
            p = self.dropout if self.training else 0.0
            y = fused_attention(q, k, v, mask, causal, p)
        else:
            y = attend(q, k, v, mask)
        return self.out(merge_heads(y))

    def step(self, x: torch.Tensor, cache: LayerState, layer: int) -> torch.Tensor:
        """One new position per row, x (N, d): attend over the cached past and itself.

        As in cross-attention, the rows of a sentence ask together: the cache hands
        back every slot of the sentence, masked down to each row's own ancestors.
        """
        n = x.size(0)
        qkv = self.qkv(x).view(n, 3, self.heads, -1)  # (N, 3, H, hd): one query, key and value per row
        keys, values, mask = cache.append_self(layer, qkv[:, 1:])  # (B, H, T*width, hd)
        sentences = keys.size(0)
        q = qkv[:, 0].view(sentences, n // sentences, self.heads, -1).transpose(1, 2)  # (B, H, width, hd)
        y = step_attend(q, keys, values, mask).transpose(1, 2)  # (B, width, H, hd)
        return self.out(y.reshape(n, -1))


class CrossAttention(nn.Module):
    """Decoder-to-encoder attention; keys/values of the memory are projected once per batch."""

    def __init__(self, d_model: int, heads: int, dropout: float = 0.0, bias: bool = True) -> None:
        super().__init__()
        self.heads, self.dropout = heads, dropout
        self.q = nn.Linear(d_model, d_model, bias=bias)
        self.kv = nn.Linear(d_model, 2 * d_model, bias=bias)
        self.out = nn.Linear(d_model, d_model, bias=bias)

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
        return self.out(merge_heads(fused_attention(q, keys, values, mask, dropout=p)))

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
            y = step_attend(q, keys, values, mask)
        else:
            weights = attention_weights(q, keys, mask)  # (B, H, k, S)
            probe.keep_attention(weights)
            y = torch.matmul(weights, values)
        y = y.transpose(1, 2)  # (B, k, H, hd)
        return self.out(y.reshape(rows, -1))
