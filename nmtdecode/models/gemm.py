"""Matrix products on the CPU: torch's own `linear`, or oneDNN with weights packed once at load.

torch's float32 `linear` calls its BLAS (MKL's sgemm on x86 builds). MKL picks
its fastest kernels by CPU vendor, and on other vendors' CPUs it can run far
below what the hardware does, where oneDNN with prepacked weights does not
(`python bench/experiments/gemm.py`). CTranslate2 makes the same split, MKL on Intel CPUs
and oneDNN elsewhere. Which one wins depends on the machine, so `auto` measures
both on the model's own shapes once and remembers the answer per machine
(`cache_dir()`/gemm.json); `--gemm onednn|torch` forces either.

oneDNN is chosen only when its products are clearly faster (ONEDNN_MARGIN),
because it has costs the steady-state measurement does not see: the first
product at each new row count compiles a kernel (a batch whose sentences
finish one by one meets ~30 row counts), and the kernel cache takes memory.
The measurements behind these choices are in docs/speed.md#what-the-code-chooses-per-machine.
"""

from __future__ import annotations

import json
import math
import os
import time
from typing import NamedTuple, TypeGuard

import torch
from torch import nn

from . import cpu
from .cpu import cpu_description  # noqa: F401  (the benchmark's scripts import it from here)

PROBE_ROWS = (8, 32, 160)  # decoder rows per step: a few sentences, a batch of 32 at beam 1, at beam 5
# A wider product is measured on this many of its rows and counted as many times as it holds such
# blocks: a 256k-token output projection costs one 4k block's random weights, not a gigabyte's.
PROBE_WIDTH = 4096
# The probe cycles through this many bytes of weights at most (per backend): a small model's every
# layer, and for a larger one more than a last-level cache holds, so that each product reads its
# weight from where the step's would come (measure).
PROBE_BYTES = 64 << 20
ONEDNN_MARGIN = 0.9  # auto picks oneDNN when its products take at most 90% of torch's time
# A probe whose ratio lands this close to the margin is followed by more (PROBES in all, summed):
# one probe's noise would otherwise decide for as long as the cache keeps it.
CLOSE_CALL = 0.1
PROBES = 3


def onednn_available() -> bool:
    """Whether this torch build has oneDNN's linear (models/cpu.py asks)."""
    return cpu.current().onednn


# Activations oneDNN applies inside the product (a "post-op"): (name, algorithm) of _linear_pointwise.
POST_OPS = {"relu": ("relu", ""), "gelu": ("gelu", "none"), "gelu_tanh": ("gelu", "tanh"), "silu": ("swish", "")}


# The tracer (models/traced_step.py) cannot record torch.ops.mkldnn._linear_pointwise called from
# Python (its Scalar?[] argument); a TorchScript function making the same call can be recorded.
_TRACEABLE = torch.jit.CompilationUnit("""
def packed_linear(x: Tensor, w: Tensor, b: Optional[Tensor], post_op: str, algorithm: str):
    scalars: List[Optional[number]] = []
    return torch.ops.mkldnn._linear_pointwise(x, w, b, post_op, scalars, algorithm)
""")


# A plain weight is multiplied a block of its rows at a time: one of this many bytes of it, which
# oneDNN reorders at every product (a whole 256k-token projection would be a gigabyte of scratch
# each step), or, swapped, one that makes this many bytes of the transposed result.
PLAIN_BLOCK_BYTES = 16 << 20
# Up to this many rows (a decoding step's: 16 sentences at beam 4), a plain weight's product runs
# with the roles swapped (PackedLinear._swapped); above it, by blocks (docs/speed.md).
SWAPPED_MAX_ROWS = 64
# A swapped product's result is transposed into place this many bytes of it at a time: pieces
# that stay in a core's cache while they are written out (docs/speed.md). A traced step keeps
# the blocks and pieces of the rows it was recorded with (traced_step.py).
TRANSPOSE_CHUNK_BYTES = 512 << 10


