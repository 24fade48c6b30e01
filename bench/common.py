"""What the benchmark's scripts share: where things are, and how a piece of work is timed.

Importing it puts the repository (for `nmtdecode` and `tests`) and bench/ (for the
benchmark's own modules: convert, report, worker, ...) on `sys.path`, so a script runs as
`python bench/NAME.py` or `python bench/experiments/NAME.py` from anywhere. An experiment
finds this module with one line first: `sys.path.insert(0, <bench/>)`.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from typing import Callable, TypeVar

BENCH = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(BENCH)
DEMO = os.path.join(ROOT, "data", "demo")
RESULTS = os.path.join(BENCH, "results")  # the tables kept, one per machine
OUT = os.path.join(BENCH, "out")  # what a run writes and nobody keeps

for _path in (BENCH, ROOT):
    if _path not in sys.path:
        sys.path.insert(0, _path)

T = TypeVar("T")

# What caps each library below the CPU's own instruction set: oneDNN (torch's and CTranslate2's
# copies), torch's own kernels, MKL, CTranslate2's own kernels. Each reads its variable once, when
# it loads, so a process is started with them. On a CPU with AVX-512 this emulates an AVX2 one,
# with this CPU's caches, clock and memory.
ISA_CAPS: dict[str, dict[str, str]] = {
    "native": {},
    "avx2": {
        "ONEDNN_MAX_CPU_ISA": "AVX2",
        "ATEN_CPU_CAPABILITY": "avx2",
        "MKL_ENABLE_INSTRUCTIONS": "AVX2",
        "CT2_FORCE_CPU_ISA": "AVX2",
    },
}


def cap_children(isa: str) -> None:
    """Every process this one starts from now on runs with `isa`'s caps; nmtdecode's measured
    kernel choices (`--gemm auto`) are kept apart from the CPU's own, in bench/out/cache-ISA."""
    os.environ.update(ISA_CAPS[isa])
    if isa != "native":
        os.environ["NMTDECODE_CACHE"] = os.path.join(OUT, f"cache-{isa}")


def run_with_isa(isa: str) -> None:
    """Re-executes this script with `isa`'s caps, unless they are set already (call it before
    torch or CTranslate2 loads: they read the caps once)."""
    if any(os.environ.get(name) != value for name, value in ISA_CAPS[isa].items()):
        cap_children(isa)
        os.execv(sys.executable, [sys.executable, *sys.argv])


def kernel_experiment_parser(doc: str | None, repeat: int) -> argparse.ArgumentParser:
    """The options of an experiment that times kernels in one process: --threads, --isa,
    --repeat (the best of so many calls is kept) and --cpu-time."""
    parser = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--isa", default="native", choices=sorted(ISA_CAPS), help="cap the instruction set")
    parser.add_argument("--repeat", type=int, default=repeat, help="the best of this many calls is kept")
    parser.add_argument("--cpu-time", action="store_true", help="CPU seconds of all threads, not wall seconds")
    return parser


def start_kernel_experiment(args: argparse.Namespace) -> Callable[[], float]:
    """The caps of --isa (this script re-executed with them), torch on --threads threads with
    the engine's allocator (freed blocks reused, not mapped afresh); the clock to read: CPU
    seconds of all threads with --cpu-time (on a shared machine, the share of a core a process
    gets varies from run to run, the work it does much less), else wall seconds."""
    run_with_isa(args.isa)
    import torch

    from nmtdecode.models import memory

    torch.set_num_threads(args.threads)
    memory.tune_allocator()
    return time.process_time if args.cpu_time else time.perf_counter


def timed(work: Callable[[], T]) -> tuple[float, T]:
    """The wall seconds of one call of `work`, and what it returned."""
    start = time.perf_counter()
    result = work()
    return time.perf_counter() - start, result


def best_seconds(work: Callable[[], object], repeat: int) -> float:
    """The fastest of `repeat` calls: what the work costs when nothing else gets in the way."""
    return min(timed(work)[0] for _ in range(repeat))


def median_seconds(work: Callable[[], object], repeat: int) -> float:
    """The median of `repeat` calls: what a shared machine gives most of the time."""
    return statistics.median(timed(work)[0] for _ in range(repeat))
