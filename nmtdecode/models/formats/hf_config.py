"""Hugging Face seq2seq directories (Marian, BART, mBART, M2M100/NLLB, Pegasus; T5 through
hf_t5.py), read without torch.

Read without importing `transformers`: `config.json` gives the architecture,
`generation_config.json` the decoding defaults, the weights' names and shapes
(`model.safetensors`, also sharded, or `pytorch_model.bin`) the rest. What
differs between the families is one row of `FAMILIES`; every other field of
`config.json` that would change the computation and that we do not model fails
by name. `describe` is what `nmtdecode inspect` shows and what huggingface.py
loads (the torch half: the tensors themselves).

Conventions converted here: Hugging Face counts the decoder start token in
`max_length` and `min_length`, we count generated tokens, so both lose one.
"""

from __future__ import annotations

import functools
import math
import os
from typing import Callable, TypedDict

from ...options.bounded import shown
from ..architecture import TransformerConfig
from ..checkpoint import ModelError, ModelFacts, ModelRules, check_dimensions, read_json
from . import hf_spiece, hf_t5
from .hf_fields import ACTIVATIONS, check_positive, check_token_ids
from .hf_tokenizers import HFTokenizer, load_tokenizer

FORMAT = "huggingface"  # ModelFacts.format adds the family: "huggingface/marian", ...


class Family(TypedDict):
    """How a family's Transformer differs (TransformerConfig's fields of those names)."""

    pre_norm: bool  # and a final norm on both stacks
    positions: str
    position_offset: int | None
    layernorm_embedding: bool


# model_type -> how its Transformer differs. position_offset None: pad_token_id + 1 (fairseq).
FAMILIES: dict[str, Family] = {
    "marian": dict(pre_norm=False, positions="sinusoidal", position_offset=0, layernorm_embedding=False),
    "bart": dict(pre_norm=False, positions="learned", position_offset=2, layernorm_embedding=True),
    "mbart": dict(pre_norm=True, positions="learned", position_offset=2, layernorm_embedding=True),
    "m2m_100": dict(pre_norm=True, positions="sinusoidal_fairseq", position_offset=None, layernorm_embedding=False),
    # Pegasus's sinusoids are Marian's (sines in the first half, cosines in the second)
    "pegasus": dict(pre_norm=True, positions="sinusoidal", position_offset=0, layernorm_embedding=False),
}
# Fields that must agree because our layers use one value for encoder and decoder.
SAME_FOR_BOTH = [("encoder_attention_heads", "decoder_attention_heads"), ("encoder_ffn_dim", "decoder_ffn_dim")]


# Sizes every config.json must give, each a positive integer.
REQUIRED_SIZES = (
    "vocab_size",
    "d_model",
    "encoder_attention_heads",
    "decoder_attention_heads",
    "encoder_layers",
    "decoder_layers",
    "encoder_ffn_dim",
    "decoder_ffn_dim",
)


def check_sizes(hf: dict, path: str) -> None:
    """The architecture's sizes and token ids, by their config.json names, before anything is
    built from them."""
    where = os.path.join(path, "config.json")
    check_token_ids(hf, where)
    check_positive(hf, where, REQUIRED_SIZES, ("max_position_embeddings", "decoder_vocab_size"))
    if hf["d_model"] % hf["encoder_attention_heads"]:
        raise ModelError(
            f"{where}: d_model ({hf['d_model']}) is not divisible by "
            f"encoder_attention_heads ({hf['encoder_attention_heads']})"
        )


