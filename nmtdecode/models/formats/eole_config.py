"""eole model directories (OpenNMT-py's successor): a directory holding

    config.json             the training config; its `model:` section describes the network
    vocab.json              source and target token lists, special tokens, decoder start token
    model.*.safetensors     the weights (eole's parameter names)
    *.model                 SentencePiece models of the `sentencepiece` transform, if any

An eole encoder-decoder Transformer is OpenNMT-py's (pre-norm, final layer
norms, sinusoidal positions scaled by sqrt(d_model), a generator with a bias),
with other parameter names and many more switches: the ones that change the
arithmetic are mapped onto `TransformerConfig` or refused by name. `eole
predict` decodes with OpenNMT-py's beam, so the same rules apply
(models/formats/opennmt.py), with its own `max_length_ratio` default, 2.

Read here without torch (`describe`: what `nmtdecode inspect` shows and what
eole.py loads, the torch half).
"""

from __future__ import annotations

import functools
import glob
import os
from typing import Any, Callable, Container

from ...options.bounded import MAX_CONFIG_BYTES, shown, vocabulary_bytes
from ..architecture import TransformerConfig
from ..checkpoint import ModelError, ModelFacts, check_dimensions, check_stored_layers, read_json
from .opennmt_shared import (
    LAYER_WEIGHT,
    OPENNMT_RULES,
    POSITION_TYPES,
    VocabTokenizer,
    attention_projections,
    mapped_shapes,
    special_ids,
    subword_models,
)

FORMAT = "eole"
ROLES = {"unk": "unk_token", "pad": "pad_token", "bos": "bos_token", "eos": "eos_token"}
DEFAULT_SPECIALS = {"unk_token": "<unk>", "pad_token": "<blank>", "bos_token": "<s>", "eos_token": "</s>"}
# eole's activations without a gate (its gated-* ones have a third projection)
ACTIVATIONS = {"relu": "relu", "gelu": "gelu", "gelu-tanh": "gelu_tanh", "silu": "silu"}
Options = dict[str, tuple[object, set[object]]]  # option -> (eole's default, the values we support)
# Options of the encoder/decoder sections whose other values our Transformer cannot compute.
FIXED_OPTIONS: Options = {
    "layer_norm": ("standard", {"standard", "standardFP32"}),
    "sliding_window": (0, {0}),
    "relative_positions_buckets": (0, {0}),
    "shared_layer_norm": (False, {False}),
    "ffn_layernorm": (False, {False}),
    "parallel_residual": (False, {False}),
    "query_norm": (False, {False}),
    "key_norm": (False, {False}),
    "value_norm": (False, {False}),
    "q_gating": (False, {False}),
    "num_experts": (0, {0}),
    "attn_scaling": (None, {None}),
    "rope_config": (None, {None}),
    "layer_types": (None, {None}),
    "encoder_layer_style": ("standard", {"standard"}),
    "num_mtp_heads": (0, {0}),
}
EMBEDDING_OPTIONS: Options = {
    "normalize": (False, {False, None}),
    "embedding_layer_norm": (False, {False}),
    "position_shift": (0, {0, None}),
    "embedding_type": ("standard", {"standard"}),
}
MODEL_OPTIONS: Options = {
    "architecture": ("transformer", {"transformer"}),
    "generator_function": ("softmax", {"softmax"}),
    "add_estimator": (False, {False}),
}
# `eole predict`'s defaults (eole/config/inference.py): as onmt_translate's, but max_length_ratio 2.
DECODING_DEFAULTS = {
    "beam_size": 5,
    "length_penalty": "avg",
    "alpha": 1.0,
    "early_stopping": "top",
    "max_length": 250,
    "max_len_a": 2.0,
    "max_len_b": 5,
}


def option(model: dict, side: str, key: str, default: Any) -> Any:  # a config value: any JSON value
    """An option of the encoder or decoder: its own section's, else the model's, else eole's default."""
    section = model.get(side) or {}
    return section.get(key, model.get(key, default))


def _refuse_unless(value: object, allowed: Container[object], name: str, path: str) -> None:
    if value not in allowed:
        raise ModelError(f"{path}: eole option {name} = {shown(value)} is not supported")


