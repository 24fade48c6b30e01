"""Marian's arrays and our parameters, read without torch: which arrays a Marian Transformer of
given options holds, the shape each must have, and how each of our parameters is made of them.

Marian's names (src/models/transformer.h, the `TransformerLegacy` name map of
src/models/transformer_factory.h, and CTranslate2's converters/marian.py read the same):

  Wemb | encoder_Wemb, decoder_Wemb                  token embeddings (V, d): one shared, or one per side
  {side}_l{n}_self_W{q,k,v,o}, _b{q,k,v,o}           self-attention of layer n (from 1): W (in, out), b (1, out)
  decoder_l{n}_context_W{q,k,v,o}, _b{q,k,v,o}       cross-attention
  {side}_l{n}_ffn_W{1,2}, _b{1,2}                    feed-forward
  {prefix}_ln_scale, _ln_bias                        the layer norm after a block (post-norm, `dan`), named
      {side}_l{n}_self_Wo, decoder_l{n}_context_Wo, {side}_l{n}_ffn_ffn; with suffix _pre before it
      (pre-norm, `transformer-preprocess: n`); {side}_emb_ln_*_pre on the embeddings, {side}_top_ln_* on
      the top of a stack
  decoder_ff_logit_out_Wt (V, d), or _W (d, V)       the output projection when it is not tied
  decoder_ff_logit_out_b (1, V)                      its bias (none with output-omit-bias)

Marian's linear weights are (in, out); ours (nn.Linear's) are (out, in), hence `transposed`. Its
decoder starts from a zero embedding, no token's: our decoder starts from one more row of zeros
(`START`), appended to the target embeddings; the output projection gets that row too, with a bias
that no softmax gives any weight (`NEVER`), so every step's distribution is Marian's over its own
vocabulary.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..checkpoint import ModelError

# The start row's output bias: exp(-1e9 - logsumexp) is 0 in float32, so the log-softmax over our
# vocabulary (Marian's and the start row) is Marian's over its own; in float16 it becomes -inf, also 0.
NEVER = -1e9
FLOAT_CODES = ("F32", "F16", "BF16", "F64")


@dataclass(frozen=True)
class Piece:
    """A part of one of our parameters, joined to the others on dim 0: a Marian array, or rows of
    a constant (`array` None)."""

    array: str | None = None
    form: str = "stored"  # "stored"; "transposed" (a linear weight: (in, out) -> (out, in)); "vector" ((1, n) -> (n,))
    rows: int = 0  # rows of `value`, when array is None
    value: float = 0.0


@dataclass(frozen=True)
class Layout:
    """What a Marian Transformer's options say its arrays are (marian_config.layout)."""

    d: int
    ffn: int
    src_rows: int  # the embeddings' rows: Marian's vocabulary sizes
    tgt_rows: int
    encoder_layers: int
    decoder_layers: int
    shared_embeddings: bool  # one Wemb for both sides (tied-embeddings-all or -src)
    tied_output: bool  # the output projection is the target embeddings (tied-embeddings or -all)
    output_weight: str  # decoder_ff_logit_out_Wt, or the untransposed _W of older models
    output_bias: bool  # not output-omit-bias
    norm_suffix: str  # "_pre" for pre-norm layers, "" for post-norm
    embedding_norm: bool
    top_norm: bool


Recipes = dict[str, tuple[Piece, ...]]  # our parameter name -> its pieces
Shapes = dict[str, tuple[int, ...]]  # Marian's array name -> the shape the options give it


def mapping(layout: Layout) -> tuple[Recipes, Shapes]:
    """Our parameter name -> its pieces (tied parameters once), and Marian's array name -> the
    shape the options give it."""
    recipes: Recipes = {}
    expected: Shapes = {}
    d = layout.d
    for side, stack, count in (
        ("encoder", "encoder_layers", layout.encoder_layers),
        ("decoder", "decoder_layers", layout.decoder_layers),
    ):
        for i in range(count):
            ours, theirs = f"{stack}.{i}", f"{side}_l{i + 1}"
            _linear(recipes, expected, f"{ours}.self_attn.qkv", f"{theirs}_self", "qkv", d, d)
            _linear(recipes, expected, f"{ours}.self_attn.out", f"{theirs}_self", "o", d, d)
            _norm(
                recipes,
                expected,
                f"{ours}.{'attn_block' if side == 'encoder' else 'self_block'}.norm",
                f"{theirs}_self_Wo",
                layout.norm_suffix,
                d,
            )
            if side == "decoder":
                for ours_part, letters in (("q", "q"), ("kv", "kv"), ("out", "o")):
                    _linear(recipes, expected, f"{ours}.cross_attn.{ours_part}", f"{theirs}_context", letters, d, d)
                _norm(recipes, expected, f"{ours}.cross_block.norm", f"{theirs}_context_Wo", layout.norm_suffix, d)
            _linear(recipes, expected, f"{ours}.ffn.up", f"{theirs}_ffn", "1", d, layout.ffn)
            _linear(recipes, expected, f"{ours}.ffn.down", f"{theirs}_ffn", "2", layout.ffn, d)
            _norm(recipes, expected, f"{ours}.ffn_block.norm", f"{theirs}_ffn_ffn", layout.norm_suffix, d)
        embed = "src_embed" if side == "encoder" else "tgt_embed"
        if layout.embedding_norm:
            _norm(recipes, expected, f"{embed}.norm", f"{side}_emb", "_pre", d)
        if layout.top_norm:
            _norm(recipes, expected, f"{side}_norm", f"{side}_top", "", d)
    _embeddings(recipes, expected, layout)
    _output(recipes, expected, layout)
    return recipes, expected


