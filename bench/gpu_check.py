"""The GPU check: one prepared command that turns a short loan of a GPU into a complete verdict.

    make gpu-check                            # on the GPU machine: PYTHONPATH=. python3 bench/gpu_check.py
    python3 bench/gpu_check.py --dry-run      # the same code on CPU, small shapes, in well under a minute

It needs only what the GPU machine's image has (torch, transformers, sentencepiece,
safetensors, click, tqdm, pyyaml, pytest) and runs, in order:

1. the machine: GPU, driver, library versions, and the two ceilings measured (a device-to-device
   copy for memory bandwidth, a large bfloat16 matrix product for arithmetic);
2. `pytest -m cuda` (tests/test_cuda.py);
3. the whole command-line job on the demo model's test set, float32 and float16 (and the search
   on the host), each line compared with float32 and with the CPU;
4. the benchmark: nmtdecode against `transformers` `generate` on the same GPU, in one process, for
   the demo model (natural lengths), a Transformer-base Marian with seeded random weights built
   here (every output forced to FIXED tokens, so both do the same work) and a Transformer-base
   OpenNMT-py checkpoint (nmtdecode only: OpenNMT-py is not in the image); float32, float16 and
   bfloat16, beam 1 and 5, batch 32 and 128: tokens/s, the ratio, whether the outputs agree, and
   the step time against the floor the memory bandwidth sets (the decoder's weights and its
   attention caches read once per step);
5. the real-size rows (gpu_real_size.py): an NLLB-600M shape and a BART-large shape against
   `generate`, float16 and bfloat16, beam 4 and 5, batch 32 and 128: tokens/s, peak GPU memory
   of each, the step against the bandwidth floor;
6. where a step's time goes: marian-base under torch.profiler, the eager step, the graphed one
   with the search on the host and on the device: wall and GPU-busy time, kernels per step, the
   model's launches per decoder layer and the search's.

A section that fails is logged with its traceback and the check goes on; rows that would pass
--budget seconds are skipped, named in the table. Writes bench/results/gpu-check.log and
bench/results/gpu-check.md (a dry run: bench/out/gpu-check-dry.*), after every section, and copies both
into the folder $GPU_CHECK_OUT names, when it is set, so that a run cut short still returns
what it measured.
"""

from __future__ import annotations

import argparse
import os
import platform
import re
import shutil
import subprocess
import sys
import time
import traceback
from dataclasses import dataclass, field

import torch

from common import OUT, RESULTS, ROOT, timed as timed_once  # noqa: E402  (first: the repository on sys.path)
from gpu_benchmark import benchmark, same, step_profile, timed  # noqa: E402
from gpu_real_size import real_size  # noqa: E402

from nmtdecode.models import cpu  # noqa: E402


@dataclass
class Sizes:
    """How much work each part does: the real check, or a dry run's few sentences on small shapes."""

    sentences: int  # forced-length models: sentences per measurement
    fixed: int  # their output length
    demo_lines: int  # demo benchmark: test lines per measurement
    cli_lines: int  # the CLI job: lines (all of the test set when it has fewer)
    cpu_lines: int  # of those, compared with a CPU run
    batches: tuple[int, ...]
    copy_mib: int  # the bandwidth probe's buffer
    matmul: int  # the arithmetic probe's square size
    passes: tuple[int, int] = (2, 2)  # run_batches: fewest warm-up passes, timed passes
    marian: dict = field(default_factory=dict)  # convert.marian_base shape
    opennmt: dict = field(default_factory=dict)  # opennmt_py.opennmt_base_without_onmt shape
    pytest_timeout: int = 300
    real_sentences: int = 128  # the real-size rows' sentences per measurement (gpu_real_size.py)
    real_passes: tuple[int, int] = (1, 1)  # and their passes: a real-size pass of `generate` takes seconds
    real_shape: dict = field(default_factory=dict)  # convert.nllb_600m_shape and bart_large_shape shapes


