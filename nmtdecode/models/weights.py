"""The torch half of loading a checkpoint: reading tensors, building the model, giving it its weights.

What a format reads without torch (its configuration, the record it returns, the
errors) is checkpoint.py's; this module holds what needs torch. Weights are read
from safetensors, or with `torch.load(weights_only=True)`, never by unpickling
code; a weight that is missing, unexpected or of the wrong shape fails by name.

A safetensors tensor is read when the model asks for it, straight into memory
the model keeps (`StoredTensor`), not through a memory map of the whole file:
a map stays resident while any tensor viewing it lives, so a model whose
weights are converted (packed, quantized, another dtype) would hold the file's
pages beside its own copy. Each chunk read is checked for non-finite values
while it is in the cache, so a checkpoint of NaNs fails at load instead of
decoding one word for every line.
"""

from __future__ import annotations

import ctypes
import functools
import io
import math
import mmap
import os
import pickle
import weakref
from typing import Iterable, Protocol, Sequence, runtime_checkable

import torch

from . import memory
from .architecture import TransformerConfig
from .checkpoint import ModelError, first_line, largest_demand, note_read, parameter_count, unpickling_reason
from .stored import DTYPE_NAMES, HEADED, SCALE_SUFFIX, StoredHeaders
from .transformer import Transformer

