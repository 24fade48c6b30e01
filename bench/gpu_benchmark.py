"""The GPU check's measurements (bench/gpu_check.py runs them): the benchmark against
`transformers` `generate` on the same GPU (section 4) and where a decoding step's time goes
(section 5), with the timing helpers the check's other sections share.
"""

from __future__ import annotations

import copy
import itertools
import os
import time
import traceback
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import torch

from common import ROOT  # (first: the repository on sys.path)
import convert
import opennmt_py
import worker
from operators import MODEL, SEARCH, labelled_parts, part_counts

from nmtdecode.models.fixed_step import FixedShapeSteps

if TYPE_CHECKING:
    from gpu_check import Report, Sizes

DTYPES = {"float16": torch.float16, "bfloat16": torch.bfloat16, "float32": torch.float32}  # the target first
BEAMS = (1, 5)


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
    return Task(
        "demo", sources, loaded.model, loaded.rules, hf_dir, max_length=64, banned=list(loaded.rules.banned_ids)
    )


def marian_task(sizes: Sizes, out: str) -> Task:
    from nmtdecode.models.checkpoint import read_json
    from nmtdecode.models.formats.huggingface import load_network

    hf_dir = convert.marian_base(os.path.join(out, "marian-base"), **sizes.marian)
    model, _, rules = load_network(hf_dir, read_json(os.path.join(hf_dir, "config.json")))
    vocab = model.cfg.tgt_vocab_size
    return Task(
        "marian-base",
        convert.random_sources(sizes.sentences, 2, vocab - 1, [0]),
        model,
        rules,
        hf_dir,
        max_length=256,
        fixed=sizes.fixed,
        banned=[vocab - 1],
    )


def opennmt_task(sizes: Sizes, out: str) -> Task:
    from nmtdecode.models.loading import load_model

    loaded = load_model(opennmt_py.opennmt_base_without_onmt(os.path.join(out, "opennmt-base"), **sizes.opennmt))
    vocab = loaded.model.cfg.tgt_vocab_size
    return Task(
        "opennmt-base",
        convert.random_sources(sizes.sentences, len(opennmt_py.SPECIALS), vocab, []),
        loaded.model,
        loaded.rules,
        None,
        max_length=256,
        fixed=sizes.fixed,
    )


def nmtdecode_decoder(task: Task, model, beam: int, fixed_steps=None, search_on: str = "auto"):
    """A function from a batch of source ids to nmtdecode's 1-best outputs (`make_decoder`'s)."""
    decoder = make_decoder(task, model, beam, fixed_steps, search_on)
    return lambda batch: [n[0].tokens for n in decoder.decode(batch).nbests]


def make_decoder(task: Task, model, beam: int, fixed_steps=None, search_on: str = "auto"):
    """nmtdecode's decoder with Hugging Face's stop rule (`--early-stopping false`, length penalty
    1), which makes it do the same work as `generate`; the forced-length tasks ban EOS up to their
    step limit. fixed_steps: the fixed-shape step (CUDA graphs on a GPU, what the engine uses
    there), or None for the model's own step (`--cuda-graphs off`); search_on: where the search
    runs (`--search-on`: `auto`, the engine's default: engine/decoding.py, `on_device`)."""
    from nmtdecode.options.config import Config
    from nmtdecode.engine.decoding import BatchDecoder

    values = {
        "beam_size": beam,
        "max_length": task.max_length,
        "early_stopping": "false",
        "length_penalty": "avg",
        "alpha": 1.0,
    }
    banned = []
    if task.fixed:  # EOS banned, not --min-length: a ban acts alike at every step, so the search's steps replay as
        values.update(max_length=task.fixed)  # CUDA graphs (search/device/graphs.py), as they would for a user
        banned = [model.cfg.eos_id]
    decoding = Config.from_values(values).decoding
    return BatchDecoder(model, decoding, task.rules, banned_ids=banned, steps=fixed_steps, search_on=search_on)


def transformers_decoder(task: Task, model, beam: int, device: torch.device):
    return worker.generate(model, beam, task.max_length, task.banned, task.fixed, device=device)


def run_batches(
    device: torch.device,
    translate,
    sources: list[list[int]],
    batch: int,
    captures=lambda: 0,
    passes: tuple[int, int] = (2, 2),
):
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


def floor_ms(
    model, dtype: torch.dtype, sentences: int, rows: int, source: float, positions: float, bandwidth_gbs: float
) -> float:
    """What one step must read, over the measured bandwidth: the decoder's weights (embedding
    table excepted: one row per token) and the output projection, the cross-attention keys/values
    of `sentences` sentences of `source` tokens, and the self-attention cache of `rows` rows at
    `positions` positions."""
    cfg, size = model.cfg, torch.finfo(dtype).bits // 8
    weights = sum(p.numel() for p in model.decoder_layers.parameters()) + model.output.weight.numel()
    caches = cfg.decoder_layers * 2 * cfg.d_model * (sentences * source + rows * positions)
    return (weights + caches) * size / (bandwidth_gbs * 1e9) * 1e3