FULL = Sizes(
    sentences=256,
    fixed=32,
    demo_lines=512,
    cli_lines=1000,
    cpu_lines=100,
    batches=(32, 128),
    copy_mib=1024,
    matmul=8192,
)
DRY = Sizes(
    sentences=4,
    fixed=4,
    demo_lines=4,
    cli_lines=8,
    cpu_lines=4,
    batches=(4,),  # one batch size: every code path, half the rows of two
    copy_mib=16,
    matmul=256,
    passes=(1, 1),
    marian=dict(vocab=500, d_model=64, layers=2),
    opennmt=dict(vocab_size=500, hidden_size=64, word_vec_size=64, transformer_ff=256, enc_layers=2, dec_layers=2),
    pytest_timeout=120,
    real_sentences=4,
    real_shape=dict(vocab=500, d_model=64, layers=2),
)


class Report:
    """The log (everything, as it happens) and the results table (rewritten after each section)."""

    def __init__(self, log_path: str, table_path: str, copy_to: str | None):
        self.log_path, self.table_path, self.copy_to = log_path, table_path, copy_to
        self.start = time.perf_counter()
        self.sections: list[tuple[str, str, float]] = []  # (name, verdict, seconds)
        self.tables: list[str] = []
        os.makedirs(os.path.dirname(log_path), exist_ok=True)
        self.log_file = open(log_path, "w", encoding="utf-8")
        if copy_to:
            os.makedirs(copy_to, exist_ok=True)

    def elapsed(self) -> float:
        return time.perf_counter() - self.start

    def log(self, text: str):
        line = f"[{self.elapsed():6.1f}s] {text}"
        print(line, flush=True)
        self.log_file.write(line + "\n")
        self.log_file.flush()

    def section(self, name: str, work):
        """Run work() -> (verdict, markdown lines); a failure is logged and the check goes on."""
        self.log(f"== {name}")
        start = time.perf_counter()
        try:
            verdict, lines = work()
        except Exception:  # noqa: BLE001 - one section's failure must not lose the others' results
            self.log(traceback.format_exc())
            verdict, lines = "FAILED (see the log)", []
        self.sections.append((name, verdict, time.perf_counter() - start))
        self.tables.append("\n".join([f"## {name}", "", *lines, ""]))
        self.log(f"-> {verdict}")
        self.write()

    def write(self):
        summary = ["| section | verdict | seconds |", "| --- | --- | ---: |"]
        summary += [f"| {name} | {verdict} | {seconds:.0f} |" for name, verdict, seconds in self.sections]
        text = "\n".join(
            ["# GPU check", "", "Made by `make gpu-check` (bench/gpu_check.py).", "", *summary, "", *self.tables]
        )
        with open(self.table_path, "w", encoding="utf-8") as f:
            f.write(text + "\n")
        if self.copy_to:
            for path in (self.log_path, self.table_path):
                shutil.copy(path, self.copy_to)


# 1. The machine ------------------------------------------------------------------------------