def model_config(hf: dict, path: str) -> TransformerConfig:
    family = hf.get("model_type")
    if family in hf_t5.MODEL_TYPES:
        return hf_t5.model_config(hf, path)
    if family not in FAMILIES:
        supported = ", ".join([*FAMILIES, *hf_t5.MODEL_TYPES])
        raise ModelError(f"{path}: model_type {shown(family)} is not supported (supported: {supported})")
    check_sizes(hf, path)
    for enc, dec in SAME_FOR_BOTH:
        if hf.get(enc) != hf.get(dec):
            raise ModelError(f"{path}: {enc}={hf.get(enc)} differs from {dec}={hf.get(dec)}, which is not supported")
    activation = hf.get("activation_function", "gelu")
    if activation not in ACTIVATIONS:
        raise ModelError(f"{path}: activation_function {shown(activation)} is not supported ({', '.join(ACTIVATIONS)})")
    shape = FAMILIES[family]
    pad = hf.get("pad_token_id", 1)
    shared = family != "marian" or hf.get("share_encoder_decoder_embeddings", True)
    vocab = hf["vocab_size"]
    return TransformerConfig(
        src_vocab_size=vocab,
        tgt_vocab_size=vocab if shared else hf.get("decoder_vocab_size") or vocab,
        d_model=hf["d_model"],
        heads=hf["encoder_attention_heads"],
        encoder_layers=hf["encoder_layers"],
        decoder_layers=hf["decoder_layers"],
        ffn_dim=hf["encoder_ffn_dim"],
        activation=ACTIVATIONS[activation],
        pre_norm=shape["pre_norm"],
        encoder_final_norm=shape["pre_norm"],
        decoder_final_norm=shape["pre_norm"],
        positions=shape["positions"],
        position_offset=pad + 1 if shape["position_offset"] is None else shape["position_offset"],
        max_positions=hf.get("max_position_embeddings", 1024),
        embed_scale=hf["d_model"] ** 0.5 if hf.get("scale_embedding", False) else 1.0,
        zero_pad_positions=family == "m2m_100",
        layernorm_embedding=shape["layernorm_embedding"],
        share_embeddings=shared,
        tie_output=hf.get("tie_word_embeddings", True),
        final_logits_bias=False,  # set by describe from the checkpoint's tensor
        bias=True,
        norm_eps=1e-5,
        pad_id=pad,
        unk_id=hf.get("unk_token_id") if hf.get("unk_token_id") is not None else 3,  # the tokenizer's wins
        bos_id=hf.get("bos_token_id", 0) if hf.get("bos_token_id") is not None else pad,
        eos_id=hf.get("eos_token_id", 2),
        decoder_start_id=hf.get("decoder_start_token_id", hf.get("eos_token_id", 2)),
    )


def weight_files(path: str) -> list[str]:
    """The checkpoint's weight files: model.safetensors, its shards, or pytorch_model.bin."""
    single, index = os.path.join(path, "model.safetensors"), os.path.join(path, "model.safetensors.index.json")
    if os.path.lexists(single):  # a FIFO or folder there is refused by name when it is read (note_read)
        return [single]
    if os.path.lexists(index):
        shards = read_json(index).get("weight_map")
        if not isinstance(shards, dict):
            raise ModelError(f"{index}: weight_map is missing")
        return [os.path.join(path, shard) for shard in sorted(set(shards.values()))]
    legacy = os.path.join(path, "pytorch_model.bin")
    if os.path.lexists(legacy):
        return [legacy]
    raise ModelError(f"{path}: no model.safetensors, model.safetensors.index.json or pytorch_model.bin")


def _attention(ours: str, theirs: str, fused: dict[str, list[str]]) -> dict[str, list[str]]:
    """Our fused projections <- concatenation of theirs: e.g. qkv <- q_proj, k_proj, v_proj."""
    return {
        f"{ours}.{name}.{p}": [f"{theirs}.{part}_proj.{p}" for part in parts]
        for name, parts in fused.items()
        for p in ("weight", "bias")
    }


def weight_map(cfg: TransformerConfig) -> dict[str, list[str]]:
    """Our parameter name -> the Hugging Face tensor(s) it is made of (concatenated on dim 0)."""
    names: dict[str, list[str]] = {}
    for side, embed in (("encoder", "src_embed"), ("decoder", "tgt_embed")):
        names[f"{embed}.tokens.weight"] = [f"model.{side}.embed_tokens.weight", "model.shared.weight"]
        if cfg.positions == "learned":
            names[f"{embed}.positions.weight"] = [f"model.{side}.embed_positions.weight"]
        if cfg.layernorm_embedding:
            for p in ("weight", "bias"):
                names[f"{embed}.norm.{p}"] = [f"model.{side}.layernorm_embedding.{p}"]
        if cfg.pre_norm:
            for p in ("weight", "bias"):
                names[f"{side}_norm.{p}"] = [f"model.{side}.layer_norm.{p}"]
    self_attention = {"qkv": ["q", "k", "v"], "out": ["out"]}
    for i in range(cfg.encoder_layers):
        ours, theirs = f"encoder_layers.{i}", f"model.encoder.layers.{i}"
        names.update(_attention(f"{ours}.self_attn", f"{theirs}.self_attn", self_attention))
        names.update(
            _feed_forward(ours, theirs, {"attn_block": "self_attn_layer_norm", "ffn_block": "final_layer_norm"})
        )
    for i in range(cfg.decoder_layers):
        ours, theirs = f"decoder_layers.{i}", f"model.decoder.layers.{i}"
        names.update(_attention(f"{ours}.self_attn", f"{theirs}.self_attn", self_attention))
        names.update(
            _attention(f"{ours}.cross_attn", f"{theirs}.encoder_attn", {"q": ["q"], "kv": ["k", "v"], "out": ["out"]})
        )
        names.update(
            _feed_forward(
                ours,
                theirs,
                {
                    "self_block": "self_attn_layer_norm",
                    "cross_block": "encoder_attn_layer_norm",
                    "ffn_block": "final_layer_norm",
                },
            )
        )
    if not cfg.tie_output:
        names["output.weight"] = ["lm_head.weight"]
    if cfg.final_logits_bias:
        names["output.bias"] = ["final_logits_bias"]
    return names


