"""The GPU check: one prepared command that turns a short loan of a GPU into a complete verdict.

    make gpu-check                            # on the GPU machine: PYTHONPATH=. python3 bench/gpu_check.py
    python3 bench/gpu_check.py --dry-run      # the same code on CPU, small shapes, in well under a minute

It needs only what the GPU machine's image has (torch, transformers, sentencepiece,
safetensors, click, tqdm, pyyaml, pytest) and runs, in order:

1. the machine: GPU, driver, library versions, and the two ceilings measured (a device-to-device
   copy for memory bandwidth, a large bfloat16 matrix product for arithmetic);
2. `pytest -m cuda` (tests/test_cuda.py);
3. the whole command-line job on the demo model's test set, float32 and float16, each line
   compared with float32 and with the CPU;
4. the benchmark: nmtdecode against `transformers` `generate` on the same GPU, in one process, for
   the demo model (natural lengths), a Transformer-base Marian with seeded random weights built
   here (every output forced to FIXED tokens, so both do the same work) and a Transformer-base
   OpenNMT-py checkpoint (nmtdecode only: OpenNMT-py is not in the image); float32, float16 and
   bfloat16, beam 1 and 5, batch 32 and 128: tokens/s, the ratio, whether the outputs agree, and
   the step time against the floor the memory bandwidth sets (the decoder's weights and its
   attention caches read once per step).

A section that fails is logged with its traceback and the check goes on; rows that would pass
--budget seconds are skipped, named in the table. Writes bench/results/gpu-check.log and
bench/results/gpu-check.md (a dry run: bench/out/gpu-check-dry.*), after every section, and copies both
into the folder $GPU_CHECK_OUT names, when it is set, so that a run cut short still returns
what it measured.
"""

from __future__ import annotations

import argparse
import copy
import itertools
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
import convert  # noqa: E402
import opennmt_py  # noqa: E402
import worker  # noqa: E402

from nmtdecode.models.fixed_step import FixedShapeSteps  # noqa: E402

DTYPES = {"float16": torch.float16, "bfloat16": torch.bfloat16, "float32": torch.float32}  # the target first
BEAMS = (1, 5)


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


FULL = Sizes(sentences=256, fixed=32, demo_lines=512, cli_lines=1000, cpu_lines=100, batches=(32, 128),
             copy_mib=1024, matmul=8192)
DRY = Sizes(sentences=8, fixed=4, demo_lines=8, cli_lines=8, cpu_lines=4, batches=(2, 4), copy_mib=16, matmul=256,
            passes=(1, 1),
            marian=dict(vocab=500, d_model=64, layers=2),
            opennmt=dict(vocab_size=500, hidden_size=64, word_vec_size=64, transformer_ff=256, enc_layers=2,
                         dec_layers=2), pytest_timeout=120)


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
        text = "\n".join(["# GPU check", "", "Made by `make gpu-check` (bench/gpu_check.py).", "", *summary, "",
                          *self.tables])
        with open(self.table_path, "w", encoding="utf-8") as f:
            f.write(text + "\n")
        if self.copy_to:
            for path in (self.log_path, self.table_path):
                shutil.copy(path, self.copy_to)


