"""Marian's own checkpoints (OPUS-MT, Tatoeba-Challenge), read without torch: a directory holding

    decoder.yml         models: the .npz; vocabs: source and target vocabularies; beam-size,
                        normalize, max-length-factor: how Marian decodes it
    *.npz               the weights, named arrays (marian_weights.py), with Marian's options for the
                        model stored as the array `special:model.yml`
    *.vocab.yml         the vocabularies (marian_vocab.py), with source.spm and target.spm

`--model` is that directory or the .npz itself (then decoder.yml beside it, or Marian's own
`MODEL.npz.decoder.yml`). Marian's options are mapped onto `TransformerConfig` or refused by
name; each array is checked against them (name, shape, dtype) before anything is allocated.
`describe` is what `nmtdecode inspect` shows and what marian.py loads (the torch half).

What Marian computes (src/models/transformer.h): embeddings scaled by sqrt(dim-emb) plus its
sinusoids, with frequencies 10000^(-i/(d/2 - 1)), sines then cosines (our `sinusoidal_fairseq`
table: the Hugging Face port and CTranslate2's converter use 10000^(-2i/d) instead); layer
norms with epsilon 1e-6; a decoder that starts from a zero embedding (marian_weights.py).
"""

from __future__ import annotations

import functools
import math
import os
from dataclasses import dataclass
from typing import Callable

import yaml

from ...options.bounded import MAX_CONFIG_BYTES, TooLarge, check_bytes, safe_load, shown, vocabulary_bytes
from ..architecture import TransformerConfig, check_limit
from ..checkpoint import ModelError, ModelFacts, ModelRules, check_dimensions, one_line, read_yaml
from ..defaults import checked_defaults
from ..npz import array_bytes, npz_entries
from .marian_vocab import Vocabulary, make_tokenizer
from .marian_weights import Layout, Piece, check_arrays, mapping, recipe_shape

FORMAT = "marian"
MAX_POSITIONS = 1024  # sinusoids have no end; Marian's decoder crops its input at 1000 tokens (max-length)
NORM_EPS = 1e-6  # Marian's layer norm in its transformer (generic.h layerNorm)
# Marian's own defaults (src/common/config_parser.cpp) for options an older model.yml leaves out.
MODEL_DEFAULTS = {
    "type": "amun",
    "dim-emb": 512,
    "enc-depth": 1,
    "dec-depth": 1,
    "transformer-heads": 8,
    "transformer-dim-ffn": 2048,
    "transformer-decoder-dim-ffn": 0,
    "transformer-ffn-activation": "swish",
    "transformer-preprocess": "",
    "transformer-postprocess": "dan",
    "transformer-postprocess-emb": "d",
    "transformer-postprocess-top": "",
    "transformer-guided-alignment-layer": "last",
    "tied-embeddings": False,
    "tied-embeddings-src": False,
    "tied-embeddings-all": False,
    "output-omit-bias": False,
}
ACTIVATIONS = {"swish": "silu", "relu": "relu"}  # Marian's gelu is x * sigmoid(1.702 x): not ours
# Options whose other values change the network: option -> (Marian's default, the values we compute,
# what another value means).
FIXED = {
    "transformer-decoder-autoreg": (
        "self-attention",
        ("self-attention",),
        "an average-attention (AAN) or RNN (SSRU) decoder",
    ),
    "transformer-ffn-depth": (2, (2,), "feed-forward blocks of other than two layers"),
    "transformer-decoder-ffn-depth": (0, (0, 2), "feed-forward blocks of other than two layers"),
    "transformer-no-projection": (False, (False,), "attention without its output projection"),
    "transformer-pool": (False, (False,), "pooled encoder states instead of cross-attention"),
    "transformer-tied-layers": ([], ([], None), "decoder layers that share their weights"),
    "transformer-disable-position-embeddings": (False, (False,), "no position embeddings"),
    "transformer-attention-mask": ("default", ("default", "", None), "a special attention mask (ALiBi)"),
    "transformer-alibi-shift": (False, (False,), "ALiBi positions"),
    "transformer-no-bias": (False, (False,), "linear layers without biases"),
    "transformer-no-affine": (False, (False,), "layer norms without scale and bias"),
    "ulr": (False, (False,), "ULR embeddings"),
    "lemma-dim-emb": (0, (0,), "factored outputs"),
    "factors-dim-emb": (0, (0, None), "factored embeddings"),
    "factors-combine": ("sum", ("sum", None), "factored embeddings"),
    "right-left": (False, (False,), "a right-to-left model"),
}
# Marian's options for the sizes of its Transformer -> ours (architecture.LIMITS bounds them).
SIZES = {
    "dim-emb": "d_model",
    "transformer-dim-ffn": "ffn_dim",
    "enc-depth": "encoder_layers",
    "dec-depth": "decoder_layers",
    "transformer-heads": "heads",
}
RNN_TYPES = ("amun", "nematus", "s2s", "multi-s2s", "lm", "char-s2s")


