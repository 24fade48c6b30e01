"""int8 weights for CPU decoding, as CTranslate2 keeps them: every linear layer, the token
embeddings and the output projection.

Weights are int8 with one scale per output row (symmetric: scale = max |row| / 127).
Linear layers run PyTorch's dynamic-quantization kernels (fbgemm), which quantize
each batch's activations on the fly. The token embeddings are an int8 table with
its row scales (`Int8Embedding`). An output projection tied to them (`tied_output`)
multiplies by a packed fbgemm copy of that table, the fastest product on every CPU
measured, unless the table is large and the CPU has int8 dot products (AVX512-VNNI,
models/cpu.py): then `Int8TiedOutput` multiplies by the embeddings' own table with
`torch._int_mm`, so the largest matrix of a big-vocabulary model is held once. Without
VNNI `torch._int_mm` is a reference loop (50x slower than float32), never used. Layer
norms, positions and the attention arithmetic stay float32.

Weights are quantized a block of rows at a time as they are read
(`quantized_rows`), so a 256k x 1024 embedding never exists in float32 in memory.
A model stored in int8 (`nmtdecode convert --quantize int8`: each weight's int8
rows, NAME, and their scales, NAME_scale) is not quantized again: its rows are
memory-mapped from the file as they are (models/weights.py, `QuantizedSource`).
"""

from __future__ import annotations

import threading
import warnings

import torch
from torch import nn
from torch.ao.nn.quantized.dynamic import Linear as DynamicInt8Linear

from . import cpu
from .weights import Source, on_huge_pages, release_pages

ROWS_AT_ONCE = 4096  # rows quantized per block: a few MB of float32 at a time
HUGE_PAGES_FROM = 16 << 20  # int8 elements from which fbgemm's input goes on 2 MB pages (`_packing_input`)


