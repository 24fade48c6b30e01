"""The benchmark's tables: the machine they were measured on, and markdown for results.md."""

from __future__ import annotations

import os
import platform
import time

import common  # noqa: F401  (the repository on sys.path)
from nmtdecode.models.gemm import cpu_description  # noqa: E402

FLAGS = ("avx2", "avx512f", "avx512_vnni", "avx512_bf16", "amx_tile")  # what the kernels can use


def cpu_flags() -> list[str]:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("flags"):
                    present = set(line.split(":", 1)[1].split())
                    return [flag for flag in FLAGS if flag in present]
    except OSError:
        pass
    return []


def versions() -> str:
    from importlib import metadata

    import torch

    found = [f"torch {torch.__version__}"]
    for name in ("ctranslate2", "transformers", "OpenNMT-py"):  # their distributions, not imported
        try:
            found.append(f"{name} {metadata.version(name)}")
        except metadata.PackageNotFoundError:
            pass
    return ", ".join(found)


def machine_lines(args) -> list[str]:
    return [
        f"CPU: {cpu_description()}; {os.cpu_count()} logical CPUs; flags: {', '.join(cpu_flags()) or 'none'}; "
        f"{platform.machine()}",
        f"Threads: {args.threads}; {versions()}; {time.strftime('%Y-%m-%d')}",
        f"Command: `python bench/run.py --threads {args.threads} --repeat {args.repeat}"
        f" --models {args.models}{' --quick' if args.quick else ''}` "
        f"(fastest of {args.repeat} interleaved runs per system)",
    ]


def speed_table(rows) -> list[str]:
    lines = [
        "| model | beam | system | sentences/s | target tokens/s | load s | process s | peak RSS MB | "
        "CPU matrix products | compared with | its speed ÷ this speed | its process ÷ this process | "
        "same 1-best | BLEU | chrF |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        vs = (
            f"{r['vs']} | {r['ratio']:.2f}× | {r['process_ratio']:.2f}× | {100 * r['same']:.0f}%"
            if r.get("vs")
            else "– | – | – | –"
        )
        quality = f"{r['bleu']:.1f} | {r['chrf']:.1f}" if "bleu" in r else "– | –"
        lines.append(
            f"| {r['model']} | {r['beam']} | {r['system']} | {r['sent_s']:.2f} | {r['tok_s']:.1f} | "
            f"{r['load_s']:.2f} | {r['process_s']:.1f} | {r['rss']:.0f} | {r['gemm']} | {vs} | {quality} |"
        )
    return lines


def write_results(path, machine, rows, jobs, memory, notes):
    lines = machine + [
        "",
        'Decoding (token ids in, token ids out; tokenization not timed). "load s": from '
        'the model\'s path to a model ready to decode, after `import torch`; "process s": the whole '
        "worker process (start, imports, load, a warm-up on 4 sentences, decoding). "
        'Each compared row is measured against an nmtdecode row ("compared with"); '
        '"its speed ÷ this speed" above 1 means that nmtdecode row is faster.',
        "",
    ]
    lines += speed_table(rows)
    if jobs:
        lines += [
            "",
            "Whole jobs on the demo test file (process start to output file written):",
            "",
            "| job | lines | seconds | time / nmtdecode's |",
            "|---|---|---|---|",
        ]
        lines += [f"| {j['job']} | {j['lines']} | {j['seconds']:.2f} | {j['ratio']:.2f}× |" for j in jobs]
    if memory:
        lines += [
            "",
            "Peak memory of the whole CLI job (demo model, beam 5, batch 32):",
            "",
            "| input lines | seconds | peak RSS MB |",
            "|---|---|---|",
        ]
        lines += [f"| {m['sentences']} | {m['seconds']:.1f} | {m['peak_rss_mb']:.0f} |" for m in memory]
    lines += [f"\n{note}" for note in notes]
    table = "\n".join(lines) + "\n"
    print(table)
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        f.write("# Benchmark results\n\n" + table)
