"""Where does loading a real-size model go, and do huge pages make it cheaper?

    python bench/experiments/load_parts.py [--model nllb-600m|marian-base] [--threads 2]
        [--isa native|avx2] [--gemm onednn|torch] [--huge-pages]

Loads the benchmark's model (bench/convert.py: seeded random weights, read from the page cache)
the way the engine does, and prints the wall and CPU seconds of the load, the CPU seconds of
its parts (reading the files into the model's memory, checking that the values are finite,
packing the linear layers for oneDNN, allocating the model), the page faults, and the peak
memory. The parts are timed in the threads that run them (the readers: models/placement.py).
--huge-pages runs it with THP_MEM_ALLOC_ENABLE=1: torch then asks the kernel for 2 MB pages for
its large tensors, so reading 2.5 GB meets a few thousand page faults instead of 600,000.
"""

from __future__ import annotations

import argparse
import collections
import os
import resource
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # bench/, for common
from common import ISA_CAPS, run_with_isa  # noqa: E402


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="nllb-600m", choices=["nllb-600m", "marian-base"])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--isa", default="native", choices=sorted(ISA_CAPS), help="cap the instruction set")
    parser.add_argument("--gemm", default="onednn", choices=["onednn", "torch"])
    parser.add_argument("--huge-pages", action="store_true", help="THP_MEM_ALLOC_ENABLE=1 (torch's 2 MB pages)")
    args = parser.parse_args()
    if args.huge_pages and os.environ.get("THP_MEM_ALLOC_ENABLE") != "1":
        os.environ["THP_MEM_ALLOC_ENABLE"] = "1"
        os.execv(sys.executable, [sys.executable, *sys.argv])
    run_with_isa(args.isa)
    import torch

    from run import prepare_marian, prepare_nllb

    from nmtdecode.models import transformer, weights
    from nmtdecode.models.checkpoint import read_json
    from nmtdecode.models.formats.huggingface import load_network
    from nmtdecode.models.gemm import cpu_description
    from nmtdecode.models.placement import Placement

    torch.set_num_threads(args.threads)
    dirs, _ = prepare_nllb(4) if args.model == "nllb-600m" else prepare_marian(4)
    spent: collections.Counter = collections.Counter()

    def clocked(owner, name, part):
        """owner.name, its CPU seconds (in the thread that runs it) added to spent[part]."""
        function = getattr(owner, name)

        def timed(*arguments, **keywords):
            start = time.thread_time()
            try:
                return function(*arguments, **keywords)
            finally:
                spent[part] += time.thread_time() - start

        setattr(owner, name, timed)

    clocked(weights.StoredTensor, "_read_into", "reading the files")
    clocked(weights, "check_finite", "checking the values are finite")
    clocked(torch.ops.mkldnn, "_reorder_linear_weight", "packing for oneDNN")
    clocked(transformer.Transformer, "uninitialised", "allocating the model")
    path = dirs["nmtdecode"]
    faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    start, cpu_start = time.perf_counter(), time.process_time()
    load_network(path, read_json(os.path.join(path, "config.json")), Placement(backend=args.gemm))
    wall, cpu = time.perf_counter() - start, time.process_time() - cpu_start
    faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults
    with open("/proc/self/status", encoding="ascii") as f:
        peak = next(int(line.split()[1]) // 1024 for line in f if line.startswith("VmHWM:"))
    print(f"CPU: {cpu_description()}; ISA {args.isa}; {args.threads} threads; torch {torch.__version__}")
    print(f"{args.model}, --gemm {args.gemm}{', THP_MEM_ALLOC_ENABLE=1' if args.huge_pages else ''}")
    print(f"load: {wall:.2f} s wall, {cpu:.2f} s CPU; {faults:,} page faults; peak RSS {peak:,} MB")
    for part, seconds in spent.most_common():
        print(f"  {part}: {seconds:.2f} s CPU")


if __name__ == "__main__":
    main()
