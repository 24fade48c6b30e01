"""What this CPU runs natively: the one place every kernel choice asks, and the one place tests
patch (`current`) to see other CPUs.

Three libraries multiply for us on a CPU, and each picks its kernels by instruction set on its
own: torch's own kernels (`torch.backends.cpu.get_cpu_capability()`, capped by
ATEN_CPU_CAPABILITY), oneDNN (the packed float32 and bfloat16 products, `torch._int_mm`; capped
by ONEDNN_MAX_CPU_ISA) and fbgemm (int8 linear layers; capped by FBGEMM_ENABLE_INSTRUCTIONS). The
answers below come from their own queries where they have one (oneDNN's bfloat16 and float16
support), from torch's CPU feature flags otherwise, and respect the caps, so that a machine run
with `ONEDNN_MAX_CPU_ISA=AVX2 ATEN_CPU_CAPABILITY=avx2` chooses as an AVX2 CPU would.

A precision runs where its kernels are native; where they are not (bfloat16 without bf16
arithmetic converts every product to float32 first: 2.5-5x slower than float32 on AVX2;
`torch._int_mm` without AVX512-VNNI is a reference loop), it is refused before the model loads,
in one line naming what the CPU lacks and what to use instead, as CTranslate2 refuses a compute
type its device does not support (its `resolve_compute_type`). docs/speed.md has the
measurements ("Precisions per CPU class").
"""

from __future__ import annotations

import functools
import os
import platform
from dataclasses import dataclass

import torch

# oneDNN's instruction sets (ONEDNN_MAX_CPU_ISA's values) as its dnnl_cpu_isa_t bit masks: a set
# includes another when its mask holds all of the other's bits. Older names are aliases.
ONEDNN_ISA_BITS = {
    "SSE41": 0x1,
    "AVX": 0x3,
    "AVX2": 0x7,
    "AVX2_VNNI": 0xF,
    "AVX2_VNNI_2": 0x1F,
    "AVX512_CORE": 0x27,
    "AVX512_CORE_VNNI": 0x67,
    "AVX512_CORE_BF16": 0xE7,
    "AVX10_1_512": 0x1EF,
    "AVX512_CORE_FP16": 0x1EF,
    "AVX10_1_512_AMX": 0xFEF,
    "AVX512_CORE_AMX": 0xFEF,
    "AVX10_1_512_AMX_FP16": 0x1FEF,
    "AVX512_CORE_AMX_FP16": 0x1FEF,
}
PRECISIONS = ("float32", "bfloat16", "float16", "int8")


@dataclass(frozen=True)
class Capabilities:
    """What the libraries can run on this CPU, each as its own query answers (within the caps)."""

    name: str  # vendor and model (cpu_description)
    torch_isa: str  # torch's own kernels: AVX512, AVX2, DEFAULT, ...
    onednn_cap: str | None  # ONEDNN_MAX_CPU_ISA, where set
    onednn: bool  # oneDNN's linear in this torch build: packed float32 products (models/gemm.py)
    onednn_bf16: bool  # oneDNN's bfloat16 kernels run here (AVX-512 BW/VL/DQ or AVX-NE-CONVERT), its own query
    bf16_arithmetic: bool  # bfloat16 products in hardware (AVX512_BF16 or AMX), not converted to float32 first
    fp16_arithmetic: bool  # oneDNN's float16 kernels (AVX512-FP16 or AMX-FP16), its own query
    int8_dot: bool  # AVX512-VNNI in oneDNN's reach: torch._int_mm calls oneDNN, not its reference loop
    fbgemm: bool  # fbgemm's int8 kernels: x86 with AVX2

    def features(self) -> str:
        """The features the choices turn on, as a line: those present, then those missing."""
        flags = {
            "oneDNN": self.onednn,
            "bf16 arithmetic (AVX512_BF16/AMX)": self.bf16_arithmetic,
            "fp16 arithmetic (AVX512_FP16/AMX-FP16)": self.fp16_arithmetic,
            "int8 dot products (AVX512_VNNI)": self.int8_dot,
            "fbgemm": self.fbgemm,
        }
        have = [name for name, present in flags.items() if present]
        lacks = [name for name, present in flags.items() if not present]
        return ", ".join(have) + (f"; no {', no '.join(lacks)}" if lacks else "")


def onednn_allows(isa: str, cap: str | None) -> bool:
    """Whether oneDNN may use instruction set `isa` under the cap ONEDNN_MAX_CPU_ISA=`cap` (none,
    ALL or a name oneDNN does not know: no cap)."""
    limit = ONEDNN_ISA_BITS.get((cap or "").upper())
    return limit is None or ONEDNN_ISA_BITS[isa] & limit == ONEDNN_ISA_BITS[isa]


# torch.cpu's feature queries (the hardware's, through cpuinfo), by the name in `_is_<name>_supported`
FLAGS = ("avx2", "avx512_bf16", "vnni", "amx_tile")


