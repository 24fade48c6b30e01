"""One configurable encoder-decoder Transformer that every supported format maps onto.

Vaswani et al. 2017, "Attention Is All You Need", with the switches that the
published checkpoint families differ in: pre- or post-norm layers (Marian and
BART are post-norm, mBART, M2M100, Pegasus and T5 pre-norm), LayerNorm or T5's
RMS norm, sinusoidal or learned positions with an index offset (BART's learned
table starts at 2) or T5's relative position bias (relative.py), embedding
scale, a layer norm after the embeddings, biases, activation, a gated
feed-forward (T5 v1.1), the heads' width and whether scores are scaled by it,
shared and tied embeddings, a scale and a bias on the output logits.

Incremental decoding: `init_cache` projects the encoder output to the
cross-attention keys/values once per batch; `decode_step` feeds one token per
row and appends that step's self-attention keys/values to the cache
(`models/cache.py`). The model knows nothing about beams: the cache follows
the search's decisions through `cache.follow(step_output)`.

The attention blocks (self-attention, cross-attention) are `models/attention.py`'s.

Shapes: B batch rows, S source length, T target length, d model width,
H heads, hd = d / H.
"""

from __future__ import annotations

import math
from contextlib import contextmanager
from typing import Callable, Iterator, Sequence, cast

import torch
import torch.nn.functional as F
from torch import nn

from .architecture import TransformerConfig
from .attention import CrossAttention, SelfAttention, with_padding, without_padding
from .cache import DecoderCache
from .relative import RelativePositionBias, StepBias
from .state import LayerState

Activation = Callable[[torch.Tensor], torch.Tensor]
ACTIVATIONS: dict[str, Activation] = {  # architecture.ACTIVATION_NAMES, each with its function
    "relu": F.relu,
    "gelu": F.gelu,
    "gelu_tanh": lambda x: F.gelu(x, approximate="tanh"),
    "silu": F.silu,
}


def sinusoidal_table(length: int, dim: int, kind: str) -> torch.Tensor:
    """Fixed position encodings, (length, dim), in the three published layouts.

    sinusoidal: frequencies 10000^(-2i/dim), sines in the first half, cosines in
        the second (tensor2tensor / Marian).
    sinusoidal_interleaved: same frequencies, sin and cos alternating (the
        paper's formula, OpenNMT-py).
    sinusoidal_fairseq: frequencies 10000^(-i/(dim/2 - 1)), halves (fairseq, M2M100).
    """
    half = dim // 2
    if kind == "sinusoidal_fairseq":
        freqs = torch.exp(torch.arange(half, dtype=torch.float64) * -(math.log(10000.0) / (half - 1)))
    else:
        freqs = torch.pow(10000.0, -torch.arange(0, dim, 2, dtype=torch.float64)[:half] / dim)
    angles = torch.arange(length, dtype=torch.float64)[:, None] * freqs[None, :]
    table = torch.zeros(length, dim, dtype=torch.float64)
    if kind == "sinusoidal_interleaved":
        table[:, 0 : 2 * half : 2] = torch.sin(angles)
        table[:, 1 : 2 * half : 2] = torch.cos(angles)
    else:
        table[:, :half] = torch.sin(angles)
        table[:, half : 2 * half] = torch.cos(angles)
    return table.float()


# What nn.Linear, nn.Embedding and nn.LayerNorm (and Transformer) initialise their parameters with.
RANDOM_INIT = ("kaiming_uniform_", "uniform_", "normal_", "ones_", "zeros_")


@contextmanager
def skipping_random_init() -> Iterator[None]:
    """While a model whose every parameter a checkpoint will overwrite is built, torch.nn.init's
    initialisers leave tensors as allocated (the approach of transformers' `no_init_weights`;
    building on the meta device instead would import torch._dynamo, which is slow:
    docs/speed.md#measurements-behind-design-choices).
    Restored on exit."""
    saved = {name: getattr(nn.init, name) for name in RANDOM_INIT}
    try:
        for name in RANDOM_INIT:
            setattr(nn.init, name, lambda tensor, *args, **kwargs: tensor)
        yield
    finally:
        for name, function in saved.items():
            setattr(nn.init, name, function)


