"""`nmtdecode convert MODEL --quantize int8|bfloat16|float16|float32 --output DIR`: any model we
read, written in the native format (formats/native_config.py) in that precision, as
CTranslate2's converters store a model in its compute type. An int8 model keeps each weight's
int8 rows and their scales, the very ones a load quantizing the original computes, and loads
by memory map without quantizing again.

The directory is written beside its final place and renamed into it once complete, so an
interrupted conversion leaves no model that would load half-written.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import tempfile
from typing import Any

import torch
import yaml
from safetensors.torch import save_file

from .checkpoint import LoadedModel, ModelError, ModelRules
from .formats.native_config import FORMAT, PRECISIONS, WEIGHTS
from .formats.native_tokenizer import export
from .loading import load_model
from .placement import quantized_in_int8
from .quantize import quantized_rows
from .stored import SCALE_SUFFIX
from .transformer import Transformer
from .weights import InMemoryTensor, shared_names

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16, "int8": torch.float32}


def convert(source: str, output: str, precision: str) -> None:
    """Read the model at `source` (any format, float32) and write it to the new directory `output`."""
    if precision not in PRECISIONS:
        raise ModelError(f"convert: precision {precision!r} is not one of {', '.join(PRECISIONS)}")
    if os.path.lexists(output):
        raise ModelError(f"convert: {output} exists; give a new directory for the converted model")
    loaded = load_model(source)
    if loaded.format.startswith("ctranslate2"):
        raise ModelError(f"convert: {source} is a CTranslate2 model, converted already: it loads as it is")
    output = os.path.normpath(output)
    parent = os.path.dirname(os.path.abspath(output))
    os.makedirs(parent, exist_ok=True)
    partial = tempfile.mkdtemp(dir=parent, prefix=f".{os.path.basename(output)}.")
    try:
        write(partial, loaded, precision)
        _usual_modes(partial)
        os.rename(partial, output)
    except BaseException:
        shutil.rmtree(partial, ignore_errors=True)
        raise


def write(path: str, loaded: LoadedModel, precision: str) -> None:
    """`loaded` (a model of any format, in float32) as a native model directory `path`, its weights
    in `precision`: float32, bfloat16, float16, or int8 (each weight an int8 load quantizes as its
    int8 rows and scales, quantized as a load would; the others float32). Its tokenizer's files,
    rules and decoding defaults go with it, so that it decodes as the original did."""
    os.makedirs(path, exist_ok=True)
    save_file(_stored_tensors(loaded.model, precision), os.path.join(path, WEIGHTS))
    rules = {
        f.name: getattr(loaded.rules, f.name)
        for f in dataclasses.fields(ModelRules)
        if f.name != "banned_ids" and getattr(loaded.rules, f.name) != f.default
    }
    config: dict[str, Any] = {"format": FORMAT, "precision": precision, "model": loaded.model.cfg.to_dict()}
    config["tokenizer"] = export(loaded.tokenizer, path)
    config["banned_ids"] = list(loaded.rules.banned_ids)
    if rules:
        config["rules"] = rules
    if loaded.defaults:
        config["decoding"] = dict(loaded.defaults)
    with open(os.path.join(path, "config.yaml"), "w", encoding="utf-8") as f:
        yaml.safe_dump(config, f, sort_keys=False, allow_unicode=True)


def _stored_tensors(model: Transformer, precision: str) -> dict[str, torch.Tensor]:
    """The tensors of model.safetensors: tied weights once; in int8, NAME and NAME_scale for each
    weight an int8 load quantizes (placement.quantized_in_int8)."""
    aliases = shared_names(model)
    int8 = (
        {f"{n}.weight" for n, m in model.named_modules() if quantized_in_int8(n, m)} if precision == "int8" else set()
    )
    tensors: dict[str, torch.Tensor] = {}
    for name, tensor in model.state_dict().items():
        if name in aliases or not tensor.is_floating_point():
            continue
        if name in int8:
            tensors[name], tensors[name + SCALE_SUFFIX] = quantized_rows(InMemoryTensor(tensor, name, "model"))
        else:
            tensors[name] = tensor.detach().to(DTYPES[precision]).contiguous()
    return tensors


def _usual_modes(directory: str) -> None:
    """The modes a new directory and its files get under the user's umask (mkdtemp's are private)."""
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(directory, 0o777 & ~umask)
    for name in os.listdir(directory):
        path = os.path.join(directory, name)
        os.chmod(path, (0o777 if os.path.isdir(path) else 0o666) & ~umask)
