"""Matrix products on the CPU: torch's own `linear`, or oneDNN with weights packed once at load.

torch's float32 `linear` calls its BLAS (MKL's sgemm on x86 builds). MKL picks
its fastest kernels by CPU vendor, and on other vendors' CPUs it can run far
below what the hardware does, where oneDNN with prepacked weights does not
(`python bench/gemm.py`). CTranslate2 makes the same split, MKL on Intel CPUs
and oneDNN elsewhere. Which one wins depends on the machine, so `auto` measures
both on the model's own shapes once and remembers the answer per machine
(`cache_dir()`/gemm.json); `--gemm onednn|torch` forces either.

oneDNN is chosen only when its products are clearly faster (ONEDNN_MARGIN),
because it has costs the steady-state measurement does not see: the first
product at each new row count compiles a kernel (a batch whose sentences
finish one by one meets ~30 row counts), and the kernel cache takes memory.
The measurements behind these choices are in docs/speed.md.
"""

from __future__ import annotations

import json
import os
import platform
import time

import torch
from torch import nn

PROBE_ROWS = (8, 32, 160)  # decoder rows per step: a few sentences, a batch of 32 at beam 1, at beam 5
ONEDNN_MARGIN = 0.9  # auto picks oneDNN when its products take at most 90% of torch's time


def onednn_available() -> bool:
    return torch.backends.mkldnn.is_available() and hasattr(torch.ops.mkldnn, "_linear_pointwise")


# Activations oneDNN applies inside the product (a "post-op"): (name, algorithm) of _linear_pointwise.
POST_OPS = {"relu": ("relu", ""), "gelu": ("gelu", "none"), "gelu_tanh": ("gelu", "tanh"), "silu": ("swish", "")}


# The tracer (models/traced_step.py) cannot record torch.ops.mkldnn._linear_pointwise called from
# Python (its Scalar?[] argument); a TorchScript function making the same call can be recorded.
_TRACEABLE = torch.jit.CompilationUnit("""
def packed_linear(x: Tensor, w: Tensor, b: Optional[Tensor], post_op: str, algorithm: str):
    scalars: List[Optional[number]] = []
    return torch.ops.mkldnn._linear_pointwise(x, w, b, post_op, scalars, algorithm)
""")


class PackedLinear(nn.Module):
    """y = activation(x W^T + b) with W held in oneDNN's packed layout (CPU, float32 or bfloat16);
    `activation` is one of POST_OPS or None."""

    def __init__(self, linear: nn.Linear, activation: str | None = None):
        super().__init__()
        self.in_features, self.out_features = linear.in_features, linear.out_features
        weight = linear.weight.detach()
        self.register_buffer("packed_weight", torch.ops.mkldnn._reorder_linear_weight(weight, None), persistent=False)
        self.bias = None if linear.bias is None else nn.Parameter(linear.bias.detach(), requires_grad=False)
        self.activation = activation
        self.post_op, self.algorithm = POST_OPS[activation] if activation else ("none", "")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if torch.jit.is_tracing():  # the same product, in the form the tracer records (per thread)
            return _TRACEABLE.packed_linear(x, self.packed_weight, self.bias, self.post_op, self.algorithm)
        return torch.ops.mkldnn._linear_pointwise(x, self.packed_weight, self.bias, self.post_op, [], self.algorithm)

    def extra_repr(self) -> str:
        fused = f", then {self.activation}" if self.activation else ""
        return f"in_features={self.in_features}, out_features={self.out_features}, onednn packed{fused}"


def use_onednn(model: nn.Module) -> nn.Module:
    """Replace every nn.Linear of `model` (in place) by a PackedLinear of the same weights; a
    feed-forward block's activation moves into its first product."""
    for parent in list(model.modules()):
        if type(getattr(parent, "up", None)) is nn.Linear and getattr(parent, "activation_name", None) in POST_OPS:
            parent.up, parent.activation = PackedLinear(parent.up, parent.activation_name), None
        for name, child in list(parent.named_children()):
            if type(child) is nn.Linear:
                setattr(parent, name, PackedLinear(child))
    return model


def linear_shapes(model: nn.Module) -> dict[tuple[int, int], int]:
    """(out_features, in_features) -> how many linear layers have that shape."""
    shapes: dict[tuple[int, int], int] = {}
    for module in model.modules():
        if type(module) is nn.Linear:
            key = (module.out_features, module.in_features)
            shapes[key] = shapes.get(key, 0) + 1
    return shapes