def check_options(model: dict, path: str) -> None:
    for name, (default, allowed) in MODEL_OPTIONS.items():
        _refuse_unless(model.get(name, default), allowed, name, path)
    embeddings = model.get("embeddings") or {}
    for name, (default, allowed) in EMBEDDING_OPTIONS.items():
        _refuse_unless(embeddings.get(name, default), allowed, f"embeddings.{name}", path)
    for side in ("encoder", "decoder"):
        for name, (default, allowed) in FIXED_OPTIONS.items():
            _refuse_unless(option(model, side, name, default), allowed, f"{side}.{name}", path)
        heads, hidden = option(model, side, "heads", 8), option(model, side, "hidden_size", 512)
        _refuse_unless(option(model, side, "heads_kv", None), {None, heads}, f"{side}.heads_kv", path)
        _refuse_unless(option(model, side, "head_dim", None), {None, hidden // max(heads, 1)}, f"{side}.head_dim", path)
        _refuse_unless(_positions(model, side), POSITION_TYPES, f"{side}.position_encoding_type", path)
        _refuse_unless(option(model, side, "mlp_activation_fn", "relu"), ACTIVATIONS, f"{side}.mlp_activation_fn", path)
    for key in ("hidden_size", "heads", "transformer_ff", "mlp_activation_fn", "norm_eps", "layer_norm"):
        values = {str(option(model, side, key, None)) for side in ("encoder", "decoder")}
        if len(values) > 1:
            raise ModelError(
                f"{path}: eole option {key} differs between the encoder and the decoder "
                f"({' / '.join(sorted(values))}); one Transformer has one"
            )


def _positions(model: dict, side: str) -> Any:  # a config value: one of POSITION_TYPES once checked
    embeddings = model.get("embeddings") or {}
    return option(
        model, side, "position_encoding_type", embeddings.get("position_encoding_type", "SinusoidalInterleaved")
    )


def special_tokens(vocab: dict) -> dict[str, str]:
    """Role (unk, pad, bos, eos) -> the token vocab.json names for it, else eole's default."""
    named = vocab.get("specials") or DEFAULT_SPECIALS
    return {role: named.get(key, DEFAULT_SPECIALS[key]) for role, key in ROLES.items()}


def model_config(model: dict, vocab: dict, weights: dict[str, tuple[int, ...]], path: str) -> TransformerConfig:
    check_options(model, path)
    specials = special_tokens(vocab)
    src = special_ids(vocab["src"], "source", path, specials)
    tgt = special_ids(vocab["tgt"], "target", path, specials)
    start = vocab.get("decoder_start_token", specials["bos"])
    if start not in vocab["tgt"]:
        raise ModelError(f"{path}/vocab.json: the decoder start token {shown(start)} is not in the target vocabulary")
    if src["pad"] != tgt["pad"]:
        raise ModelError(
            f"{path}: the pad token has id {src['pad']} in the source vocabulary, {tgt['pad']} in the target"
        )
    hidden = option(model, "encoder", "hidden_size", 512)
    table = weights.get("src_emb.pe.pe")
    try:
        return TransformerConfig(
            src_vocab_size=len(vocab["src"]),
            tgt_vocab_size=len(vocab["tgt"]),
            d_model=hidden,
            heads=option(model, "encoder", "heads", 8),
            encoder_layers=option(model, "encoder", "layers", 2),
            decoder_layers=option(model, "decoder", "layers", 2),
            ffn_dim=option(model, "encoder", "transformer_ff", 2048),
            activation=ACTIVATIONS[option(model, "encoder", "mlp_activation_fn", "relu")],
            pre_norm=True,
            encoder_final_norm=bool(option(model, "encoder", "final_encoder_layer_norm", True)),
            decoder_final_norm=True,
            positions=POSITION_TYPES[_positions(model, "encoder")],
            max_positions=table[0] if table is not None else 5000,
            embed_scale=float(hidden) ** 0.5,
            share_embeddings=bool(model.get("share_embeddings", False)),
            tie_output=bool(model.get("share_decoder_embeddings", False)),
            final_logits_bias="generator.bias" in weights,
            # one switch for every linear layer: the biases the weights lack are loaded as zeros
            bias=any(
                name.endswith(".bias")
                and "layernorm" not in name
                and "layer_norm" not in name
                and not name.startswith("generator.")
                for name in weights
            ),
            norm_eps=float(option(model, "encoder", "norm_eps", 1e-5)),
            pad_id=tgt["pad"],
            unk_id=tgt["unk"],
            bos_id=tgt["bos"],
            eos_id=tgt["eos"],
            decoder_start_id=vocab["tgt"].index(start),
        )
    except (TypeError, ValueError) as e:
        raise ModelError(f"{path}/config.json: the model section does not describe a Transformer: {e}") from None


def weight_map(cfg: TransformerConfig) -> tuple[dict[str, list[str]], dict[str, str]]:
    """Our linear layers -> eole's (concatenated), and our norms and embeddings -> eole's."""
    linear: dict[str, list[str]] = {}
    direct = {
        "src_embed.tokens.weight": "src_emb.embeddings.weight",
        "tgt_embed.tokens.weight": "tgt_emb.embeddings.weight",
        "output.weight": "generator.weight",
        "output.bias": "generator.bias",
    }
    stacks = [
        (
            "encoder",
            "encoder_layers",
            cfg.encoder_layers,
            {"attn_block": "input_layernorm", "ffn_block": "post_attention_layernorm"},
        ),
        (
            "decoder",
            "decoder_layers",
            cfg.decoder_layers,
            {
                "self_block": "input_layernorm",
                "cross_block": "precontext_layernorm",
                "ffn_block": "post_attention_layernorm",
            },
        ),
    ]
    for theirs_stack, ours_stack, layers, norms in stacks:
        for part in ("weight", "bias"):
            direct[f"{theirs_stack}_norm.{part}"] = f"{theirs_stack}.layer_norm.{part}"
        for i in range(layers):
            ours, theirs = f"{ours_stack}.{i}", f"{theirs_stack}.transformer_layers.{i}"
            attention_projections(f"{ours}.self_attn", f"{theirs}.self_attn", linear)
            if theirs_stack == "decoder":
                attention_projections(f"{ours}.cross_attn", f"{theirs}.context_attn", linear)
            linear[f"{ours}.ffn.up"] = [f"{theirs}.mlp.gate_up_proj"]
            linear[f"{ours}.ffn.down"] = [f"{theirs}.mlp.down_proj"]
            for block, norm in norms.items():
                for part in ("weight", "bias"):
                    direct[f"{ours}.{block}.norm.{part}"] = f"{theirs}.{norm}.{part}"
    return linear, direct


def weight_files(path: str) -> list[str]:
    files = sorted(glob.glob(os.path.join(path, "model.*.safetensors")))
    if not files:
        raise ModelError(f"{path}: no model.*.safetensors weights")
    return files


def tokenizer_files(config: dict, path: str) -> tuple[str | None, str | None]:
    """The SentencePiece models of the recorded `sentencepiece` transform; eole writes their
    paths as ${MODEL_PATH}/NAME (the model directory)."""
    settings = (config.get("transforms_configs") or {}).get("sentencepiece") or {}
    recorded = {
        side: (settings.get(f"{side}_subword_model") or "").replace("${MODEL_PATH}", path) or None
        for side in ("src", "tgt")
    }
    return subword_models(config.get("transforms"), recorded, path, path)


def describe(path: str, read: Callable) -> ModelFacts:
    """What the directory says; `read` reads the weight files (stored.py: their tensors for a
    load, their headers for inspect)."""
    config = read_json(os.path.join(path, "config.json"), limit=MAX_CONFIG_BYTES)
    stored = read(weight_files(path))
    rows = sum(stored.shapes.get(f"{side}_emb.embeddings.weight", (0,))[0] for side in ("src", "tgt"))
    vocab = read_json(os.path.join(path, "vocab.json"), limit=vocabulary_bytes(rows))  # of its embeddings
    if not all(isinstance(vocab.get(side), list) for side in ("src", "tgt")):
        raise ModelError(f"{path}/vocab.json: expected token lists under src and tgt")
    for name in stored.shapes:  # Gemma-style layer scalars: 1 in every model we compute
        if name.endswith(".layer_scalar") and not all(value == 1 for value in stored.values(name)):
            raise ModelError(f"{path}: {name} is not 1 (a per-layer output scale) and is not supported")
    cfg = model_config(config["model"], vocab, stored.shapes, path)
    check_stored_layers(stored.shapes, LAYER_WEIGHT, cfg, path)
    shapes = mapped_shapes(cfg, stored.shapes, *weight_map(cfg))
    check_dimensions(cfg, shapes, path)
    # eole predict decodes with OpenNMT-py's beam (eole/predict/beam_search.py)
    return ModelFacts(
        FORMAT,
        cfg,
        stored,
        shapes,
        OPENNMT_RULES,
        dict(DECODING_DEFAULTS),
        functools.partial(_tokenizer, path, config, vocab),
    )


def _tokenizer(path: str, config: dict, vocab: dict) -> VocabTokenizer:
    src_spm, tgt_spm = tokenizer_files(config, path)
    return VocabTokenizer(vocab["src"], vocab["tgt"], src_spm, tgt_spm, special_tokens(vocab))
