"""The native format loaded onto our Transformer, and written: native_config.py reads the
directory without torch; here the weights are read and given to the model. A model stored in
int8 (models/convert.py) keeps each quantized weight's int8 rows and their scales, which an
int8 load maps from the file as they are (models/weights.py, `stored_int8`).
"""

from __future__ import annotations

import os
from typing import Iterable

import torch
import yaml
from safetensors.torch import save_file

from ..checkpoint import LoadedModel
from ..placement import Placement, as_stored_int8, load_weights
from ..transformer import Transformer
from ..weights import QuantizedSource, allocate, read_tensors, shared_names, stored_int8
from .native_config import FORMAT, WEIGHTS, describe

__all__ = ["FORMAT", "load", "save"]


def load(path: str, placement: Placement | None = None) -> LoadedModel:
    """A model stored in int8 (`nmtdecode convert`) decodes in int8 where the CPU runs it, as a
    CTranslate2 model does (placement.as_stored_int8)."""
    facts = describe(path, read_tensors)
    model = allocate(facts.cfg, path)
    sources = stored_int8(facts.stored.tensors)
    int8 = any(isinstance(source, QuantizedSource) for source in sources.values())
    placed = load_weights(model, sources, path, as_stored_int8(placement) if int8 else placement)
    return facts.loaded(model, path, placed.backend)


def save(
    path: str,
    model: Transformer,
    spm_files: dict[str, str],
    decoding: dict | None = None,
    banned_ids: Iterable[int] | None = None,
    dtype: torch.dtype = torch.float16,
) -> None:
    """Write `model` as a native model directory; spm_files maps role (source/target) -> file in `path`."""
    os.makedirs(path, exist_ok=True)
    aliases = shared_names(model)
    tensors = {
        n: t.detach().to(dtype).contiguous()
        for n, t in model.state_dict().items()
        if n not in aliases and t.is_floating_point()
    }
    save_file(tensors, os.path.join(path, WEIGHTS))
    config = {"format": FORMAT, "model": model.cfg.to_dict(), "tokenizer": spm_files}
    if decoding:
        config["decoding"] = decoding
    if banned_ids is not None:
        config["banned_ids"] = list(banned_ids)
    with open(os.path.join(path, "config.yaml"), "w", encoding="utf-8") as f:
        yaml.safe_dump(config, f, sort_keys=False)
