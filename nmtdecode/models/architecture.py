"""The Transformer's configuration, every field checked by name: no torch, so that a model's
files can be read and described (`nmtdecode inspect`) before, or without, building it
(transformer.py builds the network from it)."""

from __future__ import annotations

import math
from dataclasses import MISSING, asdict, dataclass, fields
from typing import Any

from ..options.bounded import shown

ACTIVATION_NAMES = ("relu", "gelu", "gelu_tanh", "silu")  # transformer.ACTIVATIONS: the function of each
# "relative": no position vector is added to the embeddings; every self-attention adds T5's bucketed
# relative position bias to its scores instead (models/relative.py)
POSITIONS = ("sinusoidal", "sinusoidal_interleaved", "sinusoidal_fairseq", "learned", "relative")
NORMS = ("layernorm", "rmsnorm")  # transformer.NORMS: the layer of each
# Bounds on what a model config may ask for, far above every published encoder-decoder (NLLB:
# 256k pieces, d_model 2048, 24 layers, 1024 positions): a config beyond them is refused by name
# before gigabytes are allocated for it (a position table of 300,000 x 4,096, 20,000 layers).
LIMITS = {
    "src_vocab_size": 1 << 22,
    "tgt_vocab_size": 1 << 22,
    "d_model": 1 << 15,
    "heads": 1 << 10,
    "encoder_layers": 1 << 8,
    "decoder_layers": 1 << 8,
    "ffn_dim": 1 << 17,
    "max_positions": 1 << 16,
    "head_dim": 1 << 12,
    "relative_buckets": 1 << 10,
}