@dataclass
class MarianFacts(ModelFacts):
    recipes: dict[str, tuple[Piece, ...]]  # our parameter -> the arrays (and constant rows) it is made of


def model_files(path: str) -> tuple[str, str, dict]:
    """The .npz, the decoder.yml that goes with it and what it says (its paths are relative to its
    directory, as OPUS-MT writes them: `relative-paths: true`)."""
    if not os.path.isdir(path):
        found = [
            p for p in (f"{path}.decoder.yml", os.path.join(os.path.dirname(path), "decoder.yml")) if os.path.isfile(p)
        ]
        if not found:
            raise ModelError(
                f"{path}: no decoder.yml beside it (nor {os.path.basename(path)}.decoder.yml): it "
                "names the model's vocabularies"
            )
        return path, found[0], read_options(found[0])
    decoder_yml = os.path.join(path, "decoder.yml")
    decoder = read_options(decoder_yml)
    models = decoder.get("models")
    models = [models] if isinstance(models, str) else models
    if not isinstance(models, list) or not models or not all(isinstance(m, str) for m in models):
        raise ModelError(f"{decoder_yml}: models: expected the model's .npz file, got {shown(models)}")
    if len(models) > 1:
        raise ModelError(
            f"{decoder_yml}: models: {len(models)} models (a Marian ensemble): give each .npz to "
            "--model (nmtdecode decodes models given together as an ensemble)"
        )
    if not models[0].endswith(".npz"):
        raise ModelError(
            f"{decoder_yml}: models: {models[0]}: only Marian's .npz models are read (not the binary "
            "format of marian-conv)"
        )
    return os.path.join(path, models[0]), decoder_yml, decoder


def read_options(path: str) -> dict:
    """decoder.yml (its size checked as loaded by bounded.safe_load: a YAML alias bomb is one line)."""
    return read_yaml(path, limit=MAX_CONFIG_BYTES)


def model_options(npz: str, entries: dict) -> dict:
    """Marian's options for the model, stored in the .npz (a NUL-terminated YAML string), over its defaults."""
    if "special:model.yml" not in entries:
        raise ModelError(f"{npz}: no special:model.yml, the options Marian stores with a model's weights")
    begin, end = entries["special:model.yml"][1]["data_offsets"]
    try:
        check_bytes(end - begin, MAX_CONFIG_BYTES)
    except TooLarge as e:
        raise ModelError(f"{npz}: special:model.yml cannot be read: {e}") from None
    raw = array_bytes(npz, entries, "special:model.yml").rstrip(b"\0")
    try:
        options = safe_load(raw.decode("utf-8"))
    except (UnicodeDecodeError, yaml.YAMLError, RecursionError, TooLarge) as e:  # TooLarge: an alias bomb
        raise ModelError(f"{npz}: special:model.yml cannot be read: {one_line(str(e))}") from None
    if not isinstance(options, dict):
        raise ModelError(f"{npz}: special:model.yml is not a mapping of Marian options")
    return {**MODEL_DEFAULTS, **options}


