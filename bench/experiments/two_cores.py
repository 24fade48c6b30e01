"""Each system at its best use of the cores: whole jobs on the demo test set, several settings.

    python bench/experiments/two_cores.py [--cores 2] [--repeat 3] [--lines 1000]

Whole processes (start-up, model load, tokenization, decoding, writing) translating the demo
model's test lines, beam 5 and beam 1, fastest of --repeat, with the cores split two ways:
  nmtdecode    one process with --threads CORES; one process decoding CORES batches at once
               of one thread each (--inter-threads CORES --threads 1); or CORES torchrun
               processes of one thread each (`torchrun --nproc-per-node CORES`: the batches
               shared, outputs merged);
  ctranslate2  the job of bench/peer_job.py with intra_threads CORES, or inter_threads CORES
               (CORES batches at once) of one thread each.
Prints each time, the ratio at the equal setting (one process, CORES threads each) and at each
system's best. Needs the demo's CTranslate2 conversion (bench/run.py makes it:
bench/out/demo-ct2).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # bench/, for common
from common import BENCH, DEMO, OUT, ROOT, timed  # noqa: E402

from nmtdecode.models.gemm import cpu_description  # noqa: E402

CT2 = os.path.join(OUT, "demo-ct2")


def settings(cores: int, beam: int, src: str, out: str) -> dict[str, list[str]]:
    job = [
        "-m",
        "nmtdecode",
        "translate",
        "--model",
        DEMO,
        "--src",
        src,
        "--output",
        out,
        "--beam-size",
        str(beam),
        "--quiet",
    ]
    peer = [os.path.join(BENCH, "peer_job.py"), "ctranslate2", CT2, DEMO, src, out]
    return {
        f"nmtdecode, 1 process x {cores} threads": [sys.executable, *job, "--threads", str(cores)],
        f"nmtdecode, 1 process, --inter-threads {cores} x 1 thread": [
            sys.executable,
            *job,
            "--threads",
            "1",
            "--inter-threads",
            str(cores),
        ],
        f"nmtdecode, {cores} processes x 1 thread": [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--nproc-per-node",
            str(cores),
            "--standalone",
            *job,
            "--threads",
            "1",
        ],
        f"ctranslate2, intra_threads {cores}": [sys.executable, *peer, str(cores), "1", str(beam)],
        f"ctranslate2, inter_threads {cores}": [sys.executable, *peer, "1", str(cores), str(beam)],
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cores", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--lines", type=int, default=1000)
    args = parser.parse_args()
    if not os.path.isfile(os.path.join(CT2, "model.bin")):
        raise SystemExit(f"{CT2} is missing: run `python bench/run.py --quick --models demo` first")
    env = dict(os.environ, PYTHONPATH=ROOT)
    env.pop("OMP_NUM_THREADS", None)
    print(
        f"cpu: {cpu_description()}, {len(os.sched_getaffinity(0))} cores available; demo model, "
        f"{args.lines} lines of data/demo/test.en; fastest of {args.repeat}"
    )
    with tempfile.TemporaryDirectory(prefix="bench-cores-") as tmp:
        src, out = os.path.join(tmp, "test.en"), os.path.join(tmp, "out.txt")
        with open(os.path.join(DEMO, "test.en"), encoding="utf-8") as f:
            lines = f.readlines()[: args.lines]
        with open(src, "w", encoding="utf-8") as f:
            f.writelines(lines)
        for beam in (5, 1):
            best = {}
            for _ in range(args.repeat):  # interleaved: the machine's speed drifts
                for label, command in settings(args.cores, beam, src, out).items():
                    seconds, _ = timed(
                        lambda: subprocess.run(command, check=True, cwd=ROOT, env=env, capture_output=True)
                    )
                    best[label] = min(best.get(label, float("inf")), seconds)
            print(f"\nbeam {beam}:")
            for label, seconds in best.items():
                print(f"  {label:40} {seconds:6.2f} s")
            ours = [s for label, s in best.items() if label.startswith("nmtdecode")]
            theirs = [s for label, s in best.items() if label.startswith("ctranslate2")]
            print(
                f"  ratio (CTranslate2's time / nmtdecode's): equal setting {theirs[0] / ours[0]:.2f}x, "
                f"each at its best {min(theirs) / min(ours):.2f}x"
            )


if __name__ == "__main__":
    main()
