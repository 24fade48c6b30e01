"""What a CPU runs natively (models/cpu.py), and every kernel choice asking it: each precision runs
where its kernels are native and is refused before the model loads, in one line, where they are
not; the gemm candidates, the int8 tied projection and `inspect --device cpu` follow the CPU."""

import os
import subprocess
import sys

import pytest
import torch

from nmtdecode.models import cpu, gemm
from nmtdecode.models.quantize import Int8Embedding, Int8TiedOutput, quantize_rows, tied_output
from torch.ao.nn.quantized.dynamic import Linear as QuantizedLinear

from tests.helpers import CPUS, REPO, one_line, tiny_transformer

pytestmark = pytest.mark.precision


@pytest.mark.parametrize(
    "isa, cap, allowed",
    [
        ("AVX2", None, True),
        ("AVX512_CORE_VNNI", "AVX2", False),
        ("AVX512_CORE_VNNI", "avx512_core_bf16", True),  # BF16 includes VNNI
        ("AVX10_1_512_AMX", "AVX512_CORE_BF16", False),
        ("AVX512_CORE_BF16", "AVX512_CORE_AMX", True),  # an older name of AVX10_1_512_AMX
        ("AVX512_CORE", "AVX2_VNNI_2", False),  # AVX2_VNNI_2 is not a subset of AVX-512
        ("AVX512_CORE_VNNI", "ALL", True),
        ("AVX512_CORE_VNNI", "no-such-isa", True),  # oneDNN ignores a name it does not know
    ],
)
def test_onednn_cap_allows_the_instruction_sets_its_mask_includes(isa, cap, allowed):
    assert cpu.onednn_allows(isa, cap) is allowed


@pytest.mark.subprocess
def test_the_emulation_variables_make_this_cpu_an_avx2_one():
    """ONEDNN_MAX_CPU_ISA and ATEN_CPU_CAPABILITY (read when torch loads, hence a process of its
    own) take away what an AVX2 CPU lacks, whatever the machine has."""
    env = {**os.environ, "ONEDNN_MAX_CPU_ISA": "AVX2", "ATEN_CPU_CAPABILITY": "avx2"}
    code = "from nmtdecode.models import cpu; c = cpu.detected(); print(c.torch_isa, c.onednn_cap, c.features())"
    run = subprocess.run([sys.executable, "-c", code], env=env, cwd=REPO, capture_output=True, text=True, check=True)
    assert run.stdout.startswith("AVX2 AVX2 ") and "bf16 arithmetic" in run.stdout.split("; no ")[1]
    assert "int8 dot products" in run.stdout.split("; no ")[1]


@pytest.mark.parametrize(
    "name, native",
    [
        ("avx2", {"float32", "int8"}),
        ("avx512", {"float32", "int8"}),
        ("avx512-bf16", {"float32", "bfloat16", "int8"}),
        ("amx", {"float32", "bfloat16", "float16", "int8"}),
        ("no-x86", {"float32"}),
    ],
)
def test_each_cpu_class_runs_the_precisions_it_has_kernels_for(name, native):
    assert {p for p in cpu.PRECISIONS if cpu.verdict(p, CPUS[name]).native} == native


def test_a_refusal_names_what_the_cpu_lacks_and_what_to_use():
    bf16 = cpu.verdict("bfloat16", CPUS["avx2"]).refusal
    assert bf16.startswith("dtype: bfloat16 needs bf16 arithmetic (AVX512_BF16 or AMX), which this CPU (AVX2) lacks")
    assert bf16.endswith("use --dtype float32, or --quantize int8 for a lighter and faster model")
    assert cpu.verdict("float16", CPUS["avx512-bf16"]).refusal.endswith("use --dtype bfloat16 (native here) or float32")
    assert "fbgemm (x86 with AVX2), which this CPU (DEFAULT) lacks" in cpu.verdict("int8", CPUS["no-x86"]).refusal
    capped = cpu.Capabilities(**{**vars(CPUS["avx2"]), "onednn_cap": "AVX2"})
    assert "this CPU (AVX2, oneDNN capped at AVX2)" in cpu.verdict("bfloat16", capped).refusal


@pytest.mark.parametrize("dtype, quantize", [("bfloat16", "none"), ("float16", "none")])
def test_a_precision_without_native_kernels_is_refused_before_the_model_loads(
    dtype, quantize, as_cpu, cli, model_dir, monkeypatch
):
    as_cpu("avx2")
    monkeypatch.setattr("nmtdecode.engine.engine.load_model", lambda *a, **k: pytest.fail("the model was loaded"))
    run = cli("translate", "--model", model_dir, "--device", "cpu", "--dtype", dtype, stdin="hello\n", text=True)
    assert run.returncode == 2 and run.stdout == ""
    assert one_line(run.stderr) == f"nmtdecode: error: {cpu.verdict(dtype, CPUS['avx2']).refusal}"


def test_int8_without_fbgemm_is_refused(as_cpu, cli, model_dir):
    as_cpu("no-x86")
    run = cli("translate", "--model", model_dir, "--quantize", "int8", stdin="hello\n", text=True)
    assert run.returncode == 2 and "quantize: int8 needs fbgemm" in one_line(run.stderr)


