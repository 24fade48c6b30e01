"""A CTranslate2 TransformerSpec's variables (ctranslate2/specs/transformer_spec.py, attention_spec.py,
common_spec.py), without torch: which are our parameters (`weight_names`), the attributes read
beside them (`Attributes`: `encoder/num_heads`, `decoder/pre_norm`, ...), and what is refused by
name: a spec or revision this reader does not know, a variable of a feature our Transformer does
not compute (`UNSUPPORTED`), an attribute at another value than ours (`FIXED`), and any variable
left unread (`check_every_variable_read`).

The names, as the converters write them (revision 7; before revision 5 the attributes were not
under `encoder/` and `decoder/`):

    {encoder,decoder}/embeddings[_0]/weight              token embeddings (`_scale` when int8)
    {side}/position_encodings/encodings                  a position table (none: sinusoids)
    {side}/layernorm_embedding/{gamma,beta}              a norm after the embeddings
    {side}/layer_norm/{gamma,beta}                       a norm on top of a pre-norm stack
    {side}/layer_N/self_attention/linear_0, linear_1     q, k and v fused; the output
    decoder/layer_N/attention/linear_0, _1, _2           q; k and v fused; the output
    {side}/layer_N/{self_attention,attention,ffn}/layer_norm   each block's norm
    {side}/layer_N/ffn/linear_0, linear_1                the feed-forward's two layers
    decoder/projection/{weight,bias}                     the output (tied: an alias of the embeddings)

and T5's (ct2_t5.py): `relative_attention_bias` and its max distance in the self-attentions,
norms with a `gamma` only (RMS), `ffn/linear_0_noact` (a gated feed-forward), `queries_scale`,
`decoder/scale_outputs`.
"""

from __future__ import annotations

import re

from ..checkpoint import ModelError
from . import ct2_t5
from .ct2_binary import ModelBin, Variable
from .marian_weights import Piece
from ...options.bounded import shown

REVISIONS = range(3, 8)  # TransformerSpec's, CTranslate2 2.x to 4.x; 1 and 2 named OpenNMT-tf's variables
HEADS_OF_SPEC = {"TransformerBase": 8, "TransformerBig": 16, "": 8}  # revision 3's specs named their heads
# Variables of features our Transformer does not compute, by a part of their name.
UNSUPPORTED = {
    "relative_position_keys": "relative position representations (OpenNMT-py's max_relative_positions)",
    "relative_asymmetric_position": "asymmetric relative positions",
    "rotary_": "rotary position embeddings",
    "num_heads_kv": "multi-query or grouped-query attention",
    "q_norm": "query and key layer norms",
    "project_in": "projections around the decoder",
    "embeddings_1/": "source features (several source embeddings)",
    "sliding_window": "sliding-window attention",
    "pre_feedforward_layer_norm": "layer norms before and after each sub-layer",
    "input_layer_norm": "parallel residual connections",
    "layer_scalar": "scaled layer outputs",
    "memory_kv": "merged encoder attention",
}
# Attributes whose value must be this one (or unset) for our Transformer to compute the model.
FIXED = {
    "encoder/multi_query_attention": 0,
    "decoder/alibi": 0,
    "decoder/sliding_window": 0,
    "decoder/final_logit_softcapping": 0,
}
# Attributes read (or harmless at the values FIXED allows), and binary version 5's special tokens.
KNOWN = re.compile(
    r"((encoder|decoder)/)?(num_heads|pre_norm|activation|embeddings_merge|alignment_layer|alignment_heads|"
    r"scale_embeddings|start_from_zero_embedding|alibi_use_positive_positions|scale_alibi|multi_query_attention|"
    r"alibi|sliding_window|final_logit_softcapping)|(encoder|decoder)/embeddings(_0)?/multiply_by_sqrt_depth|"
    r"(unk|bos|eos)_token|with_source_bos|with_source_eos|with_target_bos|user_decoder_start_tokens|"
    rf"decoder/scale_outputs|{ct2_t5.READ.pattern}"
)


def spec_of(model_bin: ModelBin) -> None:
    where = model_bin.path
    if model_bin.spec not in HEADS_OF_SPEC and model_bin.spec != "TransformerSpec":
        kind = "a decoder-only model" if model_bin.spec == "TransformerDecoderSpec" else "not an encoder-decoder"
        raise ModelError(f"{where}: spec {shown(model_bin.spec)} ({kind}) is not supported; only TransformerSpec")
    if model_bin.revision not in REVISIONS:
        raise ModelError(
            f"{where}: TransformerSpec revision {model_bin.revision} is not read (revisions "
            f"{REVISIONS[0]} to {REVISIONS[-1]}): convert the model again with a current ctranslate2"
        )
    for name in sorted(model_bin.names):
        meaning = next((m for part, m in UNSUPPORTED.items() if part in name), None)
        if meaning is not None:
            raise ModelError(f"{where}: variable {name} ({meaning}) is not supported")
    for name, allowed in FIXED.items():
        if model_bin.scalar(name, allowed) != allowed:
            raise ModelError(f"{where}: {name} = {model_bin.scalar(name)} is not supported")