def synchronize(device: torch.device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def timed(device: torch.device, work, repeat: int = 5) -> float:
    """Seconds of one call of work(), the fastest of `repeat` after a warm-up."""
    work()
    best = float("inf")
    for _ in range(repeat):
        synchronize(device)
        start = time.perf_counter()
        work()
        synchronize(device)
        best = min(best, time.perf_counter() - start)
    return best


# 1. The machine ------------------------------------------------------------------------------

def machine(device: torch.device, sizes: Sizes) -> dict:
    """Facts and the two measured ceilings: bandwidth (bytes read + written per second of a
    device-to-device copy) and bfloat16 matrix-product rate."""
    from importlib import metadata

    facts = {"python": platform.python_version(), "torch": torch.__version__, "cuda": torch.version.cuda,
             "cpu": cpu_name()}
    for name in ("transformers", "sentencepiece", "safetensors", "pytest"):
        try:
            facts[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            facts[name] = "missing"
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        facts.update(gpu=props.name, gpu_memory=f"{props.total_memory / 2**30:.1f} GiB",
                     multiprocessors=props.multi_processor_count, capability=f"{props.major}.{props.minor}",
                     driver=nvidia_smi("driver_version"), clocks=nvidia_smi("clocks.sm,clocks.max.sm"))
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
        run = subprocess.run(["nvidia-smi", f"--query-gpu={query}", "--format=csv,noheader"], capture_output=True,
                             text=True, timeout=30)
        return run.stdout.strip() or run.stderr.strip()
    except (OSError, subprocess.TimeoutExpired) as error:
        return f"nvidia-smi: {error}"


# 2. The CUDA tests -----------------------------------------------------------------------------

def cuda_tests(report: Report, sizes: Sizes) -> tuple[str, list[str]]:
    cmd = [sys.executable, "-m", "pytest", "tests/test_cuda.py", "-m", "cuda", "-q", "-rfEs", "-p", "no:cacheprovider"]
    run = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=sizes.pytest_timeout,
                         env=dict(os.environ, PYTHONPATH=ROOT))
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
    runs = {"float32": (device.type, src, []),
            "float32 --cuda-graphs off": (device.type, src, ["--cuda-graphs", "off"]),
            "float16": (device.type, src, ["--dtype", "float16"]),
            # the same job again: a first job slower than the second is a cost of first use (the first
            # float16 job was 4-5x float32 on an H100 and an H200, torch 2.11, while the encoder ran
            # cuDNN's attention: docs/speed.md#gpus)
            "float16 again": (device.type, src, ["--dtype", "float16"]),
            "float16 --batch-size 128": (device.type, src, ["--dtype", "float16", "--batch-size", "128"])}
    if device.type == "cuda":
        head = os.path.join(out, "cli-head.en")
        with open(head, "w", encoding="utf-8") as f:
            f.write("\n".join(lines[: sizes.cpu_lines]) + "\n")
        runs["cpu float32"] = ("cpu", head, [])
    outputs, fallbacks = {}, []
    table = ["| run | lines | seconds | lines/s | decoding s | model load s |",
             "| --- | ---: | ---: | ---: | ---: | ---: |"]
    for label, (dev, path, extra) in runs.items():
        target = os.path.join(out, f"cli-{label.replace(' ', '-')}.de")
        cmd = [sys.executable, "-m", "nmtdecode", "translate", "--model", demo, "--src", path, "--output", target,
               "--device", dev, *extra]
        seconds, run = timed_once(lambda: subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True,
                                                         env=dict(os.environ, PYTHONPATH=ROOT)))
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
        table.append(f"| {dev} {label.removeprefix('cpu ')} | {n} | {seconds:.1f} | {n / seconds:.1f} "
                     f"| {decoding[1] if decoding else '?'} | {loading[1] if loading else '?'} |")
        report.log(f"{label}: {n} lines in {seconds:.1f} s")
        if len(outputs[label]) != n:
            raise RuntimeError(f"{label}: {len(outputs[label])} output lines for {n} input lines")
    agree = [f"float16 agrees with float32 on {same(outputs['float16'], outputs['float32'])} lines",
             f"--cuda-graphs off agrees on {same(outputs['float32 --cuda-graphs off'], outputs['float32'])} lines"]
    if "cpu float32" in outputs:
        agree.append(f"{device.type} float32 agrees with the CPU on {same(outputs['cpu float32'], outputs['float32'])} "
                     "lines")
    if fallbacks:
        agree.append(f"CUDA GRAPHS FELL BACK to eager steps in: {', '.join(fallbacks)} (see the log)")
    return "; ".join(agree), [*table, "", *[f"- {a}" for a in agree]]


