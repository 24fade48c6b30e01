"""CTranslate2 model folders written by the tests' own hand, from the format's facts (ctranslate2/
specs/model_spec.py `_serialize`, transformer_spec.py's variable names), without the ctranslate2
package: `write_model_bin` writes any variables and aliases, `write_folder` one of our tiny
Transformers as CTranslate2's converters lay it out (a TransformerSpec of revision 7, config.json,
shared_vocabulary.json), as stored or quantized to int8 as the converters quantize
(scale = 127 / max |row|, rows rounded)."""

from __future__ import annotations

import json
import struct

import torch

DTYPE_IDS = {torch.float32: 0, torch.int8: 1, torch.int16: 2, torch.int32: 3, torch.float16: 4, torch.bfloat16: 5}


def _string(text: str) -> bytes:
    raw = text.encode("utf-8") + b"\0"
    return struct.pack("<H", len(raw)) + raw


def write_model_bin(path, variables: dict, aliases: dict | None = None, spec="TransformerSpec", revision=7, version=6):
    """model.bin of `variables` (name -> tensor; a Python number: a float32 scalar; a bool: int8),
    in name order as the converters write them, then `aliases` (alias -> name)."""
    out = [struct.pack("<I", version)]
    if version >= 2:
        out += [_string(spec), struct.pack("<I", revision)]
    out.append(struct.pack("<I", len(variables)))
    for name, value in sorted(variables.items()):
        tensor = _tensor(value)
        data = tensor.reshape(-1).contiguous().view(torch.uint8).numpy().tobytes()
        out += [_string(name), struct.pack("<B", tensor.dim()), struct.pack(f"<{tensor.dim()}I", *tensor.shape)]
        if version >= 4:
            out += [struct.pack("<B", DTYPE_IDS[tensor.dtype]), struct.pack("<I", len(data))]
        else:
            out += [struct.pack("<B", tensor.element_size()), struct.pack("<I", tensor.numel())]
        out.append(data)
    if version >= 3:
        out.append(struct.pack("<I", len(aliases or {})))
        for alias, name in sorted((aliases or {}).items()):
            out += [_string(alias), _string(name)]
    path.write_bytes(b"".join(out))


def _tensor(value) -> torch.Tensor:
    if isinstance(value, bool):
        return torch.tensor(int(value), dtype=torch.int8)
    if isinstance(value, (int, float)):
        return torch.tensor(float(value), dtype=torch.float32)
    return value


