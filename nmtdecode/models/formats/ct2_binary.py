"""A CTranslate2 `model.bin` read without torch: its header and each variable's name, shape, dtype
and place in the file, and the aliases; the values of the scalars only (the spec's attributes:
`encoder/num_heads`, `decoder/pre_norm`, ...), so that `nmtdecode inspect` reads nothing else.

The layout (ctranslate2/specs/model_spec.py `_serialize`, read by src/models/model.cc), all little
endian, each string a uint16 length counting a final NUL, then its UTF-8 bytes and the NUL:

    uint32 binary version (1 to 6)
    string spec name, uint32 spec revision                 (version >= 2; else revision 1)
    uint32 variable count, then for each variable:
        string name, uint8 rank, uint32 x rank shape,
        uint8 dtype id (float32 0, int8 1, int16 2, int32 3, float16 4, bfloat16 5) and
        uint32 byte count                                   (version >= 4)
        or uint8 item size and uint32 element count         (older: 4 float32, 2 int16, 1 int8)
        the bytes
    uint32 alias count, then (alias, variable name) pairs   (version >= 3)

An alias names a variable stored once under another name (tied embeddings, equal layer norms);
a quantized variable's scale is `NAME_scale`, aliased with it. Every count, rank and byte range
is checked against the file before anything relies on it.
"""

from __future__ import annotations

import math
import os
import struct
from dataclasses import dataclass
from typing import BinaryIO

from ..checkpoint import ModelError, note_read

BINARY_VERSIONS = range(1, 7)  # CTranslate2 4.x writes 6
# dtype ids (include/ctranslate2/types.h) -> the codes of stored.DTYPE_NAMES
DTYPES = {0: "F32", 1: "I8", 2: "I16", 3: "I32", 4: "F16", 5: "BF16"}
ITEM_SIZES = {"F32": 4, "I8": 1, "I16": 2, "I32": 4, "F16": 2, "BF16": 2}
OLD_ITEM_SIZES = {4: "F32", 2: "I16", 1: "I8"}  # binary versions 1 to 3 give an item size
SCALAR_FORMATS = {"F32": "<f", "I8": "<b", "I16": "<h", "I32": "<i", "F16": "<e"}
MAX_VARIABLES = 1 << 20  # a 24-layer model has about 600
MAX_RANK = 8
MAX_ALIAS_HOPS = 16


@dataclass(frozen=True)
class Variable:
    """One stored variable: where its bytes are, and its value when it is a scalar."""

    name: str
    shape: tuple[int, ...]
    dtype: str  # a code of stored.DTYPE_NAMES: F32, I8, I16, I32, F16, BF16
    offset: int  # of its first byte in model.bin
    size: int  # bytes
    value: float | None = None  # a scalar's (bfloat16 scalars: None; no spec writes one)

    @property
    def entry(self) -> dict:
        """Its safetensors-style header entry, data offsets from the file's start (stored.py)."""
        return {"dtype": self.dtype, "shape": list(self.shape), "data_offsets": [self.offset, self.offset + self.size]}


@dataclass
class ModelBin:
    """What model.bin holds: its versions, its variables by name, its aliases."""

    path: str
    binary_version: int
    spec: str
    revision: int
    variables: dict[str, Variable]
    aliases: dict[str, str]  # alias -> the variable's stored name

    def find(self, name: str) -> Variable | None:
        """The variable `name` stands for, through its aliases (a quantized weight's `_scale`
        follows its weight's alias, as CTranslate2 registers it), or None."""
        for _ in range(MAX_ALIAS_HOPS):
            if name in self.variables:
                return self.variables[name]
            base = name.removesuffix("_scale")
            if name in self.aliases:
                name = self.aliases[name]
            elif base != name and base in self.aliases:
                name = self.aliases[base] + "_scale"
            else:
                return None
        raise ModelError(f"{self.path}: the aliases of {name} go round in a circle")

    def text(self, name: str) -> str | None:
        """A string attribute (an int8 vector of UTF-8 bytes: older binary versions store the
        special tokens so), or None."""
        found = self.find(name)
        if found is None or found.dtype != "I8" or len(found.shape) != 1:
            return None
        with open(self.path, "rb") as f:
            f.seek(found.offset)
            return f.read(found.size).decode("utf-8", errors="replace")

    def stored_name(self, name: str) -> str | None:
        found = self.find(name)
        return None if found is None else found.name

    def scalar(self, name: str, default: float | None = None) -> float | None:
        found = self.find(name)
        return default if found is None else found.value

    @property
    def names(self) -> set[str]:
        """Every name a variable can be asked for by: stored names and aliases."""
        return set(self.variables) | set(self.aliases)

    @property
    def shapes(self) -> dict[str, tuple[int, ...]]:
        return {name: v.shape for name, v in self.variables.items()}