def _feed_forward(ours: str, theirs: str, norms: dict[str, str]) -> dict[str, list[str]]:
    names = {
        f"{ours}.ffn.{a}.{p}": [f"{theirs}.{b}.{p}"]
        for a, b in (("up", "fc1"), ("down", "fc2"))
        for p in ("weight", "bias")
    }
    names.update(
        {
            f"{ours}.{block}.norm.{p}": [f"{theirs}.{norm}.{p}"]
            for block, norm in norms.items()
            for p in ("weight", "bias")
        }
    )
    return names


def weight_sources(cfg: TransformerConfig, stored: dict, path: str, model_type: str = "") -> dict[str, list[str]]:
    """Our parameter name -> the stored tensors it is made of (concatenated on dim 0), by the names
    they are stored under; tied parameters once. `model_type`: config.json's."""
    if model_type in hf_t5.MODEL_TYPES:
        return hf_t5.weight_sources(cfg, stored, path)
    # Some checkpoints (a bare BartModel, old exports) store names without the "model." prefix.
    named = {(k if k.startswith(("model.", "lm_head", "final_logits_bias")) else f"model.{k}"): k for k in stored}
    ours: dict[str, list[str]] = {}
    for name, sources in weight_map(cfg).items():
        if name.endswith("tokens.weight"):  # embeddings: the side's own matrix, else the shared one
            found = next((s for s in sources if s in named), None)
            if found is None:
                raise ModelError(f"{path}: no {' or '.join(sources)} in the checkpoint")
            ours[name] = [named[found]]
            continue
        missing = [s for s in sources if s not in named]
        if missing:
            raise ModelError(f"{path}: tensor {missing[0]} is missing from the checkpoint")
        ours[name] = [named[s] for s in sources]
    if cfg.share_embeddings:
        ours.pop("tgt_embed.tokens.weight")  # one matrix, stored under its first name
    return ours


def joined_shapes(sources: dict[str, list[str]], stored: dict[str, tuple[int, ...]]) -> dict[str, tuple[int, ...]]:
    """The shapes our parameters get from `weight_sources` (huggingface.convert_weights joins the tensors)."""
    shapes = {name: (sum(stored[s][0] for s in parts), *stored[parts[0]][1:]) for name, parts in sources.items()}
    if "output.bias" in shapes:  # stored as a (1, vocabulary) row
        shapes["output.bias"] = (math.prod(shapes["output.bias"]),)
    return shapes


# What transformers' generate() uses where generation_config.json leaves a value out or null
# (GenerationConfig._get_default_generation_params): top_k 50, temperature 1, top_p 1.
HF_SAMPLING_DEFAULTS = {"temperature": 1.0, "top_k": 50, "top_p": 1.0}


def sampling_settings(gen: dict) -> dict:
    """A model whose generate() samples by default (do_sample, one beam) samples here too, with its
    temperature/top_k/top_p, transformers' defaults filling the rest. Beam sampling (do_sample with
    num_beams > 1) is not offered: such a model keeps beam search."""
    if not gen.get("do_sample") or (gen.get("num_beams") or 1) > 1 or (gen.get("num_beam_groups") or 1) > 1:
        return {}
    values = {k: default if gen.get(k) is None else gen[k] for k, default in HF_SAMPLING_DEFAULTS.items()}
    return {
        "sampling": True,
        "temperature": float(values["temperature"]),
        "top_k": int(values["top_k"]),
        "top_p": float(values["top_p"]),
    }