def same(a: list, b: list) -> str:
    n = min(len(a), len(b))
    return f"{sum(x == y for x, y in zip(a, b))}/{n}"


# 4. The benchmark ------------------------------------------------------------------------------------

@dataclass
class Task:
    """One model's input: source ids (length-sorted, as the CLI batches them), the decoding limits,
    and the models: nmtdecode's (float32, on the CPU; copied per dtype) and the peer's directory."""

    name: str
    sources: list[list[int]]
    model: torch.nn.Module
    rules: object
    hf_dir: str | None
    max_length: int
    fixed: int = 0  # > 0: every output exactly this long (EOS banned until then)
    banned: list[int] = field(default_factory=list)


def demo_task(sizes: Sizes, out: str) -> Task:
    from nmtdecode.models.loading import load_model

    demo = os.path.join(ROOT, "data", "demo")
    loaded = load_model(demo)
    hf_dir = convert.to_transformers(loaded.model, os.path.join(out, "demo-hf"))
    with open(os.path.join(demo, "test.en"), encoding="utf-8") as f:
        lines = f.read().splitlines()[: sizes.demo_lines]
    sources = sorted((loaded.tokenizer.encode(line) for line in lines), key=len)
    return Task("demo", sources, loaded.model, loaded.rules, hf_dir, max_length=64,
                banned=list(loaded.rules.banned_ids))


def random_sources(n: int, low: int, high: int, eos: list[int]) -> list[list[int]]:
    g = torch.Generator().manual_seed(1)
    sources = [torch.randint(low, high, (int(torch.randint(10, 40, (1,), generator=g)),), generator=g).tolist() + eos
               for _ in range(n)]
    return sorted(sources, key=len)


def marian_task(sizes: Sizes, out: str) -> Task:
    from nmtdecode.models.checkpoint import read_json
    from nmtdecode.models.formats.huggingface import load_network

    hf_dir = convert.marian_base(os.path.join(out, "marian-base"), **sizes.marian)
    model, _, rules = load_network(hf_dir, read_json(os.path.join(hf_dir, "config.json")))
    vocab = model.cfg.tgt_vocab_size
    return Task("marian-base", random_sources(sizes.sentences, 2, vocab - 1, [0]), model, rules, hf_dir,
                max_length=256, fixed=sizes.fixed, banned=[vocab - 1])


def opennmt_task(sizes: Sizes, out: str) -> Task:
    from nmtdecode.models.loading import load_model

    loaded = load_model(opennmt_py.opennmt_base_without_onmt(os.path.join(out, "opennmt-base"), **sizes.opennmt))
    vocab = loaded.model.cfg.tgt_vocab_size
    return Task("opennmt-base", random_sources(sizes.sentences, len(opennmt_py.SPECIALS), vocab, []), loaded.model,
                loaded.rules, None, max_length=256, fixed=sizes.fixed)


def nmtdecode_decoder(task: Task, model, beam: int, fixed_steps=None):
    """nmtdecode's decoder with Hugging Face's stop rule (`--early-stopping false`, length penalty
    1), which makes it do the same work as `generate`; the forced-length tasks set both limits.
    fixed_steps: the fixed-shape step (CUDA graphs on a GPU, what the engine uses there), or None
    for the model's own step (`--cuda-graphs off`)."""
    from nmtdecode.config import Config
    from nmtdecode.decoding import BatchDecoder

    values = {"beam_size": beam, "max_length": task.max_length, "early_stopping": "false", "length_penalty": "avg",
              "alpha": 1.0}
    if task.fixed:
        values.update(min_length=task.fixed, max_length=task.fixed)
    decoder = BatchDecoder(model, Config.from_values(values).decoding, task.rules, steps=fixed_steps)
    return lambda batch: [n[0].tokens for n in decoder.translate_batch(batch)]


