"""Is a change faster? The decoding loop of two revisions on the demo model, runs alternated.

    python bench/compare_revisions.py REV [--against REV2] [--beam 5] [--runs 7] [--threads 2]

Checks REV (and REV2, default: the working tree) out into temporary git worktrees and times,
in a fresh process each, one pass over the demo's 1,000 test lines in batches of 32 (no
length penalty), cold as a job is: oneDNN compiles its kernels during the pass. The runs of
the two alternate, so that a machine whose speed drifts (a shared VM) treats both alike;
prints the fastest and the median of each, their ratio, and whether the tokens are the same.
The figures of the commits that changed the search's speed come from here.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile

from common import DEMO, ROOT  # noqa: E402

ONE_PASS = r"""
import hashlib, json, os, sys, time
import torch
torch.set_num_threads(int(sys.argv[2]))
from nmtdecode.options.config import Config
from nmtdecode.engine.decoding import BatchDecoder
from nmtdecode.models.loading import load_model
from nmtdecode.models.placement import Placement
demo = sys.argv[3]
loaded = load_model(demo, placement=Placement(backend="auto"))
with open(os.path.join(demo, "test.en"), encoding="utf-8") as f:
    sources = sorted((loaded.tokenizer.encode(line.rstrip("\n")) for line in f), key=len)
options = {"beam_size": int(sys.argv[1]), "length_penalty": "none"}
decoder = BatchDecoder(loaded.model, Config.from_values(options).decoding, loaded.rules)
tokens = []
with torch.inference_mode():
    decoder.decode(sources[:4])
    start = time.perf_counter()
    for i in range(0, len(sources), 32):
        tokens += [nbest[0].tokens for nbest in decoder.decode(sources[i : i + 32]).nbests]
    seconds = time.perf_counter() - start
print(seconds, hashlib.sha256(json.dumps(tokens).encode()).hexdigest())
"""


def one_pass(tree: str, beam: int, threads: int) -> tuple[float, str]:
    env = dict(os.environ, PYTHONPATH=tree, OMP_NUM_THREADS=str(threads))
    done = subprocess.run(
        [sys.executable, "-c", ONE_PASS, str(beam), str(threads), DEMO],
        cwd=tree,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    seconds, digest = done.stdout.split()
    return float(seconds), digest


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("revision", help="the revision to compare (e.g. main, HEAD~1)")
    parser.add_argument("--against", help="the other revision (default: the working tree)")
    parser.add_argument("--beam", type=int, default=5)
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="nmtdecode-revisions-") as tmp:
        trees, added = {}, []
        for name, revision in ((args.revision, args.revision), (args.against or "working tree", args.against)):
            if revision is None:
                trees[name] = ROOT
                continue
            path = os.path.join(tmp, str(len(added)))
            subprocess.run(["git", "-C", ROOT, "worktree", "add", "--detach", "-q", path, revision], check=True)
            trees[name], added = path, added + [path]
        try:
            times, digests = {name: [] for name in trees}, {}
            for _ in range(args.runs):
                for name, tree in trees.items():
                    seconds, digest = one_pass(tree, args.beam, args.threads)
                    times[name].append(seconds)
                    digests[name] = digest
        finally:
            for path in added:
                subprocess.run(["git", "-C", ROOT, "worktree", "remove", "--force", path], check=False)
    (a, first), (b, second) = times.items()
    print(f"demo, beam {args.beam}, {args.threads} threads, {args.runs} alternated runs each:")
    for name, values in times.items():
        print(
            f"  {name:14} fastest {min(values):.3f} s, median {statistics.median(values):.3f} s  "
            f"({' '.join(f'{v:.2f}' for v in values)})"
        )
    print(
        f"  {b} / {a}: fastest {min(second) / min(first):.3f}, median "
        f"{statistics.median(second) / statistics.median(first):.3f}; same tokens: {digests[a] == digests[b]}"
    )


if __name__ == "__main__":
    main()