def _best_of_both(first, second, budget: float = 0.01) -> tuple[float, float]:
    """Best time of each of two calls, alternated (so both see the same machine load) for
    about `budget` seconds, at least 3 times each."""
    first(), second()  # warm-up: first-call allocations and kernel selection
    best, spent, calls = [float("inf"), float("inf")], 0.0, 0
    while calls < 3 or spent < budget:
        for i, function in enumerate((first, second)):
            start = time.perf_counter()
            function()
            elapsed = time.perf_counter() - start
            best[i], spent = min(best[i], elapsed), spent + elapsed
        calls += 1
    return best[0], best[1]


def measure(shapes: dict[tuple[int, int], int], dtype: torch.dtype) -> dict[str, float]:
    """Seconds one decoding step's products would take with each backend, on random data."""
    totals = {"torch": 0.0, "onednn": 0.0}
    generator = torch.Generator().manual_seed(0)
    with torch.inference_mode():
        for (out_features, in_features), count in shapes.items():
            weight = torch.randn(out_features, in_features, generator=generator).to(dtype)
            bias = torch.randn(out_features, generator=generator).to(dtype)
            packed = torch.ops.mkldnn._reorder_linear_weight(weight, None)
            for rows in PROBE_ROWS:
                x = torch.randn(rows, in_features, generator=generator).to(dtype)
                plain, onednn = _best_of_both(
                    lambda: torch.nn.functional.linear(x, weight, bias),
                    lambda: torch.ops.mkldnn._linear_pointwise(x, packed, bias, "none", [], ""))
                totals["torch"] += count * plain
                totals["onednn"] += count * onednn
    return totals


def cpu_description() -> str:
    """Vendor and model name of this machine's CPU (from /proc/cpuinfo where there is one)."""
    fields = {}
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                key, _, value = line.partition(":")
                fields.setdefault(key.strip(), value.strip())
                if not line.strip():
                    break  # the first processor is enough
    except OSError:
        return platform.processor() or platform.machine()
    name = fields.get("model name") or platform.processor() or platform.machine()
    family = f" (family {fields['cpu family']} model {fields['model']})" if "cpu family" in fields else ""
    return f"{fields.get('vendor_id', 'unknown vendor')} {name}{family}"


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


def _write_cache(path: str, data: dict):
    """Best effort: a read-only home only means measuring again next time."""
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        tmp = f"{path}.{os.getpid()}.tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(data, f, indent=1, sort_keys=True)
        os.replace(tmp, path)
    except OSError:
        pass


def auto_backend(model: nn.Module, dtype: torch.dtype) -> str:
    """The faster backend for this model's shapes on this machine, measured once and remembered."""
    shapes = linear_shapes(model)
    key = "|".join([cpu_description(), f"torch {torch.__version__}", str(dtype), f"threads {torch.get_num_threads()}",
                    "rows " + ",".join(map(str, PROBE_ROWS)),
                    ",".join(f"{o}x{i}" for o, i in sorted(shapes))])
    path = os.path.join(cache_dir(), "gemm.json")
    cached = _read_cache(path)
    seconds = cached.get(key, {}).get("seconds") if isinstance(cached.get(key), dict) else None
    if not _valid_seconds(seconds):
        seconds = measure(shapes, dtype)
        cached[key] = {"backend": faster_backend(seconds), "seconds": seconds}
        _write_cache(path, cached)
    return faster_backend(seconds)  # decided from the times, so a change of rule needs no new measurement


def faster_backend(seconds: dict[str, float]) -> str:
    return "onednn" if seconds["onednn"] <= ONEDNN_MARGIN * seconds["torch"] else "torch"


def _valid_seconds(seconds) -> bool:
    return (isinstance(seconds, dict) and
            all(isinstance(seconds.get(b), (int, float)) and seconds[b] > 0 for b in ("torch", "onednn")))


def choose_backend(model: nn.Module, requested: str, device: torch.device, dtype: torch.dtype) -> str:
    """The backend the products will use: `torch` off the CPU, for float16, or without oneDNN."""
    if device.type != "cpu" or dtype not in (torch.float32, torch.bfloat16) or not onednn_available():
        return "torch"
    if requested == "auto":
        return auto_backend(model, dtype)
    return requested


def apply_backend(model: nn.Module, backend: str) -> nn.Module:
    return use_onednn(model) if backend == "onednn" else model