class Attributes:
    """The spec's attributes of a side (`encoder/num_heads`; before revision 5, `num_heads`)."""

    def __init__(self, model_bin: ModelBin) -> None:
        self.bin = model_bin

    def get(self, side: str, name: str, default: float | None = None) -> float | None:
        value = self.bin.scalar(f"{side}/{name}")
        if value is None and self.bin.revision < 5:
            value = self.bin.scalar(name)
        return default if value is None else value

    def same(self, name: str, default: float | None = None) -> float | None:
        """An attribute both sides must agree on (our layers have one value for both)."""
        encoder, decoder = self.get("encoder", name, default), self.get("decoder", name, default)
        if encoder != decoder:
            raise ModelError(f"{self.bin.path}: encoder/{name} {encoder} differs from decoder/{name} {decoder}")
        return encoder

    def embed_scale(self, side: str, d_model: int) -> float:
        """CTranslate2's build_embeddings_scale: a flag (int8) for sqrt(d_model), or the factor."""
        found = self.bin.find(f"{side}/scale_embeddings") or self.bin.find(
            f"{side}/embeddings{'_0' if side == 'encoder' else ''}/multiply_by_sqrt_depth"
        )
        if found is None or (found.dtype == "I8" and found.value):
            return float(d_model) ** 0.5
        return 1.0 if found.dtype == "I8" or found.value is None else float(found.value)


def layer_count(model_bin: ModelBin, side: str) -> int:
    found = {int(m.group(1)) for n in model_bin.names if (m := re.match(rf"{side}/layer_(\d+)/", n))}
    if found != set(range(len(found))) or not found:
        raise ModelError(f"{model_bin.path}: the {side}'s layers are not numbered 0 to n-1")
    return len(found)


def weight_names(model_bin: ModelBin, encoder_layers: int, decoder_layers: int) -> dict[str, str]:
    """Our parameter name -> CTranslate2's variable name, for every parameter the spec may hold
    (the caller keeps those it holds)."""
    names: dict[str, str] = {}
    embeddings = "encoder/embeddings_0" if model_bin.find("encoder/embeddings_0/weight") else "encoder/embeddings"
    names["src_embed.tokens.weight"], names["tgt_embed.tokens.weight"] = (
        f"{embeddings}/weight",
        "decoder/embeddings/weight",
    )
    for side, embed in (("encoder", "src_embed"), ("decoder", "tgt_embed")):
        names[f"{embed}.positions.weight"] = f"{side}/position_encodings/encodings"
        names[f"{side}_bias.embedding.weight"] = f"{side}/layer_0/self_attention/{ct2_t5.BIAS}"
        names.update(_norm(f"{embed}.norm", f"{side}/layernorm_embedding"))
        names.update(_norm(f"{side}_norm", f"{side}/layer_norm"))
    for i in range(encoder_layers):
        ours, theirs = f"encoder_layers.{i}", f"encoder/layer_{i}"
        names.update(_linears(f"{ours}.self_attn", f"{theirs}/self_attention", ("qkv", "out")))
        names.update(_norm(f"{ours}.attn_block.norm", f"{theirs}/self_attention/layer_norm"))
        names.update(_feed_forward(ours, theirs))
    for i in range(decoder_layers):
        ours, theirs = f"decoder_layers.{i}", f"decoder/layer_{i}"
        names.update(_linears(f"{ours}.self_attn", f"{theirs}/self_attention", ("qkv", "out")))
        names.update(_norm(f"{ours}.self_block.norm", f"{theirs}/self_attention/layer_norm"))
        names.update(_linears(f"{ours}.cross_attn", f"{theirs}/attention", ("q", "kv", "out")))
        names.update(_norm(f"{ours}.cross_block.norm", f"{theirs}/attention/layer_norm"))
        names.update(_feed_forward(ours, theirs))
    names["output.weight"], names["output.bias"] = "decoder/projection/weight", "decoder/projection/bias"
    return names


def _linears(ours: str, theirs: str, parts: tuple[str, ...]) -> dict[str, str]:
    return {
        f"{ours}.{part}.{p}": f"{theirs}/linear_{i}/{p}" for i, part in enumerate(parts) for p in ("weight", "bias")
    }


def _norm(ours: str, theirs: str) -> dict[str, str]:
    return {f"{ours}.weight": f"{theirs}/gamma", f"{ours}.bias": f"{theirs}/beta"}


def _feed_forward(ours: str, theirs: str) -> dict[str, str]:
    """A gated feed-forward's second first layer (`linear_0_noact`) is `noact` here: recipes_for
    joins it to `up` (linear_0) as our gate_up."""
    return {
        **_linears(f"{ours}.ffn", f"{theirs}/ffn", ("up", "down")),
        **{f"{ours}.ffn.noact.{p}": f"{theirs}/ffn/linear_0_noact/{p}" for p in ("weight", "bias")},
        **_norm(f"{ours}.ffn_block.norm", f"{theirs}/ffn/layer_norm"),
    }


def check_every_variable_read(model_bin: ModelBin, recipes: dict[str, tuple[Piece, ...]]) -> None:
    """A stored variable that is neither a weight we read (or its scale) nor an attribute we know
    is a feature we do not compute: refused by name rather than left out."""
    used = {p.array for pieces in recipes.values() for p in pieces if p.array is not None}
    used |= {f"{name}_scale" for name in used}
    unread = sorted(n for n in model_bin.variables if n not in used and not KNOWN.fullmatch(n))
    if unread:
        raise ModelError(f"{model_bin.path}: variable {unread[0]} is not one this reader computes with")


def held_weights(model_bin: ModelBin) -> dict[str, Variable]:
    """Our parameter name -> the stored variable (through aliases) of each one the spec holds."""
    names = weight_names(model_bin, layer_count(model_bin, "encoder"), layer_count(model_bin, "decoder"))
    held = {ours: model_bin.find(theirs) for ours, theirs in names.items()}
    found = {ours: variable for ours, variable in held.items() if variable is not None}
    for needed in (
        "src_embed.tokens.weight",
        "tgt_embed.tokens.weight",
        "output.weight",
        "encoder_layers.0.ffn.up.weight",
    ):
        if needed not in found:
            raise ModelError(f"{model_bin.path}: no {names[needed]}: not a Transformer's variables")
    return found
