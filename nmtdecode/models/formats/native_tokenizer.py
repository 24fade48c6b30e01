"""A native model's tokenizer: read from config.yaml's `tokenizer:` section (`build`), and written
for any tokenizer a model of another format came with (`export`, for `nmtdecode convert`), so
that a converted model turns text into the very ids its original did. Without torch.

    tokenizer:                        SentencePiece ids are the model's ids (the native format's own)
      source: spm.model               the source side's model (default spm.model)
      target: tgt.model               the target side's, when it has its own
      eos_id: 2                       optional: by default the model config's eos_id, and
      special_ids: [0, 1, 2]            pad, bos and the decoder start as the ids never written out
    tokenizer:  {kind: vocab, ...}    OpenNMT-py and eole: pieces (SentencePiece, or a whitespace
                                      split) numbered by the checkpoint's vocabularies
    tokenizer:  {kind: huggingface,   a Hugging Face tokenizer's files (and config.json) in a
                 directory: tokenizer}  folder, read as that format reads them
    tokenizer:  {kind: marian, ...}   Marian's YAML vocabularies over OPUS-MT's source.spm and target.spm
"""

from __future__ import annotations

import json
import os
import shutil
from typing import Any

from ...options.bounded import MAX_CONFIG_BYTES, shown, vocabulary_bytes
from ..architecture import TransformerConfig
from ..checkpoint import ModelError, note_read, read_json, read_vocabulary_json
from ..tokenizer import SentencePieceTokenizer
from .hf_tokenizers import HFTokenizer, load_tokenizer, marian_tokenizer
from .opennmt_shared import VocabTokenizer

# What a Hugging Face tokenizer may read from its directory (hf_tokenizers.py), config.json included
HF_TOKENIZER_FILES = (
    "config.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "tokenizer.json",
    "sentencepiece.bpe.model",
    "spiece.model",
    "source.spm",
    "target.spm",
    "vocab.json",
    "target_vocab.json",
    "merges.txt",
)
FOLDER = "tokenizer"  # where a converted model keeps a Hugging Face or Marian tokenizer's files


def build(path: str, section: dict, cfg: TransformerConfig) -> Any:
    """The tokenizer config.yaml's `tokenizer:` section describes, its files in the model directory `path`."""
    kind = section.get("kind", "sentencepiece")
    where = f"{path}/config.yaml: tokenizer"
    if kind == "sentencepiece":
        return _sentencepiece(path, section, cfg, where)
    if kind == "vocab":
        specials = _typed(section, "specials", dict, where)
        limit = vocabulary_bytes(max(cfg.src_vocab_size, cfg.tgt_vocab_size))
        return VocabTokenizer(
            _json(path, _typed(section, "source_vocab", str, where), list, limit),
            _json(path, _typed(section, "target_vocab", str, where), list, limit),
            _file(path, section.get("source")),
            _file(path, section.get("target")),
            {str(k): str(v) for k, v in specials.items()},
        )
    directory = os.path.join(path, _typed(section, "directory", str, where))
    if kind == "huggingface":
        return load_tokenizer(directory, read_json(os.path.join(directory, "config.json"), limit=MAX_CONFIG_BYTES), cfg)
    if kind == "marian":
        limit = vocabulary_bytes(max(cfg.src_vocab_size, cfg.tgt_vocab_size))
        vocab = _json(directory, "vocab.json", dict, limit)
        separate = os.path.lexists(os.path.join(directory, "target_vocab.json"))
        return marian_tokenizer(
            directory,
            vocab,
            _json(directory, "target_vocab.json", dict, limit) if separate else vocab,
            _typed(section, "names", dict, where),
            _typed(section, "added", dict, where),
            cleanup=bool(section.get("cleanup")),
            special_ids=_typed(section, "special_ids", list, where),
        )
    raise ModelError(f"{where}.kind: {shown(kind)} is not one of sentencepiece, vocab, huggingface, marian")


