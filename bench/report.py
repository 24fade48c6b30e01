"""The benchmark's tables: the machine they were measured on, and markdown for results.md."""

from __future__ import annotations

import os
import platform
import time

from common import ISA_CAPS  # (first: the repository on sys.path)
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


def own_isa() -> str:
    """The widest vector instruction set of this CPU that the kernels use."""
    flags = cpu_flags()
    return "AVX-512" if "avx512f" in flags else "AVX2" if "avx2" in flags else "below AVX2"


def isa_short(isa: str) -> str:
    """A row's instruction set: the CPU's own, or a cap below it ("emulated")."""
    if isa == "native":
        return own_isa()
    return isa.upper() + ("" if own_isa() == isa.upper() else " (emulated)")


def isa_line(isa: str) -> str:
    if isa == "native":
        return f"ISA: the CPU's own ({own_isa()})"
    caps = " ".join(f"{name}={value}" for name, value in ISA_CAPS[isa].items())
    where = "this CPU's own" if own_isa() == isa.upper() else f"emulated on a CPU with {own_isa()}"
    return f"ISA: {isa.upper()}, {where}: every process runs with {caps}"


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
        isa_line(args.isa),
        f"Threads: {args.threads}; {versions()}; {time.strftime('%Y-%m-%d')}",
        f"Command: `python bench/run.py --threads {args.threads} --repeat {args.repeat}"
        f" --models {args.models}{' --rows ' + args.rows if args.rows else ''}{' --quick' if args.quick else ''}"
        f"{'' if args.isa == 'native' else ' --isa ' + args.isa}` "
        f"(fastest of {args.repeat} interleaved runs per system)",
    ]


def speed_table(rows) -> list[str]:
    lines = [
        "| model | beam | ISA | system | sentences/s | target tokens/s | CPU s | load s | process s | peak RSS MB | "
        "CPU matrix products | compared with | its speed ÷ this speed | its process ÷ this process | "
        "same 1-best | BLEU | chrF |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        vs = (
            f"{r['vs']} | {r['ratio']:.2f}× | {r['process_ratio']:.2f}× | {100 * r['same']:.0f}%"
            if r.get("vs")
            else "– | – | – | –"
        )
        quality = f"{r['bleu']:.1f} | {r['chrf']:.1f}" if "bleu" in r else "– | –"
        lines.append(
            f"| {r['model']} | {r['beam']} | {isa_short(r['isa'])} | {r['system']} | {r['sent_s']:.2f} | "
            f"{r['tok_s']:.1f} | {r['cpu_s']:.1f} | {r['load_s']:.2f} | {r['process_s']:.1f} | {r['rss']:.0f} | "
            f"{r['gemm']} | {vs} | {quality} |"
        )
    return lines


def load_line(rows) -> str:
    """How busy the machine was when the kept runs started (other processes share its CPUs)."""
    loads = [r["load"] for r in rows if "load" in r]
    if not loads:
        return ""
    return (
        f"Machine load: the 1-minute load average was {min(loads):.1f}-{max(loads):.1f} when the kept runs "
        f"started ({os.cpu_count()} logical CPUs; above that, processes waited for a core)."
    )


def write_results(path, machine, rows, jobs, memory, notes):
    lines = (
        machine
        + [load_line(rows)] * bool(load_line(rows))
        + [
            "",
            'Decoding (token ids in, token ids out; tokenization not timed). "load s": from '
            'the model\'s path to a model ready to decode, after `import torch`; "process s": the whole '
            "worker process (start, imports, load, a warm-up on 4 sentences, decoding, exit; an nmtdecode "
            "worker starts as `nmtdecode translate` does, OpenMP's idle threads spinning briefly, and exits "
            "as it does, without the interpreter's teardown). "
            '"CPU s": the CPU seconds of the decoding, every thread of the process (on a shared machine, '
            "what the decoding cost apart from the time it waited for a core). "
            'Each compared row is measured against an nmtdecode row ("compared with"); '
            '"its speed ÷ this speed" above 1 means that nmtdecode row is faster.',
            "",
        ]
    )
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
