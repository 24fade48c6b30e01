"""Where does a job's start on a GPU go, and does starting CUDA beside the reading of the model pay?

    python bench/experiments/gpu_startup.py [--repeat 3] [--models demo,marian-base]

Each figure is the median of --repeat fresh processes (the image's own python, this checkout on
its path), in seconds:

* `import torch`; then CUDA's start (`torch.cuda.init` and one tensor on the device), the first
  cuBLAS product (its handle and workspace), and the model's load (`Translator.load`) once CUDA
  runs: the parts one after the other;
* the load with CUDA cold, as a job does it (the load's first tensor on the device starts CUDA),
  and with CUDA and cuBLAS started by a thread beside the reading of the model's files, tokenizer
  and configuration (started just before the load, joined after it);
* the first batch of 32 lines after the load (its CUDA graphs captured), and the whole
  command-line job on the same 32 lines with the summary's "model loaded in" figure (which
  counts `import torch`).

marian-base is a Transformer-base Marian of seeded random weights (bench/convert.py; the GPU
check's copy when it exists).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # bench/, for common
from common import DEMO, OUT, ROOT  # noqa: E402

PARTS = r"""
import json, sys, threading, time
t0 = time.perf_counter()
import torch
facts = {"import torch": time.perf_counter() - t0}
MODEL, MODE, LINES = sys.argv[1], sys.argv[2], sys.argv[3:]

def start_cuda():
    torch.cuda.init()
    torch.zeros(1, device="cuda")

def first_product():
    a = torch.ones(64, 64, device="cuda", dtype=torch.float16)
    (a @ a).sum().item()

import nmtdecode
if MODE == "parts":
    t = time.perf_counter(); start_cuda(); facts["CUDA start"] = time.perf_counter() - t
    t = time.perf_counter(); first_product(); facts["first cuBLAS product"] = time.perf_counter() - t
t = time.perf_counter()
if MODE == "beside":
    helper = threading.Thread(target=lambda: (start_cuda(), first_product()))
    helper.start()
translator = nmtdecode.Translator.load(MODEL, device="cuda", dtype="float16")
torch.cuda.synchronize()
if MODE == "beside":
    helper.join()
label = {"parts": "started", "cold": "cold", "beside": "cold, started beside it"}[MODE]
facts["load, CUDA " + label] = time.perf_counter() - t
t = time.perf_counter()
translator.translate(LINES)
torch.cuda.synchronize()
facts["first batch"] = time.perf_counter() - t
print(json.dumps(facts))
"""


def lines_for(model: str) -> list[str]:
    if model == DEMO:
        with open(os.path.join(DEMO, "test.en"), encoding="utf-8") as f:
            return f.read().splitlines()[:32]
    return [" ".join(f"t{i}" for i in range(100, 100 + 3 * n, 3)) for n in range(4, 36)]


def model_path(name: str) -> str:
    """The demo, or marian-base in the native format (a vocabulary of placeholder tokens)."""
    if name == "demo":
        return DEMO
    from convert import marian_base_native

    return marian_base_native(OUT)


def in_process(model: str, mode: str) -> dict[str, float]:
    env = dict(os.environ, PYTHONPATH=ROOT)
    done = subprocess.run(
        [sys.executable, "-c", PARTS, model, mode, *lines_for(model)], env=env, capture_output=True, text=True
    )
    if done.returncode:
        raise RuntimeError(done.stderr[-2000:])
    return json.loads(done.stdout.strip().splitlines()[-1])


def command_line(model: str) -> dict[str, float]:
    env = dict(os.environ, PYTHONPATH=ROOT)
    args = [sys.executable, "-m", "nmtdecode", "translate", "--model", model, "--device", "cuda", "--dtype", "float16"]
    start = time.perf_counter()
    done = subprocess.run(args, input="\n".join(lines_for(model)) + "\n", env=env, capture_output=True, text=True)
    wall = time.perf_counter() - start
    if done.returncode:
        raise RuntimeError(done.stderr[-2000:])
    loaded = re.search(r"model loaded in ([0-9.]+) s", done.stderr)
    return {"job, 32 lines": wall, "job's model loaded in": float(loaded.group(1)) if loaded else float("nan")}


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--models", default="demo,marian-base")
    args = parser.parse_args()
    for name in args.models.split(","):
        model = model_path(name)
        runs: dict[str, list[float]] = {}
        for _ in range(args.repeat):  # the modes interleaved, so that a busy spell touches each
            for facts in (in_process(model, mode) for mode in ("parts", "cold", "beside")):
                for key, value in facts.items():
                    runs.setdefault(key, []).append(value)
            for key, value in command_line(model).items():
                runs.setdefault(key, []).append(value)
        print(f"\n{name} (float16, median of {args.repeat} processes; min-max)\n")
        print("| part | seconds | range |\n|---|---|---|")
        for key, values in runs.items():
            print(f"| {key} | {statistics.median(values):.3f} | {min(values):.3f}-{max(values):.3f} |", flush=True)


if __name__ == "__main__":
    main()