@dataclass
class TransformerConfig:
    src_vocab_size: int
    tgt_vocab_size: int
    d_model: int = 512
    heads: int = 8
    encoder_layers: int = 6
    decoder_layers: int = 6
    ffn_dim: int = 2048
    activation: str = "relu"
    pre_norm: bool = True
    # Pre-norm stacks end with a layer norm; post-norm ones usually do not.
    encoder_final_norm: bool = True
    decoder_final_norm: bool = True
    positions: str = "sinusoidal"
    position_offset: int = 0  # index of position 0 in the table (BART: 2, M2M100: pad_id + 1)
    max_positions: int = 1024
    embed_scale: float = 1.0  # sqrt(d_model) for Vaswani-style models
    zero_pad_positions: bool = False  # fairseq/M2M100: a pad token gets a zero position vector
    layernorm_embedding: bool = False  # BART/mBART normalise the embedding sum
    share_embeddings: bool = False  # source and target token embeddings are one matrix
    tie_output: bool = True  # output projection is the target embedding matrix
    final_logits_bias: bool = False  # a bias on the output logits (BART/Marian's final_logits_bias)
    bias: bool = True
    norm_eps: float = 1e-5
    dropout: float = 0.0  # used only when training (scripts/)
    pad_id: int = 0
    unk_id: int = 1
    bos_id: int = 2
    eos_id: int = 3
    decoder_start_id: int = 2  # first decoder input (Marian: pad, BART: eos, native: bos)
    # Whose cross-attention coverage penalties and alignments read: this decoder layer (negative:
    # from the last), averaged over its first alignment_heads heads (0: all). The default, the
    # last layer's first head, is OpenNMT-py's `std` attention and CTranslate2's default; a model
    # trained with guided alignment names its layer and heads (OpenNMT-py's alignment_layer/heads).
    alignment_layer: int = -1
    alignment_heads: int = 1
    # T5's switches (t5, flan-T5, mT5, ByT5, MADLAD-400; CTranslate2's T5 spec has each of them):
    norm: str = "layernorm"  # rmsnorm: x / sqrt(mean(x^2) + eps) * weight, no mean subtracted, no bias
    # down(activation(gate(x)) * up(x)) instead of down(activation(up(x))): T5 v1.1's "gated-gelu"
    gated_ffn: bool = False
    head_dim: int = 0  # width of a head; 0: d_model / heads (T5's d_kv: heads * head_dim may differ from d_model)
    scale_queries: bool = True  # scores q.k / sqrt(head width); False: T5's plain q.k
    # positions "relative": the bias of a key at distance (key - query) is learned per head for each of
    # `relative_buckets` buckets, exact up to a quarter (encoder) or half (decoder) of them, then
    # logarithmic up to `relative_max_distance`; the encoder's is bidirectional, the decoder's looks back
    relative_buckets: int = 32
    relative_max_distance: int = 128
    output_scale: float = 1.0  # the decoder output is multiplied by it before the output projection

    def __post_init__(self) -> None:
        """Every field checked by name (ValueError), so that a malformed model config fails
        with its key, not later with a division by zero or an index out of range."""
        for f in fields(self):
            _check_type(f.name, getattr(self, f.name), f.type)
        for key in (
            "src_vocab_size",
            "tgt_vocab_size",
            "d_model",
            "heads",
            "encoder_layers",
            "decoder_layers",
            "ffn_dim",
            "max_positions",
            "relative_buckets",
        ):
            if getattr(self, key) < 1:
                raise ValueError(f"{key}: must be >= 1, got {getattr(self, key)}")
            if getattr(self, key) > LIMITS[key]:  # before anything of that size is allocated
                raise ValueError(
                    f"{key}: {getattr(self, key)} is more than any model this decoder runs asks for "
                    f"(at most {LIMITS[key]:,}); a mistyped or hostile config?"
                )
        if self.position_offset < 0:
            raise ValueError(f"position_offset: must be >= 0, got {self.position_offset}")
        if not (self.norm_eps > 0 and 0 <= self.dropout < 1):
            raise ValueError(f"norm_eps ({self.norm_eps}) must be > 0 and dropout ({self.dropout}) in [0, 1)")
        # the special tokens each side looks up: source padding and EOS; the target's start,
        # EOS, and the pad and unknown tokens that may be banned
        for side, size, keys in (
            ("source", self.src_vocab_size, ("pad_id", "eos_id")),
            ("target", self.tgt_vocab_size, ("pad_id", "unk_id", "eos_id", "decoder_start_id")),
        ):
            for key in keys:
                if not 0 <= getattr(self, key) < size:
                    raise ValueError(f"{key}: {getattr(self, key)} is outside the {side} vocabulary ({size} tokens)")
        if not -self.decoder_layers <= self.alignment_layer < self.decoder_layers:
            raise ValueError(
                f"alignment_layer: {self.alignment_layer} is not a layer of the {self.decoder_layers}-layer decoder"
            )
        if not 0 <= self.alignment_heads <= self.heads:
            raise ValueError(f"alignment_heads: must be in [0, heads={self.heads}], got {self.alignment_heads}")
        self._check_t5_switches()
        if self.activation not in ACTIVATION_NAMES:
            raise ValueError(f"activation {shown(self.activation)} is not one of {sorted(ACTIVATION_NAMES)}")
        if self.positions not in POSITIONS:
            raise ValueError(f"positions {shown(self.positions)} is not one of {list(POSITIONS)}")
        if self.share_embeddings and self.src_vocab_size != self.tgt_vocab_size:
            raise ValueError("share_embeddings needs equal source and target vocabulary sizes")

    def _check_t5_switches(self) -> None:
        if not 0 <= self.head_dim <= LIMITS["head_dim"]:
            raise ValueError(
                f"head_dim: must be in [0, {LIMITS['head_dim']:,}] (0: d_model / heads), got {self.head_dim}"
            )
        if not self.head_dim and self.d_model % self.heads:
            raise ValueError(f"d_model ({self.d_model}) must be divisible by heads ({self.heads})")
        if self.norm not in NORMS:
            raise ValueError(f"norm {shown(self.norm)} is not one of {list(NORMS)}")
        # the decoder's exact buckets are half of them (the encoder's a quarter): the logarithmic ones reach beyond
        if self.relative_buckets < 4 or self.relative_max_distance <= self.relative_buckets // 2:
            raise ValueError(
                f"relative_buckets ({self.relative_buckets}) must be >= 4 and relative_max_distance "
                f"({self.relative_max_distance}) more than half of them"
            )
        if self.output_scale <= 0:
            raise ValueError(f"output_scale: must be > 0, got {self.output_scale}")

    @property
    def head_size(self) -> int:
        """The width of one attention head."""
        return self.head_dim or self.d_model // self.heads

    @property
    def attention_dim(self) -> int:
        """The width of the attention's queries, keys and values, all heads side by side."""
        return self.heads * self.head_size

    @classmethod
    def from_dict(cls, values: dict) -> "TransformerConfig":
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise ValueError(f"unknown model config keys: {', '.join(unknown)}")
        missing = [f.name for f in fields(cls) if f.default is MISSING and f.name not in values]
        if missing:
            raise ValueError(f"{missing[0]} is missing")
        return cls(**values)

    def to_dict(self) -> dict:
        return asdict(self)


def _check_type(key: str, value: Any, kind: Any) -> None:
    """kind: a field's annotation ("int", "float", "bool", "str"); ints count as floats."""
    number = isinstance(value, (int, float)) and not isinstance(value, bool)
    valid = {
        "int": isinstance(value, int) and not isinstance(value, bool),
        "float": number and math.isfinite(value),
        "bool": isinstance(value, bool),
        "str": isinstance(value, str),
    }[kind]
    if not valid:
        raise ValueError(f"{key}: expected {'a finite float' if kind == 'float' else kind}, got {shown(value)}")


def precision_refusal(cfg: TransformerConfig, dtype: str) -> str | None:
    """Why this model cannot compute in `dtype` (float32, float16, bfloat16), in one line, or None.
    T5's stacks (relative positions), trained in bfloat16, grow their feed-forward layers' outputs
    past float16's largest number (65,504) in real checkpoints: transformers keeps those layers in
    float32 and clamps the rest; CTranslate2 keeps them in float32. Here float16 is refused."""
    if dtype == "float16" and cfg.positions == "relative":
        return (
            "dtype: float16 overflows in T5's feed-forward layers (trained in bfloat16, their outputs "
            "pass float16's 65,504); use --dtype bfloat16, or float32"
        )
    return None