def quantize_rows(rows: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """rows (n, d) float -> int8 (n, d) and float32 scales (n,), symmetric per row (`rows` left as
    they are: quantized in a float32 copy)."""
    values = torch.empty(rows.shape, dtype=torch.int8, device=rows.device)
    scales = torch.empty(len(rows), device=rows.device)
    quantize_block_in_place(rows.to(torch.float32, copy=True), values, scales)
    return values, scales


def quantize_block_in_place(block: torch.Tensor, values: torch.Tensor, scales: torch.Tensor) -> None:
    """The one quantization rule: a float32 block (n, d) into values (n, d) int8 and scales (n,),
    each row over its largest magnitude / 127, rounded half to even; the block is overwritten (a
    load's scratch block: no temporaries, docs/speed.md#precisions-per-cpu-class)."""
    # each row's largest magnitude (two reductions: torch.aminmax took 10x their time here)
    torch.maximum(block.amax(dim=1), block.amin(dim=1).neg_(), out=scales)
    scales.clamp_min_(torch.finfo(torch.float32).tiny).div_(127)
    block.div_(scales[:, None]).round_().clamp_(-127, 127)
    values.copy_(block)


_reused = threading.local()  # per loading thread: the float32 block and int8 rows of `quantized_rows`


def _scratch(name: str, shape: tuple[int, int], dtype: torch.dtype) -> torch.Tensor:
    """A tensor of `shape` kept by this thread for the next call: a load that allocated and freed
    them layer after layer would leave its heap full of holes (hundreds of MB at NLLB-600M)."""
    size = shape[0] * shape[1]
    buffer = getattr(_reused, name, None)
    if buffer is None or buffer.numel() < size:
        buffer = torch.empty(size, dtype=dtype)
        setattr(_reused, name, buffer)
    return buffer[:size].view(shape)


def quantized_rows(
    source: Source, rows_at_once: int = ROWS_AT_ONCE, kept: bool = True
) -> tuple[torch.Tensor, torch.Tensor]:
    """A stored weight (models/weights.py: StoredTensor, InMemoryTensor, Joined) read and quantized a
    block of rows at a time: its int8 rows and their scales. Unless `kept`, the rows are this
    thread's scratch, valid until its next call (for a layer that copies them: `int8_linear`)."""
    n, d = source.shape
    values = torch.empty(n, d, dtype=torch.int8) if kept else _scratch("values", (n, d), torch.int8)
    scales = torch.empty(n)
    block = _scratch("block", (min(n, rows_at_once), d), torch.float32)
    for first in range(0, n, rows_at_once):
        part = block[: min(rows_at_once, n - first)]
        source.read_rows(first, part)
        rows = slice(first, first + len(part))
        quantize_block_in_place(part, values[rows], scales[rows])
    return values, scales


def int8_linear(values: torch.Tensor, scales: torch.Tensor, bias: torch.Tensor | None) -> nn.Module:
    """A dynamic-quantization linear layer (fbgemm) of int8 rows with per-row scales."""
    out_features, in_features = values.shape
    with warnings.catch_warnings():  # torch.ao.quantization announces its move to torchao
        warnings.simplefilter("ignore")
        # built 1 x 1, then given its weight: built at its size, it would pack a zero weight first
        layer = DynamicInt8Linear(1, 1, bias_=bias is not None, dtype=torch.qint8)
        layer.in_features, layer.out_features = in_features, out_features
        weight = _packing_input(values, scales)
        # `weight` is a copy: rows mapped from a converted model's file can leave this process
        # before the packing (they come back from the file if read again, as a tied table's
        # lookups do), so that the file's pages, the copy and the packed layer are not all held
        release_pages(values)
        layer.set_weight_bias(weight, bias)
    return layer


def _packing_input(values: torch.Tensor, scales: torch.Tensor) -> torch.Tensor:
    """What fbgemm packs: a per-row quantized copy of `values`. A large one is put on 2 MB pages
    before it is written: fbgemm reads it across every row for each group of columns, a TLB miss
    a row on 4 KB pages (docs/speed.md#precisions-per-cpu-class). The packed layer does not keep it."""
    weight = torch._empty_per_channel_affine_quantized(
        tuple(values.shape),
        scales=scales.double(),
        zero_points=torch.zeros(values.size(0), dtype=torch.long),
        axis=0,
        dtype=torch.qint8,
    )
    if values.numel() >= HUGE_PAGES_FROM:
        on_huge_pages(weight)
    as_int8 = torch.empty(0, dtype=torch.int8).set_(weight.untyped_storage(), 0, values.shape, weight.stride())
    as_int8.copy_(values)  # its bytes are the int8 rows
    return weight


class Int8Embedding(nn.Module):
    """Token embeddings as int8 rows with one scale each; a lookup gives float32 rows."""

    values: torch.Tensor  # buffers (register_buffer)
    scales: torch.Tensor

    def __init__(self, values: torch.Tensor, scales: torch.Tensor, activations_per_row: bool = False) -> None:
        super().__init__()
        self.register_buffer("values", values)  # (V, d) int8
        self.register_buffer("scales", scales)  # (V,) float32
        # CTranslate2's rows: a projection by them quantizes each row of activations alone, as its products do
        self.activations_per_row = activations_per_row

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        flat = ids.reshape(-1)
        rows = self.values.index_select(0, flat).float() * self.scales.index_select(0, flat)[:, None]
        return rows.view(*ids.shape, -1)

    def extra_repr(self) -> str:
        return f"{self.values.size(0)}, {self.values.size(1)}, int8 rows with scales"


class Int8TiedOutput(nn.Module):
    """The output projection tied to an Int8Embedding: logits = x E^T + b with the embedding's own
    int8 table, x quantized per row (an int8 product, then each entry scaled by its row's and its
    token's scale). The int32 products are made TOKENS_AT_ONCE tokens at a time, so the only
    vocabulary-wide tensor is the float32 logits."""

    TOKENS_AT_ONCE = 16384

    def __init__(self, embedding: Int8Embedding, bias: torch.Tensor | None) -> None:
        super().__init__()
        self.embedding = embedding
        self.bias = None if bias is None else nn.Parameter(bias, requires_grad=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        rows = x.reshape(-1, x.size(-1)).float()
        values, scales = quantize_rows(rows)
        table, vocab = self.embedding.values, self.embedding.values.size(0)
        logits = rows.new_empty(rows.size(0), vocab)
        for first in range(0, vocab, self.TOKENS_AT_ONCE):
            tokens = slice(first, first + self.TOKENS_AT_ONCE)
            torch.mul(torch._int_mm(values, table[tokens].t()), self.embedding.scales[tokens], out=logits[:, tokens])
        logits.mul_(scales[:, None])
        if self.bias is not None:
            logits.add_(self.bias)
        return logits.view(*x.shape[:-1], -1)


def tied_output(embedding: Int8Embedding, bias: torch.Tensor | None, copy_bytes: int) -> nn.Module:
    """The output projection tied to `embedding`: fbgemm on a packed copy of its table, or, on a CPU
    with int8 dot products, `Int8TiedOutput` on the table itself for a table above `copy_bytes` or
    CTranslate2's rows (its products quantize each row of activations alone)."""
    large = embedding.values.numel() > copy_bytes
    if cpu.current().int8_dot and (large or embedding.activations_per_row):
        return Int8TiedOutput(embedding, bias)
    return int8_linear(embedding.values, embedding.scales, bias)  # the mapped table's pages released