def _linear(
    recipes: Recipes, expected: Shapes, ours: str, theirs: str, letters: str, size_in: int, size_out: int
) -> None:
    """Our (fused) projection from Marian's, one per letter: W{letter} (in, out) and b{letter} (1, out)."""
    recipes[f"{ours}.weight"] = tuple(Piece(f"{theirs}_W{x}", "transposed") for x in letters)
    recipes[f"{ours}.bias"] = tuple(Piece(f"{theirs}_b{x}", "vector") for x in letters)
    for x in letters:
        expected[f"{theirs}_W{x}"], expected[f"{theirs}_b{x}"] = (size_in, size_out), (1, size_out)


def _norm(recipes: Recipes, expected: Shapes, ours: str, theirs: str, suffix: str, d: int) -> None:
    for part, name in (("weight", "scale"), ("bias", "bias")):
        recipes[f"{ours}.{part}"] = (Piece(f"{theirs}_ln_{name}{suffix}", "vector"),)
        expected[f"{theirs}_ln_{name}{suffix}"] = (1, d)


def _embeddings(recipes: Recipes, expected: Shapes, layout: Layout) -> None:
    """The target table gets the decoder's start row; the source table as many rows as make the
    padding id (that start row's) one of its own: its embedding is never looked at (masked)."""
    start = layout.tgt_rows
    source, target = ("Wemb", "Wemb") if layout.shared_embeddings else ("encoder_Wemb", "decoder_Wemb")
    expected[source], expected[target] = (layout.src_rows, layout.d), (layout.tgt_rows, layout.d)
    padding = max(0, start + 1 - layout.src_rows)
    recipes["src_embed.tokens.weight"] = (Piece(source), *([Piece(rows=padding)] if padding else []))
    if not layout.shared_embeddings:
        recipes["tgt_embed.tokens.weight"] = (Piece(target), Piece(rows=1))


def _output(recipes: Recipes, expected: Shapes, layout: Layout) -> None:
    rows = layout.tgt_rows
    if not layout.tied_output:
        legacy = layout.output_weight.endswith("_W")
        expected[layout.output_weight] = (layout.d, rows) if legacy else (rows, layout.d)
        recipes["output.weight"] = (Piece(layout.output_weight, "transposed" if legacy else "stored"), Piece(rows=1))
    bias = Piece("decoder_ff_logit_out_b", "vector") if layout.output_bias else Piece(rows=rows)
    if layout.output_bias:
        expected["decoder_ff_logit_out_b"] = (1, rows)
    recipes["output.bias"] = (bias, Piece(rows=1, value=NEVER))


def formed_shape(piece: Piece, stored: tuple[int, ...]) -> tuple[int, ...]:
    if piece.form == "transposed":
        return tuple(reversed(stored))
    if piece.form == "vector":
        return (math.prod(stored),)
    return tuple(stored)


def recipe_shape(pieces: tuple[Piece, ...], shapes: dict[str, tuple[int, ...]]) -> tuple[int, ...]:
    """The shape of the parameter that `pieces` make (shapes: Marian's array name -> shape)."""
    formed = [formed_shape(p, shapes[p.array]) for p in pieces if p.array is not None]
    rows = sum(s[0] for s in formed) + sum(p.rows for p in pieces if p.array is None)
    return (rows, *(formed[0][1:] if formed else ()))


# Arrays that say which Marian feature made them, for a refusal that names it.
FEATURES = {
    "Wpos": "trained position embeddings",
    "_context_enc": "a second encoder (multi-source)",
    "_aan_": "average attention",
    "_rnn_": "an RNN decoder layer",
    "factor": "factored embeddings",
    "lemma": "factored outputs",
}


def check_arrays(
    entries: dict[str, tuple[int, dict]], expected: dict[str, tuple[int, ...]], options: str, where: str
) -> None:
    """Every array the options ask for is there, with their shape and a floating-point dtype, and
    there is no other (Marian's `special:` entries aside); `options` names the sizes in messages."""
    names = {name for name in entries if not name.startswith("special:")}
    unknown = sorted(names - set(expected))
    if unknown:
        feature = next((what for key, what in FEATURES.items() if key in unknown[0]), None)
        because = f" ({feature}, not supported)" if feature else ""
        raise ModelError(
            f"{where}: array {unknown[0]}{because} is not one of the Transformer its options "
            "describe; nmtdecode maps Marian's transformer arrays only"
        )
    for name, shape in expected.items():
        if name not in entries:
            raise ModelError(f"{where}: array {name} is missing (the model's options: {options})")
        entry = entries[name][1]
        if tuple(entry["shape"]) != shape:
            raise ModelError(
                f"{where}: array {name} has shape {tuple(entry['shape'])}, the model's options "
                f"({options}) ask for {shape}"
            )
        if entry["dtype"] not in FLOAT_CODES:
            raise ModelError(f"{where}: array {name} holds {entry['dtype']}; weights must be floating-point")
