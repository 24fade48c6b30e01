"""The files a model is read from, named without torch and without reading its weights, so that a
job refuses an output that would overwrite one (its weights, configs, tokenizers, vocabularies)
before anything is written or loaded (jobs/files.py).

Each format's names come from its own readers where it has them (a Marian decoder.yml names its
.npz and vocabularies, a native config.yaml its SentencePiece models, eole's config.json its
transforms'); where a model's files cannot be told apart from its configs (they do not parse,
for instance), the names a format always reads stand, and the load fails on the rest. What only
the load learns (an OpenNMT-py checkpoint's SentencePiece models, named inside the pickle) is
checked again against `LoadedModel.files` once the model has loaded.
"""

from __future__ import annotations

import os
from typing import Callable

from ..options.bounded import MAX_CONFIG_BYTES
from ..options.config import ConfigError
from .checkpoint import ModelError, read_json
from .detect import model_format
from .formats import ct2_config, ct2_vocab, eole_config, hf_config, marian_config, native_config, native_tokenizer

# What a Hugging Face directory's readers open (hf_config.py, hf_tokenizers.py), but its weights.
HF_FILES = (
    "config.json",
    "generation_config.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "added_tokens.json",
    "tokenizer.json",
    "vocab.json",
    "target_vocab.json",
    "merges.txt",
    "source.spm",
    "target.spm",
    "sentencepiece.bpe.model",
    "spiece.model",
    "model.safetensors.index.json",
)


def files_read(path: str | list[str] | None, tokenizer: str | None = None) -> list[str]:
    """The files the model at `path` (a list: an ensemble's members) is read from, as far as their
    names tell, with the `tokenizer` that --tokenizer names; [] when `path` is no model, or None
    (the load says why)."""
    if tokenizer is not None:
        return files_read(path) + _given_tokenizer(tokenizer)
    if isinstance(path, list):
        return [name for member in path for name in files_read(member)]
    if path is None:
        return []
    try:
        fmt = model_format(path)
    except ConfigError:  # no model here: nothing to protect, and the load refuses it by name
        return []
    if fmt == "opennmt-py":
        return [path]  # its SentencePiece models are named inside the pickle: checked once loaded
    return [path] + _named(path, fmt) if os.path.isfile(path) else _named(path, fmt)


def _named(path: str, fmt: str) -> list[str]:
    names, more = BY_FORMAT.get(fmt, ((), _nothing_more))
    found = [os.path.join(path if os.path.isdir(path) else os.path.dirname(path), n) for n in names]
    try:
        found += more(path)
    except (ModelError, OSError, ValueError, TypeError, AttributeError):
        pass  # a config that does not parse: the load fails on it before anything is written
    return found


def _nothing_more(path: str) -> list[str]:
    return []


def _native(path: str) -> list[str]:
    """The files config.yaml's `tokenizer:` names (native_tokenizer.py): SentencePiece models and
    vocabularies in the folder, or a Hugging Face or Marian tokenizer's folder's files."""
    tokenizer = native_config.read_config(path).get("tokenizer") or {}
    named = [os.path.join(path, name) for name in tokenizer.values() if isinstance(name, str)]
    folder = tokenizer.get("directory")
    if not isinstance(folder, str):
        return named
    return named + [os.path.join(path, folder, name) for name in native_tokenizer.HF_TOKENIZER_FILES]


def _huggingface(path: str) -> list[str]:
    return hf_config.weight_files(path)


def _eole(path: str) -> list[str]:
    config = read_json(os.path.join(path, "config.json"), limit=MAX_CONFIG_BYTES)
    return eole_config.weight_files(path) + [name for name in eole_config.tokenizer_files(config, path) if name]


def _marian(path: str) -> list[str]:
    npz, decoder_yml, decoder = marian_config.model_files(path)
    directory = os.path.dirname(decoder_yml)
    vocabularies = [os.path.join(directory, name) for name in decoder.get("vocabs") or [] if isinstance(name, str)]
    return [npz, decoder_yml, *vocabularies]


def _ctranslate2(path: str) -> list[str]:
    """The vocabularies a converter writes, and the SentencePiece models and tokenizer.json looked
    for in the folder and the one above it (ct2_vocab.py)."""
    vocabularies = [
        f"{name}{ext}" for name in (ct2_vocab.SHARED, ct2_vocab.SOURCE, ct2_vocab.TARGET) for ext in (".json", ".txt")
    ]
    folders = (path, os.path.dirname(os.path.abspath(path)))
    pieces = ct2_vocab.SENTENCEPIECE_NAMES + ct2_vocab.SENTENCEPIECE_PAIR + (ct2_vocab.TOKENIZER_JSON,)
    return [os.path.join(path, n) for n in vocabularies] + [os.path.join(f, n) for f in folders for n in pieces]


def _given_tokenizer(given: str) -> list[str]:
    """The files --tokenizer names: itself, or those a CTranslate2 folder's reader takes in it."""
    try:
        found = ct2_vocab.find_tokenizer(given, given)
    except (ConfigError, OSError):
        return [given]  # no tokenizer there: the load refuses it by name
    return [given] if found is None else list(found)


# format -> (the names it always reads in the model's directory, what its files name besides)
BY_FORMAT: dict[str, tuple[tuple[str, ...], Callable[[str], list[str]]]] = {
    native_config.FORMAT: (("config.yaml", native_config.WEIGHTS, "spm.model"), _native),
    hf_config.FORMAT: (HF_FILES, _huggingface),
    eole_config.FORMAT: (("config.json", "vocab.json"), _eole),
    marian_config.FORMAT: (("decoder.yml", "source.spm", "target.spm"), _marian),
    ct2_config.FORMAT: (("model.bin", "config.json"), _ctranslate2),
}
