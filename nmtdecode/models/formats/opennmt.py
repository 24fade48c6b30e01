"""OpenNMT-py v3 checkpoints: one `.pt` file holding `model`, `generator`, `vocab` and `opt`.

The file is a pickle, read with `torch.load(weights_only=True)`: tensors and
plain containers, plus the one class the options are stored as
(`argparse.Namespace`, which only holds attributes). A checkpoint that names
any other global (pickled code) is refused by the unpickler before anything runs.

OpenNMT-py 3.x's Transformer is pre-norm with a final layer norm on both
stacks, sinusoidal positions (interleaved sin/cos by default) scaled by
sqrt(d_model), and a generator (a linear layer with a bias) on top of the
decoder. The options that change the arithmetic are mapped onto
`TransformerConfig` or refused by name (`model_config`). The vocabularies are
token strings: text becomes pieces (the SentencePiece model recorded in the
options, or a whitespace split), pieces become ids (`VocabTokenizer`).
"""

from __future__ import annotations

import argparse
import os
import pickle
from typing import Callable, Mapping

import torch

from ...options.bounded import shown
from ..architecture import TransformerConfig
from ..checkpoint import (
    LoadedModel,
    ModelError,
    check_dimensions,
    check_stored_layers,
    first_line,
    note_read,
    unpickling_reason,
)
from ..placement import Placement, load_weights
from ..transformer import Transformer
from ..weights import InMemoryTensor, Source, StoredSource, allocate, in_memory, join
from .opennmt_shared import (
    LAYER_WEIGHT,
    OPENNMT_RULES,
    POSITION_TYPES,
    VocabTokenizer,
    attention_projections,
    mapped_shapes,
    special_ids,
    subword_models,
    untied,
)

FORMAT = "opennmt-py"
# The only non-tensor class an OpenNMT-py checkpoint pickles: its options.
SAFE_GLOBALS: list[Callable | tuple[Callable, str]] = [argparse.Namespace]  # as torch.serialization takes them
# OpenNMT-py 3.5's "silu" and "gated-gelu" are gated (a third projection, w_3): not ours.
ACTIVATIONS = {"relu": "relu", "gelu": "gelu"}
# Options whose other values change the network in ways our Transformer does not have:
# option -> (value it must have, when missing; the values we support, or None: only an empty one).
FIXED_OPTIONS: dict[str, tuple[object, set[object] | None]] = {
    "model_type": ("text", {"text"}),
    "encoder_type": ("transformer", {"transformer"}),
    "decoder_type": ("transformer", {"transformer"}),
    "copy_attn": (False, {False}),
    "layer_norm": ("standard", {"standard"}),
    "parallel_residual": (False, {False}),
    "multiquery": (False, {False}),
    "self_attn_type": ("scaled-dot", {"scaled-dot", "scaled-dot-flash"}),
    "sliding_window": (0, {0}),
    "lora_layers": ([], None),
    "quant_layers": ([], None),
}
# max_relative_positions: 0 = absolute sinusoids; the other values, each refused by its meaning.
RELATIVE_POSITIONS = {-1: "rotary position embeddings", -2: "ALiBi"}
# The onmt_translate defaults (onmt/opts.py translate_opts): beam 5, average length penalty
# with alpha 1, a step limit of min(max_length, |src| * max_length_ratio + 5).
DECODING_DEFAULTS = {
    "beam_size": 5,
    "length_penalty": "avg",
    "alpha": 1.0,
    "early_stopping": "top",
    "max_length": 250,
    "max_len_a": 1.25,
    "max_len_b": 5,
}


# The options a Transformer checkpoint's `opt` always holds (onmt_train writes every option).
REQUIRED_OPTIONS = ("hidden_size", "heads", "enc_layers", "dec_layers", "transformer_ff")


