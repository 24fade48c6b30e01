"""What a checkpoint's weight files hold, seen without torch: each tensor's name and shape, and the
values of the few small tensors a format's configuration depends on (a bias that may be all zeros,
a layer's scale).

Two views with one face (`shapes`, `values(name)`), so that a format describes a model with the
same code whether its tensors were read (`Tensors`, the loaders) or only their headers
(`StoredHeaders`, `nmtdecode inspect`). A safetensors file starts with 8 bytes of
little-endian header length, then the JSON header: each tensor's dtype, shape and byte range
(huggingface/safetensors, "Format" in its README). A NumPy `.npz` (Marian's weights) is listed
the same way by npz.py.
"""

from __future__ import annotations

import json
import math
import os
import struct
from typing import TYPE_CHECKING

from ..options.bounded import shown
from .checkpoint import ModelError, note_read
from .npz import npz_entries

if TYPE_CHECKING:  # named in annotations only: reading headers needs no torch
    import torch

DTYPE_NAMES = {
    "F64": "float64",
    "F32": "float32",
    "F16": "float16",
    "BF16": "bfloat16",
    "I64": "int64",
    "I32": "int32",
    "I16": "int16",
    "I8": "int8",
    "U8": "uint8",
    "BOOL": "bool",
}
FLOAT_CODES = {"F64": "d", "F32": "f", "F16": "e"}  # struct's codes; BF16 is the top half of a float32
MAX_HEADER = 100_000_000  # the safetensors library's own limit on a header
# Bytes per element of every dtype the safetensors format names.
ITEM_BYTES = {
    **{code: 8 for code in ("F64", "I64", "U64")},
    **{code: 4 for code in ("F32", "I32", "U32")},
    **{code: 2 for code in ("F16", "BF16", "I16", "U16")},
    **{code: 1 for code in ("I8", "U8", "BOOL", "F8_E4M3", "F8_E5M2")},
}
SCALE_SUFFIX = "_scale"  # a weight stored in int8 as NAME has its row scales in NAME_scale (models/quantize.py)


class NeedsTorch(Exception):
    """A weight file that only torch reads (a pickled .bin or .pt): no view without it."""


def read_header(path: str) -> tuple[dict, int]:
    """A safetensors file's tensors (name -> dtype, shape, data_offsets) and where their data
    starts, every entry checked (`check_entries`) before any tensor is read."""
    try:
        with open(note_read(path), "rb") as f:
            (size,) = struct.unpack("<Q", f.read(8))
            if size > MAX_HEADER:
                raise ValueError(f"a header of {size:,} bytes")
            header = json.loads(f.read(size))
            file_size = os.fstat(f.fileno()).st_size
        if not isinstance(header, dict):
            raise ValueError("the header is not a JSON object")
    except (OSError, struct.error, ValueError, UnicodeDecodeError) as e:
        raise ModelError(f"cannot read weights {path}: {e}") from None
    except RecursionError:
        raise ModelError(f"cannot read weights {path}: its header nests too deeply for a list of tensors") from None
    header.pop("__metadata__", None)
    check_entries(header, file_size - 8 - size, f"cannot read weights {path}")
    return header, 8 + size


def check_entries(header: dict, data_size: int, where: str) -> None:
    """The safetensors rules for a header, which the format's own library enforces: each entry a
    tensor's (`_span`), and the tensors, in the order of their offsets, covering the data section
    without overlap or hole (so that no tensor's bytes are another's, or the header's)."""
    covered, last = 0, None
    for begin, end, name in sorted(_span(name, entry, where) for name, entry in header.items()):
        if begin != covered:
            problem = f"overlaps tensor {shown(last)}" if begin < covered else f"starts at byte {begin:,}, after a hole"
            raise ModelError(f"{where}: tensor {shown(name)} (data_offsets [{begin}, {end}]) {problem}")
        covered, last = end, name
    if covered != data_size:
        problem = "(truncated?)" if covered > data_size else "that no tensor describes"
        raise ModelError(
            f"{where}: its data section has {data_size:,} bytes, its header describes {covered:,} {problem}"
        )