def machine(device: torch.device, sizes: Sizes) -> dict:
    """Facts and the two measured ceilings: bandwidth (bytes read + written per second of a
    device-to-device copy) and bfloat16 matrix-product rate."""
    from importlib import metadata

    facts = {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "cpu": cpu_name(),
    }
    for name in ("transformers", "sentencepiece", "safetensors", "pytest"):
        try:
            facts[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            facts[name] = "missing"
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        facts.update(
            gpu=props.name,
            gpu_memory=f"{props.total_memory / 2**30:.1f} GiB",
            multiprocessors=props.multi_processor_count,
            capability=f"{props.major}.{props.minor}",
            driver=nvidia_smi("driver_version"),
            clocks=nvidia_smi("clocks.sm,clocks.max.sm"),
        )
    facts["bandwidth_gbs"] = copy_bandwidth(device, sizes.copy_mib)
    facts["bf16_tflops"] = matmul_rate(device, sizes.matmul)
    return facts


def copy_bandwidth(device: torch.device, mib: int) -> float:
    """GB/s of a device-to-device copy, bytes read and written counted."""
    n = mib * 2**20 // 4
    source, target = torch.randn(n, device=device), torch.empty(n, device=device)
    return 2 * n * 4 / timed(device, lambda: target.copy_(source)) / 1e9


def matmul_rate(device: torch.device, n: int) -> float:
    """TFLOP/s of an n x n x n bfloat16 matrix product on random data."""
    a = torch.randn(n, n, device=device, dtype=torch.bfloat16)
    return 2 * n**3 / timed(device, lambda: a @ a) / 1e12


def cpu_name() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def nvidia_smi(query: str) -> str:
    try:
        run = subprocess.run(
            ["nvidia-smi", f"--query-gpu={query}", "--format=csv,noheader"], capture_output=True, text=True, timeout=30
        )
        return run.stdout.strip() or run.stderr.strip()
    except (OSError, subprocess.TimeoutExpired) as error:
        return f"nvidia-smi: {error}"


# 2. The CUDA tests -----------------------------------------------------------------------------


def cuda_tests(report: Report, sizes: Sizes) -> tuple[str, list[str]]:
    cmd = [sys.executable, "-m", "pytest", "tests/test_cuda.py", "-m", "cuda", "-q", "-rfEs", "-p", "no:cacheprovider"]
    run = subprocess.run(
        cmd,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=sizes.pytest_timeout,
        env=dict(os.environ, PYTHONPATH=ROOT),
    )
    report.log(run.stdout[-6000:] + run.stderr[-2000:])
    last = (run.stdout.strip().splitlines() or ["no output"])[-1].strip("= ")
    verdict = f"passed: {last}" if run.returncode == 0 else f"FAILED: {last}"
    failures = [line for line in run.stdout.splitlines() if line.startswith(("FAILED", "ERROR"))]
    return verdict, [f"`{' '.join(cmd[1:])}`: {last}", "", *[f"- {f}" for f in failures]]


# 3. The command-line job ---------------------------------------------------------------------------


def cli_job(report: Report, device: torch.device, sizes: Sizes, out: str) -> tuple[str, list[str]]:
    """The demo model's test set through `nmtdecode translate`, whole processes, float32 and float16
    on `device`; the first cpu_lines also on the CPU. One output line per input line, and how many
    lines agree."""
    demo = os.path.join(ROOT, "data", "demo")
    with open(os.path.join(demo, "test.en"), encoding="utf-8") as f:
        lines = f.read().splitlines()[: sizes.cli_lines]
    src = os.path.join(out, "cli-test.en")
    with open(src, "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")
    # float16 on a GPU; on a CPU (the dry run) the half precision it runs natively, if any (a CPU
    # without its arithmetic refuses it: nmtdecode/models/cpu.py)
    half = (
        "float16"
        if device.type == "cuda"
        else next((p for p in ("float16", "bfloat16") if cpu.verdict(p).native), None)
    )
    runs = {
        "float32": (device.type, src, []),
        "float32 --cuda-graphs off": (device.type, src, ["--cuda-graphs", "off"]),
        "float32 --search-on device": (device.type, src, ["--search-on", "device"]),
    }
    if half:
        runs[half] = (device.type, src, ["--dtype", half])
    if device.type == "cuda":
        # the same job again: a first job slower than the second is a cost of first use (the first
        # float16 job was 4-5x float32 on an H100 and an H200, torch 2.11, while the encoder ran
        # cuDNN's attention: docs/speed.md#gpus)
        runs[f"{half} again"] = (device.type, src, ["--dtype", half])
        runs[f"{half} --batch-size 128"] = (device.type, src, ["--dtype", half, "--batch-size", "128"])
        head = os.path.join(out, "cli-head.en")
        with open(head, "w", encoding="utf-8") as f:
            f.write("\n".join(lines[: sizes.cpu_lines]) + "\n")
        runs["cpu float32"] = ("cpu", head, [])
    outputs, fallbacks = {}, []
    table = [
        "| run | lines | seconds | lines/s | decoding s | model load s |",
        "| --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for label, (dev, path, extra) in runs.items():
        target = os.path.join(out, f"cli-{label.replace(' ', '-')}.de")
        cmd = [
            sys.executable,
            "-m",
            "nmtdecode",
            "translate",
            "--model",
            demo,
            "--src",
            path,
            "--output",
            target,
            "--device",
            dev,
            *extra,
        ]
        seconds, run = timed_once(
            lambda: subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, env=dict(os.environ, PYTHONPATH=ROOT))
        )
        if run.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd)} exited {run.returncode}:\n{run.stderr[-3000:]}")
        for warning in (line for line in run.stderr.splitlines() if "warning" in line):
            report.log(f"{label}: {warning}")
            if "CUDA graphs are off" in warning:
                fallbacks.append(label)
        summary = next((line for line in reversed(run.stderr.splitlines()) if " in all" in line), "")
        report.log(f"{label}: {summary}")
        decoding = re.search(r" in ([0-9.]+) s \(", summary)
        loading = re.search(r"model loaded in ([0-9.]+) s", summary)
        with open(target, encoding="utf-8") as f:
            outputs[label] = f.read().splitlines()
        n = sum(1 for _ in open(path, encoding="utf-8"))
        table.append(
            f"| {dev} {label.removeprefix('cpu ')} | {n} | {seconds:.1f} | {n / seconds:.1f} "
            f"| {decoding[1] if decoding else '?'} | {loading[1] if loading else '?'} |"
        )
        report.log(f"{label}: {n} lines in {seconds:.1f} s")
        if len(outputs[label]) != n:
            raise RuntimeError(f"{label}: {len(outputs[label])} output lines for {n} input lines")
    agree = [
        f"{half} agrees with float32 on {same(outputs[half], outputs['float32'])} lines"
        if half
        else "no half precision runs natively on this CPU",
        f"--cuda-graphs off agrees on {same(outputs['float32 --cuda-graphs off'], outputs['float32'])} lines",
        f"--search-on device agrees on {same(outputs['float32 --search-on device'], outputs['float32'])} lines",
    ]
    if "cpu float32" in outputs:
        agree.append(
            f"{device.type} float32 agrees with the CPU on {same(outputs['cpu float32'], outputs['float32'])} lines"
        )
    if fallbacks:
        agree.append(f"CUDA GRAPHS FELL BACK to eager steps in: {', '.join(fallbacks)} (see the log)")
    return "; ".join(agree), [*table, "", *[f"- {a}" for a in agree]]


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dry-run", action="store_true", help="the same code on CPU with small shapes")
    parser.add_argument("--device", default=None, help="default: cuda, or cpu with --dry-run")
    parser.add_argument("--budget", type=float, default=450, help="seconds after which benchmark rows are skipped")
    parser.add_argument("--models", default="marian-base,demo,opennmt-base")
    parser.add_argument("--real-size", default="nllb-600m,bart-large", help="the real-size rows' models")
    parser.add_argument("--skip", default="", help="sections to leave out: tests,cli,benchmark,real-size,profile")
    args = parser.parse_args()
    device = torch.device(args.device or ("cpu" if args.dry_run else "cuda"))
    sizes = DRY if args.dry_run else FULL
    out = os.path.join(OUT, "gpu-check-dry" if args.dry_run else "gpu-check")
    stem = os.path.join(OUT, "gpu-check-dry") if args.dry_run else os.path.join(RESULTS, "gpu-check")
    report = Report(stem + ".log", stem + ".md", os.environ.get("GPU_CHECK_OUT"))
    os.makedirs(out, exist_ok=True)
    if device.type == "cuda" and not torch.cuda.is_available():
        report.log("no CUDA device: run with --dry-run on a machine without a GPU")
        raise SystemExit(2)
    torch.backends.cuda.matmul.allow_tf32 = False  # float32 rows are float32 arithmetic
    skip = set(filter(None, args.skip.split(",")))
    facts = {}

    def the_machine():
        facts.update(machine(device, sizes))
        return f"{facts.get('gpu', facts['cpu'])}, {facts['bandwidth_gbs']:.0f} GB/s", machine_lines(facts)

    report.section("machine", the_machine)
    if "tests" not in skip:
        report.section("pytest -m cuda", lambda: cuda_tests(report, sizes))
    if "cli" not in skip:
        report.section("command-line job, demo model", lambda: cli_job(report, device, sizes, out))
    if "benchmark" not in skip:
        report.section(
            "benchmark against transformers generate",
            lambda: benchmark(report, device, sizes, out, facts, args.budget, args.models.split(",")),
        )
    if "real-size" not in skip:
        report.section(
            "real-size shapes against transformers generate",
            lambda: real_size(report, device, sizes, out, facts, args.budget, args.real_size.split(",")),
        )
    if "profile" not in skip:
        report.section("where a step's time goes", lambda: step_profile(report, device, sizes, out))
    report.log(f"done in {report.elapsed():.0f} s; table: {os.path.relpath(report.table_path, ROOT)}")
    report.write()
    print(open(report.table_path, encoding="utf-8").read())


def machine_lines(facts: dict) -> list[str]:
    return ["| what | value |", "| --- | --- |"] + [
        f"| {k} | {round(v, 1) if isinstance(v, float) else v} |" for k, v in facts.items()
    ]


if __name__ == "__main__":
    main()
