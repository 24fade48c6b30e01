"""CTranslate2 model folders, read without torch: a folder holding

    model.bin             the variables of a TransformerSpec (ct2_binary.py), weights at the precision
                          the converter stored them: float32, float16, bfloat16, int8 (a scale per
                          row, `NAME_scale`) or int16 (one scale)
    config.json           the special tokens (`unk_token`, `bos_token`, `eos_token`,
                          `decoder_start_token`), `add_source_bos`/`add_source_eos`, `layer_norm_epsilon`
    *_vocabulary.json|txt the pieces (ct2_vocab.py)

as CTranslate2's converters write them for Marian (OPUS-MT, transformers' MarianMT), BART, mBART,
M2M100/NLLB, T5 (t5, flan-T5, mT5, MADLAD-400) and OpenNMT-py (ctranslate2/specs/transformer_spec.py,
converters/*.py; read as its src/models/model.cc and src/layers/transformer.cc do). The spec's
variables and attributes map onto `TransformerConfig` (ct2_spec.py: which variable is which, and
what is refused by name; ct2_t5.py: T5's switches). `describe` is what `nmtdecode inspect` shows
and what ct2.py loads (the torch half).

What CTranslate2 computes, as its layers do: embeddings times `scale_embeddings` (a flag for
sqrt(d_model), or the factor itself), plus the stored position table (`position_encodings/
encodings`) or, without one, sinusoids of frequencies 10000^(-i/(d/2-1)) whose first position is
1, or T5's relative attention bias; layer norms with `layer_norm_epsilon` (unset: 1e-5, or 1e-6
for a norm without a bias, an RMS norm); a
Marian decoder (`start_from_zero_embedding`) starts from a zero embedding: our start is one more
target row of zeros, whose output bias no softmax weighs (marian_weights.NEVER), as for Marian's
own files.
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass, replace
from typing import Any, Callable

from ...options.bounded import shown
from ..architecture import LIMITS, TransformerConfig
from ..checkpoint import LoadedModel, ModelError, ModelFacts, ModelRules, check_dimensions, read_json
from . import ct2_t5
from .ct2_binary import ModelBin, Variable, read_model_bin
from .ct2_spec import HEADS_OF_SPEC, Attributes, check_every_variable_read, held_weights, layer_count, spec_of
from .ct2_vocab import PADDING, SourceFrame, Vocabulary, languages, make_tokenizer, vocabularies
from .marian_weights import NEVER, Piece, recipe_shape

FORMAT = "ctranslate2"  # ModelFacts.format adds the family: "ctranslate2/marian", ...
ACTIVATIONS = {0: "relu", 1: "gelu_tanh", 2: "silu", 3: "gelu"}  # common_spec.Activation
MAX_POSITIONS = 1024  # generated sinusoids have no end; CTranslate2's max_input_length is 1024
# CTranslate2's defaults for translate_batch (as nmtdecode.compat.ctranslate2 maps them).
CTRANSLATE2_DEFAULTS = {
    "beam_size": 2,
    "length_penalty": "avg",
    "alpha": 1.0,
    "early_stopping": "ctranslate2",
    "min_length": 1,
}


@dataclass
class Ct2Facts(ModelFacts):
    recipes: dict[str, tuple[Piece, ...]]  # our parameter -> the variables (and constant rows) it is made of
    int8: bool  # the weights are stored in int8 or int16 (decoded in int8 on a CPU: ct2.py)

    def loaded(self, model: Any, path: str, gemm: str = "torch") -> LoadedModel:
        return Ct2Loaded(model.eval(), self.tokenizer(), self.format, path, self.rules, self.defaults, gemm)


class Ct2Loaded(LoadedModel):
    """A loaded folder: where config.json leaves the decoder start to the user (null), the job's
    target language gives it (ct2_vocab.Ct2Tokenizer.decoder_start_for)."""

    def rules_for(self, src_lang: str | None, tgt_lang: str | None) -> ModelRules:
        rules = super().rules_for(src_lang, tgt_lang)
        start = self.tokenizer.decoder_start_for(tgt_lang)
        return rules if start is None else replace(rules, decoder_start_id=start)


@dataclass(frozen=True)
class Specials:
    """config.json's special tokens and source flags (binary version 5: model.bin's attributes)."""

    unk: str
    bos: str
    eos: str
    decoder_start: str | None
    add_source_bos: bool
    add_source_eos: bool
    norm_eps: float | None


def specials(path: str, model_bin: ModelBin) -> Specials:
    config = read_json(os.path.join(path, "config.json"), required=model_bin.binary_version >= 6)
    if model_bin.binary_version < 6:  # sequence_to_sequence.cc: the attributes with their defaults
        text = {k: model_bin.text(k) for k in ("unk_token", "bos_token", "eos_token")}
        config = {
            "unk_token": text["unk_token"] or "<unk>",
            "bos_token": text["bos_token"] or "<s>",
            "eos_token": text["eos_token"] or "</s>",
            "add_source_bos": bool(model_bin.scalar("with_source_bos", 0)),
            "add_source_eos": bool(model_bin.scalar("with_source_eos", 0)),
            "decoder_start_token": None
            if model_bin.scalar("user_decoder_start_tokens", 0)
            else (text["bos_token"] or "<s>")
            if model_bin.scalar("with_target_bos", 1)
            else (text["eos_token"] or "</s>"),
            **config,
        }
    where = os.path.join(path, "config.json")
    for key in ("unk_token", "bos_token", "eos_token"):
        if not isinstance(config.get(key), str):
            raise ModelError(f"{where}: {key}: expected a token, got {shown(config.get(key))}")
    start, eps = config.get("decoder_start_token"), config.get("layer_norm_epsilon")
    if start is not None and not isinstance(start, str) or eps is not None and not isinstance(eps, (int, float)):
        raise ModelError(f"{where}: decoder_start_token or layer_norm_epsilon is not a token or a number")
    return Specials(
        config["unk_token"],
        config["bos_token"],
        config["eos_token"],
        start,
        bool(config.get("add_source_bos")),
        bool(config.get("add_source_eos")),
        None if eps is None else float(eps),
    )


def family(model_bin: ModelBin, tokens: Specials, pre_norm: bool, layernorm_embedding: bool, t5: bool) -> str:
    """The family the converter wrote (for how text becomes a source, ct2_vocab.SourceFrame):
    marian (a decoder starting from a zero embedding), t5 (a relative attention bias), bart
    (post-norm, embedding norms, starting from </s>), fairseq (mBART, M2M100, NLLB: starting from
    </s>, or from the target's tag where config.json leaves the start to the user), else
    transformer (OpenNMT-py ...)."""
    if model_bin.scalar("decoder/start_from_zero_embedding", 0):
        return "marian"
    if t5:
        return "t5"
    if tokens.decoder_start in (tokens.eos, None):  # None: a language tag starts (mBART-25, fairseq's)
        return "bart" if layernorm_embedding and not pre_norm else "fairseq"
    return "transformer"


def describe(path: str, read: Callable | None = None, tokenizer: str | None = None) -> Ct2Facts:
    """What the folder says; `tokenizer`: the SentencePiece model --tokenizer names (ct2_vocab.py).
    `read` (how the other formats read their weight files) is not needed: model.bin is read here."""
    model_bin = read_model_bin(os.path.join(path, "model.bin"))
    spec_of(model_bin)
    tokens = specials(path, model_bin)
    source, target = vocabularies(path, tokens.unk)
    cfg, recipes, kind = model_config(path, model_bin, tokens, source, target)
    shapes = {name: recipe_shape(pieces, model_bin.shapes) for name, pieces in recipes.items()}
    check_dimensions(cfg, shapes, model_bin.path)
    user_start = tokens.decoder_start is None and kind != "marian"
    frame = SourceFrame(kind, tokens.add_source_bos, tokens.add_source_eos, user_start)
    if user_start and not languages(kind, target)[0]:
        raise ModelError(
            f"{path}/config.json: decoder_start_token null (each target prefix's first token starts the "
            "decoder) and no language tags to start from: not supported"
        )
    ids = {"bos": cfg.bos_id, "eos": cfg.eos_id, "unk": cfg.unk_id, "start": cfg.decoder_start_id}
    ours = {cfg.decoder_start_id} if kind == "marian" else set()  # the zero start row: never text
    make = functools.partial(make_tokenizer, path, tokenizer, source, target, frame, ids, tokens.unk, ours)
    defaults = {**CTRANSLATE2_DEFAULTS, "max_length": min(256, cfg.max_positions)}
    int8 = any(v.dtype in ("I8", "I16") and v.name.endswith("weight") for v in model_bin.variables.values())
    rules = ModelRules(banned_ids=tuple(sorted(ours)))
    check_every_variable_read(model_bin, recipes)
    return Ct2Facts(f"{FORMAT}/{kind}", cfg, model_bin, shapes, rules, defaults, make, recipes, int8)


def model_config(
    path: str, model_bin: ModelBin, tokens: Specials, source: Vocabulary, target: Vocabulary
) -> tuple[TransformerConfig, dict[str, tuple[Piece, ...]], str]:
    """Our Transformer for the spec, the recipe of each of our parameters, the family."""
    attributes, where = Attributes(model_bin), model_bin.path
    held = held_weights(model_bin)
    d_model = held["src_embed.tokens.weight"].shape[1]
    activation = ACTIVATIONS.get(int(attributes.same("activation", 0) or 0))
    if activation is None:
        raise ModelError(f"{where}: activation {attributes.same('activation')} (Marian's gelu, ...) is not supported")
    pre_norm = bool(attributes.same("pre_norm", 1))
    heads = int(attributes.same("num_heads", HEADS_OF_SPEC.get(model_bin.spec)) or 0)
    t5 = t5_switches(model_bin, held, heads, d_model, tokens.norm_eps)
    kind = family(model_bin, tokens, pre_norm, "src_embed.norm.weight" in held, t5["positions"] == "relative")
    check_vocabularies(held, source, target, where)
    recipes = recipes_for(held, kind, len(target))
    scale = attributes.embed_scale("encoder", d_model)
    if scale != attributes.embed_scale("decoder", d_model):
        raise ModelError(f"{where}: the encoder's and decoder's embedding scales differ, which is not supported")
    if kind == "marian":
        start = len(target)  # our zero start row
    elif tokens.decoder_start is None:  # the job's target tag starts (Ct2Loaded); until then, </s>
        start = target.id(tokens.eos, "eos_token", where)
    else:
        start = target.id(tokens.decoder_start, "decoder_start_token", where)
    try:
        cfg = TransformerConfig(
            src_vocab_size=recipe_shape(recipes["src_embed.tokens.weight"], model_bin.shapes)[0],
            tgt_vocab_size=len(target) + (kind == "marian"),
            d_model=d_model,
            heads=heads,
            encoder_layers=layer_count(model_bin, "encoder"),
            decoder_layers=layer_count(model_bin, "decoder"),
            ffn_dim=held["encoder_layers.0.ffn.up.weight"].shape[0],
            activation=activation,
            pre_norm=pre_norm,
            encoder_final_norm="encoder_norm.weight" in held,
            decoder_final_norm="decoder_norm.weight" in held,
            embed_scale=scale,
            layernorm_embedding="src_embed.norm.weight" in held,
            share_embeddings="tgt_embed.tokens.weight" not in recipes,
            tie_output="output.weight" not in recipes,
            final_logits_bias="output.bias" in recipes,
            bias=any(name.endswith("bias") and ("attn." in name or ".ffn." in name) for name in held),
            pad_id=next((target.ids[p] for p in PADDING if p in target.ids), start),
            unk_id=target.id(tokens.unk, "unk_token", where),
            bos_id=target.ids.get(tokens.bos, start),
            eos_id=target.id(tokens.eos, "eos_token", where),
            decoder_start_id=start,
            alignment_layer=int(attributes.get("decoder", "alignment_layer", -1) or 0),
            alignment_heads=int(attributes.get("decoder", "alignment_heads", 1) or 0),
            **t5,
        )
    except ValueError as e:
        raise ModelError(f"{where}: {e}") from None
    return cfg, recipes, kind


def t5_switches(
    model_bin: ModelBin, held: dict[str, Variable], heads: int, d_model: int, norm_eps: float | None
) -> dict[str, Any]:
    """The positions, norms, feed-forward, heads and scales (TransformerConfig's fields): T5's
    where the spec has its variables (ct2_t5.py), else the stored position table or CTranslate2's
    sinusoids, layer norms, plain feed-forward, scaled queries."""
    where = model_bin.path
    layers = {side: layer_count(model_bin, side) for side in ("encoder", "decoder")}
    relative = ct2_t5.relative_positions(model_bin, layers)
    positions: dict[str, Any]
    if relative is not None:
        buckets, distance = relative
        positions = dict(positions="relative", relative_buckets=buckets, relative_max_distance=distance)
        positions["max_positions"] = LIMITS["max_positions"]  # no table, so no end: TransformerConfig's bound
    else:
        rows = position_rows(held, where)
        positions = dict(
            positions="learned" if rows else "sinusoidal_fairseq",
            position_offset=0 if rows else 1,  # CTranslate2's sinusoids start at position 1
            max_positions=rows or MAX_POSITIONS,
        )
    norm = ct2_t5.norm_kind(held, where)
    width = ct2_t5.head_dim(held, heads, d_model, where)
    return dict(
        positions,
        norm=norm,
        norm_eps=norm_eps or (1e-5 if norm == "layernorm" else 1e-6),  # CTranslate2's, with a beta or without
        gated_ffn=ct2_t5.gated(held, sum(layers.values()), where),
        head_dim=width,
        scale_queries=ct2_t5.scales_queries(model_bin, width or d_model // max(heads, 1)),
        output_scale=ct2_t5.output_scale(model_bin),
    )


def check_vocabularies(held: dict[str, Variable], source: Vocabulary, target: Vocabulary, where: str) -> None:
    for side, vocabulary, table in (("source", source, "src_embed"), ("target", target, "tgt_embed")):
        rows = held[f"{table}.tokens.weight"].shape[0]
        if len(vocabulary) != rows:
            raise ModelError(
                f"{where}: the {side} vocabulary has {len(vocabulary):,} pieces (<unk> appended when "
                f"missing), the embeddings {rows:,} rows"
            )


def position_rows(held: dict[str, Variable], where: str) -> int | None:
    """The rows of the stored position tables (one size for both sides), or None: sinusoids."""
    tables = [held.get(f"{side}_embed.positions.weight") for side in ("src", "tgt")]
    if tables[0] is None and tables[1] is None:
        return None
    if tables[0] is None or tables[1] is None or tables[0].shape != tables[1].shape:
        raise ModelError(f"{where}: the encoder's and decoder's position tables differ, which is not supported")
    return tables[0].shape[0]


def recipes_for(held: dict[str, Variable], kind: str, target_rows: int) -> dict[str, tuple[Piece, ...]]:
    """Our parameters from the stored variables (shared and tied ones given once): a linear bias
    the spec leaves out where others are stored (OpenNMT-py's attention without biases) is zeros;
    a gated feed-forward's two first layers are one (gate_up: linear_0, the activated one, first);
    a Marian decoder's zero start row is appended to the target embeddings and the output, whose
    bias for it no softmax weighs (NEVER)."""
    recipes: dict[str, tuple[Piece, ...]] = {ours: (Piece(variable.name),) for ours, variable in held.items()}
    linears = [n for n in held if n.endswith(".weight") and ("attn." in n or ".ffn." in n)]
    if any(n.removesuffix("weight") + "bias" in held for n in linears):
        for name in linears:
            recipes.setdefault(name.removesuffix("weight") + "bias", (Piece(rows=held[name].shape[0]),))
    source, target, output = (held[f"{n}.weight"].name for n in ("src_embed.tokens", "tgt_embed.tokens", "output"))
    if target == source:
        del recipes["tgt_embed.tokens.weight"]
    if output == target:
        del recipes["output.weight"]
    for name in [n for n in recipes if n.endswith(".ffn.noact.weight")]:  # gated: [linear_0; linear_0_noact]
        layer = name.removesuffix("noact.weight")
        for p in ("weight", "bias"):
            if f"{layer}noact.{p}" in recipes:
                recipes[f"{layer}gate_up.{p}"] = recipes.pop(f"{layer}up.{p}") + recipes.pop(f"{layer}noact.{p}")
    if kind == "marian":
        for name in ("tgt_embed.tokens.weight" if target != source else "src_embed.tokens.weight", "output.weight"):
            if name in recipes:
                recipes[name] += (Piece(rows=1),)
        recipes["output.bias"] = (*recipes.get("output.bias", (Piece(rows=target_rows),)), Piece(rows=1, value=NEVER))
    return recipes