class Embeddings(nn.Module):
    """Token embedding * scale + position encoding (+ optional layer norm). Relative positions
    (T5's) add nothing here: the self-attention adds them to its scores (models/relative.py)."""

    sinusoids: torch.Tensor  # a buffer (register_buffer) where the positions are not learned

    def __init__(self, cfg: TransformerConfig, tokens: nn.Embedding) -> None:
        super().__init__()
        self.tokens = tokens
        self.scale = cfg.embed_scale
        self.offset = cfg.position_offset
        self.dropout = cfg.dropout
        table_size = cfg.max_positions + cfg.position_offset
        self.relative = cfg.positions == "relative"
        self.positions = nn.Embedding(table_size, cfg.d_model) if cfg.positions == "learned" else None
        if cfg.positions not in ("learned", "relative"):
            self.register_buffer(
                "sinusoids", sinusoidal_table(table_size, cfg.d_model, cfg.positions), persistent=False
            )
        self.norm = nn.LayerNorm(cfg.d_model, eps=cfg.norm_eps) if cfg.layernorm_embedding else None
        self.zero_pad_id = cfg.pad_id if cfg.zero_pad_positions else None

    def position_table(self) -> torch.Tensor:
        return self.positions.weight if self.positions is not None else self.sinusoids

    def forward(self, ids: torch.Tensor, start: int = 0) -> torch.Tensor:
        """ids (B, T) -> (B, T, d); `start` is the position of ids[:, 0]."""
        if self.relative:
            return self._embed(ids, None)
        first = start + self.offset
        if first + ids.size(1) > self.position_table().size(0):
            positions = self.position_table().size(0) - self.offset
            raise ValueError(f"sequence longer than the model's {positions} positions")
        return self._embed(ids, self.position_table()[first : first + ids.size(1)])

    def _embed(self, ids: torch.Tensor, positions: torch.Tensor | None) -> torch.Tensor:
        x = self.tokens(ids) * self.scale  # the tokens may be int8 rows (models/quantize.py), looked up as floats
        if positions is None:
            return dropout(x, self.dropout, self.training)
        positions = positions.to(x.dtype)
        if self.zero_pad_id is not None:
            positions = positions * (ids != self.zero_pad_id)[..., None]
        x = x + positions
        if self.norm is not None:
            x = self.norm(x)
        return dropout(x, self.dropout, self.training)

    def step(self, ids: torch.Tensor, position: int | torch.Tensor) -> torch.Tensor:
        """One token per row at `position`: ids (N,) -> (N, d). The position is a number, or a
        one-element tensor on the device (the fixed-shape step, models/fixed_step.py, whose
        graphs must not depend on a Python value)."""
        if self.relative:
            return self._embed(ids, None)
        if isinstance(position, int):
            return self(ids[:, None], start=position)[:, 0]
        return self._embed(ids, self.position_table().index_select(0, position + self.offset))


def dropout(x: torch.Tensor, p: float, training: bool) -> torch.Tensor:
    """F.dropout, with no call at all when decoding (every step saves a few dispatches)."""
    return F.dropout(x, p, True) if training and p > 0 else x


class FeedForward(nn.Module):
    """down(activation(up(x)))."""

    def __init__(self, cfg: TransformerConfig) -> None:
        super().__init__()
        self.up = nn.Linear(cfg.d_model, cfg.ffn_dim, bias=cfg.bias)
        self.down = nn.Linear(cfg.ffn_dim, cfg.d_model, bias=cfg.bias)
        self.activation_name = cfg.activation
        self.activation: Activation | None = ACTIVATIONS[cfg.activation]  # None once fused into `up` (models/gemm.py)
        self.dropout = cfg.dropout

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.up(x)
        if self.activation is not None:
            h = self.activation(h)
        return self.down(dropout(h, self.dropout, self.training))


