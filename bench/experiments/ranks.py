"""One process against N torchrun processes, one thread each, on the demo model.

    python bench/experiments/ranks.py [--procs 2] [--lines 1000] [--beam-size 5] [--gemm auto]

Translates the first LINES lines of data/demo/test.en (repeated past its 1000) once in one process and once
under `torchrun --nproc-per-node PROCS --standalone` (gloo, CPU), each process with
`--threads 1`, checks that both outputs are byte-identical, and prints the wall time of
each (whole commands: start-up, model loading and the merge included) and the decoding
time the processes report (the slowest one's), their ratios and the CPU. The goal on a machine with PROCS free
cores is a ratio near 1/PROCS
(<= 0.6 for 2); other load on the machine makes it worse.
"""

from __future__ import annotations

import argparse
import filecmp
import os
import re
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # bench/, for common
from common import DEMO, ROOT, timed  # noqa: E402

from nmtdecode.models.gemm import cpu_description  # noqa: E402


def wall_and_decoding(command: list[str]) -> tuple[float, float]:
    """Wall time of the command, and the longest decoding time its processes' summary lines report."""
    wall, run = timed(lambda: subprocess.run(command, check=True, cwd=ROOT, stderr=subprocess.PIPE, text=True))
    decoding = [float(s) for s in re.findall(r"target tokens in ([0-9.]+) s", run.stderr)]
    return wall, max(decoding)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--procs", type=int, default=2)
    parser.add_argument("--lines", type=int, default=1000)
    parser.add_argument("--beam-size", type=int, default=5)
    parser.add_argument("--gemm", default="auto")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="bench-ranks-") as tmp:
        src = os.path.join(tmp, "test.en")
        with open(os.path.join(DEMO, "test.en"), encoding="utf-8") as f:
            lines = f.readlines()
        lines = (lines * (args.lines // len(lines) + 1))[: args.lines]  # more than the file: it again
        with open(src, "w", encoding="utf-8") as f:
            f.writelines(lines)
        job = [
            "translate",
            "--model",
            DEMO,
            "--src",
            src,
            "--threads",
            "1",
            "--beam-size",
            str(args.beam_size),
            "--gemm",
            args.gemm,
        ]
        one_out, many_out = os.path.join(tmp, "one.txt"), os.path.join(tmp, "many.txt")
        # one untimed run first: the gemm measurement (--gemm auto) is made once and remembered
        subprocess.run(
            [sys.executable, "-m", "nmtdecode", *job, "--output", os.devnull, "--quiet"], check=True, cwd=ROOT
        )
        one = wall_and_decoding([sys.executable, "-m", "nmtdecode", *job, "--output", one_out])
        env_note = os.environ.get("OMP_NUM_THREADS")
        many = wall_and_decoding(
            [
                sys.executable,
                "-m",
                "torch.distributed.run",
                "--nproc-per-node",
                str(args.procs),
                "--standalone",
                "-m",
                "nmtdecode",
                *job,
                "--output",
                many_out,
            ]
        )
        same = filecmp.cmp(one_out, many_out, shallow=False)

    print(
        f"cpu: {cpu_description()}, {len(os.sched_getaffinity(0))} cores available"
        + (f", OMP_NUM_THREADS={env_note}" if env_note else "")
    )
    print(f"demo model, {len(lines)} lines of data/demo/test.en, beam {args.beam_size}, --threads 1 per process")
    print(f"{'':22} {'wall':>8} {'decoding':>9}   (decoding: the slowest process's summary line)")
    print(f"{'1 process':22} {one[0]:7.2f}s {one[1]:8.2f}s")
    print(f"{f'{args.procs} torchrun processes':22} {many[0]:7.2f}s {many[1]:8.2f}s")
    print(f"{'ratio':22} {many[0] / one[0]:7.2f}x {many[1] / one[1]:8.2f}x  (goal <= {1.2 / args.procs:.2f}x)")
    print(f"outputs byte-identical: {'yes' if same else 'NO'}")
    if not same:
        sys.exit(1)


if __name__ == "__main__":
    main()
