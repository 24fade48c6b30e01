"""Does reading a pipe keep up with reading a file, with and without --stream?

    python bench/experiments/stream.py [--lines 1000] [--repeat 3]

The demo model translates the first --lines of its held-out test set (beam 5) three ways, each a
whole `python -m nmtdecode translate` process, interleaved --repeat times (the fastest run of each
is shown, as the least disturbed by other processes): from the file (`--src FILE`), from a full
pipe (`cat FILE |`) and from a full pipe with --stream. The three outputs must be the same bytes.
It also pipes two lines six seconds apart (from the first's writing), without --stream, and shows
when each answer came: the first must not wait for the second.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # bench/, for common
from common import DEMO, ROOT, timed  # noqa: E402

COMMAND = [sys.executable, "-m", "nmtdecode", "translate", "--model", DEMO, "--quiet"]


def whole_job(mode: str, src: str) -> tuple[float, bytes]:
    """Seconds of one process translating `src` read as `mode` (file, pipe, stream), and its output."""
    env = dict(os.environ, PYTHONPATH=ROOT)
    if mode == "file":
        return timed(lambda: subprocess.run(COMMAND + ["--src", src], capture_output=True, env=env, check=True).stdout)
    with open(src, "rb") as f:
        data = f.read()
    extra = ["--stream"] if mode == "stream" else []
    return timed(lambda: subprocess.run(COMMAND + extra, input=data, capture_output=True, env=env, check=True).stdout)


def answer_times(pause: float) -> list[float]:
    """When each of two lines written `pause` seconds apart is answered, from the process's start
    (the second line is written `pause` seconds after the first whether or not it was answered)."""
    start = time.perf_counter()
    process = subprocess.Popen(
        COMMAND, stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=dict(os.environ, PYTHONPATH=ROOT)
    )
    answered: list[float] = []
    reader = threading.Thread(target=lambda: answered.extend(time.perf_counter() - start for _ in process.stdout))
    reader.start()
    process.stdin.write(b"good morning\n")
    process.stdin.flush()
    time.sleep(pause)
    process.stdin.write(b"thank you\n")
    process.stdin.close()
    process.wait()
    reader.join()
    return answered


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--lines", type=int, default=1000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    with open(os.path.join(DEMO, "test.en"), encoding="utf-8") as f:
        lines = f.read().splitlines()[: args.lines]
    with tempfile.TemporaryDirectory() as tmp:
        src = os.path.join(tmp, "src.en")
        with open(src, "w", encoding="utf-8") as f:
            f.write("".join(line + "\n" for line in lines))
        best, outputs = {}, {}
        for _ in range(args.repeat):
            for mode in ("file", "pipe", "stream"):
                seconds, outputs[mode] = whole_job(mode, src)
                best[mode] = min(best.get(mode, seconds), seconds)
    assert outputs["pipe"] == outputs["file"] == outputs["stream"], "the outputs differ"
    print(f"| input ({len(lines)} lines) | seconds (fastest of {args.repeat}) | ÷ file |\n|---|---|---|")
    labels = {"file": "`--src FILE`", "pipe": "`cat FILE \\|`", "stream": "`cat FILE \\| ... --stream`"}
    for mode, label in labels.items():
        print(f"| {label} | {best[mode]:.2f} | {best[mode] / best['file']:.2f} |")
    first, second = answer_times(6.0)
    print(f"\ntwo lines 6 s apart, without --stream: answered at {first:.2f} s and {second:.2f} s")


if __name__ == "__main__":
    main()
