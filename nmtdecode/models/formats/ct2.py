"""CTranslate2 model folders loaded onto our Transformer: ct2_config.py reads the folder without torch
(the spec, the vocabularies, which variables make each parameter); here each variable is read from
model.bin as the model is filled (models/weights.py), at the precision it is stored in.

float32, float16 and bfloat16 variables are read as safetensors tensors are (the same bytes at a
known place). int8 weights are CTranslate2's rows with a scale each, value = row / scale (scale =
127 / max |row|; ctranslate2/specs/model_spec.py): on a CPU in float32 they are kept as they are,
the int8 layers of models/quantize.py holding those very rows (their scale is the reciprocal,
max |row| / 127), with no dequantizing and quantizing again (placement.py makes their products
quantize each row of activations alone, as CTranslate2's do); where the placement names float
products (--gemm torch/onednn, --dtype float16/bfloat16, a GPU) they are dequantized as read.
int16 weights (one scale each) become int8 as CTranslate2 makes them on a CPU without int16
products; nothing here multiplies int16.
"""

from __future__ import annotations

from dataclasses import replace

import torch

from ..checkpoint import LoadedModel, ModelError, note_read
from ..placement import Placement, load_weights
from ..weights import InMemoryTensor, Joined, Source, StoredTensor, allocate, check_finite, join
from .ct2_binary import ModelBin, Variable
from .ct2_config import FORMAT, Ct2Facts, describe
from .marian_weights import Piece

__all__ = ["FORMAT", "load"]

INTEGER_DTYPES = {"I8": torch.int8, "I16": torch.int16}
KEPT_INT8_BACKENDS = ("auto", "int8")  # a placement leaving the CPU's products to be chosen, or asking for int8


