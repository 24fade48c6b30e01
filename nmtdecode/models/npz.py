"""NumPy `.npz` archives read with the standard library alone: no numpy, and nothing unpickled.

A `.npz` (what `numpy.savez` and Marian write) is a zip archive holding one `.npy` file per
array, stored without compression. A `.npy` file is the magic string `\\x93NUMPY`, a format
version (1.0: a 2-byte header length; 2.0 and 3.0: 4 bytes), a header that is a Python dict
literal (`{'descr': '<f4', 'fortran_order': False, 'shape': (512, 512), }`), then the raw data
(numpy's `format.py`, "Format Version 1.0"). The header is read with `ast.literal_eval`, which
builds literals only; an array of Python objects (`descr` 'O', which numpy would unpickle) is
refused by name, as is anything else but little-endian numbers in C order.

`npz_entries` lists the arrays as safetensors headers list tensors (dtype code, shape, byte
range), so that the same readers (stored.py without torch, weights.StoredTensor with it) read
either file straight from disk into the memory that keeps the values.
"""

from __future__ import annotations

import ast
import math
import struct
import zipfile
from typing import BinaryIO

from ..options.bounded import shown
from .checkpoint import ModelError, note_read

NPY_MAGIC = b"\x93NUMPY"
MAX_NPY_HEADER = 1 << 16  # numpy writes headers of a few hundred bytes
LOCAL_HEADER = struct.Struct("<4s22xHH")  # zip local file header: signature ... name length, extra length
# .npy dtype descriptions -> safetensors dtype codes (stored.DTYPE_NAMES); '|' marks one-byte types.
# Marian stores its options (`special:model.yml`) as a string of int8 bytes.
DESCR_CODES = {
    "<f8": "F64",
    "<f4": "F32",
    "<f2": "F16",
    "<i8": "I64",
    "<i4": "I32",
    "<i2": "I16",
    "|i1": "I8",
    "|u1": "U8",
    "|S1": "U8",
    "|b1": "BOOL",
}
ITEM_SIZES = {"F64": 8, "F32": 4, "F16": 2, "I64": 8, "I32": 4, "I16": 2, "I8": 1, "U8": 1, "BOOL": 1}


def npz_entries(path: str) -> dict[str, tuple[int, dict]]:
    """Each array of the archive by name (`encoder_l1_self_Wq`, without `.npy`): where its data
    starts in the file, and its safetensors-style entry (dtype, shape, data_offsets from there)."""
    try:
        archive = zipfile.ZipFile(note_read(path))
    except (zipfile.BadZipFile, OSError) as e:
        raise ModelError(f"cannot read weights {path}: not a .npz archive ({e})") from None
    entries: dict[str, tuple[int, dict]] = {}
    with archive, open(path, "rb") as f:
        for info in archive.infolist():
            name = _array_name(info, path)
            if name in entries:
                raise ModelError(f"cannot read weights {path}: array {name} is stored twice")
            entries[name] = _entry(f, info, name, path)
    return entries


def _array_name(info: zipfile.ZipInfo, path: str) -> str:
    if not info.filename.endswith(".npy"):
        raise ModelError(f"cannot read weights {path}: {info.filename} is not an array (.npy) of a .npz")
    if info.flag_bits & 1:
        raise ModelError(f"cannot read weights {path}: {info.filename} is encrypted")
    if info.compress_type != zipfile.ZIP_STORED:  # numpy.savez_compressed; Marian never compresses
        raise ModelError(
            f"cannot read weights {path}: {info.filename} is compressed; only uncompressed "
            ".npz files are read (as Marian and numpy.savez write them)"
        )
    return info.filename.removesuffix(".npy")


def _entry(f: BinaryIO, info: zipfile.ZipInfo, name: str, path: str) -> tuple[int, dict]:
    """Where the array's data starts and its entry, the header checked against the member's size."""
    f.seek(info.header_offset)
    signature, name_length, extra_length = LOCAL_HEADER.unpack(f.read(LOCAL_HEADER.size).ljust(LOCAL_HEADER.size))
    if signature != b"PK\x03\x04":
        raise ModelError(f"cannot read weights {path}: the archive's entry for {name} is damaged")
    start = info.header_offset + LOCAL_HEADER.size + name_length + extra_length
    f.seek(start)
    try:
        descr, shape, header_size = read_npy_header(f)
    except ValueError as e:
        raise ModelError(f"cannot read weights {path}: array {name}: {e}") from None
    code = DESCR_CODES.get(descr)
    if code is None:
        what = "Python objects (numpy would unpickle them)" if "O" in descr else f"dtype {shown(descr)}"
        raise ModelError(f"cannot read weights {path}: array {name} holds {what}; only little-endian numbers are read")
    size = math.prod(shape) * ITEM_SIZES[code]
    if info.file_size != header_size + size:
        raise ModelError(
            f"cannot read weights {path}: array {name} has {info.file_size - header_size:,} bytes, "
            f"its shape {shape} needs {size:,} (truncated?)"
        )
    return start + header_size, {"dtype": code, "shape": list(shape), "data_offsets": [0, size]}


def read_npy_header(f: BinaryIO) -> tuple[str, tuple[int, ...], int]:
    """The dtype description, shape and header size of the `.npy` file at f's position."""
    magic = f.read(8)
    if len(magic) < 8 or magic[:6] != NPY_MAGIC:
        raise ValueError("not a .npy array (no \\x93NUMPY magic)")
    major = magic[6]
    if major not in (1, 2, 3):
        raise ValueError(f".npy format version {major} is unknown")
    length_format = "<H" if major == 1 else "<I"
    raw_length = f.read(struct.calcsize(length_format))
    (length,) = struct.unpack(length_format, raw_length.ljust(struct.calcsize(length_format), b"\0"))
    if length > MAX_NPY_HEADER:
        raise ValueError(f"a header of {length:,} bytes")
    text = f.read(length).decode("utf-8" if major == 3 else "latin-1")
    try:
        header = ast.literal_eval(text)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        raise ValueError("its header is not a dict literal") from None
    return (*_checked_header(header), 8 + len(raw_length) + length)


def _checked_header(header: object) -> tuple[str, tuple[int, ...]]:
    if not isinstance(header, dict) or set(header) != {"descr", "fortran_order", "shape"}:
        raise ValueError("its header is not a dict of descr, fortran_order and shape")
    descr, fortran, shape = header["descr"], header["fortran_order"], header["shape"]
    if not isinstance(descr, str):
        raise ValueError(f"descr {shown(descr)} is not a plain dtype (a structured array?)")
    if not isinstance(shape, tuple) or not all(
        isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in shape
    ):
        raise ValueError(f"shape {shown(shape)} is not a tuple of sizes")
    if not isinstance(fortran, bool):
        raise ValueError(f"fortran_order {shown(fortran)} is not a bool")
    if fortran and sum(n > 1 for n in shape) > 1:  # with one axis longer than 1 both orders are the same bytes
        raise ValueError("it is stored in Fortran (column-major) order")
    return descr, shape


def array_bytes(path: str, entries: dict, name: str) -> bytes:
    """The raw data of one (small) array: Marian's `special:model.yml`."""
    start, entry = entries[name]
    begin, end = entry["data_offsets"]
    with open(note_read(path), "rb") as f:
        f.seek(start + begin)
        return f.read(end - begin)
