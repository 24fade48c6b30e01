"""The GPU check's real-size rows (bench/gpu_check.py runs them): an NLLB-600M shape and a
BART-large shape (bench/convert.py, seeded random weights) against `transformers` `generate`
on the same GPU, beam 4 and 5, batch 32 and 128, float16 and bfloat16.

Every output is forced to `fixed` tokens (EOS banned until then, the step limit there) and pad
is banned on both sides, so that both do the same work. Per row: tokens/s of each and their
ratio, whether the outputs agree, the peak GPU memory each adds while decoding to its own
weights, and nmtdecode's step against the bandwidth floor (gpu_benchmark.floor_ms). nmtdecode
runs as the engine does on a GPU: the fixed-shape step replayed as CUDA graphs and the search
on the device.
"""

from __future__ import annotations

import dataclasses
import os
from typing import TYPE_CHECKING

import torch

import convert
from gpu_benchmark import (
    StepCounter,
    Task,
    floor_ms,
    nmtdecode_decoder,
    run_batches,
    same,
    synchronize,
    table_rows,
    transformers_decoder,
)

if TYPE_CHECKING:
    from gpu_check import Report, Sizes

REAL_DTYPES = {"float16": torch.float16, "bfloat16": torch.bfloat16}
REAL_BEAMS = (4, 5)
PAD = 1  # both shapes' pad id (and 2 their EOS and decoder start)


def real_task(name: str, sizes: Sizes, out: str) -> Task:
    """The model `name` ("nllb-600m" or "bart-large") at the check's size, its sources and limits."""
    from nmtdecode.models.checkpoint import read_json
    from nmtdecode.models.formats.huggingface import load_network

    build = {"nllb-600m": convert.nllb_600m_shape, "bart-large": convert.bart_large_shape}[name]
    hf_dir = build(os.path.join(out, name), **sizes.real_shape)
    model, _, rules = load_network(hf_dir, read_json(os.path.join(hf_dir, "config.json")))
    rules = dataclasses.replace(rules, banned_ids=(PAD,))
    sources = convert.random_sources(sizes.real_sentences, 4, model.cfg.src_vocab_size, [2])
    return Task(name, sources, model, rules, hf_dir, max_length=sizes.fixed, fixed=sizes.fixed, banned=[PAD])


def weight_bytes(model: torch.nn.Module) -> int:
    return sum(p.numel() * p.element_size() for p in model.parameters())


def peak_while(device: torch.device, model: torch.nn.Module, work) -> tuple[object, float | None]:
    """work()'s result, and the peak GPU memory (MiB) of `model`'s weights and what the work
    allocated beyond what was there before it (None on a CPU)."""
    if device.type != "cuda":
        return work(), None
    synchronize(device)
    before = torch.cuda.memory_allocated(device)
    torch.cuda.reset_peak_memory_stats(device)
    result = work()
    synchronize(device)
    return result, (torch.cuda.max_memory_allocated(device) - before + weight_bytes(model)) / 2**20


def real_size(
    report: Report, device: torch.device, sizes: Sizes, out: str, facts: dict, budget: float, models: list[str]
) -> tuple[str, list[str]]:
    header = [
        "| model | dtype | beam | batch | nmtdecode tok/s | transformers tok/s | x transformers | same outputs "
        "| nmtdecode peak MiB | transformers peak MiB | peak ratio | step ms | floor ms | step / floor |",
        "| --- | --- " + "| ---: " * 12 + "|",
    ]
    rows, skipped, failed = table_rows(
        report,
        device,
        budget,
        {name: lambda name=name: real_task(name, sizes, out) for name in models},
        REAL_DTYPES,
        REAL_BEAMS,
        sizes.batches,
        report.log,
        lambda *row: real_row(report, device, *row, facts, sizes.real_passes),
    )
    table = header + rows
    verdict = "measured" if not (skipped or failed) else f"{failed} rows failed, {skipped} skipped"
    notes = [
        "",
        f"Outputs forced to {sizes.fixed} tokens, {sizes.real_sentences} random sources of 10-40 tokens; "
        "peak: each system's weights plus what its decoding allocated beyond them (both models stay loaded); "
        f"floor: the decoder's weights and caches read once per step at {facts.get('bandwidth_gbs', 0):.0f} GB/s.",
    ]
    return verdict, table + notes


def real_row(report, device, task, ours, steps, peer, dtype, dtype_name, beam, batch, facts, passes) -> str:
    """One row: nmtdecode as the engine runs it on a GPU, then `generate`, on the same batches."""
    translate = nmtdecode_decoder(task, ours, beam, steps)
    with StepCounter(steps) as counter:
        (seconds, outputs, made), our_peak = peak_while(
            device,
            ours,
            lambda: run_batches(device, translate, task.sources, batch, captures=lambda: steps.captures, passes=passes),
        )
    generate = transformers_decoder(task, peer, beam, device)
    (peer_seconds, peer_outputs, _), peer_peak = peak_while(
        device, peer, lambda: run_batches(device, generate, task.sources, batch, passes=passes)
    )
    tokens, peer_tokens = sum(map(len, outputs)), sum(map(len, peer_outputs))
    step_ms = seconds / (counter.steps / made) * 1e3
    source = sum(map(len, task.sources)) / len(task.sources)
    floor = floor_ms(ours, dtype, batch, batch * beam, source, tokens / len(outputs) / 2, facts["bandwidth_gbs"])
    peaks = (
        ["-", "-", "-"] if our_peak is None else [f"{our_peak:.0f}", f"{peer_peak:.0f}", f"{our_peak / peer_peak:.2f}"]
    )
    cells = [
        task.name,
        dtype_name,
        beam,
        batch,
        f"{tokens / seconds:.0f}",
        f"{peer_tokens / peer_seconds:.0f}",
        f"{peer_seconds / seconds:.2f}",
        same(outputs, peer_outputs),
        *peaks,
        f"{step_ms:.2f}",
        f"{floor:.3f}",
        f"{step_ms / floor:.0f}",
    ]
    row = "| " + " | ".join(map(str, cells)) + " |"
    report.log(row)
    return row