def quantized(weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """int8 rows and CTranslate2's scales (127 / max |row|), as its converters quantize."""
    largest = weight.abs().amax(dim=1)
    largest[largest == 0] = 127.0
    scale = 127.0 / largest
    return torch.round(weight * scale[:, None]).to(torch.int8), scale


def spec_variables(model, int8: bool = False) -> tuple[dict, dict]:
    """Our model's weights under a TransformerSpec's names (T5's switches too: relative positions,
    RMS norms, a gated feed-forward, unscaled queries, scaled outputs), and the aliases of the tied
    and shared ones."""
    cfg, state = model.cfg, {k: v.detach().float() for k, v in model.state_dict().items()}
    variables: dict = {}
    aliases: dict = {}
    for side, embed, stack in (("encoder", "src_embed", "encoder_layers"), ("decoder", "tgt_embed", "decoder_layers")):
        variables[f"{side}/num_heads"] = torch.tensor(cfg.heads, dtype=torch.int16)
        variables[f"{side}/pre_norm"] = cfg.pre_norm
        variables[f"{side}/activation"] = torch.tensor(
            {"relu": 0, "gelu_tanh": 1, "silu": 2, "gelu": 3}[cfg.activation], dtype=torch.int8
        )
        variables[f"{side}/scale_embeddings"] = cfg.embed_scale
        if cfg.positions != "relative":
            table = getattr(model, embed).position_table().detach().float()[cfg.position_offset :]
            variables[f"{side}/position_encodings/encodings"] = table.contiguous()
        if cfg.layernorm_embedding:
            _norm(variables, f"{side}/layernorm_embedding", state, f"{embed}.norm")
        if getattr(cfg, f"{side}_final_norm"):
            _norm(variables, f"{side}/layer_norm", state, f"{side}_norm")
        for i in range(getattr(cfg, stack)):
            ours, theirs = f"{stack}.{i}", f"{side}/layer_{i}"
            _linear(variables, f"{theirs}/self_attention/linear_0", state, f"{ours}.self_attn.qkv", int8)
            _linear(variables, f"{theirs}/self_attention/linear_1", state, f"{ours}.self_attn.out", int8)
            block = "attn_block" if side == "encoder" else "self_block"
            _norm(variables, f"{theirs}/self_attention/layer_norm", state, f"{ours}.{block}.norm")
            if side == "decoder":
                for n, part in enumerate(("q", "kv", "out")):
                    _linear(variables, f"{theirs}/attention/linear_{n}", state, f"{ours}.cross_attn.{part}", int8)
                _norm(variables, f"{theirs}/attention/layer_norm", state, f"{ours}.cross_block.norm")
            if cfg.gated_ffn:  # gate_up: [linear_0 (activated); linear_0_noact]
                gate, up = state[f"{ours}.ffn.gate_up.weight"].chunk(2)
                state[f"{ours}.ffn.gate.weight"], state[f"{ours}.ffn.up.weight"] = gate, up
                _linear(variables, f"{theirs}/ffn/linear_0", state, f"{ours}.ffn.gate", int8)
                _linear(variables, f"{theirs}/ffn/linear_0_noact", state, f"{ours}.ffn.up", int8)
            else:
                _linear(variables, f"{theirs}/ffn/linear_0", state, f"{ours}.ffn.up", int8)
            _linear(variables, f"{theirs}/ffn/linear_1", state, f"{ours}.ffn.down", int8)
            _norm(variables, f"{theirs}/ffn/layer_norm", state, f"{ours}.ffn_block.norm")
        aliases.update(_t5_attention(variables, cfg, state, side, getattr(cfg, stack)))
    variables["encoder/embeddings_merge"] = torch.tensor(0, dtype=torch.int8)
    variables["decoder/alignment_layer"] = torch.tensor(cfg.alignment_layer, dtype=torch.int16)
    variables["decoder/alignment_heads"] = torch.tensor(cfg.alignment_heads, dtype=torch.int16)
    _linear(variables, "decoder/embeddings", state, "tgt_embed.tokens", int8)
    if cfg.output_scale != 1.0:
        variables["decoder/scale_outputs"] = cfg.output_scale
    if cfg.share_embeddings:
        aliases["encoder/embeddings_0/weight"] = "decoder/embeddings/weight"
    else:
        _linear(variables, "encoder/embeddings_0", state, "src_embed.tokens", int8)
    if cfg.tie_output:
        aliases["decoder/projection/weight"] = "decoder/embeddings/weight"
    else:
        _linear(variables, "decoder/projection", state, "output", int8)
    if cfg.final_logits_bias:
        variables["decoder/projection/bias"] = state["output.bias"]
    return variables, aliases


def _linear(variables: dict, theirs: str, state: dict, ours: str, int8: bool) -> None:
    weight = state[f"{ours}.weight"]
    if int8:
        variables[f"{theirs}/weight"], variables[f"{theirs}/weight_scale"] = quantized(weight)
    else:
        variables[f"{theirs}/weight"] = weight
    if f"{ours}.bias" in state and not theirs.endswith("embeddings"):
        variables[f"{theirs}/bias"] = state[f"{ours}.bias"]


def _norm(variables: dict, theirs: str, state: dict, ours: str) -> None:
    """A layer norm's gamma and beta; an RMS norm's gamma alone."""
    variables[f"{theirs}/gamma"] = state[f"{ours}.weight"]
    if f"{ours}.bias" in state:
        variables[f"{theirs}/beta"] = state[f"{ours}.bias"]


def _t5_attention(variables: dict, cfg, state: dict, side: str, layers: int) -> dict:
    """T5's attention variables, as its converter writes them: the relative attention bias in the
    first layer (the others' aliases of it) with each layer's max distance, and queries_scale 1
    in every attention where scores are not scaled. Returns the aliases."""
    aliases = {}
    for i in range(layers):
        if cfg.positions == "relative":
            bias = f"{side}/layer_{i}/self_attention/relative_attention_bias"
            if i == 0:
                variables[bias] = state[f"{side}_bias.embedding.weight"]
            else:
                aliases[bias] = f"{side}/layer_0/self_attention/relative_attention_bias"
            distance = torch.tensor(cfg.relative_max_distance, dtype=torch.int32)
            variables[f"{side}/layer_{i}/self_attention/relative_attention_max_distance"] = distance
        if not cfg.scale_queries:
            for attention in ("self_attention", "attention") if side == "decoder" else ("self_attention",):
                variables[f"{side}/layer_{i}/{attention}/queries_scale"] = 1.0
    return aliases


def write_folder(path, model, tokens: list[str], int8: bool = False, **config):
    """`model` as a CTranslate2 folder at `path`: model.bin, config.json (the special tokens of
    model.cfg's ids, `config` over them), shared_vocabulary.json (`tokens`)."""
    path.mkdir(parents=True, exist_ok=True)
    cfg = model.cfg
    variables, aliases = spec_variables(model, int8)
    write_model_bin(path / "model.bin", variables, aliases)
    settings = {
        "add_source_bos": False,
        "add_source_eos": False,
        "bos_token": tokens[cfg.bos_id],
        "eos_token": tokens[cfg.eos_id],
        "unk_token": tokens[cfg.unk_id],
        "decoder_start_token": tokens[cfg.decoder_start_id],
        "layer_norm_epsilon": None,
        "multi_query_attention": False,
        **config,
    }
    (path / "config.json").write_text(json.dumps(settings))
    (path / "shared_vocabulary.json").write_text(json.dumps(tokens))
    return path