def read_checkpoint(path: str) -> dict:
    """The checkpoint's dict, unpickled without running code; one line of error otherwise."""
    try:
        with torch.serialization.safe_globals(SAFE_GLOBALS):
            data = torch.load(note_read(path), map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as e:
        raise ModelError(f"{path}: refused: {unpickling_reason(str(e))}") from None
    except Exception as e:  # the unpickler raises many types (EOFError, KeyError, RuntimeError...)
        raise ModelError(
            f"{path}: not a readable PyTorch checkpoint (truncated or corrupt?): "
            f"{type(e).__name__}: {first_line(str(e))}"
        ) from None
    expected = ("model", "generator", "vocab", "opt")
    if not isinstance(data, dict) or not all(key in data for key in expected):
        found = sorted(map(str, data)) if isinstance(data, dict) else type(data).__name__
        raise ModelError(
            f"{path}: not an OpenNMT-py checkpoint: expected a dict with {', '.join(expected)}; found {found}"
        )
    if not isinstance(data["opt"], argparse.Namespace) or not isinstance(data["vocab"], dict):
        raise ModelError(f"{path}: not an OpenNMT-py v3 checkpoint: `opt` must be options and `vocab` a dict")
    return data


def check_options(opt: argparse.Namespace, path: str) -> None:
    """Refuse, by option name, what the one Transformer cannot compute (and options that do not
    describe a Transformer at all)."""
    missing = [name for name in REQUIRED_OPTIONS if not hasattr(opt, name)]
    if missing:
        raise ModelError(
            f"{path}: its OpenNMT-py options (`opt`) have no {', '.join(missing)}: they do not describe a Transformer"
        )
    for name, (default, allowed) in FIXED_OPTIONS.items():
        value = getattr(opt, name, default)
        if (allowed is None and value) or (allowed is not None and value not in allowed):
            raise ModelError(f"{path}: OpenNMT-py option {name} = {shown(value)} is not supported")
    relative = getattr(opt, "max_relative_positions", 0)
    if relative:
        meaning = RELATIVE_POSITIONS.get(relative, "relative position representations")
        raise ModelError(f"{path}: OpenNMT-py option max_relative_positions = {relative} ({meaning}) is not supported")
    if not getattr(opt, "position_encoding", True):
        raise ModelError(f"{path}: OpenNMT-py option position_encoding = False (no positions) is not supported")
    num_kv = getattr(opt, "num_kv", 0)
    if num_kv not in (0, opt.heads):
        raise ModelError(f"{path}: OpenNMT-py option num_kv = {num_kv} (grouped-query attention) is not supported")
    for name, table in (("pos_ffn_activation_fn", ACTIVATIONS), ("position_encoding_type", POSITION_TYPES)):
        value = getattr(opt, name, next(iter(table)))
        if value not in table:
            raise ModelError(
                f"{path}: OpenNMT-py option {name} = {shown(value)} is not supported (supported: {', '.join(table)})"
            )


def model_config(opt: argparse.Namespace, vocab: dict, weights: dict, path: str) -> TransformerConfig:
    check_options(opt, path)
    if vocab.get("data_task", "seq2seq") != "seq2seq" or vocab.get("src_feats"):
        raise ModelError(f"{path}: only seq2seq checkpoints without source features are supported")
    src, tgt = special_ids(vocab["src"], "source", path), special_ids(vocab["tgt"], "target", path)
    if src["pad"] != tgt["pad"]:
        raise ModelError(f"{path}: <blank> has id {src['pad']} in the source vocabulary, {tgt['pad']} in the target")
    table = weights.get("encoder.embeddings.make_embedding.pe.pe")
    try:
        return TransformerConfig(
            src_vocab_size=len(vocab["src"]),
            tgt_vocab_size=len(vocab["tgt"]),
            d_model=opt.hidden_size,
            heads=opt.heads,
            encoder_layers=opt.enc_layers,
            decoder_layers=opt.dec_layers,
            ffn_dim=opt.transformer_ff,
            activation=ACTIVATIONS[getattr(opt, "pos_ffn_activation_fn", "relu")],
            pre_norm=True,
            encoder_final_norm=True,
            decoder_final_norm=True,
            positions=POSITION_TYPES[getattr(opt, "position_encoding_type", "SinusoidalInterleaved")],
            max_positions=table.size(0) if table is not None else 5000,
            embed_scale=float(opt.hidden_size) ** 0.5,
            share_embeddings=bool(opt.share_embeddings),
            tie_output=bool(opt.share_decoder_embeddings),
            final_logits_bias="generator.bias" in weights,
            # one switch for every linear layer: the biases a checkpoint lacks are loaded as zeros
            bias=bool(getattr(opt, "add_qkvbias", False) or getattr(opt, "add_ffnbias", False)),
            norm_eps=float(getattr(opt, "norm_eps", 1e-6)),
            pad_id=tgt["pad"],
            unk_id=tgt["unk"],
            bos_id=tgt["bos"],
            eos_id=tgt["eos"],
            decoder_start_id=tgt["bos"],
        )
    except (AttributeError, TypeError, ValueError) as e:
        raise ModelError(f"{path}: options do not describe a Transformer: {e}") from None


def weight_map(cfg: TransformerConfig) -> tuple[dict[str, list[str]], dict[str, str]]:
    """Our linear layers -> their (concatenated) linear layers, and our layer norms and
    embeddings -> theirs."""
    linear: dict[str, list[str]] = {}
    direct = {
        "src_embed.tokens.weight": "encoder.embeddings.make_embedding.emb_luts.0.weight",
        "tgt_embed.tokens.weight": "decoder.embeddings.make_embedding.emb_luts.0.weight",
        "output.weight": "generator.weight",
        "output.bias": "generator.bias",
    }
    for norm in ("weight", "bias"):
        direct[f"encoder_norm.{norm}"] = f"encoder.layer_norm.{norm}"
        direct[f"decoder_norm.{norm}"] = f"decoder.layer_norm.{norm}"
    for i in range(cfg.encoder_layers):
        ours, theirs = f"encoder_layers.{i}", f"encoder.transformer.{i}"
        attention_projections(f"{ours}.self_attn", f"{theirs}.self_attn", linear)
        norms = {"attn_block": "layer_norm", "ffn_block": "feed_forward.layer_norm"}
        _feed_forward(ours, theirs, norms, linear, direct)
    for i in range(cfg.decoder_layers):
        ours, theirs = f"decoder_layers.{i}", f"decoder.transformer_layers.{i}"
        attention_projections(f"{ours}.self_attn", f"{theirs}.self_attn", linear)
        attention_projections(f"{ours}.cross_attn", f"{theirs}.context_attn", linear)
        norms = {"self_block": "layer_norm_1", "cross_block": "layer_norm_2", "ffn_block": "feed_forward.layer_norm"}
        _feed_forward(ours, theirs, norms, linear, direct)
    return linear, direct


def _feed_forward(
    ours: str, theirs: str, norms: dict[str, str], linear: dict[str, list[str]], direct: dict[str, str]
) -> None:
    linear[f"{ours}.ffn.up"] = [f"{theirs}.feed_forward.w_1"]
    linear[f"{ours}.ffn.down"] = [f"{theirs}.feed_forward.w_2"]
    for block, norm in norms.items():
        for part in ("weight", "bias"):
            direct[f"{ours}.{block}.norm.{part}"] = f"{theirs}.{norm}.{part}"


def convert_weights(
    model: Transformer, theirs: Mapping[str, StoredSource], linear: dict[str, list[str]], direct: dict[str, str]
) -> dict[str, Source]:
    """Their tensors (models/weights.py's stored ones) under our names (`weight_map`), to be read as
    the model is filled; a bias the checkpoint lacks (add_qkvbias off while add_ffnbias is on,
    say) becomes zeros, which is the same layer without one. A float16 checkpoint stays float16
    here: the tensors are converted as they are read."""
    ours: dict[str, Source] = {name: theirs[source] for name, source in direct.items() if source in theirs}
    expected = model.state_dict()
    for name, parts in linear.items():
        if any(f"{p}.weight" not in theirs for p in parts):
            continue  # reported by load_weights as missing
        ours[f"{name}.weight"] = join([theirs[f"{p}.weight"] for p in parts])
        if f"{name}.bias" in expected:
            ours[f"{name}.bias"] = join(
                [theirs.get(f"{p}.bias") or _zeros(theirs[f"{p}.weight"].shape[0], p) for p in parts]
            )
    return untied(model.cfg, ours)


def _zeros(size: int, name: str) -> InMemoryTensor:
    return InMemoryTensor(torch.zeros(size), f"{name}.bias", "zeros for a missing bias")


def load(path: str, placement: Placement | None = None) -> LoadedModel:
    data = read_checkpoint(path)
    opt, vocab = data["opt"], data["vocab"]
    theirs = dict(data["model"])
    theirs.update({f"generator.{name}": tensor for name, tensor in data["generator"].items()})
    cfg = model_config(opt, vocab, theirs, path)
    shapes = {name: tuple(tensor.shape) for name, tensor in theirs.items()}
    linear, direct = weight_map(cfg)
    check_stored_layers(shapes, LAYER_WEIGHT, cfg, path)
    check_dimensions(cfg, mapped_shapes(cfg, shapes, linear, direct), path)
    model = allocate(cfg, path)
    sources = convert_weights(model, in_memory(theirs, path), linear, direct)
    theirs.clear()  # the tensors are kept by `sources` alone: each freed once read
    data.clear()
    placed = load_weights(model, sources, path, placement)
    recorded = {side: getattr(opt, f"{side}_subword_model", None) for side in ("src", "tgt")}
    beside = os.path.dirname(os.path.abspath(path))
    src_spm, tgt_spm = subword_models(getattr(opt, "transforms", None), recorded, path, beside)
    tokenizer = VocabTokenizer(vocab["src"], vocab["tgt"], src_spm, tgt_spm)
    return LoadedModel(
        model.eval(), tokenizer, FORMAT, path, OPENNMT_RULES, dict(DECODING_DEFAULTS), gemm=placed.backend
    )