def transformers_decoder(task: Task, model, beam: int, device: torch.device):
    return worker.generate(model, beam, task.max_length, task.banned, task.fixed, device=device)


def run_batches(device: torch.device, translate, sources: list[list[int]], batch: int, captures=lambda: 0,
                passes: tuple[int, int] = (2, 2)):
    """Warm-up passes over every batch, then the fastest of the timed ones: (seconds, outputs,
    passes made); `passes`: (fewest warm-up passes, timed passes). The warm-up pays what a long job
    pays once (CUDA graph captures, each new shape's first kernels and cuBLAS heuristics), for every
    system alike: `passes[0]` passes (two in the full check), and more (up to four in all) while a
    pass still captures graphs (captures(): how many so far), as it does after the buffers grew in
    the first. One warm-up pass was not enough on an H200: the second pass recaptured the graphs the
    growth dropped, and once took 0.29 s for a batch that then took 0.05."""
    batches = [sources[i : i + batch] for i in range(0, len(sources), batch)]
    (warm_up, timed), made, best, before = passes, 0, None, -1
    with torch.inference_mode():
        while made < warm_up or (made < 4 and captures() != before):
            before = captures()
            for b in batches:
                translate(b)
            made += 1
        for _ in range(timed):
            synchronize(device)
            start = time.perf_counter()
            outputs = [o for b in batches for o in translate(b)]
            synchronize(device)
            seconds = time.perf_counter() - start
            best = seconds if best is None else min(best, seconds)
            made += 1
    return best, outputs, made


class StepCounter:
    """Counts the decode_step calls of a model or of its FixedShapeSteps (shadowing the method on
    the instance) while active."""

    def __init__(self, stepper):
        self.stepper, self.steps = stepper, 0

    def __enter__(self):
        step = type(self.stepper).decode_step

        def counted(tokens, cache):
            self.steps += 1
            return step(self.stepper, tokens, cache)

        self.stepper.decode_step = counted
        return self

    def __exit__(self, *exc):
        del self.stepper.decode_step


def floor_ms(model, dtype: torch.dtype, sentences: int, rows: int, source: float, positions: float,
             bandwidth_gbs: float) -> float:
    """What one step must read, over the measured bandwidth: the decoder's weights (embedding
    table excepted: one row per token) and the output projection, the cross-attention keys/values
    of `sentences` sentences of `source` tokens, and the self-attention cache of `rows` rows at
    `positions` positions."""
    cfg, size = model.cfg, torch.finfo(dtype).bits // 8
    weights = sum(p.numel() for p in model.decoder_layers.parameters()) + model.output.weight.numel()
    caches = cfg.decoder_layers * 2 * cfg.d_model * (sentences * source + rows * positions)
    return (weights + caches) * size / (bandwidth_gbs * 1e9) * 1e3