def benchmark(
    report: Report, device: torch.device, sizes: Sizes, out: str, facts: dict, budget: float, models: list[str]
) -> tuple[str, list[str]]:
    builders = {"demo": demo_task, "marian-base": marian_task, "opennmt-base": opennmt_task}
    header = [
        "| model | dtype | beam | batch | nmtdecode tok/s | transformers tok/s | x transformers | same outputs "
        "| eager tok/s | graphs / eager | same as eager | step ms | floor ms | step / floor | peak MiB |",
        "| --- | --- " + "| ---: " * 13 + "|",
    ]
    fallbacks = []

    def fell_back(message: str):
        report.log(message)
        fallbacks.append(message)

    rows, skipped, failed = table_rows(
        report,
        device,
        budget,
        {name: lambda name=name: builders[name](sizes, out) for name in models},
        DTYPES,
        BEAMS,
        sizes.batches,
        fell_back,
        lambda *row: benchmark_row(report, device, *row, facts, sizes.passes),
    )
    table = header + rows
    verdict = "measured" if not (skipped or failed) else f"{failed} rows failed, {skipped} skipped"
    if fallbacks:
        verdict += f"; CUDA GRAPHS FELL BACK to eager steps {len(fallbacks)} times (see the log)"
    notes = [
        "",
        "Tokens are output tokens (EOS not counted) over decoding time (encoder included, tokenization "
        "not), the fastest of two timed passes over the same batches after warm-up passes (`run_batches`). "
        "nmtdecode: the fixed-shape step, "
        "replayed as CUDA graphs on a GPU, with the search where `--search-on auto` puts it (on a GPU the device "
        "search, its steps replayed as CUDA graphs too, for these rows; outputs of a fixed length ban EOS up "
        "to it); eager: "
        "`--cuda-graphs off`, the same search. Step ms is nmtdecode's "
        "(graphs); floor: the decoder's weights and caches read once per step at the measured "
        f"{facts.get('bandwidth_gbs', 0):.0f} GB/s. nmtdecode runs Hugging Face's stop rule "
        "(`--early-stopping false`, length penalty 1) so that both do the same work.",
    ]
    return verdict, table + notes


def table_rows(
    report: Report, device: torch.device, budget: float, builders: dict, dtypes: dict, beams, batches, warn, measure
) -> tuple[list[str], int, int]:
    """A benchmark table's rows, and how many were skipped (past `budget` seconds) and failed: for
    each task that `builders` (name -> function) make, each dtype, beam and batch size,
    measure(task, ours, steps, peer, dtype, dtype_name, beam, batch) -> its row. `ours` is the task's
    model in the dtype, `steps` its fixed-shape step (CUDA graphs on a GPU, kept across rows as the
    engine keeps it; `warn` told of a fallback), `peer` the same model in `transformers` or None."""
    import transformers

    rows, skipped, failed = [], 0, 0
    for name, build in builders.items():
        try:
            task = build()
        except Exception:  # noqa: BLE001 - one model's failure must not lose the others' rows
            report.log(f"{name}: could not be built\n{traceback.format_exc()}")
            rows.append(f"| {name} | could not be built (see the log) |")
            failed += 1
            continue
        for dtype_name, dtype in dtypes.items():
            ours = copy.deepcopy(task.model).to(device, dtype)
            steps = FixedShapeSteps(ours, graphs=device.type == "cuda", warn=warn)
            peer = None
            if task.hf_dir:
                peer = transformers.AutoModelForSeq2SeqLM.from_pretrained(task.hf_dir, dtype=dtype).to(device).eval()
            for beam, batch in itertools.product(beams, batches):
                if report.elapsed() > budget:
                    rows.append(f"| {name} | {dtype_name} | {beam} | {batch} | skipped: time budget |")
                    skipped += 1
                    continue
                try:
                    rows.append(measure(task, ours, steps, peer, dtype, dtype_name, beam, batch))
                except Exception:  # noqa: BLE001
                    report.log(traceback.format_exc())
                    rows.append(f"| {name} | {dtype_name} | {beam} | {batch} | FAILED (see the log) |")
                    failed += 1
            del ours, steps, peer
            if device.type == "cuda":
                torch.cuda.empty_cache()
    return rows, skipped, failed