def check_options(options: dict, where: str) -> None:
    """Refuse, by Marian option, what our Transformer does not compute."""
    kind = options["type"]
    if kind != "transformer":
        what = " (an RNN encoder-decoder)" if kind in RNN_TYPES else ""
        raise ModelError(f"{where}: Marian model type {shown(kind)}{what} is not supported; only type: transformer")
    for name, (default, allowed, meaning) in FIXED.items():
        value = options.get(name, default)
        if value not in allowed:
            raise ModelError(f"{where}: Marian option {name}: {shown(value)} ({meaning}) is not supported")
    if options["transformer-ffn-activation"] not in ACTIVATIONS:
        raise ModelError(
            f"{where}: Marian option transformer-ffn-activation: "
            f"{shown(options['transformer-ffn-activation'])} is not supported "
            f"({', '.join(ACTIVATIONS)})"
        )
    decoder_ffn, ffn = options["transformer-decoder-dim-ffn"], options["transformer-dim-ffn"]
    if decoder_ffn not in (0, ffn):
        raise ModelError(
            f"{where}: Marian option transformer-decoder-dim-ffn: {decoder_ffn} differs from "
            f"transformer-dim-ffn ({ffn}), which is not supported"
        )


def _ops(options: dict, name: str) -> str:
    """A processing order without its dropout ('d' does nothing when decoding)."""
    return str(options.get(name) or "").replace("d", "")


def norm_placement(options: dict, where: str) -> tuple[bool, bool, bool]:
    """pre_norm, a layer norm on the embeddings, one on top of each stack: from Marian's orders
    (`dan`: post-norm; `transformer-preprocess: n` with `da`: pre-norm)."""
    orders = {("", "an"): False, ("n", "a"): True}
    pre, post = _ops(options, "transformer-preprocess"), _ops(options, "transformer-postprocess")
    if (pre, post) not in orders:
        raise ModelError(
            f"{where}: Marian options transformer-preprocess "
            f"{shown(options.get('transformer-preprocess'))} with transformer-postprocess "
            f"{shown(options.get('transformer-postprocess'))} are not supported (nmtdecode computes "
            "'dan' (post-norm), or 'n' then 'da' (pre-norm))"
        )
    for name in ("transformer-postprocess-emb", "transformer-postprocess-top"):
        if _ops(options, name) not in ("", "n"):
            raise ModelError(
                f"{where}: Marian option {name}: {shown(options.get(name))} is not supported "
                "(nmtdecode computes '', 'd', 'n' or 'dn')"
            )
    return (
        orders[(pre, post)],
        "n" in _ops(options, "transformer-postprocess-emb"),
        "n" in _ops(options, "transformer-postprocess-top"),
    )


def layout(options: dict, entries: dict, where: str) -> Layout:
    """The arrays the options describe: sizes, which embeddings are shared or tied, where the norms are."""
    sizes = options.get("dim-vocabs")
    if not isinstance(sizes, list) or len(sizes) != 2 or not all(isinstance(n, int) and n > 0 for n in sizes):
        raise ModelError(f"{where}: Marian option dim-vocabs: expected two vocabulary sizes, got {shown(sizes)}")
    for name in SIZES:
        if not isinstance(options[name], int) or isinstance(options[name], bool) or options[name] < 1:
            raise ModelError(f"{where}: Marian option {name}: expected a positive integer, got {shown(options[name])}")
    try:  # before the arrays of every layer are listed (marian_weights.mapping)
        for name, key in SIZES.items():
            check_limit(key, options[name], name)
        for rows, key in zip(sizes, ("src_vocab_size", "tgt_vocab_size")):
            check_limit(key, rows, "dim-vocabs")
    except ValueError as e:
        raise ModelError(f"{where}: Marian option {e}") from None
    pre_norm, embedding_norm, top_norm = norm_placement(options, where)
    shared = bool(options["tied-embeddings-all"] or options["tied-embeddings-src"])
    if shared and sizes[0] != sizes[1]:
        raise ModelError(f"{where}: tied source and target embeddings of different sizes ({sizes})")
    tied_output = bool(options["tied-embeddings"] or options["tied-embeddings-all"])
    legacy_output = "decoder_ff_logit_out_W" in entries  # older models store it untransposed
    return Layout(
        d=options["dim-emb"],
        ffn=options["transformer-dim-ffn"],
        src_rows=sizes[0],
        tgt_rows=sizes[1],
        encoder_layers=options["enc-depth"],
        decoder_layers=options["dec-depth"],
        shared_embeddings=shared,
        tied_output=tied_output,
        output_weight="decoder_ff_logit_out_W" if legacy_output else "decoder_ff_logit_out_Wt",
        output_bias=not options["output-omit-bias"],
        norm_suffix="_pre" if pre_norm else "",
        embedding_norm=embedding_norm,
        top_norm=top_norm,
    )


