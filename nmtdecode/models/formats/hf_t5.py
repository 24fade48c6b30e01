"""T5 checkpoints of Hugging Face (t5 v1.0, v1.1 and flan-T5, mT5, ByT5, MADLAD-400) mapped onto our
Transformer, without torch: config.json's fields onto TransformerConfig's, T5's tensor names onto ours.

What makes a T5 a T5 (Raffel et al. 2020), each one of TransformerConfig's switches:

  T5 (config.json)                          ours
  T5LayerNorm: RMS, no bias, pre-norm       norm rmsnorm, pre_norm, final norms on both stacks
  relative_attention_bias of block 0        positions relative, relative_buckets, relative_max_distance
  scores q.k, not q.k / sqrt(d_kv)          scale_queries False
  d_kv (heads * d_kv may differ from d)     head_dim
  feed_forward_proj relu | gated-gelu       activation, gated_ffn (gated-gelu: GELU's tanh form)
  tied lm_head: output * d_model^-0.5       output_scale (scale_decoder_outputs, else tie_word_embeddings;
                                            never in mT5)
  num_decoder_layers (ByT5: fewer)          decoder_layers
  decoder_start_token_id (MADLAD: not pad)  decoder_start_id

The output projection is tied to the shared embeddings unless the checkpoint stores lm_head.weight
(v1.1 and later: hf_config.describe decides from the weights' names, as transformers does). A
config.json saved by transformers 5 says `scale_decoder_outputs`; older ones say
`tie_word_embeddings: false` for an unscaled (v1.1) model.
"""

from __future__ import annotations

import os

from ...options.bounded import shown
from ..architecture import LIMITS, TransformerConfig
from ..checkpoint import ModelError
from .hf_fields import ACTIVATIONS, check_positive, check_token_ids, token_id

MODEL_TYPES = ("t5", "mt5")  # config.json's model_type (umT5's per-layer biases are not T5's: refused)
SIZES = ("vocab_size", "d_model", "d_kv", "d_ff", "num_layers", "num_heads")
OPTIONAL_SIZES = ("num_decoder_layers", "relative_attention_num_buckets", "relative_attention_max_distance")
# Relative positions have no table, so no end; a source is cut at TransformerConfig's bound on positions.
MAX_POSITIONS = LIMITS["max_positions"]


def feed_forward(hf: dict, where: str) -> tuple[str, bool]:
    """config.json's feed_forward_proj ("relu", "gated-gelu", "gated-silu", ...) -> our activation,
    and whether the layer is gated."""
    projection = hf.get("feed_forward_proj", "relu")
    gate, _, name = str(projection).rpartition("-")
    if projection == "gated-gelu":
        name = "gelu_new"  # T5 v1.1's GELU is the tanh form (transformers maps it so)
    if not isinstance(projection, str) or gate not in ("", "gated") or name not in ACTIVATIONS:
        raise ModelError(
            f"{where}: feed_forward_proj {shown(projection)} is not supported "
            f"(an activation of {', '.join(ACTIVATIONS)}, optionally gated-: relu, gated-gelu, ...)"
        )
    return ACTIVATIONS[name], gate == "gated"


def scales_outputs(hf: dict) -> bool:
    """Whether the decoder output is scaled by d_model^-0.5 before the output projection: never in
    mT5 (v1.1's layout; transformers' MT5 has no such scale, whatever tie_word_embeddings says)."""
    if hf.get("model_type") == "mt5":
        return False
    saved = hf.get("scale_decoder_outputs")
    return saved if isinstance(saved, bool) else hf.get("tie_word_embeddings") is not False


def model_config(hf: dict, path: str) -> TransformerConfig:
    """The architecture of config.json `hf` (its output tied until the weights say otherwise)."""
    where = os.path.join(path, "config.json")
    check_token_ids(hf, where)
    check_positive(hf, where, SIZES, OPTIONAL_SIZES)
    activation, gated = feed_forward(hf, where)
    pad = token_id(hf, "pad_token_id", 0)
    d_model = hf["d_model"]
    return TransformerConfig(
        src_vocab_size=hf["vocab_size"],
        tgt_vocab_size=hf["vocab_size"],
        d_model=d_model,
        heads=hf["num_heads"],
        head_dim=hf["d_kv"],
        encoder_layers=hf["num_layers"],
        decoder_layers=hf.get("num_decoder_layers") or hf["num_layers"],
        ffn_dim=hf["d_ff"],
        activation=activation,
        gated_ffn=gated,
        pre_norm=True,
        norm="rmsnorm",
        norm_eps=hf.get("layer_norm_epsilon", 1e-6),
        positions="relative",
        max_positions=MAX_POSITIONS,
        relative_buckets=hf.get("relative_attention_num_buckets", 32),
        relative_max_distance=hf.get("relative_attention_max_distance", 128),
        scale_queries=False,
        share_embeddings=True,
        tie_output=True,
        output_scale=d_model**-0.5 if scales_outputs(hf) else 1.0,
        bias=False,
        pad_id=pad,
        unk_id=2,  # the tokenizer's <unk> wins (hf_config._tokenizer)
        bos_id=pad,  # T5 has no BOS
        eos_id=token_id(hf, "eos_token_id", 1),
        decoder_start_id=token_id(hf, "decoder_start_token_id", pad),
    )