class GatedFeedForward(nn.Module):
    """down(activation(gate(x)) * up(x)), gate and up in one product (`gate_up`, gate first): T5
    v1.1's gated GELU (Shazeer 2020, "GLU Variants Improve Transformer")."""

    def __init__(self, cfg: TransformerConfig) -> None:
        super().__init__()
        self.gate_up = nn.Linear(cfg.d_model, 2 * cfg.ffn_dim, bias=cfg.bias)
        self.down = nn.Linear(cfg.ffn_dim, cfg.d_model, bias=cfg.bias)
        self.activation = ACTIVATIONS[cfg.activation]
        self.dropout = cfg.dropout

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate, up = self.gate_up(x).chunk(2, dim=-1)
        return self.down(dropout(self.activation(gate) * up, self.dropout, self.training))


def feed_forward(cfg: TransformerConfig) -> nn.Module:
    return GatedFeedForward(cfg) if cfg.gated_ffn else FeedForward(cfg)


class RMSNorm(nn.Module):
    """x / sqrt(mean(x^2) + eps) * weight: no mean subtracted, no bias (Zhang and Sennrich 2019),
    T5's layer norm. The mean of squares is taken in float32 whatever the dtype, as T5 takes it."""

    def __init__(self, d_model: int, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d_model))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = x.float()
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * h.to(self.weight.dtype)


def layer_norm(cfg: TransformerConfig) -> nn.Module:
    """The model's norm (architecture.NORMS): nn.LayerNorm, or RMSNorm."""
    return RMSNorm(cfg.d_model, cfg.norm_eps) if cfg.norm == "rmsnorm" else nn.LayerNorm(cfg.d_model, eps=cfg.norm_eps)


class Residual(nn.Module):
    """x + sublayer(x) with the layer norm before (pre-norm) or after (post-norm) it."""

    def __init__(self, cfg: TransformerConfig) -> None:
        super().__init__()
        self.norm = layer_norm(cfg)
        self.pre_norm = cfg.pre_norm
        self.dropout = cfg.dropout

    def forward(self, x: torch.Tensor, sublayer: Callable[..., torch.Tensor], *args) -> torch.Tensor:
        """sublayer(x, *args) with the norm and the residual connection around it."""
        if self.pre_norm:
            return x + dropout(sublayer(self.norm(x), *args), self.dropout, self.training)
        return self.norm(x + dropout(sublayer(x, *args), self.dropout, self.training))


def attention_shape(cfg: TransformerConfig) -> tuple[int, int, float, bool, int, float | None]:
    """What an attention layer is built from: width, heads, dropout, whether projections have
    biases, the width of a head, what the scores are multiplied by (None: 1/sqrt(head width))."""
    return cfg.d_model, cfg.heads, cfg.dropout, cfg.bias, cfg.head_size, None if cfg.scale_queries else 1.0