def benchmark(report: Report, device: torch.device, sizes: Sizes, out: str, facts: dict, budget: float,
              models: list[str]) -> tuple[str, list[str]]:
    import transformers

    builders = {"demo": demo_task, "marian-base": marian_task, "opennmt-base": opennmt_task}
    header = ["| model | dtype | beam | batch | nmtdecode tok/s | transformers tok/s | x transformers | same outputs "
              "| eager tok/s | graphs / eager | same as eager | step ms | floor ms | step / floor | peak MiB |",
              "| --- | --- " + "| ---: " * 13 + "|"]
    table, skipped, failed, fallbacks = list(header), 0, 0, []

    def fell_back(message: str):
        report.log(message)
        fallbacks.append(message)

    for name in models:
        try:
            task = builders[name](sizes, out)
        except Exception:  # noqa: BLE001
            report.log(f"{name}: could not be built\n{traceback.format_exc()}")
            table.append(f"| {name} | could not be built (see the log) |")
            failed += 1
            continue
        for dtype_name, dtype in DTYPES.items():
            ours = copy.deepcopy(task.model).to(device, dtype)
            steps = FixedShapeSteps(ours, graphs=device.type == "cuda", warn=fell_back)  # kept, as the engine does
            peer = None
            if task.hf_dir:
                peer = transformers.AutoModelForSeq2SeqLM.from_pretrained(task.hf_dir, dtype=dtype).to(device).eval()
            for beam in BEAMS:
                for batch in sizes.batches:
                    if report.elapsed() > budget:
                        table.append(f"| {name} | {dtype_name} | {beam} | {batch} | skipped: time budget |")
                        skipped += 1
                        continue
                    try:
                        table.append(benchmark_row(report, device, task, ours, steps, peer, dtype, dtype_name, beam,
                                                   batch, facts, sizes.passes))
                    except Exception:  # noqa: BLE001
                        report.log(traceback.format_exc())
                        table.append(f"| {name} | {dtype_name} | {beam} | {batch} | FAILED (see the log) |")
                        failed += 1
            del ours, steps, peer
            if device.type == "cuda":
                torch.cuda.empty_cache()
    verdict = "measured" if not (skipped or failed) else f"{failed} rows failed, {skipped} skipped"
    if fallbacks:
        verdict += f"; CUDA GRAPHS FELL BACK to eager steps {len(fallbacks)} times (see the log)"
    notes = ["", "Tokens are output tokens (EOS not counted) over decoding time (encoder included, tokenization "
             "not), the fastest of two timed passes over the same batches after warm-up passes (`run_batches`). "
             "nmtdecode: the fixed-shape step, "
             "replayed as CUDA graphs on a GPU (the default); eager: `--cuda-graphs off`. Step ms is nmtdecode's "
             "(graphs); floor: the decoder's weights and caches read once per step at the measured "
             f"{facts.get('bandwidth_gbs', 0):.0f} GB/s. nmtdecode runs Hugging Face's stop rule "
             "(`--early-stopping false`, length penalty 1) so that both do the same work."]
    return verdict, table + notes


def benchmark_row(report, device, task, ours, steps, peer, dtype, dtype_name, beam, batch, facts, passes) -> str:
    """nmtdecode as the engine runs it (the fixed-shape step, replayed as CUDA graphs on a GPU),
    its eager step (--cuda-graphs off) and transformers on the same sentences and batches."""
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    with StepCounter(steps) as counter:
        seconds, outputs, made = run_batches(device, nmtdecode_decoder(task, ours, beam, steps), task.sources,
                                             batch, captures=lambda: steps.captures, passes=passes)
    eager_seconds, eager_outputs, _ = run_batches(device, nmtdecode_decoder(task, ours, beam), task.sources, batch,
                                                  passes=passes)
    steps = counter.steps / made  # one pass's
    peak = torch.cuda.max_memory_allocated(device) / 2**20 if device.type == "cuda" else 0
    tokens = sum(map(len, outputs))
    source = sum(map(len, task.sources)) / len(task.sources)
    floor = floor_ms(ours, dtype, batch, batch * beam, source, tokens / len(outputs) / 2, facts["bandwidth_gbs"])
    step_ms = seconds / steps * 1e3
    cells = [task.name, dtype_name, beam, batch, f"{tokens / seconds:.0f}"]
    if peer is not None:
        generate = transformers_decoder(task, peer, beam, device)
        peer_seconds, peer_outputs, _ = run_batches(device, generate, task.sources, batch, passes=passes)
        peer_tokens = sum(map(len, peer_outputs))
        cells += [f"{peer_tokens / peer_seconds:.0f}", f"{peer_seconds / seconds:.2f}",
                  same(outputs, peer_outputs)]
    else:
        cells += ["-", "-", "-"]
    cells += [f"{sum(map(len, eager_outputs)) / eager_seconds:.0f}", f"{eager_seconds / seconds:.2f}",
              same(outputs, eager_outputs), f"{step_ms:.2f}", f"{floor:.3f}", f"{step_ms / floor:.0f}", f"{peak:.0f}"]
    row = "| " + " | ".join(map(str, cells)) + " |"
    report.log(row)
    return row


