"""T5 in a CTranslate2 TransformerSpec, read without torch: what its T5 converter writes for t5
v1.0 and v1.1, flan-T5, mT5 and MADLAD-400 (ctranslate2/converters/transformers.py, `T5Loader`),
onto TransformerConfig's T5 switches (models/architecture.py), as CTranslate2 computes them
(src/layers/attention.cc, attention_layer.cc, common.cc, transformer.cc):

  CTranslate2's variables                                  ours
  {side}/layer_0/self_attention/relative_attention_bias    positions relative: the stack's table,
    (buckets x heads), the other layers' aliases of it       relative_buckets its rows
  {side}/layer_N/self_attention/relative_attention_max_distance    relative_max_distance
  layer norms with a `gamma` and no `beta`                 norm rmsnorm (epsilon unset: 1e-6)
  ffn/linear_0 (activated) and ffn/linear_0_noact          gated_ffn: gate_up = [linear_0; linear_0_noact]
  {attention}/queries_scale 1.0 (unset: 1/sqrt(head))      scale_queries False: scores q.k
  self_attention/linear_0 of 3 x heads x d_kv rows         head_dim d_kv, where heads x d_kv != d_model
  decoder/scale_outputs                                    output_scale

What CTranslate2 computes from a variable is what is computed here, whatever the checkpoint it was
converted from computed: `decoder/scale_outputs` is the converter's `tie_word_embeddings`, which
transformers 5 sets for every T5 and mT5 (v1.1 and mT5 do not scale their outputs there), so
such a folder scales as CTranslate2 scales it (docs/formats.md).
"""

from __future__ import annotations

import math
import re

from ..checkpoint import ModelError
from .ct2_binary import ModelBin, Variable

BIAS, MAX_DISTANCE = "relative_attention_bias", "relative_attention_max_distance"
# The scalars this module reads (ct2_spec.KNOWN takes them as read).
READ = re.compile(rf"(encoder|decoder)/layer_\d+/(self_attention|attention)/(queries_scale|{MAX_DISTANCE})")


def relative_positions(model_bin: ModelBin, layers: dict[str, int]) -> tuple[int, int] | None:
    """(buckets, max distance) of T5's relative attention bias, or None without one. Every layer
    of a stack must add the one table of its first layer (T5's; UMT5 gives each layer its own),
    and both stacks must have one, of as many buckets, and one max distance."""
    where, found = model_bin.path, {}
    for side, count in layers.items():
        tables = {model_bin.stored_name(f"{side}/layer_{i}/self_attention/{BIAS}") for i in range(count)}
        if tables == {None}:
            continue
        if None in tables:
            raise ModelError(f"{where}: only some of the {side}'s layers have a relative attention bias: not supported")
        if len(tables) > 1:
            raise ModelError(
                f"{where}: the {side}'s layers have relative attention biases of their own (UMT5's), "
                "not the first layer's for all (T5's): not supported"
            )
        distances = {model_bin.scalar(f"{side}/layer_{i}/self_attention/{MAX_DISTANCE}") for i in range(count)}
        found[side] = (model_bin.variables[tables.pop()], distances)
    if any(model_bin.find(f"decoder/layer_{i}/attention/{BIAS}") for i in range(layers["decoder"])):
        raise ModelError(f"{where}: a relative attention bias on the encoder attention is not supported")
    if not found:
        return None
    if len(found) == 1:
        raise ModelError(f"{where}: only the {next(iter(found))} has a relative attention bias: not supported")
    (encoder, encoder_distances), (decoder, decoder_distances) = found["encoder"], found["decoder"]
    distances = encoder_distances | decoder_distances
    if encoder.shape[0] != decoder.shape[0] or len(distances) != 1 or None in distances:
        raise ModelError(
            f"{where}: the encoder's and decoder's relative attention biases differ in buckets "
            f"({encoder.shape[0]}, {decoder.shape[0]}) or max distance ({sorted(map(str, distances))})"
        )
    return encoder.shape[0], int(distances.pop())


def norm_kind(held: dict[str, Variable], where: str) -> str:
    """layernorm where the norms have a `beta`, rmsnorm where none has (T5's); a mix is refused."""
    gammas = [name for name in held if name.endswith("norm.weight")]
    betas = [name for name in gammas if name.removesuffix("weight") + "bias" in held]
    if betas and len(betas) != len(gammas):
        lone = next(name for name in gammas if name not in betas)
        raise ModelError(f"{where}: the norm of {held[lone].name} has no beta where others have one: not supported")
    return "layernorm" if betas else "rmsnorm"


def gated(held: dict[str, Variable], layers: int, where: str) -> bool:
    """Whether the feed-forward layers are gated (a `linear_0_noact` beside `linear_0`): all or none."""
    count = sum(name.endswith(".ffn.noact.weight") for name in held)
    if count not in (0, layers):
        raise ModelError(f"{where}: {count} of the {layers} feed-forward layers are gated: not supported")
    return count == layers


def head_dim(held: dict[str, Variable], heads: int, d_model: int, where: str) -> int:
    """The heads' width where it is not d_model / heads (T5's d_kv), else 0: the fused
    self-attention projection holds 3 x heads x width rows (CTranslate2 splits its heads so)."""
    rows = held["encoder_layers.0.self_attn.qkv.weight"].shape[0]
    if heads < 1 or rows % (3 * heads):
        raise ModelError(f"{where}: a self-attention projection of {rows} rows is not 3 x {heads} heads")
    width = rows // (3 * heads)
    return 0 if width * heads == d_model else width


def scales_queries(model_bin: ModelBin, head_size: int) -> bool:
    """Whether scores are q.k / sqrt(head width) (every `queries_scale` unset or that), not q.k
    (every one 1.0, T5's); any other scale is refused."""
    scales = {v.value for name, v in model_bin.variables.items() if name.endswith("/queries_scale")}
    default = 1 / math.sqrt(head_size)
    if all(s is not None and math.isclose(s, default, rel_tol=1e-6) for s in scales):
        return True
    if scales == {1.0}:
        return False
    raise ModelError(
        f"{model_bin.path}: queries_scale {sorted(map(str, scales))}: only 1 (T5's) or 1/sqrt(head width) "
        f"({default:.6g}), the same in every attention, is supported"
    )


def output_scale(model_bin: ModelBin) -> float:
    """`decoder/scale_outputs`: what the decoder output is multiplied by before the projection (1: none)."""
    found = model_bin.find("decoder/scale_outputs")
    if found is None:
        return 1.0
    if found.shape != () or found.value is None or not math.isfinite(found.value) or found.value <= 0:
        raise ModelError(
            f"{model_bin.path}: decoder/scale_outputs must be a number > 0, got {found.dtype}{found.shape}"
        )
    return float(found.value)
