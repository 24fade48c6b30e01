"""The native format: a directory holding

    config.yaml         model: TransformerConfig fields; tokenizer: SentencePiece file names;
                        decoding: default decoding options; banned_ids: never generated
    model.safetensors   weights under our own parameter names (tied weights stored once)
    *.model             SentencePiece model(s)
"""

from __future__ import annotations

import os

import torch
import yaml
from safetensors.torch import save_file

from ...tokenizer import SentencePieceTokenizer
from ..checkpoint import (
    LoadedModel,
    ModelError,
    ModelRules,
    allocate,
    check_dimensions,
    load_weights,
    note_read,
    read_safetensors,
    shared_names,
)
from ..transformer import Transformer, TransformerConfig

FORMAT = "native"


def read_config(path: str) -> dict:
    try:
        with open(note_read(os.path.join(path, "config.yaml")), encoding="utf-8") as f:
            data = yaml.safe_load(f)
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as e:
        raise ModelError(f"{path}/config.yaml cannot be read: {e}") from None
    if not isinstance(data, dict) or not isinstance(data.get("model"), dict):
        raise ModelError(f"{path}/config.yaml has no `model:` section")
    for key in ("tokenizer", "decoding"):
        if not isinstance(data.get(key) or {}, dict):
            raise ModelError(f"{path}/config.yaml: {key}: expected a mapping, got {data[key]!r}")
    for role, name in (data.get("tokenizer") or {}).items():
        if not isinstance(name, str) and name is not None:
            raise ModelError(f"{path}/config.yaml: tokenizer.{role}: expected a file name, got {name!r}")
    banned = data.get("banned_ids", [])
    if not isinstance(banned, list) or not all(isinstance(i, int) and not isinstance(i, bool) for i in banned):
        raise ModelError(f"{path}/config.yaml: banned_ids: expected a list of token ids, got {banned!r}")
    return data


def load(path: str) -> LoadedModel:
    data = read_config(path)
    try:
        cfg = TransformerConfig.from_dict(data["model"])
    except (TypeError, ValueError) as e:
        raise ModelError(f"{path}/config.yaml: {e}") from None
    tensors = read_safetensors(os.path.join(path, "model.safetensors"))
    check_dimensions(cfg, {name: tensor.shape for name, tensor in tensors.items()}, path)
    model = allocate(cfg, path)
    load_weights(model, tensors, path)
    model.eval()
    tok = data.get("tokenizer") or {}
    source = os.path.join(path, tok.get("source", "spm.model"))
    target = os.path.join(path, tok["target"]) if tok.get("target") else None
    for spm_file in filter(None, [source, target]):
        if not os.path.lexists(spm_file):
            raise ModelError(f"{path}: SentencePiece model {os.path.basename(spm_file)} is missing")
        note_read(spm_file)  # a regular file
    tokenizer = SentencePieceTokenizer(source, target, eos_id=cfg.eos_id,
                                       special_ids={cfg.pad_id, cfg.bos_id, cfg.decoder_start_id})
    if tokenizer.target.get_piece_size() != cfg.tgt_vocab_size:
        raise ModelError(f"{path}: the target SentencePiece model has {tokenizer.target.get_piece_size()} pieces, "
                         f"the model {cfg.tgt_vocab_size}")
    banned = data.get("banned_ids", [cfg.pad_id])
    outside = [i for i in banned if not 0 <= i < cfg.tgt_vocab_size]
    if outside:
        raise ModelError(f"{path}/config.yaml: banned_ids: {outside[0]} is outside the target vocabulary "
                         f"({cfg.tgt_vocab_size} tokens)")
    rules = ModelRules(banned_ids=tuple(banned))
    return LoadedModel(model, tokenizer, FORMAT, path, rules, dict(data.get("decoding") or {}))


def save(path: str, model: Transformer, spm_files: dict[str, str], decoding: dict | None = None,
         banned_ids=None, dtype=torch.float16):
    """Write `model` as a native model directory; spm_files maps role (source/target) -> file in `path`."""
    os.makedirs(path, exist_ok=True)
    aliases = shared_names(model)
    tensors = {n: t.detach().to(dtype).contiguous() for n, t in model.state_dict().items()
               if n not in aliases and t.is_floating_point()}
    save_file(tensors, os.path.join(path, "model.safetensors"))
    config = {"format": FORMAT, "model": model.cfg.to_dict(), "tokenizer": spm_files}
    if decoding:
        config["decoding"] = decoding
    if banned_ids is not None:
        config["banned_ids"] = list(banned_ids)
    with open(os.path.join(path, "config.yaml"), "w", encoding="utf-8") as f:
        yaml.safe_dump(config, f, sort_keys=False)