# 5. Where a step's time goes -------------------------------------------------------------------------

def step_profile(report: Report, device: torch.device, sizes: Sizes, out: str) -> tuple[str, list[str]]:
    """One batch of marian-base (float16 on a GPU) under torch.profiler: per decoding step, the wall
    time (measured without the profiler), the GPU's busy time (the sum of its kernels: what the step
    would take with no launch gaps), kernel launches and operator calls."""
    from torch.autograd import DeviceType

    task = marian_task(sizes, out)
    dtype = torch.float16 if device.type == "cuda" else torch.float32
    model = copy.deepcopy(task.model).to(device, dtype)
    activities = [torch.profiler.ProfilerActivity.CPU]
    if device.type == "cuda":
        activities.append(torch.profiler.ProfilerActivity.CUDA)
    table = ["| step | beam | batch | steps | wall ms/step | GPU busy ms/step | wall / busy | kernels/step "
             "| aten calls/step |", "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    steps = FixedShapeSteps(model, graphs=device.type == "cuda", warn=report.log)
    for (beam, batch), (mode, stepper) in itertools.product(
            ((5, sizes.batches[0]), (5, sizes.batches[-1]), (1, sizes.batches[-1])),
            (("eager", None), ("graphs" if device.type == "cuda" else "fixed shape", steps))):
        translate = nmtdecode_decoder(task, model, beam, stepper)
        sources = task.sources[:batch]
        with torch.inference_mode(), StepCounter(stepper or model) as counter:
            seconds = timed(device, lambda: translate(sources), repeat=3)
            with torch.profiler.profile(activities=activities) as prof:
                translate(sources)
                synchronize(device)
        n = counter.steps // 5  # warm-up, three timed runs, the profiled one
        events = prof.key_averages()
        kernels = [e for e in events if e.device_type == DeviceType.CUDA]
        busy = sum(e.device_time_total for e in kernels) / 1e3 / n if kernels else None
        wall = seconds / n * 1e3
        calls = sum(e.count for e in events if e.key.startswith("aten::"))
        cells = [mode, beam, batch, n, f"{wall:.2f}", f"{busy:.3f}" if busy else "-",
                 f"{wall / busy:.1f}" if busy else "-",
                 f"{sum(e.count for e in kernels) / n:.0f}" if kernels else "-", f"{calls / n:.0f}"]
        table.append("| " + " | ".join(map(str, cells)) + " |")
        report.log(table[-1])
    return f"marian-base {str(dtype).removeprefix('torch.')}", table


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dry-run", action="store_true", help="the same code on CPU with small shapes")
    parser.add_argument("--device", default=None, help="default: cuda, or cpu with --dry-run")
    parser.add_argument("--budget", type=float, default=450, help="seconds after which benchmark rows are skipped")
    parser.add_argument("--models", default="marian-base,demo,opennmt-base")
    parser.add_argument("--skip", default="", help="sections to leave out: tests,cli,benchmark,profile")
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
        report.section("benchmark against transformers generate",
                       lambda: benchmark(report, device, sizes, out, facts, args.budget, args.models.split(",")))
    if "profile" not in skip:
        report.section("where a step's time goes", lambda: step_profile(report, device, sizes, out))
    report.log(f"done in {report.elapsed():.0f} s; table: {os.path.relpath(report.table_path, ROOT)}")
    report.write()
    print(open(report.table_path, encoding="utf-8").read())


def machine_lines(facts: dict) -> list[str]:
    return ["| what | value |", "| --- | --- |"] + [
        f"| {k} | {round(v, 1) if isinstance(v, float) else v} |" for k, v in facts.items()]


if __name__ == "__main__":
    main()