def benchmark_row(report, device, task, ours, steps, peer, dtype, dtype_name, beam, batch, facts, passes) -> str:
    """nmtdecode as the engine runs it (the fixed-shape step, replayed as CUDA graphs on a GPU),
    its eager step (--cuda-graphs off) and transformers on the same sentences and batches."""
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    with StepCounter(steps) as counter:
        seconds, outputs, made = run_batches(
            device,
            nmtdecode_decoder(task, ours, beam, steps),
            task.sources,
            batch,
            captures=lambda: steps.captures,
            passes=passes,
        )
    eager_seconds, eager_outputs, _ = run_batches(
        device, nmtdecode_decoder(task, ours, beam, None), task.sources, batch, passes=passes
    )
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
        cells += [f"{peer_tokens / peer_seconds:.0f}", f"{peer_seconds / seconds:.2f}", same(outputs, peer_outputs)]
    else:
        cells += ["-", "-", "-"]
    cells += [
        f"{sum(map(len, eager_outputs)) / eager_seconds:.0f}",
        f"{eager_seconds / seconds:.2f}",
        same(outputs, eager_outputs),
        f"{step_ms:.2f}",
        f"{floor:.3f}",
        f"{step_ms / floor:.0f}",
        f"{peak:.0f}",
    ]
    row = "| " + " | ".join(map(str, cells)) + " |"
    report.log(row)
    return row


# 5. Where a step's time goes -------------------------------------------------------------------------


def step_profile(report: Report, device: torch.device, sizes: Sizes, out: str) -> tuple[str, list[str]]:
    """One batch of marian-base (float16 on a GPU) under torch.profiler: per decoding step, the wall
    time (measured without the profiler), the GPU's busy time (the sum of its kernels: what the step
    would take with no launch gaps), kernel launches and operator calls; and the launches of the
    model's step (per decoder layer) and of the search apart (bench/operators.py: kernels on a GPU,
    computing operators on a CPU). The eager step, then the graphed one with the search on the host
    and on the device (`--search-on host|device`)."""
    from torch.autograd import DeviceType

    task = marian_task(sizes, out)
    dtype = torch.float16 if device.type == "cuda" else torch.float32
    model = copy.deepcopy(task.model).to(device, dtype)
    activities = [torch.profiler.ProfilerActivity.CPU]
    if device.type == "cuda":
        activities.append(torch.profiler.ProfilerActivity.CUDA)
    table = [
        "| step | search | beam | batch | steps | wall ms/step | GPU busy ms/step | wall / busy | kernels/step "
        "| aten calls/step | model launches/layer | search launches/step |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    steps = FixedShapeSteps(model, graphs=device.type == "cuda", warn=report.log)
    graphs = "graphs" if device.type == "cuda" else "fixed shape"
    modes = (("eager", None, False), (graphs, steps, False), (graphs, steps, True))
    shapes = dict.fromkeys([(5, sizes.batches[0]), (5, sizes.batches[-1]), (1, sizes.batches[-1])])  # once each
    for (beam, batch), (mode, stepper, on_device) in itertools.product(shapes, modes):
        decoder = make_decoder(task, model, beam, stepper, "device" if on_device else "host")
        sources = task.sources[:batch]
        with torch.inference_mode(), StepCounter(stepper or model) as counter:
            seconds = timed(device, lambda: decoder.decode(sources).nbests, repeat=3)
            with labelled_parts(decoder), torch.profiler.profile(activities=activities) as prof:
                decoder.decode(sources)
                synchronize(device)
        n = counter.steps // 5  # warm-up, three timed runs, the profiled one
        events = prof.key_averages()
        kernels = [e for e in events if e.device_type == DeviceType.CUDA]
        busy = sum(e.device_time_total for e in kernels) / 1e3 / n if kernels else None
        wall = seconds / n * 1e3
        calls = sum(e.count for e in events if e.key.startswith("aten::"))
        parts = part_counts(prof)
        cells = [
            mode,
            "device" if on_device else "host",
            beam,
            batch,
            n,
            f"{wall:.2f}",
            f"{busy:.3f}" if busy else "-",
            f"{wall / busy:.1f}" if busy else "-",
            f"{sum(e.count for e in kernels) / n:.0f}" if kernels else "-",
            f"{calls / n:.0f}",
            f"{parts[MODEL][1] / n / model.cfg.decoder_layers:.1f}",
            f"{parts[SEARCH][1] / n:.0f}",
        ]
        table.append("| " + " | ".join(map(str, cells)) + " |")
        report.log(table[-1])
    notes = [
        "",
        "Launches: kernels on a GPU, computing operators on a CPU (bench/operators.py); a model step's are "
        "divided by its decoder layers (the embedding and output layer included). The search's are those "
        "it launches one by one: a search step replayed as a CUDA graph (search/device/graphs.py) launches "
        "its kernels in the replay, counted in kernels/step, not here.",
    ]
    return f"marian-base {str(dtype).removeprefix('torch.')}", table + notes