class PackedLinear(nn.Module):
    """y = activation(x W^T + b) through oneDNN (CPU, float32 or bfloat16); `activation` is one of
    POST_OPS or None. With `pack` (the rule) W is held in oneDNN's packed layout, which replaces
    the plain weight; without it W stays the plain tensor given, shared with what else reads it
    (an output projection tied to the token embeddings, whose lookup needs plain rows): a
    decoding step's few rows multiply it with the roles swapped, more rows by blocks of it that
    oneDNN reorders at each product; either is much faster than torch's MKL product where MKL
    does not know the CPU (docs/speed.md)."""

    packed_weight: torch.Tensor  # a buffer (register_buffer), with `pack`

    def __init__(
        self, weight: torch.Tensor, bias: torch.Tensor | None = None, activation: str | None = None, pack: bool = True
    ) -> None:
        super().__init__()
        self.out_features, self.in_features = weight.shape
        self.packed = pack
        if pack:
            self.register_buffer(
                "packed_weight", torch.ops.mkldnn._reorder_linear_weight(weight.detach(), None), persistent=False
            )
        else:
            self.plain_weight = weight  # a Parameter of another module: not registered twice
        self.bias = None if bias is None else nn.Parameter(bias.detach(), requires_grad=False)
        self.activation = activation
        self.post_op, self.algorithm = POST_OPS[activation] if activation else ("none", "")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.packed:
            return self._product(x, self.packed_weight, self.bias)
        if self.swaps(x.numel() // self.in_features):
            return self._swapped(x)
        return self._by_blocks(x)

    def swaps(self, rows: int) -> bool:
        """Whether a product of this many rows runs with the roles swapped (a plain weight's, with
        few rows, and no activation to fuse); a recorded step (traced_step.py) is recorded once
        for each answer."""
        return not self.packed and self.activation is None and rows <= SWAPPED_MAX_ROWS

    def _product(self, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
        if torch.jit.is_tracing():  # the same product, in the form the tracer records (per thread)
            return _TRACEABLE.packed_linear(x, weight, bias, self.post_op, self.algorithm)
        return torch.ops.mkldnn._linear_pointwise(x, weight, bias, self.post_op, [], self.algorithm)

    def _swapped(self, x: torch.Tensor) -> torch.Tensor:
        """The plain weight's product as (W x^T)^T: oneDNN reads W as its input, as it lies in
        memory, and reorders only the few rows of x, its "weight"; each block's (block, rows)
        result is transposed into place. Reordering W instead reads and writes the whole weight
        at every step, a gigabyte for a 256k-token projection, for a product that reads it once."""
        rows = x.reshape(-1, self.in_features)
        block = max(1, PLAIN_BLOCK_BYTES // (rows.size(0) * rows.element_size()))
        out = rows.new_empty(rows.size(0), self.out_features)
        for first in range(0, self.out_features, block):
            result = self._product(self.plain_weight[first : first + block], rows, None)
            transpose_into(out[:, first : first + result.size(0)], result)
        if self.bias is not None:
            out.add_(self.bias)
        return out if x.dim() == 2 else out.view(*x.shape[:-1], self.out_features)

    def _by_blocks(self, x: torch.Tensor) -> torch.Tensor:
        """The plain weight's product, PLAIN_BLOCK_BYTES of its rows at a time, into one output."""
        rows = max(1, PLAIN_BLOCK_BYTES // (self.in_features * self.plain_weight.element_size()))
        if rows >= self.out_features:
            return self._product(x, self.plain_weight, self.bias)
        out = x.new_empty(*x.shape[:-1], self.out_features)
        for first in range(0, self.out_features, rows):
            block = slice(first, first + rows)
            bias = None if self.bias is None else self.bias[block]
            out[..., block] = self._product(x, self.plain_weight[block], bias)
        return out

    def extra_repr(self) -> str:
        fused = f", then {self.activation}" if self.activation else ""
        layout = "packed" if self.packed else "plain (shared)"
        return f"in_features={self.in_features}, out_features={self.out_features}, onednn {layout}{fused}"


def transpose_into(target: torch.Tensor, source: torch.Tensor) -> None:
    """target[:] = source.t(), TRANSPOSE_CHUNK_BYTES of source at a time: copied whole, a 16 MB
    result scatters each of its rows across all of target's rows, each a megabyte long for a
    256k-token vocabulary, and the copy is up to 3 times slower (docs/speed.md)."""
    chunk = max(1, TRANSPOSE_CHUNK_BYTES // (source.size(1) * source.element_size()))
    for first in range(0, source.size(0), chunk):
        piece = source[first : first + chunk]
        target[:, first : first + piece.size(0)] = piece.t()


def linear_shapes(model: nn.Module) -> dict[tuple[int, int], int]:
    """(out_features, in_features) -> how many linear layers have that shape."""
    shapes: dict[tuple[int, int], int] = {}
    for module in model.modules():
        if type(module) is nn.Linear:
            key = (module.out_features, module.in_features)
            shapes[key] = shapes.get(key, 0) + 1
    return shapes


def probed_shapes(shapes: dict[tuple[int, int], int]) -> dict[tuple[int, int], float]:
    """The shapes `measure` times, each with its weight in the step: products wider than
    PROBE_WIDTH are timed on PROBE_WIDTH rows of their weight and counted in proportion."""
    probed: dict[tuple[int, int], float] = {}
    for (out_features, in_features), count in shapes.items():
        width = min(out_features, PROBE_WIDTH)
        probed[width, in_features] = probed.get((width, in_features), 0.0) + count * out_features / width
    return probed


def probe_copies(probed: dict[tuple[int, int], float], itemsize: int) -> dict[tuple[int, int], int]:
    """How many distinct weights of each probed shape `measure` cycles through: one per layer
    (a wide product's blocks counted up), scaled down alike where they would pass PROBE_BYTES."""
    wanted = {shape: math.ceil(count) for shape, count in probed.items()}
    total = sum(n * math.prod(shape) * itemsize for shape, n in wanted.items())
    scale = min(1.0, PROBE_BYTES / total) if total else 1.0
    return {shape: max(1, round(n * scale)) for shape, n in wanted.items()}


def measure(shapes: dict[tuple[int, int], int], dtype: torch.dtype, budget: float = 0.05) -> dict[str, float]:
    """Seconds one decoding step's products would take with each backend, on random data.

    A pass multiplies every probed weight once, shapes taken in turn, as a step goes through
    its layers: each product finds in the cache what the ones before it left, not its own
    weight of a moment ago (timing one product again and again favoured torch on small
    models: docs/speed.md#what-the-code-chooses-per-machine). Passes of the two backends
    alternate, at least 3 each and about `budget` seconds per row count; a pass's time per
    shape is counted as many times as the step has that shape (`probed_shapes`)."""
    probed = probed_shapes(shapes)
    copies = probe_copies(probed, dtype.itemsize)
    generator = torch.Generator().manual_seed(0)
    totals = {"torch": 0.0, "onednn": 0.0}
    with torch.inference_mode():
        layers = _probe_layers(copies, dtype, generator)
        for rows in PROBE_ROWS:
            inputs = {n: torch.randn(rows, n, generator=generator).to(dtype) for _, n in copies}
            best = dict.fromkeys(totals, float("inf"))
            spent, passes = 0.0, -1  # pass -1 warms up (first-call allocations, kernel selection)
            while passes < 3 or spent < budget:
                for backend in totals:
                    start = time.perf_counter()
                    per_shape = _pass(layers, backend, inputs)
                    if passes >= 0:
                        step = sum(probed[shape] * seconds / copies[shape] for shape, seconds in per_shape.items())
                        best[backend] = min(best[backend], step)
                        spent += time.perf_counter() - start
                passes += 1
            for backend in totals:
                totals[backend] += best[backend]
    return totals


class _ProbeLayer(NamedTuple):
    shape: tuple[int, int]  # (out_features, in_features)
    weight: torch.Tensor
    bias: torch.Tensor
    packed: torch.Tensor  # the weight in oneDNN's layout


def _probe_layers(
    copies: dict[tuple[int, int], int], dtype: torch.dtype, generator: torch.Generator
) -> list[_ProbeLayer]:
    """`copies` random weights of each shape, the shapes taken in turn (as a step's layers)."""
    layers = []
    for i in range(max(copies.values(), default=0)):
        for (out_features, in_features), n in copies.items():
            if i < n:
                weight = torch.randn(out_features, in_features, generator=generator).to(dtype)
                bias = torch.randn(out_features, generator=generator).to(dtype)
                packed = torch.ops.mkldnn._reorder_linear_weight(weight, None)
                layers.append(_ProbeLayer((out_features, in_features), weight, bias, packed))
    return layers


def _pass(layers: list[_ProbeLayer], backend: str, inputs: dict[int, torch.Tensor]) -> dict[tuple[int, int], float]:
    """One pass over `layers` with `backend`'s products: seconds spent on each shape."""
    seconds: dict[tuple[int, int], float] = {}
    for layer in layers:
        x = inputs[layer.shape[1]]
        start = time.perf_counter()
        if backend == "torch":
            torch.nn.functional.linear(x, layer.weight, layer.bias)
        else:
            torch.ops.mkldnn._linear_pointwise(x, layer.packed, layer.bias, "none", [], "")
        seconds[layer.shape] = seconds.get(layer.shape, 0.0) + time.perf_counter() - start
    return seconds


def cache_dir() -> str:
    """Where per-machine measurements are kept: $NMTDECODE_CACHE, else $XDG_CACHE_HOME/nmtdecode."""
    explicit = os.environ.get("NMTDECODE_CACHE")
    if explicit:
        return explicit
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "nmtdecode")


def _read_cache(path: str) -> dict:
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
        return data if isinstance(data, dict) else {}
    except (OSError, ValueError):
        return {}


def _write_cache(path: str, data: dict) -> None:
    """Best effort: a read-only home only means measuring again next time."""
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        tmp = f"{path}.{os.getpid()}.tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(data, f, indent=1, sort_keys=True)
        os.replace(tmp, path)
    except OSError:
        pass


def measured(model: nn.Module, dtype: torch.dtype) -> dict[str, float]:
    """`probe`'s seconds for this model's shapes on this machine: remembered, or measured now."""
    shapes = linear_shapes(model)
    caps = cpu.current()
    key = "|".join(
        [
            caps.name,
            f"isa {caps.torch_isa}" + (f", oneDNN {caps.onednn_cap}" if caps.onednn_cap else ""),  # emulated CPUs apart
            f"torch {torch.__version__}",
            str(dtype),
            f"threads {torch.get_num_threads()}",
            "rows " + ",".join(map(str, PROBE_ROWS)),
            f"layers in turn, {PROBE_BYTES >> 20} MB, close calls {PROBES}",  # how it probes: a new way probes again
            ",".join(f"{o}x{i}" for o, i in sorted(shapes)),
        ]
    )
    path = os.path.join(cache_dir(), "gemm.json")
    cached = _read_cache(path)
    seconds = cached.get(key, {}).get("seconds") if isinstance(cached.get(key), dict) else None
    if not _valid_seconds(seconds):
        seconds = probe(shapes, dtype)
        cached[key] = {"backend": faster_backend(seconds), "seconds": seconds}
        _write_cache(path, cached)
    return seconds


def probe(shapes: dict[tuple[int, int], int], dtype: torch.dtype) -> dict[str, float]:
    """`measure`, repeated while the sum so far is a close call (up to PROBES, seconds summed)."""
    seconds = measure(shapes, dtype)
    for _ in range(PROBES - 1):
        if abs(seconds["onednn"] / seconds["torch"] - ONEDNN_MARGIN) > CLOSE_CALL:
            break
        again = measure(shapes, dtype)
        seconds = {backend: seconds[backend] + again[backend] for backend in seconds}
    return seconds


def faster_backend(seconds: dict[str, float]) -> str:
    return "onednn" if seconds["onednn"] <= ONEDNN_MARGIN * seconds["torch"] else "torch"


def _valid_seconds(seconds: object) -> TypeGuard[dict[str, float]]:
    return isinstance(seconds, dict) and all(
        isinstance(seconds.get(b), (int, float)) and seconds[b] > 0 for b in ("torch", "onednn")
    )


def candidates(dtype: torch.dtype) -> tuple[str, ...]:
    """The backends that run `dtype`'s products natively on this CPU (models/cpu.py): oneDNN for
    float32 where the build has it and for bfloat16 where the CPU has bf16 arithmetic; torch's
    linear always (for float16 it calls oneDNN itself where the CPU has fp16 arithmetic)."""
    caps = cpu.current()
    onednn = caps.onednn and (dtype == torch.float32 or dtype == torch.bfloat16 and caps.bf16_arithmetic)
    return ("torch", "onednn") if onednn else ("torch",)


def auto_choice(model: nn.Module, dtype: torch.dtype) -> tuple[str, dict[str, float] | None]:
    """`--gemm auto`'s backend for this model's shapes in `dtype` on this CPU, and the probe's
    seconds it was chosen by (remembered, or measured now); torch's, unmeasured (None), where
    oneDNN has no native kernels for `dtype` (`candidates`)."""
    if "onednn" not in candidates(dtype):
        return "torch", None
    seconds = measured(model, dtype)
    return faster_backend(seconds), seconds  # decided from the times: a new rule needs no new probe


def choose_backend(model: nn.Module, requested: str, device: torch.device, dtype: torch.dtype) -> str:
    """The backend the products will use: `torch` off the CPU or where oneDNN has no native kernels
    for `dtype` (`candidates`); otherwise the one asked for, or `auto`'s measurement."""
    if device.type != "cpu" or "onednn" not in candidates(dtype):
        return "torch"
    return auto_choice(model, dtype)[0] if requested == "auto" else requested
