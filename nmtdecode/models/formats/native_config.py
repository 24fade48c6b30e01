"""The native format, read without torch: a directory holding

    config.yaml         model: TransformerConfig fields; tokenizer: its files (native_tokenizer.py);
                        decoding: default decoding options; banned_ids: never generated;
                        rules: forced_bos_id, forced_eos, length_offset, opennmt_beam (ModelRules);
                        precision: how `nmtdecode convert` stored the weights (int8, bfloat16,
                        float16, float32), the precision it decodes in unless told otherwise
    model.safetensors   weights under our own parameter names (tied weights stored once); in
                        int8, each quantized weight NAME as int8 rows and NAME_scale (float32,
                        one per row: models/quantize.py)
    *.model             SentencePiece model(s), or a tokenizer/ folder

`describe` is what `nmtdecode inspect` shows and what native.py loads (the torch half).
"""

from __future__ import annotations

import functools
import os
from typing import Callable


from ...options.bounded import MAX_CONFIG_BYTES, shown
from ..architecture import TransformerConfig
from ..checkpoint import ModelError, ModelFacts, ModelRules, check_dimensions, read_yaml
from ..defaults import checked_defaults
from ..stored import SCALE_SUFFIX
from .native_tokenizer import build

FORMAT = "native"
WEIGHTS = "model.safetensors"
PRECISIONS = ("float32", "bfloat16", "float16", "int8")  # how `nmtdecode convert` stores weights
RULES: dict[str, type | tuple[type, ...]] = {
    "forced_bos_id": (int, type(None)),
    "forced_eos": bool,
    "length_offset": int,
    "opennmt_beam": bool,
}


def read_config(path: str) -> dict:
    """config.yaml, read as every model's config is (checkpoint.read_yaml), its sections checked."""
    data = read_yaml(os.path.join(path, "config.yaml"), limit=MAX_CONFIG_BYTES)
    if not isinstance(data.get("model"), dict):
        raise ModelError(f"{path}/config.yaml has no `model:` section")
    for key in ("tokenizer", "decoding", "rules"):
        if not isinstance(data.get(key) or {}, dict):
            raise ModelError(f"{path}/config.yaml: {key}: expected a mapping, got {shown(data[key])}")
    for role in ("source", "target"):
        name = (data.get("tokenizer") or {}).get(role)
        if not isinstance(name, str) and name is not None:
            raise ModelError(f"{path}/config.yaml: tokenizer.{role}: expected a file name, got {shown(name)}")
    banned = data.get("banned_ids", [])
    if not isinstance(banned, list) or not all(isinstance(i, int) and not isinstance(i, bool) for i in banned):
        raise ModelError(f"{path}/config.yaml: banned_ids: expected a list of token ids, got {shown(banned)}")
    if data.get("precision", "float32") not in PRECISIONS:
        raise ModelError(
            f"{path}/config.yaml: precision: {shown(data['precision'])} is not one of {', '.join(PRECISIONS)}"
        )
    for key, value in (data.get("rules") or {}).items():
        if key not in RULES or isinstance(value, bool) and RULES[key] is int or not isinstance(value, RULES[key]):
            raise ModelError(f"{path}/config.yaml: rules.{key}: {shown(value)} is not a valid {key}")
    return data


def stored_precision(path: str) -> str:
    """How a native model's weights are stored (config.yaml's `precision`, float32 if unsaid)."""
    return str(read_config(path).get("precision", "float32"))


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
        {n: shape for n, shape in stored.shapes.items() if not _is_scale(n, stored.shapes)},
        ModelRules(banned_ids=tuple(banned), **(data.get("rules") or {})),
        checked_defaults(dict(data.get("decoding") or {}), f"{path}/config.yaml"),
        functools.partial(build, path, data.get("tokenizer") or {}, cfg),
    )


def _is_scale(name: str, shapes: dict) -> bool:
    """The row scales of a stored int8 weight (not a parameter of their own)."""
    return name.endswith(SCALE_SUFFIX) and name.removesuffix(SCALE_SUFFIX) in shapes