def _sentencepiece(path: str, section: dict, cfg: TransformerConfig, where: str) -> SentencePieceTokenizer:
    source = os.path.join(path, section.get("source") or "spm.model")
    target = os.path.join(path, section["target"]) if section.get("target") else None
    for spm_file in filter(None, [source, target]):
        if not os.path.lexists(spm_file):
            raise ModelError(f"{path}: SentencePiece model {os.path.basename(spm_file)} is missing")
        note_read(spm_file)  # a regular file
    eos_id = section.get("eos_id", cfg.eos_id)
    special_ids = section.get("special_ids", [cfg.pad_id, cfg.bos_id, cfg.decoder_start_id])
    if (
        not isinstance(eos_id, int)
        or not isinstance(special_ids, list)
        or not all(isinstance(i, int) for i in special_ids)
    ):
        raise ModelError(f"{where}: eos_id must be a token id and special_ids a list of them")
    tokenizer = SentencePieceTokenizer(source, target, eos_id=eos_id, special_ids=special_ids)
    if tokenizer.target.get_piece_size() != cfg.tgt_vocab_size:
        raise ModelError(
            f"{path}: the target SentencePiece model has {tokenizer.target.get_piece_size()} pieces, "
            f"the model {cfg.tgt_vocab_size}"
        )
    return tokenizer


def _typed(section: dict, key: str, kind: type, where: str) -> Any:
    value = section.get(key)
    if not isinstance(value, kind):
        raise ModelError(f"{where}.{key}: expected a {kind.__name__}, got {shown(value)}")
    return value


def _json(directory: str, name: str, kind: type, limit: int) -> Any:
    """A vocabulary's JSON list or object, measured against `limit` (bytes) before it is parsed."""
    return read_vocabulary_json(os.path.join(directory, name), kind, limit)


def _file(directory: str, name: object) -> str | None:
    return os.path.join(directory, str(name)) if name else None


def export(tokenizer: Any, path: str) -> dict:
    """Write what `tokenizer` reads into the model directory `path`; config.yaml's `tokenizer:` section."""
    if isinstance(tokenizer, SentencePieceTokenizer):
        section: dict[str, Any] = {"source": _proto(tokenizer.source, path, "source.model")}
        if tokenizer.target is not tokenizer.source:
            section["target"] = _proto(tokenizer.target, path, "target.model")
        return {**section, "eos_id": tokenizer.eos_id, "special_ids": sorted(tokenizer.special_ids)}
    if isinstance(tokenizer, VocabTokenizer):
        section = {"kind": "vocab", "specials": tokenizer.specials}
        for side, tokens, model in (
            ("source", tokenizer.src_tokens, tokenizer.src_spm),
            ("target", tokenizer.tgt_tokens, tokenizer.tgt_spm),
        ):
            section[f"{side}_vocab"] = _write_json(tokens, path, f"{side}.vocab.json")
            if model is not None:
                section[side] = _proto(model, path, f"{side}.model")
        return section
    if isinstance(tokenizer, HFTokenizer) and tokenizer.recipe.get("kind") in ("huggingface", "marian"):
        return _export_recipe(tokenizer.recipe, path)
    raise ModelError(f"cannot convert a model whose tokenizer is a {type(tokenizer).__name__}")


def _export_recipe(recipe: dict, path: str) -> dict:
    """A Hugging Face tokenizer's files, or Marian's vocabularies and .spm files, in FOLDER."""
    folder = os.path.join(path, FOLDER)
    os.makedirs(folder, exist_ok=True)
    source = recipe["directory"]
    if recipe["kind"] == "huggingface":
        for name in HF_TOKENIZER_FILES:
            if os.path.isfile(os.path.join(source, name)):
                shutil.copyfile(os.path.join(source, name), os.path.join(folder, name))
        return {"kind": "huggingface", "directory": FOLDER}
    for name in ("source.spm", "target.spm"):
        shutil.copyfile(os.path.join(source, name), os.path.join(folder, name))
    _write_json(recipe["vocab"], folder, "vocab.json")
    if recipe["target_vocab"] is not None:
        _write_json(recipe["target_vocab"], folder, "target_vocab.json")
    keep = ("names", "added", "cleanup", "special_ids")
    return {"kind": "marian", "directory": FOLDER, **{key: recipe[key] for key in keep}}


def _proto(processor: Any, path: str, name: str) -> str:
    """A loaded SentencePiece model written back as a file (its serialised protobuf)."""
    with open(os.path.join(path, name), "wb") as f:
        f.write(processor.serialized_model_proto())
    return name


def _write_json(value: Any, path: str, name: str) -> str:
    with open(os.path.join(path, name), "w", encoding="utf-8") as f:
        json.dump(value, f, ensure_ascii=False)
    return name