def _attention(ours: str, theirs: str, fused: dict[str, list[str]]) -> dict[str, list[str]]:
    """Our fused projections <- T5's (no biases): e.g. qkv <- q, k, v."""
    return {f"{ours}.{name}.weight": [f"{theirs}.{part}.weight" for part in parts] for name, parts in fused.items()}


def _feed_forward(cfg: TransformerConfig, ours: str, theirs: str) -> dict[str, list[str]]:
    dense = f"{theirs}.DenseReluDense"
    first = ("gate_up", ["wi_0", "wi_1"]) if cfg.gated_ffn else ("up", ["wi"])  # gate first (GatedFeedForward)
    return {
        f"{ours}.ffn.{first[0]}.weight": [f"{dense}.{w}.weight" for w in first[1]],
        f"{ours}.ffn.down.weight": [f"{dense}.wo.weight"],
        f"{ours}.ffn_block.norm.weight": [f"{theirs}.layer_norm.weight"],
    }


def weight_map(cfg: TransformerConfig) -> dict[str, list[str]]:
    """Our parameter name -> T5's tensor(s) it is made of (concatenated on dim 0); the token
    embeddings: the first of their names that is stored."""
    self_attention = {"qkv": ["q", "k", "v"], "out": ["o"]}
    names = {
        "src_embed.tokens.weight": ["shared.weight", "encoder.embed_tokens.weight"],
        "encoder_norm.weight": ["encoder.final_layer_norm.weight"],
        "decoder_norm.weight": ["decoder.final_layer_norm.weight"],
    }
    for stack in ("encoder", "decoder"):
        bias = f"{stack}.block.0.layer.0.SelfAttention.relative_attention_bias.weight"
        names[f"{stack}_bias.embedding.weight"] = [bias]  # the first layer's, which all of them add
    for i in range(cfg.encoder_layers):
        ours, theirs = f"encoder_layers.{i}", f"encoder.block.{i}.layer"
        names.update(_attention(f"{ours}.self_attn", f"{theirs}.0.SelfAttention", self_attention))
        names[f"{ours}.attn_block.norm.weight"] = [f"{theirs}.0.layer_norm.weight"]
        names.update(_feed_forward(cfg, ours, f"{theirs}.1"))
    for i in range(cfg.decoder_layers):
        ours, theirs = f"decoder_layers.{i}", f"decoder.block.{i}.layer"
        names.update(_attention(f"{ours}.self_attn", f"{theirs}.0.SelfAttention", self_attention))
        names[f"{ours}.self_block.norm.weight"] = [f"{theirs}.0.layer_norm.weight"]
        cross = {"q": ["q"], "kv": ["k", "v"], "out": ["o"]}
        names.update(_attention(f"{ours}.cross_attn", f"{theirs}.1.EncDecAttention", cross))
        names[f"{ours}.cross_block.norm.weight"] = [f"{theirs}.1.layer_norm.weight"]
        names.update(_feed_forward(cfg, ours, f"{theirs}.2"))
    if not cfg.tie_output:
        names["output.weight"] = ["lm_head.weight"]
    return names


def weight_sources(cfg: TransformerConfig, stored: dict, path: str) -> dict[str, list[str]]:
    """Our parameter name -> the stored tensors it is made of; tied parameters once (the shared
    embeddings are the source's; the output, when tied, theirs too)."""
    ours: dict[str, list[str]] = {}
    for name, sources in weight_map(cfg).items():
        if name == "src_embed.tokens.weight":
            found = next((s for s in sources if s in stored), None)
            if found is None:
                raise ModelError(f"{path}: no {' or '.join(sources)} in the checkpoint")
            ours[name] = [found]
            continue
        missing = [s for s in sources if s not in stored]
        if missing:
            raise ModelError(f"{path}: tensor {missing[0]} is missing from the checkpoint")
        ours[name] = sources
    return ours