class EncoderLayer(nn.Module):
    def __init__(self, cfg: TransformerConfig) -> None:
        super().__init__()
        self.self_attn, self.ffn = SelfAttention(*attention_shape(cfg)), feed_forward(cfg)
        self.attn_block, self.ffn_block = Residual(cfg), Residual(cfg)

    def forward(
        self, x: torch.Tensor, mask: torch.Tensor | None, position_bias: torch.Tensor | None = None
    ) -> torch.Tensor:
        x = self.attn_block(x, lambda h: self.self_attn(h, mask=mask, position_bias=position_bias))
        return self.ffn_block(x, self.ffn)

    def forward_unpadded(
        self,
        x: torch.Tensor,
        places: torch.Tensor,
        shape: tuple[int, int],
        mask: torch.Tensor,
        position_bias: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """The layer on the real positions' rows x (N, d) of a padded batch of `shape`: every part
        but the attention works row by row, so only the attention sees the padding."""
        x = self.attn_block(x, lambda h: self.self_attn.forward_unpadded(h, places, shape, mask, position_bias))
        return self.ffn_block(x, self.ffn)


class DecoderLayer(nn.Module):
    def __init__(self, cfg: TransformerConfig) -> None:
        super().__init__()
        shape = attention_shape(cfg)
        self.self_attn, self.cross_attn, self.ffn = SelfAttention(*shape), CrossAttention(*shape), feed_forward(cfg)
        self.self_block, self.cross_block, self.ffn_block = Residual(cfg), Residual(cfg), Residual(cfg)

    def forward(
        self,
        x: torch.Tensor,
        keys: torch.Tensor,
        values: torch.Tensor,
        memory_mask: torch.Tensor | None,
        position_bias: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Teacher-forced pass over a whole target prefix (training, scoring)."""
        x = self.self_block(x, lambda h: self.self_attn(h, causal=True, position_bias=position_bias))
        x = self.cross_block(x, lambda h: self.cross_attn(h, keys, values, memory_mask))
        return self.ffn_block(x, self.ffn)

    def step(
        self, x: torch.Tensor, cache: LayerState, layer: int, position_bias: StepBias | None = None
    ) -> torch.Tensor:
        """One incremental step; x (N, d)."""
        keys, values = cache.cross(layer)
        x = self.self_block(x, self.self_attn.step, cache, layer, position_bias)
        x = self.cross_block(x, self.cross_attn.step, keys, values, cache.memory_mask, cache.attention_probe(layer))
        return self.ffn_block(x, self.ffn)


def padding_mask(src_mask: torch.Tensor) -> torch.Tensor:
    """(B, S) bool, True = real token  ->  (B, 1, 1, S) attention mask broadcast over heads and queries."""
    return src_mask[:, None, None, :]


class Transformer(nn.Module):
    backend: str = "torch"  # how the CPU multiplies by its weights: torch, onednn or int8 (models/placement.py)

    def __init__(self, cfg: TransformerConfig) -> None:
        super().__init__()
        self.cfg = cfg
        src_tokens = nn.Embedding(cfg.src_vocab_size, cfg.d_model)
        tgt_tokens = src_tokens if cfg.share_embeddings else nn.Embedding(cfg.tgt_vocab_size, cfg.d_model)
        self.src_embed = Embeddings(cfg, src_tokens)
        self.tgt_embed = Embeddings(cfg, tgt_tokens)
        # nn.ModuleLists, which a type checker sees yield plain Modules: cast to the layers they hold
        self.encoder_layers = cast(
            "Sequence[EncoderLayer]", nn.ModuleList(EncoderLayer(cfg) for _ in range(cfg.encoder_layers))
        )
        self.decoder_layers = cast(
            "Sequence[DecoderLayer]", nn.ModuleList(DecoderLayer(cfg) for _ in range(cfg.decoder_layers))
        )
        self.encoder_norm = layer_norm(cfg) if cfg.encoder_final_norm else None
        self.decoder_norm = layer_norm(cfg) if cfg.decoder_final_norm else None
        relative = cfg.positions == "relative"  # one table per stack, which all of its layers add
        self.encoder_bias = RelativePositionBias(cfg, bidirectional=True) if relative else None
        self.decoder_bias = RelativePositionBias(cfg, bidirectional=False) if relative else None
        self.output = nn.Linear(cfg.d_model, cfg.tgt_vocab_size, bias=cfg.final_logits_bias)  # bias fused in the matmul
        if cfg.tie_output:
            self.output.weight = tgt_tokens.weight
        if self.output.bias is not None:
            nn.init.zeros_(self.output.bias)

    @classmethod
    def uninitialised(cls, cfg: TransformerConfig) -> "Transformer":
        """A model for a checkpoint to fill (the loaders): its parameters allocated but not randomly
        initialised, which would cost a large part of the load for nothing
        (docs/speed.md#measurements-behind-design-choices)."""
        with skipping_random_init():
            return cls(cfg)

    def encode(self, src_ids: torch.Tensor, src_mask: torch.Tensor) -> torch.Tensor:
        """src_ids (B, S), src_mask (B, S) bool -> memory (B, S, d)."""
        x = self.src_embed(src_ids)
        bias = None if self.encoder_bias is None else self.encoder_bias(x.size(1), x.size(1))
        if bool(src_mask.all()):  # no padding: the unmasked kernel
            for layer in self.encoder_layers:
                x = layer(x, None, bias)
            return self.encoder_norm(x) if self.encoder_norm is not None else x
        # Padded: the layers hold the real positions' rows only, as CTranslate2's encoder does
        # (its pull request 251): the products, norms and feed-forward layers skip the padding.
        mask, shape = padding_mask(src_mask), (x.size(0), x.size(1))
        places = src_mask.reshape(-1).nonzero().squeeze(1)
        rows = without_padding(x, places)
        for layer in self.encoder_layers:
            rows = layer.forward_unpadded(rows, places, shape, mask, bias)
        if self.encoder_norm is not None:
            rows = self.encoder_norm(rows)
        return with_padding(rows, places, shape)

    def logits(self, x: torch.Tensor) -> torch.Tensor:
        if self.decoder_norm is not None:
            x = self.decoder_norm(x)
        if self.cfg.output_scale != 1.0:
            x = x * self.cfg.output_scale
        return self.output(x)

    def cross_keys_values(self, memory: torch.Tensor) -> torch.Tensor:
        """The memory (B, S, d) projected to every decoder layer's cross-attention keys and values,
        once per sentence: (L, 2, B, H, S, hd)."""
        return torch.stack([torch.stack(layer.cross_attn.project_memory(memory)) for layer in self.decoder_layers])

    def init_cache(self, memory: torch.Tensor, src_mask: torch.Tensor) -> DecoderCache:
        """Project the memory to cross-attention keys/values, once per sentence. Length-sorted
        batches often have no padding: then no step needs the mask."""
        cross = self.cross_keys_values(memory)
        mask = None if bool(src_mask.all()) else padding_mask(src_mask)
        alignment = (self.cfg.alignment_layer, self.cfg.alignment_heads)
        return DecoderCache(cross_kv=cross, memory_mask=mask, alignment=alignment)  # (L, 2, B, H, S, hd)

    def decode_step(self, tokens: torch.Tensor, cache: LayerState) -> torch.Tensor:
        """tokens (N,) at position cache.position -> next-token logits (N, V); appends to the cache.
        N is a multiple of the cache's sentences: each sentence's rows are consecutive. The cache
        is any LayerState (models/state.py): a DecoderCache, the fixed-shape step's
        (models/fixed_step.py) or the traced step's inputs (models/traced_step.py)."""
        x = self.tgt_embed.step(tokens, cache.position)  # (N, d)
        bias = None if self.decoder_bias is None else StepBias(self.decoder_bias, cache.position)
        for i, layer in enumerate(self.decoder_layers):
            x = layer.step(x, cache, i, bias)
        cache.advance()
        return self.logits(x)

    def decoding_bytes(self, sentences: int, width: int, positions: int, dtype: torch.dtype) -> int:
        """A lower bound of the memory that decoding step `positions - 1` of `sentences`
        sentences, `width` rows each, holds at once: the self-attention cache, plus the larger
        of one layer's self-attention scores with their softmax (each row attends over all
        of its sentence's `positions * width` slots, models/cache.py) and the logits with
        their float32 log-probabilities (translator.py)."""
        cfg, size = self.cfg, torch.finfo(dtype).bits // 8
        rows = sentences * width
        cache = cfg.decoder_layers * 2 * rows * positions * cfg.attention_dim * size
        attention = 2 * sentences * cfg.heads * width * positions * width * size
        logits = rows * cfg.tgt_vocab_size * (size + 4)
        return cache + max(attention, logits)

    def forward(self, src_ids: torch.Tensor, src_mask: torch.Tensor, tgt_in: torch.Tensor) -> torch.Tensor:
        """Teacher forcing: tgt_in (B, T) decoder inputs (start token first) -> logits (B, T, V)."""
        memory = self.encode(src_ids, src_mask)
        mask = padding_mask(src_mask)
        x = self.tgt_embed(tgt_in)
        bias = None if self.decoder_bias is None else self.decoder_bias(x.size(1), x.size(1))
        for layer in self.decoder_layers:
            keys, values = layer.cross_attn.project_memory(memory)
            x = layer(x, keys, values, mask, bias)
        return self.logits(x)
