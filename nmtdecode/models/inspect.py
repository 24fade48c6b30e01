"""`nmtdecode inspect PATH`: what a model directory (or OpenNMT-py `.pt` file) holds, without decoding anything."""

from __future__ import annotations

import argparse
import json
import os
import struct

import torch

from .loading import load_model

SAFETENSORS_DTYPES = {"F64": "float64", "F32": "float32", "F16": "float16", "BF16": "bfloat16", "I64": "int64",
                      "I32": "int32", "I16": "int16", "I8": "int8", "U8": "uint8", "BOOL": "bool"}


def _safetensors_dtypes(path: str) -> set[str]:
    """The dtypes in a safetensors file, from its JSON header (no tensor is read)."""
    with open(path, "rb") as f:
        (size,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(size))
    return {SAFETENSORS_DTYPES.get(v["dtype"], v["dtype"].lower()) for k, v in header.items() if k != "__metadata__"}


def _tensors(state) -> list[torch.Tensor]:
    """The tensors of a state dict, or of the state dicts in a checkpoint dict (OpenNMT-py's
    `model` and `generator`)."""
    if isinstance(state, torch.Tensor):
        return [state]
    if isinstance(state, dict):
        return [t for value in state.values() if isinstance(value, (dict, torch.Tensor)) for t in _tensors(value)]
    return []


def stored_dtypes(path: str) -> list[str]:
    """The dtypes of a model's weight files as stored (the loader computes in float32 unless --dtype says)."""
    names = [path] if os.path.isfile(path) else [os.path.join(path, n) for n in sorted(os.listdir(path))]
    found: set[str] = set()
    for name in names:
        if name.endswith(".safetensors"):
            found |= _safetensors_dtypes(name)
        elif name.endswith((".bin", ".pt")):
            with torch.serialization.safe_globals([argparse.Namespace]):  # OpenNMT-py's options
                state = torch.load(name, map_location="cpu", weights_only=True, mmap=True)
            found |= {str(t.dtype).replace("torch.", "") for t in _tensors(state)}
    floating = sorted(d for d in found if d.startswith(("float", "bfloat")))
    return floating or sorted(found)


def default_target_language(loaded) -> str:
    """The target language a multilingual model decodes into without --tgt-lang."""
    languages = getattr(loaded.tokenizer, "languages", None) or {}
    if not languages:
        return "none (not a multilingual model)"
    by_id = {i: code for code, i in languages.items()}
    forced = loaded.rules.forced_bos_id
    if forced in by_id:
        return f"{by_id[forced]} (forced_bos_token_id; --tgt-lang changes it)"
    start = getattr(loaded.tokenizer, "decoder_start_id", None)
    if start in by_id:
        return f"{by_id[start]} (decoder_start_token_id; fixed)"
    return "none: give --tgt-lang"


def describe(path: str) -> str:
    loaded = load_model(path)
    model, cfg = loaded.model, loaded.model.cfg
    params = {id(p): p for p in model.parameters()}.values()  # tied weights once
    dtypes = sorted({str(p.dtype).replace("torch.", "") for p in params})
    lines = [
        f"path:          {path}",
        f"format:        {loaded.format}",
        f"architecture:  Transformer {cfg.encoder_layers}+{cfg.decoder_layers} layers, d_model {cfg.d_model}, "
        f"{cfg.heads} heads, ffn {cfg.ffn_dim}, {cfg.activation}, {'pre' if cfg.pre_norm else 'post'}-norm, "
        f"{cfg.positions} positions",
        f"vocabulary:    source {cfg.src_vocab_size}, target {cfg.tgt_vocab_size}"
        f"{' (shared embeddings)' if cfg.share_embeddings else ''}",
        f"parameters:    {sum(p.numel() for p in params):,}",
        f"dtype:         stored {', '.join(stored_dtypes(path)) or 'unknown'}; loaded as {', '.join(dtypes)} "
        "(--dtype chooses the compute precision)",
        f"special ids:   pad {cfg.pad_id}, unk {cfg.unk_id}, bos {cfg.bos_id}, eos {cfg.eos_id}, "
        f"decoder start {cfg.decoder_start_id}",
    ]
    if loaded.defaults:
        lines.append("decoding defaults: " + ", ".join(f"{k}={v}" for k, v in sorted(loaded.defaults.items())))
    codes = loaded.tokenizer.language_codes()
    if codes:
        lines.append(f"languages:     {len(codes)} ({', '.join(codes[:10])}{', ...' if len(codes) > 10 else ''})")
    lines.append(f"target language: {default_target_language(loaded)}")
    return "\n".join(lines)