class _Reader:
    """model.bin's header fields, each read checked against the file's end."""

    def __init__(self, f: BinaryIO, path: str, size: int) -> None:
        self.f, self.path, self.size = f, path, size

    def take(self, count: int, what: str) -> bytes:
        data = self.f.read(count)
        if len(data) != count:
            raise ModelError(f"{self.path} is incomplete: it ends inside {what} (truncated?)")
        return data

    def number(self, fmt: str, what: str) -> int:
        return struct.unpack(fmt, self.take(struct.calcsize(fmt), what))[0]

    def string(self, what: str) -> str:
        length = self.number("<H", what)
        if length == 0:
            raise ModelError(f"{self.path}: {what} has an invalid length 0")
        raw = self.take(length, what)
        try:
            return raw[:-1].decode("utf-8")
        except UnicodeDecodeError:
            raise ModelError(f"{self.path}: {what} is not UTF-8 text") from None

    def skip(self, count: int, what: str) -> int:
        """Where `count` bytes start, and past them."""
        start = self.f.tell()
        if start + count > self.size:
            raise ModelError(
                f"{self.path} is incomplete: {what} needs {count:,} bytes at {start:,}, "
                f"the file has {self.size:,} (truncated?)"
            )
        self.f.seek(count, os.SEEK_CUR)
        return start


def read_model_bin(path: str) -> ModelBin:
    """model.bin's header, variables and aliases (ModelError naming the file when it is not one)."""
    try:
        size = os.path.getsize(note_read(path))
        with open(path, "rb") as f:
            return _read(_Reader(f, path, size))
    except OSError as e:
        raise ModelError(f"cannot read {path}: {e.strerror}") from None


def _read(reader: _Reader) -> ModelBin:
    version = reader.number("<I", "the binary version")
    if version not in BINARY_VERSIONS:
        raise ModelError(
            f"{reader.path}: binary version {version} is not one CTranslate2 has written "
            f"(1 to {BINARY_VERSIONS[-1]}): not a CTranslate2 model.bin, or one of a newer CTranslate2"
        )
    spec, revision = "", 1
    if version >= 2:
        spec, revision = reader.string("the spec name"), reader.number("<I", "the spec revision")
    count = reader.number("<I", "the variable count")
    if count > MAX_VARIABLES:
        raise ModelError(f"{reader.path}: {count:,} variables, more than any model holds")
    variables: dict[str, Variable] = {}
    for _ in range(count):
        variable = _variable(reader, version)
        if variable.name in variables:
            raise ModelError(f"{reader.path}: variable {variable.name} is stored twice")
        variables[variable.name] = variable
    aliases = {}
    if version >= 3:
        for _ in range(reader.number("<I", "the alias count")):
            alias, name = reader.string("an alias"), reader.string("an alias's variable")
            aliases[alias] = name
    return ModelBin(reader.path, version, spec, revision, variables, aliases)


def _variable(reader: _Reader, version: int) -> Variable:
    name = reader.string("a variable name")
    rank = reader.number("<B", f"the rank of {name}")
    if rank > MAX_RANK:
        raise ModelError(f"{reader.path}: variable {name} has rank {rank}")
    shape = struct.unpack(f"<{rank}I", reader.take(4 * rank, f"the shape of {name}"))
    if version >= 4:
        dtype = DTYPES.get(reader.number("<B", f"the dtype of {name}"))
        size = reader.number("<I", f"the size of {name}")
    else:
        dtype = OLD_ITEM_SIZES.get(reader.number("<B", f"the item size of {name}"))
        size = reader.number("<I", f"the size of {name}") * ITEM_SIZES.get(dtype or "", 0)
    if dtype is None:
        raise ModelError(f"{reader.path}: variable {name} has a dtype CTranslate2 does not write")
    if size != math.prod(shape) * ITEM_SIZES[dtype]:
        raise ModelError(
            f"{reader.path}: variable {name} has {size:,} bytes, its shape {shape} needs "
            f"{math.prod(shape) * ITEM_SIZES[dtype]:,} (an invalid payload size)"
        )
    if rank == 0 and dtype in SCALAR_FORMATS:
        offset = reader.f.tell()
        return Variable(name, shape, dtype, offset, size, reader.number(SCALAR_FORMATS[dtype], name))
    return Variable(name, shape, dtype, reader.skip(size, f"variable {name}"), size)
