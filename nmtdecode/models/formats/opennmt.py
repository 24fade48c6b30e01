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

import sentencepiece as spm
import torch

from ...config import ConfigError
from ...tokenizer import spm_identity
from ..checkpoint import (LoadedModel, ModelError, ModelRules, allocate, check_dimensions, first_line, load_weights,
                          note_read, unpickling_reason)
from ..transformer import Transformer, TransformerConfig

FORMAT = "opennmt-py"
# The only non-tensor class an OpenNMT-py checkpoint pickles: its options.
SAFE_GLOBALS = [argparse.Namespace]
SPECIALS = {"unk": "<unk>", "pad": "<blank>", "bos": "<s>", "eos": "</s>"}
# OpenNMT-py 3.5's "silu" and "gated-gelu" are gated (a third projection, w_3): not ours.
ACTIVATIONS = {"relu": "relu", "gelu": "gelu"}
POSITION_TYPES = {"SinusoidalInterleaved": "sinusoidal_interleaved", "SinusoidalConcat": "sinusoidal_fairseq"}
# Options whose other values change the network in ways our Transformer does not have:
# option -> (value it must have, when missing; the values we support).
FIXED_OPTIONS = {
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
DECODING_DEFAULTS = {"beam_size": 5, "length_penalty": "avg", "alpha": 1.0, "early_stopping": "top",
                     "max_length": 250, "max_len_a": 1.25, "max_len_b": 5}
# How onmt_translate (and eole predict) search: nothing banned but <unk> with ban_unk_token
# (onmt/translate/decode_strategy.py); the length penalty counts one token more than were
# generated, and the beam keeps a finished candidate's slot empty for a step (beam_search.py).
OPENNMT_RULES = ModelRules(banned_ids=(), length_offset=1, opennmt_beam=True)


def read_checkpoint(path: str) -> dict:
    """The checkpoint's dict, unpickled without running code; one line of error otherwise."""
    try:
        with torch.serialization.safe_globals(SAFE_GLOBALS):
            data = torch.load(note_read(path), map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as e:
        raise ModelError(f"{path}: refused: {unpickling_reason(str(e))}") from None
    except Exception as e:  # the unpickler raises many types (EOFError, KeyError, RuntimeError...)
        raise ModelError(f"{path}: not a readable PyTorch checkpoint (truncated or corrupt?): "
                         f"{type(e).__name__}: {first_line(str(e))}") from None
    expected = ("model", "generator", "vocab", "opt")
    if not isinstance(data, dict) or not all(key in data for key in expected):
        found = sorted(map(str, data)) if isinstance(data, dict) else type(data).__name__
        raise ModelError(f"{path}: not an OpenNMT-py checkpoint: expected a dict with "
                         f"{', '.join(expected)}; found {found}")
    if not isinstance(data["opt"], argparse.Namespace) or not isinstance(data["vocab"], dict):
        raise ModelError(f"{path}: not an OpenNMT-py v3 checkpoint: `opt` must be options and `vocab` a dict")
    return data


def check_options(opt: argparse.Namespace, path: str):
    """Refuse, by option name, what the one Transformer cannot compute."""
    for name, (default, allowed) in FIXED_OPTIONS.items():
        value = getattr(opt, name, default)
        if (allowed is None and value) or (allowed is not None and value not in allowed):
            raise ModelError(f"{path}: OpenNMT-py option {name} = {value!r} is not supported")
    relative = getattr(opt, "max_relative_positions", 0)
    if relative:
        meaning = RELATIVE_POSITIONS.get(relative, "relative position representations")
        raise ModelError(f"{path}: OpenNMT-py option max_relative_positions = {relative} ({meaning}) "
                         "is not supported")
    if not getattr(opt, "position_encoding", True):
        raise ModelError(f"{path}: OpenNMT-py option position_encoding = False (no positions) is not supported")
    num_kv = getattr(opt, "num_kv", 0)
    if num_kv not in (0, opt.heads):
        raise ModelError(f"{path}: OpenNMT-py option num_kv = {num_kv} (grouped-query attention) is not supported")
    for name, table in (("pos_ffn_activation_fn", ACTIVATIONS), ("position_encoding_type", POSITION_TYPES)):
        value = getattr(opt, name, next(iter(table)))
        if value not in table:
            raise ModelError(f"{path}: OpenNMT-py option {name} = {value!r} is not supported "
                             f"(supported: {', '.join(table)})")


def token_ids(tokens: list) -> dict:
    """A vocabulary's token -> id; a token listed twice keeps its first id."""
    return {token: i for i, token in reversed(list(enumerate(tokens)))}


def special_ids(tokens: list, side: str, path: str, specials: dict[str, str] = SPECIALS) -> dict[str, int]:
    """The ids of the special tokens (role -> token) in one vocabulary."""
    index = token_ids(tokens)
    missing = [token for token in specials.values() if token not in index]
    if missing:
        raise ModelError(f"{path}: the {side} vocabulary has no {missing[0]} token")
    return {role: index[token] for role, token in specials.items()}


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
            src_vocab_size=len(vocab["src"]), tgt_vocab_size=len(vocab["tgt"]),
            d_model=opt.hidden_size, heads=opt.heads, encoder_layers=opt.enc_layers, decoder_layers=opt.dec_layers,
            ffn_dim=opt.transformer_ff, activation=ACTIVATIONS[getattr(opt, "pos_ffn_activation_fn", "relu")],
            pre_norm=True, encoder_final_norm=True, decoder_final_norm=True,
            positions=POSITION_TYPES[getattr(opt, "position_encoding_type", "SinusoidalInterleaved")],
            max_positions=table.size(0) if table is not None else 5000, embed_scale=float(opt.hidden_size) ** 0.5,
            share_embeddings=bool(opt.share_embeddings), tie_output=bool(opt.share_decoder_embeddings),
            final_logits_bias="generator.bias" in weights,
            # one switch for every linear layer: the biases a checkpoint lacks are loaded as zeros
            bias=bool(getattr(opt, "add_qkvbias", False) or getattr(opt, "add_ffnbias", False)),
            norm_eps=float(getattr(opt, "norm_eps", 1e-6)),
            pad_id=tgt["pad"], unk_id=tgt["unk"], bos_id=tgt["bos"], eos_id=tgt["eos"], decoder_start_id=tgt["bos"])
    except (AttributeError, TypeError, ValueError) as e:
        raise ModelError(f"{path}: options do not describe a Transformer: {e}") from None


def attention_projections(ours: str, theirs: str, fused: dict) -> dict:
    """Our fused projections are concatenations of theirs, rows in this order."""
    if ours.endswith("self_attn"):
        fused[f"{ours}.qkv"] = [f"{theirs}.linear_query", f"{theirs}.linear_keys", f"{theirs}.linear_values"]
    else:
        fused[f"{ours}.q"] = [f"{theirs}.linear_query"]
        fused[f"{ours}.kv"] = [f"{theirs}.linear_keys", f"{theirs}.linear_values"]
    fused[f"{ours}.out"] = [f"{theirs}.final_linear"]
    return fused


def weight_map(cfg: TransformerConfig) -> tuple[dict[str, list[str]], dict[str, str]]:
    """Our linear layers -> their (concatenated) linear layers, and our layer norms and
    embeddings -> theirs."""
    linear, direct = {}, {
        "src_embed.tokens.weight": "encoder.embeddings.make_embedding.emb_luts.0.weight",
        "tgt_embed.tokens.weight": "decoder.embeddings.make_embedding.emb_luts.0.weight",
        "output.weight": "generator.weight", "output.bias": "generator.bias",
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


def _feed_forward(ours: str, theirs: str, norms: dict, linear: dict, direct: dict):
    linear[f"{ours}.ffn.up"] = [f"{theirs}.feed_forward.w_1"]
    linear[f"{ours}.ffn.down"] = [f"{theirs}.feed_forward.w_2"]
    for block, norm in norms.items():
        for part in ("weight", "bias"):
            direct[f"{ours}.{block}.norm.{part}"] = f"{theirs}.{norm}.{part}"


def mapped_shapes(theirs: dict[str, torch.Tensor], linear: dict[str, list[str]],
                  direct: dict[str, str]) -> dict[str, tuple[int, ...]]:
    """The shapes that `convert_weights` would give our parameters, without converting (the
    model is not allocated yet: checkpoint.check_dimensions)."""
    shapes = {name: tuple(theirs[source].shape) for name, source in direct.items() if source in theirs}
    for name, parts in linear.items():
        found = [theirs[f"{p}.weight"].shape for p in parts if f"{p}.weight" in theirs]
        if found and len(found) == len(parts):
            shapes[f"{name}.weight"] = (sum(shape[0] for shape in found), *found[0][1:])
    return shapes


def convert_weights(model: Transformer, theirs: dict[str, torch.Tensor], linear: dict[str, list[str]],
                    direct: dict[str, str]) -> dict[str, torch.Tensor]:
    """Their tensors under our names (`weight_map`); a bias the checkpoint lacks (add_qkvbias
    off while add_ffnbias is on, say) becomes zeros, which is the same layer without one. A
    float16 checkpoint stays float16 here: `load_weights` converts to the model's dtype."""
    ours = {name: theirs[source] for name, source in direct.items() if source in theirs}
    expected = model.state_dict()
    for name, parts in linear.items():
        if any(f"{p}.weight" not in theirs for p in parts):
            continue  # reported by load_weights as missing
        ours[f"{name}.weight"] = torch.cat([theirs[f"{p}.weight"] for p in parts])
        if f"{name}.bias" in expected:
            ours[f"{name}.bias"] = torch.cat([theirs.get(f"{p}.bias", torch.zeros(theirs[f"{p}.weight"].size(0)))
                                              for p in parts])
    if model.cfg.tie_output:
        ours.pop("output.weight", None)
    if model.cfg.share_embeddings:
        ours.pop("tgt_embed.tokens.weight", None)
    return ours


class VocabTokenizer:
    """Text -> pieces (a SentencePiece model, or a whitespace split of pre-tokenized text) ->
    ids in the checkpoint's own vocabularies; unknown pieces become <unk>. The source gets
    no EOS, as OpenNMT-py feeds its encoder (onmt/inputters/text_utils.py numericalize)."""

    def __init__(self, src_vocab: list, tgt_vocab: list, src_spm: str | None, tgt_spm: str | None,
                 specials: dict[str, str] = SPECIALS):
        self.src_ids, self.tgt_ids = token_ids(src_vocab), token_ids(tgt_vocab)
        self.src_tokens, self.tgt_tokens = list(src_vocab), list(tgt_vocab)
        self.src_spm = spm.SentencePieceProcessor(model_file=note_read(src_spm)) if src_spm else None
        self.tgt_spm = spm.SentencePieceProcessor(model_file=note_read(tgt_spm)) if tgt_spm else None
        self.src_unk, self.tgt_unk = self.src_ids[specials["unk"]], self.tgt_ids[specials["unk"]]
        # onmt_translate writes every token before EOS, <blank> and <unk> included
        self.eos_id = self.tgt_ids[specials["eos"]]

    @staticmethod
    def _pieces(text: str, model) -> list[str]:
        return model.encode(text, out_type=str) if model is not None else text.split()

    def encode(self, text: str) -> list[int]:
        return [self.src_ids.get(p, self.src_unk) for p in self._pieces(text, self.src_spm)]

    def encode_pieces(self, pieces: list[str]) -> list[int]:
        """Source pieces (text already cut as `encode` cuts it) -> ids; unknown ones are <unk>."""
        return [self.src_ids.get(p, self.src_unk) for p in pieces]

    def encode_target(self, text: str) -> list[int]:
        return [self.tgt_ids.get(p, self.tgt_unk) for p in self._pieces(text, self.tgt_spm)]

    @property
    def word_marker(self) -> str:
        """What starts a word in the pieces: SentencePiece's mark, or a space between whitespace tokens."""
        return "\u2581" if self.tgt_spm is not None else " "

    def source_pieces(self, text: str) -> list[str]:
        """One piece per id of `encode`, as the text spells it (an unknown piece too)."""
        return self._pieces(text, self.src_spm)

    def decode(self, ids: list[int]) -> str:
        pieces = [self.tgt_tokens[i] for i in ids if i != self.eos_id]
        return self.tgt_spm.decode_pieces(pieces) if self.tgt_spm is not None else " ".join(pieces)

    def target_piece(self, token_id: int) -> str | None:
        """The target vocabulary's entry for an id, or None beyond the vocabulary."""
        return self.tgt_tokens[token_id] if 0 <= token_id < len(self.tgt_tokens) else None

    def source_piece(self, token_id: int) -> str | None:
        """The source vocabulary's entry for an id, or None beyond the vocabulary."""
        return self.src_tokens[token_id] if 0 <= token_id < len(self.src_tokens) else None

    def piece_id(self, piece: str) -> int | None:
        """The id of a target vocabulary entry (as `ignore_when_blocking` and `banned_tokens` name
        them), or None when the vocabulary has no such entry."""
        return self.tgt_ids.get(piece)

    def source_identity(self) -> tuple:
        """Equal for two tokenizers exactly when they give every source line the same ids."""
        proto = spm_identity(self.src_spm) if self.src_spm is not None else None
        return ("vocab", proto, tuple(sorted(self.src_ids.items())), self.src_unk)

    def set_languages(self, src_lang: str | None, tgt_lang: str | None) -> int | None:
        if src_lang or tgt_lang:
            raise ConfigError("src_lang/tgt_lang: this model has no language tags")
        return None

    def language_codes(self) -> list[str]:
        return []


def subword_models(transforms: list, recorded: dict[str, str | None], path: str,
                   beside: str) -> tuple[str | None, str | None]:
    """The SentencePiece models of the `sentencepiece` transform recorded with the model
    (recorded: side -> path): the recorded path, else the file of that name in the directory
    `beside`. Without the transform the input is taken as pre-tokenized (split on whitespace)."""
    tokenizers = [t for t in transforms or [] if t in ("sentencepiece", "onmt_tokenize", "bpe")]
    if not tokenizers:
        return None, None
    if tokenizers != ["sentencepiece"]:
        raise ModelError(f"{path}: the {tokenizers[0]} transform is not supported (only sentencepiece)")
    found = []
    for side in ("src", "tgt"):
        name = recorded.get(side)
        if not name:
            raise ModelError(f"{path}: the sentencepiece transform names no {side}_subword_model")
        chosen = next((p for p in (name, os.path.join(beside, os.path.basename(name))) if os.path.isfile(p)), None)
        if chosen is None:
            raise ModelError(f"{path}: {side}_subword_model {name} is missing "
                             f"(put {os.path.basename(name)} next to the checkpoint)")
        found.append(chosen)
    return found[0], found[1]


def load(path: str) -> LoadedModel:
    data = read_checkpoint(path)
    opt, vocab = data["opt"], data["vocab"]
    theirs = dict(data["model"])
    theirs.update({f"generator.{name}": tensor for name, tensor in data["generator"].items()})
    cfg = model_config(opt, vocab, theirs, path)
    check_dimensions(cfg, mapped_shapes(theirs, *weight_map(cfg)), path)
    model = allocate(cfg, path)
    load_weights(model, convert_weights(model, theirs, *weight_map(cfg)), path)
    recorded = {side: getattr(opt, f"{side}_subword_model", None) for side in ("src", "tgt")}
    beside = os.path.dirname(os.path.abspath(path))
    src_spm, tgt_spm = subword_models(getattr(opt, "transforms", None), recorded, path, beside)
    tokenizer = VocabTokenizer(vocab["src"], vocab["tgt"], src_spm, tgt_spm)
    return LoadedModel(model.eval(), tokenizer, FORMAT, path, OPENNMT_RULES, dict(DECODING_DEFAULTS))
