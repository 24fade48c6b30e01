"""nmtdecode/models/npz.py: NumPy's .npz read with the standard library, against numpy's own
reader, and every archive it refuses (in one line, nothing unpickled)."""

import re
import struct
import zipfile

import numpy as np
import pytest
import torch

from nmtdecode.models.checkpoint import ModelError
from nmtdecode.models.npz import array_bytes, npz_entries
from nmtdecode.models.stored import StoredHeaders
from nmtdecode.models.weights import StoredTensors, read

ARRAYS = {
    "encoder_l1_self_Wq": np.arange(12, dtype=np.float32).reshape(3, 4) / 7,
    "half": np.linspace(-2, 2, 5, dtype=np.float16),
    "double_scalar": np.array(3.25, dtype=np.float64),
    "empty": np.zeros((0, 4), dtype=np.float32),
    "column": np.asfortranarray(np.arange(3, dtype=np.float32).reshape(3, 1)),  # Fortran order, one axis
    "special:model.yml": np.frombuffer(b"type: transformer\n\0", dtype=np.int8),
}


def test_arrays_are_read_as_numpy_reads_them(tmp_path):
    path = tmp_path / "model.npz"
    np.savez(path, **ARRAYS)
    entries = npz_entries(str(path))
    assert set(entries) == set(ARRAYS)
    for name, array in ARRAYS.items():
        start, entry = entries[name]
        assert tuple(entry["shape"]) == array.shape
        assert array_bytes(str(path), entries, name) == np.ascontiguousarray(array).tobytes()
    assert array_bytes(str(path), entries, "special:model.yml").rstrip(b"\0") == b"type: transformer\n"
    headers = StoredHeaders([str(path)])  # inspect's view, without torch
    assert headers.values("half") == ARRAYS["half"].astype(float).tolist()
    tensors = StoredTensors([str(path)]).tensors  # the loader's, read straight into the destination
    for name in ("encoder_l1_self_Wq", "half", "column", "empty"):
        assert torch.equal(read(tensors[name], torch.float32), torch.from_numpy(ARRAYS[name].astype(np.float32)))


def npy(header: str, data: bytes = b"", version: int = 1) -> bytes:
    """A .npy file with this header text (padded as numpy pads it)."""
    text = header.encode("latin-1") + b"\n"
    length = struct.pack("<H" if version == 1 else "<I", len(text))
    return b"\x93NUMPY" + bytes([version, 0]) + length + text + data


def archive(path, members: dict[str, bytes], compression=zipfile.ZIP_STORED):
    with zipfile.ZipFile(path, "w", compression=compression) as z:
        for name, data in members.items():
            z.writestr(name, data)
    return path


def saved(path, **arrays):
    np.savez(path, **arrays)
    return path


def saved_compressed(path, **arrays):
    np.savez_compressed(path, **arrays)
    return path


REFUSED = {
    "objects": (lambda p: saved(p, w=np.array([{"a": 1}], dtype=object)), "holds Python objects"),
    "compressed": (lambda p: saved_compressed(p, w=np.ones(3, dtype=np.float32)), "is compressed"),
    "big-endian": (lambda p: saved(p, w=np.ones(3, dtype=">f4")), "holds dtype '>f4'"),
    "fortran": (lambda p: saved(p, w=np.asfortranarray(np.ones((2, 3), dtype=np.float32))), "Fortran"),
    "structured": (lambda p: saved(p, w=np.zeros(2, dtype=[("a", "<f4")])), "not a plain dtype"),
    "truncated": (
        lambda p: archive(p, {"w.npy": npy("{'descr': '<f4', 'fortran_order': False, 'shape': (4,), }", b"\0" * 12)}),
        "has 12 bytes, its shape (4,) needs 16",
    ),
    "code in the header": (
        lambda p: archive(p, {"w.npy": npy("__import__('os').system('false')")}),
        "not a dict literal",
    ),
    "no magic": (lambda p: archive(p, {"w.npy": b"PK not an array"}), "no \\x93NUMPY magic"),
    "version 9": (lambda p: archive(p, {"w.npy": npy("{}", version=9)}), "version 9 is unknown"),
    "not an array": (lambda p: archive(p, {"notes.txt": b"hello"}), "notes.txt is not an array"),
    "not a zip": (lambda p: p.write_bytes(b"\x93NUMPY not a zip") and p, "not a .npz archive"),
}


@pytest.mark.parametrize("case", list(REFUSED))
def test_what_is_not_plain_numbers_is_refused_by_name(tmp_path, case):
    make, message = REFUSED[case]
    path = tmp_path / "model.npz"
    make(path)
    with pytest.raises(ModelError, match=re.escape(message)) as error:
        npz_entries(str(path))
    assert "\n" not in str(error.value) and str(error.value).startswith(f"cannot read weights {path}")


def test_a_large_header_is_refused_before_it_is_read(tmp_path):
    path = archive(tmp_path / "model.npz", {"w.npy": b"\x93NUMPY\x02\x00" + struct.pack("<I", 1 << 30)})
    with pytest.raises(ModelError, match="a header of 1,073,741,824 bytes"):
        npz_entries(str(path))