def model_config(
    options: dict, shape: Layout, src_rows: int, eos_id: int, unk_id: int, where: str
) -> TransformerConfig:
    """Our Transformer for the options; the decoder's start row (and padding) is the row after
    Marian's target vocabulary (marian_weights.py)."""
    start = shape.tgt_rows
    try:
        return TransformerConfig(
            src_vocab_size=src_rows,
            tgt_vocab_size=start + 1,
            d_model=shape.d,
            heads=options["transformer-heads"],
            encoder_layers=shape.encoder_layers,
            decoder_layers=shape.decoder_layers,
            ffn_dim=shape.ffn,
            activation=ACTIVATIONS[options["transformer-ffn-activation"]],
            pre_norm=shape.norm_suffix == "_pre",
            encoder_final_norm=shape.top_norm,
            decoder_final_norm=shape.top_norm,
            positions="sinusoidal_fairseq",
            max_positions=MAX_POSITIONS,
            embed_scale=float(shape.d) ** 0.5,
            layernorm_embedding=shape.embedding_norm,
            share_embeddings=shape.shared_embeddings,
            tie_output=shape.tied_output,
            final_logits_bias=True,
            norm_eps=NORM_EPS,
            pad_id=start,
            unk_id=unk_id,
            bos_id=start,
            eos_id=eos_id,
            decoder_start_id=start,
            alignment_layer=alignment_layer(options, shape.decoder_layers, where),
            alignment_heads=1,
        )  # Marian's alignments are the first head's (transformer.h collectOneHead)
    except ValueError as e:
        raise ModelError(f"{where}: {e}") from None


def alignment_layer(options: dict, layers: int, where: str) -> int:
    """The decoder layer whose attention Marian reads alignments from (guided-alignment training
    teaches that one): `last`, or a layer counted from 1."""
    value = options["transformer-guided-alignment-layer"]
    value = str(value) if isinstance(value, (str, int)) else value
    if value == "last":
        return -1
    if not isinstance(value, str) or not value.isdigit() or not 1 <= int(value) <= layers:
        raise ModelError(
            f"{where}: Marian option transformer-guided-alignment-layer: {shown(value)} is not a "
            f"layer of the {layers}-layer decoder"
        )
    return int(value) - 1


def vocabularies(decoder: dict, decoder_yml: str, shape: Layout) -> tuple[Vocabulary, Vocabulary]:
    """The source and target vocabularies decoder.yml names (one object when they are one file)."""
    names = decoder.get("vocabs")
    if not isinstance(names, list) or len(names) != 2 or not all(isinstance(n, str) for n in names):
        raise ModelError(f"{decoder_yml}: vocabs: expected the source and target vocabularies, got {shown(names)}")
    paths = [os.path.join(os.path.dirname(decoder_yml), name) for name in names]
    for path, rows in zip(paths, (shape.src_rows, shape.tgt_rows)):
        if not os.path.lexists(path):  # a FIFO or folder in its place is not missing: note_read refuses it
            raise ModelError(f"{decoder_yml}: vocabs: {path} is missing")
        try:  # before it is parsed: a vocabulary of millions of entries takes minutes as YAML
            check_bytes(os.path.getsize(path), vocabulary_bytes(rows))
        except TooLarge as e:
            raise ModelError(f"{path} cannot be read: {e} for {rows:,} rows (dim-vocabs)") from None
    source = Vocabulary(paths[0], shape.src_rows, "source")
    same = os.path.realpath(paths[0]) == os.path.realpath(paths[1])
    target = source if same else Vocabulary(paths[1], shape.tgt_rows, "target")
    if source.eos_id != target.eos_id:
        raise ModelError(
            f"{decoder_yml}: </s> has id {source.eos_id} in the source vocabulary, {target.eos_id} in the target one"
        )
    return source, target