# The dtypes a checkpoint's weights may have (safetensors codes): floating point only. A tensor of
# integers in a weight's place is not converted to float: its bytes mean something else.
FLOAT_DTYPES = {"F64": torch.float64, "F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16}
CHUNK_BYTES = 16 << 20  # read and checked in pieces that stay in the CPU's cache
# A row's scale is its largest |value| / 127 (models/quantize.py): larger, its values are past float32's.
MAX_SCALE = torch.finfo(torch.float32).max / 127


class Source(Protocol):
    """A weight as a format gives it, read when asked: a stored tensor (`StoredTensor`,
    `InMemoryTensor`), or several joined (`Joined`), one transposed (`Transposed`), or int8 rows
    with their scales (`QuantizedSource`)."""

    @property
    def name(self) -> str: ...  # the stored tensor's (the first one's, when joined), for messages

    @property
    def shape(self) -> tuple[int, ...]: ...

    @property
    def dtype(self) -> torch.dtype | None: ...  # as stored; None: a StoredTensor of integers, which `check` refuses

    def check(self) -> None: ...  # ModelError unless it holds floating-point numbers, as many as its shape

    def read_rows(self, first: int, out: torch.Tensor) -> None: ...  # rows first .. first + len(out) into `out`


@runtime_checkable
class StoredInt8(Protocol):
    """A weight stored as int8 rows with a scale each, which int8 layers take as they are
    (`QuantizedSource`, formats/ct2.py's scaled rows)."""

    activations_per_row: bool  # products quantize each row of activations alone, as CTranslate2's (placement.py)

    def int8_rows(self) -> tuple[torch.Tensor, torch.Tensor]: ...  # the rows (int8) and their scales


class StoredSource(Source, Protocol):
    """A tensor as a weight file (or memory) holds it, which can also be seen with another shape."""

    def reshaped(self, shape: tuple[int, ...]) -> StoredSource: ...


class StoredTensor:
    """One tensor of a safetensors file (or one array of a .npz: the same raw little-endian bytes
    at a known place), read when asked (`read_rows`)."""

    def __init__(self, path: str, offset: int, entry: dict, name: str) -> None:
        self.path, self.name = path, name
        try:
            code, (begin, end) = entry["dtype"], entry["data_offsets"]
            self.shape = tuple(int(n) for n in entry["shape"])
        except (KeyError, TypeError, ValueError):
            raise ModelError(
                f"cannot read weights {path}: the header's entry for tensor {name} is not a tensor's"
            ) from None
        self.dtype_name, self.dtype = DTYPE_NAMES.get(code, str(code)), FLOAT_DTYPES.get(code)
        self.start, self.size = offset + begin, end - begin
        self.identity = file_identity(os.stat(path))  # as the header was read: each read checks it

    def check(self) -> None:
        """A weight must hold floating-point numbers, as many bytes as its shape needs."""
        need = math.prod(self.shape) * self._float_dtype().itemsize
        if self.size != need:
            raise ModelError(
                f"cannot read weights {self.path}: tensor {self.name} has {self.size:,} bytes, its "
                f"shape {self.shape} needs {need:,}"
            )

    def _float_dtype(self) -> torch.dtype:
        """The dtype of a weight's numbers (None in `dtype`: not floating-point, refused here)."""
        if self.dtype is None:
            raise ModelError(
                f"cannot read weights {self.path}: tensor {self.name} holds {self.dtype_name}; "
                "weights must be float32, float16 or bfloat16"
            )
        return self.dtype

    def reshaped(self, shape: tuple[int, ...]) -> "StoredTensor":
        """The same bytes seen with another shape of as many elements."""
        view = object.__new__(StoredTensor)
        view.__dict__.update(self.__dict__, shape=tuple(shape))
        return view

    def read_rows(self, first: int, out: torch.Tensor) -> None:
        """Rows first .. first + len(out) (along dim 0) into `out` (contiguous, any float dtype)."""
        dtype = self._float_dtype()
        row_bytes = math.prod(self.shape[1:]) * dtype.itemsize
        rows_per_chunk = max(1, CHUNK_BYTES // max(row_bytes, 1))
        with open(note_read(self.path), "rb", buffering=0) as f:
            for start in range(0, out.size(0), rows_per_chunk):
                rows = out[start : start + rows_per_chunk]
                chunk = rows if rows.dtype == dtype else torch.empty(rows.shape, dtype=dtype)
                self._read_into(f, self.start + (first + start) * row_bytes, chunk)
                check_finite(chunk, self)
                if chunk is not rows:
                    rows.copy_(chunk)
            self.check_unchanged(f)

    def mapped(self) -> torch.Tensor:
        """The int8 tensor's bytes where they lie in the file, memory-mapped rather than read
        (copy-on-write, never written): its pages come in as they are first used, from the page
        cache, and a table used as stored (the int8 token embeddings) costs no copy. The caller
        has checked the file's length (`check_length`): a mapping past its end would fault."""
        if self.dtype_name != "int8":
            raise ModelError(f"cannot read weights {self.path}: tensor {self.name} holds {self.dtype_name}, not int8")
        if self.size == 0:
            return torch.empty(self.shape, dtype=torch.int8)
        start = self.start - self.start % mmap.ALLOCATIONGRANULARITY
        with open(note_read(self.path), "rb") as f:
            self.check_unchanged(f)
            mapping = mmap.mmap(f.fileno(), self.start + self.size - start, access=mmap.ACCESS_COPY, offset=start)
        values = torch.frombuffer(mapping, dtype=torch.int8, count=self.size, offset=self.start - start).view(
            self.shape
        )
        key = id(values)
        _mapped[key] = weakref.ref(values, lambda _: _mapped.pop(key, None))
        return values

    def check_unchanged(self, f: io.IOBase) -> None:
        """The file open as `f` is the one whose header was read, unchanged: a model saved again (in
        place, or a new file renamed onto it) while the load reads it would mix two models' weights."""
        if file_identity(os.fstat(f.fileno())) != self.identity:
            raise ModelError(
                f"cannot read weights {self.path}: the file changed while it was read (saved again during "
                "the load?); load it again once it is complete"
            )

    def _read_into(self, f: io.RawIOBase, position: int, tensor: torch.Tensor) -> None:
        size = tensor.numel() * tensor.element_size()
        view = memoryview((ctypes.c_char * size).from_address(tensor.data_ptr())).cast("B")
        f.seek(position)
        done = 0
        while done < size:
            got = f.readinto(view[done:])
            if not got:
                raise ModelError(
                    f"cannot read weights {self.path}: the file ends inside tensor {self.name} (truncated?)"
                )
            done += got


def file_identity(status: os.stat_result) -> tuple[int, ...]:
    """What changes when a file is written or replaced: its device and inode, size and time of change."""
    return status.st_dev, status.st_ino, status.st_size, status.st_mtime_ns


_mapped: dict[int, weakref.ref] = {}  # the tensors StoredTensor.mapped made, by id, while they live


def release_pages(tensor: torch.Tensor) -> None:
    """Let the kernel drop a memory-mapped tensor's pages from this process (MADV_DONTNEED; they
    come back from the file when next read): for a weight read whole once into a copy (an int8
    layer's rows, which fbgemm packs; a tied table, read a few rows at a time after). Nothing for a
    tensor not mapped."""
    known = _mapped.get(id(tensor))
    if known is not None and known() is tensor:
        _advise(tensor, "MADV_DONTNEED")


def on_huge_pages(tensor: torch.Tensor) -> None:
    """Ask the kernel to back a new, not yet written tensor with 2 MB pages (MADV_HUGEPAGE, where
    transparent huge pages are on or `madvise`): one page-table entry for 512 of 4 KB. For a copy
    read across its rows, where every row would cost a TLB miss: fbgemm packing a large table."""
    _advise(tensor, "MADV_HUGEPAGE")


def _advise(tensor: torch.Tensor, advice: str) -> None:
    """madvise(2) over the pages that hold `tensor`'s elements; nothing where the system lacks `advice`."""
    if not hasattr(mmap, advice):
        return
    first = tensor.data_ptr() - tensor.data_ptr() % mmap.PAGESIZE  # in the same mapping (page-aligned)
    size = tensor.data_ptr() + tensor.numel() * tensor.element_size() - first
    _c_library().madvise(ctypes.c_void_p(first), ctypes.c_size_t(size), getattr(mmap, advice))


@functools.cache
def _c_library() -> ctypes.CDLL:
    """The C library this process runs with (its madvise), opened once: a load advises the pages
    of every int8 layer's weight."""
    return ctypes.CDLL(None)


class InMemoryTensor:
    """A tensor already read (a pickled checkpoint, a model built in memory), with the same face."""

    def __init__(self, tensor: torch.Tensor, name: str, where: str) -> None:
        self.tensor, self.name, self.where = tensor, name, where
        self.shape, self.dtype = tuple(tensor.shape), tensor.dtype

    def check(self) -> None:
        if not self.tensor.is_floating_point():
            raise ModelError(
                f"{self.where}: tensor {self.name} holds {str(self.dtype).removeprefix('torch.')}; "
                "weights must be float32, float16 or bfloat16"
            )

    def reshaped(self, shape: tuple[int, ...]) -> "InMemoryTensor":
        return InMemoryTensor(self.tensor.reshape(shape), self.name, self.where)

    def read_rows(self, first: int, out: torch.Tensor) -> None:
        rows = (self.tensor if self.tensor.dim() else self.tensor.view(1))[first : first + out.size(0)]
        check_finite(rows, self)
        out.copy_(rows)


class Joined:
    """Tensors joined on dim 0 (a fused projection made of the checkpoint's separate ones)."""

    def __init__(self, parts: Sequence[Source]) -> None:
        self.parts = parts
        self.shape = (sum(p.shape[0] for p in parts), *parts[0].shape[1:])
        self.dtype = parts[0].dtype
        self.name = parts[0].name

    def check(self) -> None:
        for part in self.parts:
            part.check()

    def read_rows(self, first: int, out: torch.Tensor) -> None:
        start = 0  # of the current part, in the joined rows
        for part in self.parts:
            lo, hi = max(first, start), min(first + out.size(0), start + part.shape[0])
            if lo < hi:
                part.read_rows(lo - start, out[lo - first : hi - first])
            start += part.shape[0]


class Transposed:
    """A stored matrix seen transposed (Marian's (in, out) linear weights as nn.Linear's (out, in)).
    Its rows are the stored columns: the stored rows are read a block at a time, so at most one
    block is held beside the destination."""

    def __init__(self, source: Source) -> None:
        self.source, self.name, self.dtype = source, source.name, source.dtype
        self.shape = tuple(reversed(source.shape))

    def check(self) -> None:
        self.source.check()

    def read_rows(self, first: int, out: torch.Tensor) -> None:
        stored_rows, width = self.source.shape
        block = max(1, CHUNK_BYTES // max(width * out.element_size(), 1))
        for start in range(0, stored_rows, block):
            chunk = torch.empty(min(block, stored_rows - start), width, dtype=self.dtype)
            self.source.read_rows(start, chunk)
            out[:, start : start + chunk.size(0)].copy_(chunk[:, first : first + out.size(0)].T)


class QuantizedSource:
    """A weight stored as int8 rows with one float32 scale each (NAME, NAME_scale): read as its
    float values (rows x scales) for a float placement, or handed to an int8 one as stored
    (`int8_rows`: the rows memory-mapped, models/weights.py `StoredTensor.mapped`)."""

    activations_per_row = False  # `nmtdecode convert`'s rows multiply as fbgemm's layer does

    def __init__(self, values: StoredTensor, scales: StoredSource) -> None:
        self.values, self.scales = values, scales
        self.name, self.shape, self.dtype = values.name, values.shape, torch.float32
        self._scales: torch.Tensor | None = None

    def check(self) -> None:
        """int8 rows, as many bytes as their shape, and a positive scale for each row that a row of
        float32 values gives (MAX_SCALE)."""
        where = f"cannot read weights {self.values.path}: tensor {self.name}"
        if self.values.dtype_name != "int8" or len(self.shape) != 2:
            stored = f"{self.values.dtype_name} {self.shape}"
            raise ModelError(f"{where} is stored with scales, so it must be int8 rows; it holds {stored}")
        if self.values.size != math.prod(self.shape):
            raise ModelError(
                f"{where} has {self.values.size:,} bytes, its shape {self.shape} needs {math.prod(self.shape):,}"
            )
        if tuple(self.scales.shape) != self.shape[:1]:
            raise ModelError(
                f"{where}: {self.scales.name} holds {tuple(self.scales.shape)} scales for {self.shape[0]} rows"
            )
        scales = self.row_scales()
        if not bool(((scales > 0) & (scales <= MAX_SCALE)).all()):
            raise ModelError(
                f"{where}: {self.scales.name} holds a scale that is not positive, or larger than any "
                "float32 row gives; the file is damaged"
            )

    def row_scales(self) -> torch.Tensor:
        if self._scales is None:
            self._scales = read(self.scales, torch.float32)  # its finiteness checked as it is read
        return self._scales

    def int8_rows(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The rows as stored (memory-mapped) and their scales."""
        self.check()
        return self.values.mapped(), self.row_scales()

    def read_rows(self, first: int, out: torch.Tensor) -> None:
        """Rows first .. first + len(out) as floats (each int8 row times its scale) into `out`."""
        rows = self.values.mapped()[first : first + out.size(0)]
        torch.mul(rows, self.row_scales()[first : first + out.size(0), None], out=out)


def stored_int8(sources: dict[str, StoredSource]) -> dict[str, Source]:
    """A weight file's tensors with each stored int8 weight and its scales made one source
    (QuantizedSource) under the weight's name."""
    scales = {n.removesuffix(SCALE_SUFFIX) for n in sources if n.endswith(SCALE_SUFFIX)}
    joined: dict[str, Source] = {}
    for name, source in sources.items():
        if name in scales and isinstance(source, StoredTensor):
            joined[name] = QuantizedSource(source, sources[name + SCALE_SUFFIX])
        elif not (name.endswith(SCALE_SUFFIX) and name.removesuffix(SCALE_SUFFIX) in sources):
            joined[name] = source
    return joined


def join(parts: Sequence[Source]) -> Source:
    """One tensor made of `parts` joined on dim 0 (no copy until it is read)."""
    return parts[0] if len(parts) == 1 else Joined(parts)


def check_finite(tensor: torch.Tensor, source: Source) -> None:
    if tensor.numel() and not bool(torch.isfinite(torch.stack(torch.aminmax(tensor))).all()):
        where = getattr(source, "path", None) or getattr(source, "where", "")  # the stored kinds name their file
        raise ModelError(
            f"{where}: tensor {source.name} holds NaN or infinite values; the checkpoint is damaged "
            "(or was saved after training diverged)"
        )


def read(source: Source, dtype: torch.dtype | None = None) -> torch.Tensor:
    """The whole of `source` in a tensor of `dtype` (default: as stored): a new one, or, for a
    tensor already in memory as asked, that tensor itself."""
    source.check()
    if (
        isinstance(source, InMemoryTensor)
        and source.dtype == (dtype or source.dtype)
        and source.tensor.is_contiguous()
        and source.tensor.device.type == "cpu"
    ):
        check_finite(source.tensor, source)
        return source.tensor
    out = torch.empty(source.shape, dtype=dtype or source.dtype)
    if out.numel():
        source.read_rows(0, out if out.dim() else out.view(1))
    return out


class StoredTensors:
    """A model's weight files as the view a format's `describe` reads (stored.py: `shapes`,
    `values(name)`), with each tensor to be read by the loader (`tensors`: name -> StoredTensor
    or InMemoryTensor)."""

    def __init__(self, files: list[str]) -> None:
        self.tensors: dict[str, StoredSource] = {}
        for path in files:
            if path.endswith(HEADED):
                headers = StoredHeaders([path])
                stored = {
                    name: StoredTensor(file, start, entry, name) for name, (file, start, entry) in headers.where.items()
                }
                check_length(path, stored.values())
                self.tensors.update(stored)
            else:
                self.tensors.update(in_memory(read_torch_weights(path), path))
        self.shapes = {name: tensor.shape for name, tensor in self.tensors.items()}

    def values(self, name: str) -> list[float]:
        return read(self.tensors[name], torch.float64).flatten().tolist()


def check_length(path: str, tensors: Iterable[StoredTensor]) -> None:
    """A file shorter than its header says (a copy cut short) fails before anything is read."""
    needed = max((t.start + t.size for t in tensors), default=0)
    size = os.path.getsize(path)
    if size < needed:
        raise ModelError(
            f"cannot read weights {path}: the file has {size:,} bytes, its header describes {needed:,} (truncated?)"
        )


def read_tensors(files: list[str]) -> StoredTensors:
    """The tensors of a model's weight files (safetensors, a .npz, or a pytorch_model.bin), to be
    read as the model is filled."""
    return StoredTensors(files)


def read_torch_weights(path: str) -> dict[str, torch.Tensor]:
    """A `pytorch_model.bin`-style file: tensors and plain containers only, never pickled code."""
    try:
        data = torch.load(note_read(path), map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as e:
        raise ModelError(f"cannot read weights {path}: refused: {unpickling_reason(str(e))}") from None
    except Exception as e:  # the unpickler raises many types; all mean "not readable as weights"
        raise ModelError(f"cannot read weights {path}: {type(e).__name__}: {first_line(str(e))}") from None
    if not isinstance(data, dict) or not all(isinstance(t, torch.Tensor) for t in data.values()):
        raise ModelError(f"cannot read weights {path}: expected a dict of tensors")
    return data


def in_memory(tensors: dict[str, torch.Tensor], where: str) -> dict[str, InMemoryTensor]:
    """Tensors already read, with the face of stored ones."""
    return {name: InMemoryTensor(tensor, name, where) for name, tensor in tensors.items()}


def shared_names(model: torch.nn.Module) -> dict[str, str]:
    """Parameter names that alias an earlier one (tied embeddings): alias -> first name."""
    first: dict[tuple[int, tuple[int, ...]], str] = {}  # (where its data is, its shape) -> its first name
    aliases: dict[str, str] = {}
    for name, tensor in model.state_dict(keep_vars=True).items():
        key = (tensor.data_ptr(), tuple(tensor.shape))
        if key in first:
            aliases[name] = first[key]
        else:
            first[key] = name
    return aliases


def check_weights(model: Transformer, sources: dict[str, Source], source: str) -> None:
    """The sources (our names -> stored tensors) against the model's parameters: names and shapes."""
    aliases = shared_names(model)
    expected = {n: t for n, t in model.state_dict().items() if n not in aliases}
    missing = sorted(set(expected) - set(sources))
    unexpected = sorted(set(sources) - set(expected) - set(aliases))
    if missing or unexpected:
        raise ModelError(
            f"{source}: weights do not match the architecture; missing: {missing[:5]}, unexpected: {unexpected[:5]}"
        )
    for name, tensor in expected.items():
        if tuple(sources[name].shape) != tuple(tensor.shape):
            raise ModelError(
                f"{source}: {name} has shape {tuple(sources[name].shape)}, the config implies {tuple(tensor.shape)}"
            )
        sources[name].check()


def allocate(cfg: TransformerConfig, source: str) -> Transformer:
    """The model's memory (Transformer.uninitialised), once `check_dimensions` passed; running out
    of memory is one line naming the config's largest demand, not the allocator's message."""
    try:
        return Transformer.uninitialised(cfg)
    except (MemoryError, RuntimeError) as e:
        if not memory.is_out_of_memory(e):
            raise
        what, size = largest_demand(cfg)
        whole, largest = (memory.readable_size(n * 4) for n in (parameter_count(cfg), size))
        raise ModelError(
            f"{source}: out of memory allocating the model ({whole} in float32); most of it for {what} ({largest})"
        ) from None
