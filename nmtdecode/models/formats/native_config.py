"""The native format, read without torch: a directory holding

    config.yaml         model: TransformerConfig fields; tokenizer: SentencePiece file names;
                        decoding: default decoding options; banned_ids: never generated
    model.safetensors   weights under our own parameter names (tied weights stored once)
    *.model             SentencePiece model(s)

`describe` is what `nmtdecode inspect` shows and what native.py loads (the torch half).
"""

from __future__ import annotations

import functools
import os
from typing import Callable

import yaml

from ...options.bounded import MAX_CONFIG_BYTES, TooLarge, check_bytes, check_size, shown
from ..tokenizer import SentencePieceTokenizer
from ..architecture import TransformerConfig
from ..checkpoint import ModelError, ModelFacts, ModelRules, check_dimensions, note_read
from ..defaults import checked_defaults

FORMAT = "native"
WEIGHTS = "model.safetensors"


def read_config(path: str) -> dict:
    try:
        with open(note_read(os.path.join(path, "config.yaml")), encoding="utf-8") as f:
            check_bytes(os.fstat(f.fileno()).st_size, MAX_CONFIG_BYTES)
            data = yaml.safe_load(f)
        check_size(data)
    except (OSError, UnicodeDecodeError, yaml.YAMLError, TooLarge) as e:
        raise ModelError(f"{path}/config.yaml cannot be read: {e}") from None
    except RecursionError:
        raise ModelError(f"{path}/config.yaml cannot be read: it nests too deeply") from None
    if not isinstance(data, dict) or not isinstance(data.get("model"), dict):
        raise ModelError(f"{path}/config.yaml has no `model:` section")
    for key in ("tokenizer", "decoding"):
        if not isinstance(data.get(key) or {}, dict):
            raise ModelError(f"{path}/config.yaml: {key}: expected a mapping, got {shown(data[key])}")
    for role, name in (data.get("tokenizer") or {}).items():
        if not isinstance(name, str) and name is not None:
            raise ModelError(f"{path}/config.yaml: tokenizer.{role}: expected a file name, got {shown(name)}")
    banned = data.get("banned_ids", [])
    if not isinstance(banned, list) or not all(isinstance(i, int) and not isinstance(i, bool) for i in banned):
        raise ModelError(f"{path}/config.yaml: banned_ids: expected a list of token ids, got {shown(banned)}")
    return data


def describe(path: str, read: Callable) -> ModelFacts:
    """What the directory says; `read` reads the weight file (stored.py: its tensors for a load,
    its header for inspect)."""
    data = read_config(path)
    try:
        cfg = TransformerConfig.from_dict(data["model"])
    except (TypeError, ValueError) as e:
        raise ModelError(f"{path}/config.yaml: {e}") from None
    stored = read([os.path.join(path, WEIGHTS)])
    check_dimensions(cfg, stored.shapes, path)
    banned = data.get("banned_ids", [cfg.pad_id])
    outside = [i for i in banned if not 0 <= i < cfg.tgt_vocab_size]
    if outside:
        raise ModelError(
            f"{path}/config.yaml: banned_ids: {outside[0]} is outside the target vocabulary "
            f"({cfg.tgt_vocab_size} tokens)"
        )
    return ModelFacts(
        FORMAT,
        cfg,
        stored,
        dict(stored.shapes),
        ModelRules(banned_ids=tuple(banned)),
        checked_defaults(dict(data.get("decoding") or {}), f"{path}/config.yaml"),
        functools.partial(_tokenizer, path, data, cfg),
    )


def _tokenizer(path: str, data: dict, cfg: TransformerConfig) -> SentencePieceTokenizer:
    tok = data.get("tokenizer") or {}
    source = os.path.join(path, tok.get("source", "spm.model"))
    target = os.path.join(path, tok["target"]) if tok.get("target") else None
    for spm_file in filter(None, [source, target]):
        if not os.path.lexists(spm_file):
            raise ModelError(f"{path}: SentencePiece model {os.path.basename(spm_file)} is missing")
        note_read(spm_file)  # a regular file
    tokenizer = SentencePieceTokenizer(
        source, target, eos_id=cfg.eos_id, special_ids={cfg.pad_id, cfg.bos_id, cfg.decoder_start_id}
    )
    if tokenizer.target.get_piece_size() != cfg.tgt_vocab_size:
        raise ModelError(
            f"{path}: the target SentencePiece model has {tokenizer.target.get_piece_size()} pieces, "
            f"the model {cfg.tgt_vocab_size}"
        )
    return tokenizer
