"""A safetensors header is checked before any tensor is read (models/stored.py): every entry a
tensor's, its data_offsets inside the data section and as long as its shape, no two tensors on
the same bytes, no byte left over. Each file below is refused in one line naming the file and the
tensor; the same checks apply to `inspect` (headers only) and to a load."""

import json
import struct

import pytest
import torch
from safetensors.torch import save_file

from nmtdecode.models.checkpoint import ModelError
from nmtdecode.models.stored import read_header


def written(path, header: dict, data: bytes) -> str:
    text = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(text)) + text + data)
    return str(path)


# Two float32 tensors, a (2, 2) then b (3,): 16 + 12 bytes of data.
GOOD = {
    "a": {"dtype": "F32", "shape": [2, 2], "data_offsets": [0, 16]},
    "b": {"dtype": "F32", "shape": [3], "data_offsets": [16, 28]},
}


def changed(**entries) -> dict:
    return {**GOOD, **entries}


def test_a_header_as_the_safetensors_library_writes_it_is_read(tmp_path):
    path = tmp_path / "model.safetensors"
    save_file({"a": torch.ones(2, 2), "b": torch.zeros(3), "empty": torch.zeros(0, 4)}, str(path))
    header, start = read_header(str(path))
    assert {name: entry["shape"] for name, entry in header.items()} == {"a": [2, 2], "b": [3], "empty": [0, 4]}
    assert start + 28 == path.stat().st_size
    assert read_header(written(tmp_path / "mine.safetensors", GOOD, bytes(28)))[0] == GOOD  # and a hand-written one


OFFSETS = {
    "reaching into the header": (
        changed(a={"dtype": "F32", "shape": [2, 2], "data_offsets": [-8, 8]}),
        "the header's entry for tensor 'a' is not a tensor's",
    ),
    "shifted by 4": (
        {n: {**e, "data_offsets": [o + 4 for o in e["data_offsets"]]} for n, e in GOOD.items()},
        "tensor 'a' (data_offsets [4, 20]) starts at byte 4, after a hole",
    ),
    "overlapping": (
        changed(b={"dtype": "F32", "shape": [3], "data_offsets": [8, 20]}),
        "tensor 'b' (data_offsets [8, 20]) overlaps tensor 'a'",
    ),
    "begin after end": (
        changed(b={"dtype": "F32", "shape": [3], "data_offsets": [28, 16]}),
        "tensor 'b': data_offsets [28, 16] hold -12 bytes, its shape (3,) of float32 needs 12",
    ),
    "shorter than the shape": (
        changed(b={"dtype": "F32", "shape": [4], "data_offsets": [16, 28]}),
        "tensor 'b': data_offsets [16, 28] hold 12 bytes, its shape (4,) of float32 needs 16",
    ),
    "float offsets": (
        changed(a={"dtype": "F32", "shape": [2, 2], "data_offsets": [0.0, 16.0]}),
        "the header's entry for tensor 'a' is not a tensor's",
    ),
    "boolean offsets": (
        changed(a={"dtype": "F32", "shape": [2, 2], "data_offsets": [False, True]}),
        "the header's entry for tensor 'a' is not a tensor's",
    ),
    "three offsets": (
        changed(a={"dtype": "F32", "shape": [2, 2], "data_offsets": [0, 16, 16]}),
        "the header's entry for tensor 'a' is not a tensor's",
    ),
    "past the end of the file": (
        changed(b={"dtype": "F32", "shape": [3 + (1 << 30)], "data_offsets": [16, 28 + (4 << 30)]}),
        "its data section has 28 bytes, its header describes 4,294,967,324 (truncated?)",
    ),
    "leaving bytes no tensor describes": (
        changed(b={"dtype": "F32", "shape": [2], "data_offsets": [16, 24]}),
        "its data section has 28 bytes, its header describes 24 that no tensor describes",
    ),
}
TYPES = {  # entries of the wrong type: before, Python's own messages (list indices must be integers...)
    "a list": changed(a=[0, 16]),
    "a number": changed(a=5),
    "a string": changed(a="F32"),
    "a shape of strings": changed(a={"dtype": "F32", "shape": ["2", "2"], "data_offsets": [0, 16]}),
    "a negative size": changed(a={"dtype": "F32", "shape": [-2, -2], "data_offsets": [0, 16]}),
    "a dtype that is a list": changed(a={"dtype": ["F32"], "shape": [2, 2], "data_offsets": [0, 16]}),
    "no data_offsets": changed(a={"dtype": "F32", "shape": [2, 2]}),
    "data_offsets a mapping": changed(a={"dtype": "F32", "shape": [2, 2], "data_offsets": {"0": 16}}),
}


@pytest.mark.parametrize("case", list(OFFSETS) + list(TYPES))
def test_a_header_the_format_does_not_allow_is_one_line_naming_the_file(tmp_path, case):
    header, message = (
        OFFSETS[case] if case in OFFSETS else (TYPES[case], "the header's entry for tensor 'a' is not a tensor's")
    )
    path = written(tmp_path / "model.safetensors", header, bytes(28))
    with pytest.raises(ModelError) as error:
        read_header(path)
    text = str(error.value)
    assert text.startswith(f"cannot read weights {path}: ") and message in text and "\n" not in text


def test_a_dtype_safetensors_does_not_name_is_refused(tmp_path):
    path = written(
        tmp_path / "w.safetensors", changed(a={"dtype": "F128", "shape": [2, 2], "data_offsets": [0, 16]}), bytes(28)
    )
    with pytest.raises(ModelError, match="tensor 'a' has dtype 'F128', which safetensors does not name"):
        read_header(path)


def test_a_header_nested_deeper_than_the_parser_names_its_file(tmp_path):
    deep = b"[" * 200_000 + b"]" * 200_000
    path = tmp_path / "model.safetensors"
    path.write_bytes(struct.pack("<Q", len(deep)) + deep)
    with pytest.raises(ModelError, match=f"^cannot read weights {path}: its header nests too deeply"):
        read_header(str(path))