class ScaledRows:
    """An int8 (or int16) weight of model.bin with its scales, rows of zeros appended (a Marian
    start row): dequantized as read (`read_rows`), or given as they are to int8 layers (`int8_rows`)."""

    dtype = torch.float32  # what read_rows gives

    def __init__(self, model_bin: ModelBin, variable: Variable, extra_rows: int = 0) -> None:
        self.path, self.name, self.variable = model_bin.path, variable.name, variable
        scale = model_bin.find(f"{variable.name}_scale")
        if scale is None or scale.dtype != "F32" or scale.shape not in ((), (variable.shape[0],)):
            raise ModelError(f"{self.path}: {variable.name} is {variable.dtype} without its float32 scale")
        self.scale, self.extra_rows = scale, extra_rows
        self.shape = (variable.shape[0] + extra_rows, *variable.shape[1:])

    def check(self) -> None:
        """Nothing to check before reading: the integers are finite, and the scales are checked as read."""

    def _scales(self) -> torch.Tensor:
        """CTranslate2's scales (127 / max |row|), one per stored row, each checked finite and > 0."""
        raw = _read(self.path, self.scale, torch.float32).reshape(-1)
        check_finite(raw, self)
        if not bool((raw > 0).all()):
            raise ModelError(f"{self.path}: {self.scale.name} holds a scale <= 0; the model is damaged")
        return raw.expand(self.variable.shape[0])

    def read_rows(self, first: int, out: torch.Tensor) -> None:
        stored = self.variable.shape[0]
        count = max(0, min(out.size(0), stored - first))
        rows = _read(self.path, self.variable, INTEGER_DTYPES[self.variable.dtype], first, count).to(torch.float32)
        rows /= self._scales()[first : first + count].view(-1, *[1] * (rows.dim() - 1))
        out[:count].copy_(rows)
        out[count:].zero_()

    def int8_rows(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The stored int8 rows and our scales for them (max |row| / 127), the appended rows zero.
        int16 rows become int8 as CTranslate2 makes them on a CPU without int16 products (its
        ensure_dtype: dequantized, then each row quantized with the scale 127 / max |row|)."""
        if self.variable.dtype == "I8":
            values, scales = _read(self.path, self.variable, torch.int8), self._scales().reciprocal()
        else:
            rows = torch.empty(self.variable.shape, dtype=torch.float32)
            self.read_rows(0, rows)
            largest = rows.abs().amax(dim=1)
            ct2_scales = 127 / largest.masked_fill_(largest == 0, 127.0)
            values = torch.round(rows * ct2_scales[:, None]).to(torch.int8)
            scales = ct2_scales.reciprocal()
        if self.extra_rows:
            values = torch.cat([values, values.new_zeros(self.extra_rows, *values.shape[1:])])
            scales = torch.cat([scales, scales.new_ones(self.extra_rows)])
        return values, scales.contiguous()


class JoinedScaledRows(Joined):
    """Scaled rows of several variables joined on dim 0 (a gated feed-forward's two first layers,
    linear_0 and linear_0_noact), as one weight: read joined, or given joined to an int8 layer."""

    def __init__(self, parts: list[ScaledRows]) -> None:
        super().__init__(parts)
        self.scaled = parts

    def int8_rows(self) -> tuple[torch.Tensor, torch.Tensor]:
        parts = [part.int8_rows() for part in self.scaled]
        return torch.cat([values for values, _ in parts]), torch.cat([scales for _, scales in parts])


def _read(path: str, variable: Variable, dtype: torch.dtype, first: int = 0, count: int | None = None) -> torch.Tensor:
    """Rows first .. first + count of a variable as a tensor of `dtype` (its stored type), read
    straight into the memory the tensor keeps."""
    rows = variable.shape[0] if variable.shape else 1
    count = rows - first if count is None else count
    row_bytes = variable.size // max(rows, 1)
    data = bytearray(count * row_bytes)
    with open(note_read(path), "rb", buffering=0) as f:
        f.seek(variable.offset + first * row_bytes)
        if f.readinto(data) != len(data):
            raise ModelError(f"cannot read weights {path}: the file ends inside {variable.name} (truncated?)")
    shape = (count, *variable.shape[1:]) if variable.shape else ()
    return torch.frombuffer(data, dtype=dtype).reshape(shape) if data else torch.empty(shape, dtype=dtype)


def sources(facts: Ct2Facts) -> dict[str, Source]:
    """Our parameters from model.bin's variables (ct2_config.recipes_for), read as the model is filled."""
    model_bin = facts.stored
    ours: dict[str, Source] = {}
    for name, pieces in facts.recipes.items():
        stored = [model_bin.variables[p.array] for p in pieces if p.array is not None]
        extra = sum(p.rows for p in pieces if p.array is None)
        if stored and stored[0].dtype in INTEGER_DTYPES:
            scaled = [ScaledRows(model_bin, v, extra if i == len(stored) - 1 else 0) for i, v in enumerate(stored)]
            ours[name] = scaled[0] if len(scaled) == 1 else JoinedScaledRows(scaled)
        else:
            ours[name] = join([_piece(model_bin, p, name, pieces) for p in pieces])
    return ours


def _piece(model_bin: ModelBin, piece: Piece, name: str, pieces: tuple[Piece, ...]) -> Source:
    if piece.array is None:
        width = next((model_bin.variables[p.array].shape[1:] for p in pieces if p.array is not None), ())
        return InMemoryTensor(torch.full((piece.rows, *width), piece.value), name, model_bin.path)
    variable = model_bin.variables[piece.array]
    if variable.dtype not in ("F32", "F16", "BF16"):
        raise ModelError(f"{model_bin.path}: {variable.name} holds {variable.dtype}, not weights")
    return StoredTensor(model_bin.path, 0, variable.entry, variable.name)


def stored_precision(facts: Ct2Facts, placement: Placement | None) -> Placement | None:
    """An int8 model decodes in int8 on a CPU in float32, unless the placement names float products."""
    if placement is None:  # a bare load (tests, inspect): float32, as every format's
        return None
    keep = facts.int8 and placement.device.type == "cpu" and placement.dtype == torch.float32
    return replace(placement, backend="int8") if keep and placement.backend in KEPT_INT8_BACKENDS else placement


def load(path: str, placement: Placement | None = None, tokenizer: str | None = None) -> LoadedModel:
    facts = describe(path, tokenizer=tokenizer)
    model = allocate(facts.cfg, path)
    placed = load_weights(model, sources(facts), path, stored_precision(facts, placement))
    return facts.loaded(model, path, placed.backend)
