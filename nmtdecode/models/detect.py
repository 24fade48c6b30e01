"""Which format a model path is, from its files alone: no torch, so that a wrong path fails at once.

Tried in order (loading.py loads with the format named here): a native directory has a
config.yaml; a CTranslate2 folder a model.bin beside its vocabulary (its config.json is
CTranslate2's); an eole directory a config.json with a `model:` section naming an
architecture (a Hugging Face config.json has none); a Hugging Face directory a
config.json; a Marian directory a decoder.yml (or it is Marian's `.npz` itself); an
OpenNMT-py checkpoint is a `.pt` file.
"""

from __future__ import annotations

import json
import os
import re

from ..options.config import ConfigError


def model_format(path: str | None) -> str:
    """The format's name (native, ctranslate2, eole, huggingface, marian, opennmt-py), or a ConfigError
    saying why none."""
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
        return "ctranslate2"
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
        "no config.json for Hugging Face, no decoder.yml for Marian, no model.bin for "
        "CTranslate2) nor an OpenNMT-py .pt "
        "checkpoint or a Marian .npz"
    )


# What a Hugging Face Hub id looks like (owner/name); nmtdecode never downloads, so it says how.
HUB_ID = re.compile(r"[A-Za-z0-9][\w.-]*/[\w.-]+")
HUB_HINT = (
    "; it looks like a Hugging Face Hub id, and nmtdecode reads local directories only (no network): "
    "download it where there is internet (huggingface-cli download {0} --local-dir DIR) and give --model DIR"
)


def is_ctranslate2(path: str) -> bool:
    """A folder CTranslate2 converted a model into: its model.bin (with its vocabularies and
    config.json, ctranslate2/specs/model_spec.py); Marian's decoder.yml names its own files."""
    return os.path.isfile(os.path.join(path, "model.bin")) and not os.path.isfile(os.path.join(path, "decoder.yml"))


def eole_model_section(path: str) -> dict | None:
    """The `model:` section of an eole directory's config.json, or None (unreadable, or not eole's)."""
    try:
        with open(os.path.join(path, "config.json"), encoding="utf-8") as f:
            data = json.load(f)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, RecursionError):
        return None  # not eole's: the Hugging Face reader says what is wrong with it
    model = data.get("model") if isinstance(data, dict) else None
    return model if isinstance(model, dict) and "architecture" in model else None