@functools.cache
def detected() -> Capabilities:
    """This machine's answers, asked once per process."""
    cap = os.environ.get("ONEDNN_MAX_CPU_ISA") or os.environ.get("DNNL_MAX_CPU_ISA") or None
    onednn = torch.backends.mkldnn.is_available() and hasattr(torch.ops.mkldnn, "_linear_pointwise")
    features = {name: bool(getattr(torch.cpu, f"_is_{name}_supported", lambda: False)()) for name in FLAGS}
    amx = features["amx_tile"] and onednn_allows("AVX10_1_512_AMX", cap)
    onednn_bf16 = onednn and bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    x86 = platform.machine().lower() in ("x86_64", "amd64", "i686", "x86")
    return Capabilities(
        name=cpu_description(),
        torch_isa=torch.backends.cpu.get_cpu_capability(),
        onednn_cap=cap,
        onednn=onednn,
        onednn_bf16=onednn_bf16,
        bf16_arithmetic=onednn_bf16 and (amx or features["avx512_bf16"] and onednn_allows("AVX512_CORE_BF16", cap)),
        fp16_arithmetic=onednn and bool(torch.ops.mkldnn._is_mkldnn_fp16_supported()),
        # torch._int_mm asks the hardware alone for AVX512-VNNI (else: its reference loop); under a
        # lower cap oneDNN would run it without VNNI, its int16 pair sums saturating, as no real CPU does
        int8_dot=onednn
        and bool(torch.backends.mkldnn.enabled)
        and features["vnni"]
        and onednn_allows("AVX512_CORE_VNNI", cap),
        fbgemm=x86 and features["avx2"] and "fbgemm" in torch.backends.quantized.supported_engines,
    )


def current() -> Capabilities:
    """What this CPU runs natively: every kernel choice asks here, and tests patch this."""
    return detected()


def cpu_description() -> str:
    """Vendor and model name of this machine's CPU (from /proc/cpuinfo where there is one)."""
    fields: dict[str, str] = {}  # the first processor's, key -> value
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


@dataclass(frozen=True)
class Verdict:
    """How a precision runs on this CPU: its kernels, or why it is refused (and what to use)."""

    precision: str
    kernels: str  # what multiplies, in words
    refusal: str | None = None  # None: it runs natively

    @property
    def native(self) -> bool:
        return self.refusal is None


def verdict(precision: str, caps: Capabilities | None = None) -> Verdict:
    """How `precision` (float32, bfloat16, float16 or int8) runs on the CPU `caps` (this one)."""
    caps = caps or current()
    instead = "--dtype float32" + (", or --quantize int8 for a lighter and faster model" if caps.fbgemm else "")
    if precision == "float32":
        if caps.onednn:
            return Verdict(precision, "oneDNN with packed weights or torch's linear, the faster measured (--gemm auto)")
        return Verdict(precision, "torch's linear")
    if precision == "bfloat16":
        if caps.bf16_arithmetic:
            return Verdict(precision, "oneDNN in bfloat16, packed weights")
        return Verdict(
            precision, "none native", _lacks(caps, "dtype: bfloat16", "bf16 arithmetic (AVX512_BF16 or AMX)", instead)
        )
    if precision == "float16":
        if caps.fp16_arithmetic:
            return Verdict(precision, "torch's linear, which calls oneDNN in float16")
        if caps.bf16_arithmetic:
            instead = "--dtype bfloat16 (native here) or float32"
        return Verdict(
            precision,
            "none native",
            _lacks(caps, "dtype: float16", "fp16 arithmetic (AVX512_FP16 or AMX-FP16)", instead),
        )
    if precision == "int8":
        if not caps.fbgemm:
            return Verdict(
                precision,
                "none native",
                f"quantize: int8 needs fbgemm (x86 with AVX2), which {_this(caps)} lacks; use --dtype float32",
            )
        shared = (
            "torch._int_mm on the shared table when large"
            if caps.int8_dot
            else "no shared-table product without AVX512_VNNI"
        )
        return Verdict(precision, f"fbgemm; a tied output projection: fbgemm on a packed copy of the table ({shared})")
    raise ValueError(f"unknown precision {precision!r}; expected one of {', '.join(PRECISIONS)}")


def _lacks(caps: Capabilities, what: str, feature: str, instead: str) -> str:
    return (
        f"{what} needs {feature}, which {_this(caps)} lacks: each product would convert to float32 "
        f"first, slower than float32; use {instead}"
    )


def _this(caps: Capabilities) -> str:
    return f"this CPU ({caps.torch_isa}{', oneDNN capped at ' + caps.onednn_cap if caps.onednn_cap else ''})"


def refusal(dtype: str, quantize: str = "none") -> str | None:
    """Why a job in `dtype` (with `quantize`) cannot run natively on this CPU, in one line; None if it can."""
    return verdict("int8" if quantize == "int8" else dtype).refusal
