"""Which format a model path is, from its files alone: no torch, so that a wrong path fails at once.

Tried in order (loading.py loads with the format named here): a native directory has a
config.yaml; an eole directory a config.json with a `model:` section naming an
architecture (a Hugging Face config.json has none); a Hugging Face directory a
config.json; a Marian directory a decoder.yml (or it is Marian's `.npz` itself); an
OpenNMT-py checkpoint is a `.pt` file.
"""

from __future__ import annotations

import json
import os
import re

from ..options.bounded import MAX_CONFIG_BYTES
from ..options.config import ConfigError


def model_format(path: str | None) -> str:
    """The format's name (native, eole, huggingface, marian, opennmt-py), or a ConfigError saying why none."""
    if path is None:
        raise ConfigError("model: no model given (--model PATH or `model:` in the config file)")
    if not os.path.exists(path):
        raise ConfigError(f"model: {path} does not exist" + (HUB_HINT.format(path) if HUB_ID.fullmatch(path) else ""))
    for name in ("config.yaml", "config.json"):  # opened below: a FIFO there would block the detection
        candidate = os.path.join(path, name)
        if os.path.lexists(candidate) and not os.path.isfile(candidate):
            raise ConfigError(
                f"model: {candidate} is not a regular file (a FIFO, device or folder): a model's files must be files"
            )
    if os.path.isfile(os.path.join(path, "config.yaml")):
        return "native"
    if is_ctranslate2(path):
        raise ConfigError(
            f"model: {path} is a CTranslate2 model (model.bin and its vocabulary, converted for "
            "CTranslate2); nmtdecode reads the checkpoint it was converted from (a Hugging Face "
            "directory, an OpenNMT-py .pt, an eole directory): give that"
        )
    if os.path.isdir(path) and eole_model_section(path) is not None:
        return "eole"
    if os.path.isfile(os.path.join(path, "config.json")):
        return "huggingface"
    if os.path.isfile(os.path.join(path, "decoder.yml")) or os.path.isfile(path) and path.endswith(".npz"):
        return "marian"
    if os.path.isfile(path) and path.endswith(".pt"):
        return "opennmt-py"
    raise ConfigError(
        f"model: {path} is not a model directory (no config.yaml for the native format, "
        "no config.json for Hugging Face, no decoder.yml for Marian) nor an OpenNMT-py .pt "
        "checkpoint or a Marian .npz"
    )


# What a Hugging Face Hub id looks like (owner/name); nmtdecode never downloads, so it says how.
HUB_ID = re.compile(r"[A-Za-z0-9][\w.-]*/[\w.-]+")
HUB_HINT = (
    "; it looks like a Hugging Face Hub id, and nmtdecode reads local directories only (no network): "
    "download it where there is internet (huggingface-cli download {0} --local-dir DIR) and give --model DIR"
)
# CTranslate2's converters write model.bin beside the vocabularies (ctranslate2/specs/model_spec.py).
CTRANSLATE2_VOCABULARIES = (
    "shared_vocabulary.json",
    "source_vocabulary.json",
    "shared_vocabulary.txt",
    "source_vocabulary.txt",
)


def is_ctranslate2(path: str) -> bool:
    """A directory CTranslate2 converted a model into: model.bin and its vocabulary files."""
    return os.path.isfile(os.path.join(path, "model.bin")) and any(
        os.path.isfile(os.path.join(path, name)) for name in CTRANSLATE2_VOCABULARIES
    )


def eole_model_section(path: str) -> dict | None:
    """The `model:` section of an eole directory's config.json, or None (unreadable, or not eole's)."""
    try:
        with open(os.path.join(path, "config.json"), encoding="utf-8") as f:
            if os.fstat(f.fileno()).st_size > MAX_CONFIG_BYTES:
                return None  # the Hugging Face reader refuses it by its size
            data = json.load(f)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, RecursionError):
        return None  # not eole's: the Hugging Face reader says what is wrong with it
    model = data.get("model") if isinstance(data, dict) else None
    return model if isinstance(model, dict) and "architecture" in model else None