def _span(name: str, entry: object, where: str) -> tuple[int, int, str]:
    """A header entry's byte range in the data section, once it is a tensor's: a dtype, a shape of
    sizes, and data_offsets [begin, end] that hold exactly the shape's bytes."""
    dtype, shape, offsets = (
        (entry.get(k) for k in ("dtype", "shape", "data_offsets")) if isinstance(entry, dict) else [None] * 3
    )
    if not (
        isinstance(dtype, str)
        and isinstance(shape, list)
        and all(map(_is_size, shape))
        and isinstance(offsets, list)
        and len(offsets) == 2
        and all(map(_is_size, offsets))
    ):
        raise ModelError(
            f"{where}: the header's entry for tensor {shown(name)} is not a tensor's (a dtype, a shape of "
            f"sizes, data_offsets [begin, end]): {shown(entry)}"
        )
    if dtype not in ITEM_BYTES:
        raise ModelError(f"{where}: tensor {shown(name)} has dtype {shown(dtype)}, which safetensors does not name")
    (begin, end), needed = offsets, math.prod(shape) * ITEM_BYTES[dtype]
    if end - begin != needed:
        raise ModelError(
            f"{where}: tensor {shown(name)}: data_offsets {offsets} hold {end - begin:,} bytes, its shape "
            f"{tuple(shape)} of {DTYPE_NAMES.get(dtype, dtype)} needs {needed:,}"
        )
    return begin, end, name


def _is_size(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


class Tensors:
    """Tensors already read (name -> tensor)."""

    def __init__(self, tensors: dict[str, torch.Tensor]) -> None:
        self.tensors = tensors
        self.shapes = {name: tuple(tensor.shape) for name, tensor in tensors.items()}

    def values(self, name: str) -> list[float]:
        return self.tensors[name].flatten().tolist()


HEADED = (".safetensors", ".npz")  # weight files whose tensors are listed without reading them


def file_entries(path: str) -> dict[str, tuple[int, dict]]:
    """A safetensors or .npz file's tensors: name -> (where the data starts, its header entry:
    dtype code, shape, data_offsets from there)."""
    if path.endswith(".npz"):
        return npz_entries(path)
    header, start = read_header(path)
    return {name: (start, entry) for name, entry in header.items()}


class StoredHeaders:
    """Safetensors or .npz files known by their headers; a tensor's bytes are read only when asked for."""

    def __init__(self, paths: list[str]) -> None:
        self.where: dict[str, tuple[str, int, dict]] = {}  # name -> (file, where its data starts, its header entry)
        for path in paths:
            if not path.endswith(HEADED):
                raise NeedsTorch(path)
            self.where.update({name: (path, start, entry) for name, (start, entry) in file_entries(path).items()})
        self.shapes = {name: tuple(entry["shape"]) for name, (_, _, entry) in self.where.items()}

    def values(self, name: str) -> list[float]:
        path, start, entry = self.where[name]
        begin, end = entry["data_offsets"]
        with open(path, "rb") as f:
            f.seek(start + begin)
            return floats(f.read(end - begin), entry["dtype"], f"{path}: {name}")


def floats(data: bytes, dtype: str, what: str) -> list[float]:
    """The numbers of a floating-point tensor's little-endian bytes."""
    if dtype == "BF16":
        count = len(data) // 2
        halves = struct.unpack(f"<{count}H", data)
        return list(struct.unpack(f"<{count}f", struct.pack(f"<{count}I", *(h << 16 for h in halves))))
    if dtype not in FLOAT_CODES:
        raise ModelError(f"{what}: expected a floating-point tensor, got {DTYPE_NAMES.get(dtype, dtype)}")
    code = FLOAT_CODES[dtype]
    return list(struct.unpack(f"<{len(data) // struct.calcsize(code)}{code}", data))
