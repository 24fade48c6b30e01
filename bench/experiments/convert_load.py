"""Loading a model `nmtdecode convert` stored in int8, against quantizing the float32 checkpoint
at load and against CTranslate2 reading its converter's int8 model: the NLLB-600M shape.

    python bench/experiments/convert_load.py [--repeat 3] [--threads 2]

Builds (once, in bench/out/) the NLLB-600M shaped checkpoint and CTranslate2's int8 conversion
as bench/run.py --models nllb-600m does, and our int8 conversion of it (models/convert.py; the
shape has no tokenizer, so its token strings serve as a whitespace vocabulary). Each load runs
in a process of its own, the three alternated: seconds from after the import (torch, or
ctranslate2) to the weights in place (ours ending as Engine.load does: what loading freed given
back to the system, memory.tune_allocator), and resident memory after the import, after the load and
at the peak (VmRSS, VmHWM). The page cache is warm after the first round for all three.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # bench/, for common
from common import OUT, ROOT  # noqa: E402

NATIVE_INT8 = os.path.join(OUT, "nllb-600m-native-int8")

# One load in a fresh process; prints {"import_s", "load_s", "import_mb", "loaded_mb", "peak_mb"}.
LOAD = r"""
import json, sys, time
def rss(key):
    with open("/proc/self/status") as f:
        return next(int(l.split()[1]) / 1024 for l in f if l.startswith(key + ":"))
system, path, threads = sys.argv[1], sys.argv[2], int(sys.argv[3])
start = time.perf_counter()
if system == "ctranslate2":
    import ctranslate2
    imported, imported_mb = time.perf_counter(), rss("VmRSS")
    model = ctranslate2.Translator(path, device="cpu", compute_type="int8", intra_threads=threads)
else:
    import torch
    torch.set_num_threads(threads)
    from nmtdecode.models.placement import Placement
    imported, imported_mb = time.perf_counter(), rss("VmRSS")
    if system == "nmtdecode converted":
        from nmtdecode.models.loading import load_model
        model = load_model(path, placement=Placement(backend="int8")).model
    else:
        from nmtdecode.models.checkpoint import read_json
        from nmtdecode.models.formats.huggingface import load_network
        model = load_network(path, read_json(path + "/config.json"), Placement(backend="int8"))[0]
    from nmtdecode.models import memory
    memory.tune_allocator()  # as Engine.load: the heap's holes that loading left go back to the system
loaded = time.perf_counter()
print(json.dumps({"import_s": imported - start, "load_s": loaded - imported, "import_mb": imported_mb,
                  "loaded_mb": rss("VmRSS"), "peak_mb": rss("VmHWM")}))
"""


def prepare() -> dict[str, str]:
    """The three models: the float32 checkpoint, CTranslate2's int8 conversion, ours."""
    from convert import VOCAB_600M, nllb_600m_shape, to_ctranslate2, to_native, token_strings

    from nmtdecode.models.checkpoint import read_json
    from nmtdecode.models.formats.huggingface import load_network

    hf_dir = nllb_600m_shape(os.path.join(OUT, "nllb-600m"))
    ct2_dir = os.path.join(OUT, "nllb-600m-ct2-int8")
    tokens = token_strings(VOCAB_600M, {0: "<s>", 1: "<pad>", 2: "</s>", 3: "<unk>"})
    if not os.path.isfile(os.path.join(ct2_dir, "model.bin")):
        model, _, _ = load_network(hf_dir, read_json(os.path.join(hf_dir, "config.json")))
        to_ctranslate2(model, tokens, ct2_dir, "int8")
        del model
    to_native(hf_dir, tokens, NATIVE_INT8)
    return {"nmtdecode converted": NATIVE_INT8, "nmtdecode quantizing at load": hf_dir, "ctranslate2": ct2_dir}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    models = prepare()
    runs: dict[str, list[dict]] = {system: [] for system in models}
    for _ in range(args.repeat + 1):  # the first round warms the page cache and is not counted
        for system, path in models.items():
            done = subprocess.run(
                [sys.executable, "-c", LOAD, system, path, str(args.threads)],
                cwd=ROOT,
                capture_output=True,
                text=True,
                check=True,
            )
            runs[system].append(json.loads(done.stdout.splitlines()[-1]))
    print(f"NLLB-600M shape, int8, {args.threads} threads, {args.repeat} runs each (median; min-max of the load)")
    print("| system | import | load | RSS after import | model (RSS after load - after import) | peak RSS |")
    print("|---|---|---|---|---|---|")
    for system, results in runs.items():
        counted = results[1:]
        median = {key: statistics.median(r[key] for r in counted) for key in counted[0]}
        loads = [r["load_s"] for r in counted]
        print(
            f"| {system} | {median['import_s']:.2f} s | {median['load_s']:.2f} s ({min(loads):.2f}-{max(loads):.2f}) "
            f"| {median['import_mb']:,.0f} MB | {median['loaded_mb'] - median['import_mb']:,.0f} MB "
            f"| {median['peak_mb']:,.0f} MB |"
        )


if __name__ == "__main__":
    main()