def generation_settings(gen: dict, cfg: TransformerConfig) -> tuple[dict, ModelRules]:
    """Decoding defaults and model rules from generation_config.json (or config.json)."""
    defaults = {}
    if gen.get("num_beams"):
        defaults["beam_size"] = gen["num_beams"]
    if gen.get("max_new_tokens"):
        defaults["max_length"] = gen["max_new_tokens"]
    elif gen.get("max_length"):
        defaults["max_length"] = gen["max_length"] - 1  # theirs counts the decoder start token
    if gen.get("min_length"):
        defaults["min_length"] = max(0, gen["min_length"] - 1)
    if "length_penalty" in gen:
        defaults.update(length_penalty="avg", alpha=float(gen["length_penalty"]))
    if gen.get("no_repeat_ngram_size"):
        defaults["no_repeat_ngram_size"] = gen["no_repeat_ngram_size"]
    if gen.get("repetition_penalty", 1.0) != 1.0:
        defaults["repetition_penalty"] = float(gen["repetition_penalty"])
    if (gen.get("num_beam_groups") or 1) > 1:  # group beam search (search/diverse.py)
        defaults.update(beam_groups=gen["num_beam_groups"], diversity_penalty=float(gen.get("diversity_penalty") or 0))
    defaults.update(sampling_settings(gen))
    # transformers' own default is early_stopping=False; ours (`top`) is not theirs, so it is always set
    defaults["early_stopping"] = str(gen.get("early_stopping", False)).lower()
    banned = []
    for sequence in gen.get("bad_words_ids") or []:
        if len(sequence) != 1:
            raise ModelError(f"bad_words_ids with multi-token sequences ({sequence}) are not supported")
        banned.append(sequence[0])
    forced_eos = gen.get("forced_eos_token_id")
    if forced_eos not in (None, cfg.eos_id):
        raise ModelError(f"forced_eos_token_id {forced_eos} differs from eos_token_id {cfg.eos_id}: not supported")
    rules = ModelRules(tuple(banned), forced_bos_id=gen.get("forced_bos_token_id"), forced_eos=forced_eos is not None)
    return defaults, rules


def describe(path: str, read: Callable, hf: dict | None = None) -> ModelFacts:
    """What the directory says (its config.json is `hf` when given); `read` reads the weight files
    (stored.py: their tensors for a load, their headers for inspect)."""
    hf = read_json(os.path.join(path, "config.json")) if hf is None else hf
    try:
        cfg = model_config(hf, path)
    except ValueError as e:  # what check_sizes does not cover (a token id out of range...), by our name for it
        raise ModelError(f"{os.path.join(path, 'config.json')}: {e}") from None
    generation = read_json(os.path.join(path, "generation_config.json"), required=False) or hf
    check_token_ids(generation, os.path.join(path, "generation_config.json" if generation is not hf else "config.json"))
    if isinstance(generation.get("decoder_start_token_id"), int):  # generation_config.json wins, as in transformers
        cfg.decoder_start_id = generation["decoder_start_token_id"]
    stored = read(weight_files(path))
    if hf["model_type"] in hf_t5.MODEL_TYPES:  # T5's output is its own where the checkpoint stores one
        cfg.tie_output = "lm_head.weight" not in stored.shapes
    bias = next((name for name in ("final_logits_bias", "model.final_logits_bias") if name in stored.shapes), None)
    # Most checkpoints store an all-zero final_logits_bias: adding it would cost a pass over every step's logits.
    cfg.final_logits_bias = bias is not None and any(stored.values(bias))
    shapes = joined_shapes(weight_sources(cfg, stored.shapes, path, hf["model_type"]), stored.shapes)
    check_dimensions(cfg, shapes, path)
    defaults, rules = generation_settings(generation, cfg)
    return ModelFacts(
        f"{FORMAT}/{hf['model_type']}",
        cfg,
        stored,
        shapes,
        rules,
        defaults,
        functools.partial(_tokenizer, path, hf, cfg),
    )


def _tokenizer(path: str, hf: dict, cfg: TransformerConfig) -> HFTokenizer:
    if hf.get("model_type") in hf_spiece.MODEL_TYPES:
        tokenizer = hf_spiece.load_tokenizer(path, hf, cfg)
    else:
        tokenizer = load_tokenizer(path, hf, cfg)
    cfg.unk_id = tokenizer.unk_id  # the tokenizer's <unk> wins over config.json's
    return tokenizer