@pytest.mark.parametrize(
    "name, dtype, expected",
    [
        ("avx2", torch.float32, ("torch", "onednn")),
        ("avx2", torch.bfloat16, ("torch",)),
        ("avx512", torch.bfloat16, ("torch",)),  # oneDNN would convert each product: not native
        ("avx512-bf16", torch.bfloat16, ("torch", "onednn")),
        ("amx", torch.float16, ("torch",)),  # torch's linear calls oneDNN's float16 itself
        ("no-x86", torch.float32, ("torch",)),
    ],
)
def test_gemm_candidates_are_the_native_ones(name, dtype, expected, as_cpu, monkeypatch):
    as_cpu(name)
    assert gemm.candidates(dtype) == expected
    if len(expected) == 1:  # nothing to choose: nothing measured
        monkeypatch.setattr(gemm, "measure", lambda *a: pytest.fail("measured with one candidate"))
        assert gemm.choose_backend(tiny_transformer(0), "auto", torch.device("cpu"), dtype) == "torch"
        assert gemm.choose_backend(tiny_transformer(0), "onednn", torch.device("cpu"), dtype) == "torch"


@pytest.mark.parametrize("name", ["avx2", "avx512-vnni"])
@pytest.mark.parametrize("copy_bytes", [0, 1 << 20])
def test_the_tied_int8_projection_never_runs_a_reference_loop(name, copy_bytes, as_cpu):
    """torch._int_mm (on the embeddings' own table) only where the CPU has AVX512-VNNI and the
    table is above the copy limit; fbgemm on a packed copy otherwise, whatever the table's size."""
    caps = as_cpu(name)
    embedding = Int8Embedding(*quantize_rows(torch.randn(40, 16)))
    output = tied_output(embedding, None, copy_bytes)
    shared = caps.int8_dot and copy_bytes == 0
    assert isinstance(output, Int8TiedOutput if shared else QuantizedLinear)


def test_inspect_device_cpu_lists_each_precision_native_or_refused(as_cpu, cli):
    caps = as_cpu("avx2")
    run = cli("inspect", "--device", "cpu", text=True)
    assert run.returncode == 0, run.stderr
    lines = run.stdout.splitlines()
    assert lines[0] == f"cpu:           {caps.name}" and lines[1] == "instructions:  torch's kernels AVX2"
    rows = {line.split()[0]: line for line in lines[lines.index("precisions:") + 1 :]}
    assert set(rows) == set(cpu.PRECISIONS)
    assert rows["bfloat16"].endswith(f"refused: {cpu.verdict('bfloat16', caps).refusal}")
    assert rows["int8"].endswith(cpu.verdict("int8", caps).kernels)


@pytest.mark.parametrize("cpu_class, products", [("avx2", "fbgemm on a packed copy"), ("avx512-vnni", "torch._int_mm")])
def test_inspect_device_cpu_names_the_kernels_chosen_for_a_model(
    cpu_class, products, as_cpu, cli, model_dir, monkeypatch, tmp_path
):
    """float32's backend is --gemm auto's measurement; the int8 projection follows the CPU and the
    table's size (every table "large" here: nothing is multiplied in int8)."""
    as_cpu(cpu_class)
    monkeypatch.setenv("NMTDECODE_CACHE", str(tmp_path))  # measured here, not remembered from another test
    monkeypatch.setattr("nmtdecode.models.placement.INT8_TIED_COPY_BYTES", 0)
    monkeypatch.setattr(gemm, "measure", lambda shapes, dtype: {"torch": 2.0, "onednn": 1.0})
    run = cli("inspect", "--device", "cpu", model_dir, text=True)
    assert run.returncode == 0, run.stderr
    kernels = run.stdout.split(f"kernels for {model_dir}:\n")[1].splitlines()
    assert kernels[0] == (
        "  float32   oneDNN, packed weights (--gemm auto: oneDNN's products took 0.50 of torch's time on this machine)"
    )
    assert kernels[-1].startswith("  int8      fbgemm linear layers; output projection: " + products)
    assert not any(line.split()[0] == "bfloat16" for line in kernels)  # not native on either


@pytest.mark.parametrize(
    "seconds, line",
    [
        ({"torch": 1.0, "onednn": 0.9}, "oneDNN, packed weights (--gemm auto: oneDNN's products took 0.90 of torch's"),
        ({"torch": 1.0, "onednn": 0.95}, "torch linear (--gemm auto: oneDNN's products took 0.95 of torch's"),
    ],
)
def test_inspect_says_what_the_float32_products_were_chosen_by(
    seconds, line, as_cpu, cli, model_dir, monkeypatch, tmp_path
):
    """The probe's times as remembered, and the margin when torch's products are kept."""
    as_cpu("avx2")
    monkeypatch.setenv("NMTDECODE_CACHE", str(tmp_path))
    monkeypatch.setattr(gemm, "measure", lambda shapes, dtype: seconds)
    run = cli("inspect", "--device", "cpu", model_dir, text=True)
    assert run.returncode == 0, run.stderr
    float32 = run.stdout.split(f"kernels for {model_dir}:\n")[1].splitlines()[0]
    assert float32.startswith(f"  float32   {line}"), float32
    assert float32.endswith("or less)") == (line.startswith("torch"))