def _number(decoder: dict, key: str, default: float, where: str, kind: type[float] = float) -> float:
    """A number of decoder.yml (`kind` int: a whole one), Marian's default when it is left out."""
    value = decoder.get(key, default)
    number = isinstance(value, (int, float)) and not isinstance(value, bool) and 0 <= value < math.inf
    if not number or kind is int and value != int(value):
        raise ModelError(f"{where}: {key}: expected a number >= 0, got {shown(value)}")
    return kind(value)


def decoding_settings(decoder: dict, where: str, cfg: TransformerConfig, target: Vocabulary) -> tuple[dict, ModelRules]:
    """Marian's defaults for decoding from decoder.yml: its beam, `normalize` (score / length^n,
    EOS counted: our avg), its step limit max-length-factor x |source| (EOS counted), and the
    tokens it never writes (<unk> without allow-unk, byte-fallback control pieces without
    allow-special). Its beam gathers beam-size finished hypotheses: our `true`."""
    if _number(decoder, "word-penalty", 0, where):
        raise ModelError(f"{where}: word-penalty is not supported (nmtdecode has no word penalty); set it to 0")
    if decoder.get("output-sampling") not in (None, False, [], "false"):
        raise ModelError(f"{where}: output-sampling is not read from decoder.yml: remove it (and use --sampling)")
    defaults = {
        "beam_size": max(1, _number(decoder, "beam-size", 12, where, int)),
        "length_penalty": "avg",
        "alpha": _number(decoder, "normalize", 0, where),
        "early_stopping": "true",
        "max_len_a": _number(decoder, "max-length-factor", 3, where),
        "max_len_b": 0,
        "max_length": cfg.max_positions,
    }
    banned = [cfg.decoder_start_id]
    banned += [] if decoder.get("allow-unk") else [target.unk_id]
    banned += [] if decoder.get("allow-special") else target.control_ids()
    return defaults, ModelRules(banned_ids=tuple(banned))


def describe(path: str, read: Callable) -> MarianFacts:
    """What the model's files say; `read` reads the .npz (stored.py: its tensors for a load, its
    headers for inspect)."""
    npz, decoder_yml, decoder = model_files(path)
    entries = npz_entries(npz)
    options = model_options(npz, entries)
    check_options(options, npz)
    shape = layout(options, entries, npz)
    recipes, expected = mapping(shape)
    sizes = (
        f"dim-emb {shape.d}, transformer-dim-ffn {shape.ffn}, dim-vocabs [{shape.src_rows}, {shape.tgt_rows}], "
        f"enc-depth {shape.encoder_layers}, dec-depth {shape.decoder_layers}"
    )
    check_arrays(entries, expected, sizes, npz)
    source, target = vocabularies(decoder, decoder_yml, shape)
    stored = read([npz])
    shapes = {name: recipe_shape(pieces, stored.shapes) for name, pieces in recipes.items()}
    cfg = model_config(options, shape, shapes["src_embed.tokens.weight"][0], target.eos_id, target.unk_id, npz)
    check_dimensions(cfg, shapes, npz)
    defaults, rules = decoding_settings(decoder, decoder_yml, cfg, target)
    checked_defaults(defaults, decoder_yml)
    tokenizer = functools.partial(make_tokenizer, os.path.dirname(decoder_yml), source, target, cfg.decoder_start_id)
    return MarianFacts(FORMAT, cfg, stored, shapes, rules, defaults, tokenizer, recipes)
