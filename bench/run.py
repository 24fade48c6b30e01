"""Speed benchmark: nmtdecode against transformers `generate` and CTranslate2, in one run.

    make bench                     # or: python bench/run.py [--quick] [--threads 2] [--repeat 3]

Two models, each converted to every system (bench/convert.py):
  marian-base  Transformer-base shaped Marian with seeded random weights; every
               hypothesis is forced to the same length (EOS banned until then), so all
               systems do the same work;
  demo         the bundled English->German model on its held-out test set, natural lengths.
Beam 1 and 5, batch 32, float32 and int8, on CPU with --threads threads. Each
measurement runs in its own process (bench/worker.py) so peak memory is its own.
Prints one table and writes it to bench/results.md.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, ROOT)
sys.path.insert(0, HERE)

from convert import VOCAB_BASE, marian_base, to_ctranslate2, to_transformers, token_strings  # noqa: E402

OUT = os.path.join(HERE, "out")
SYSTEMS = ["nmtdecode", "transformers", "ctranslate2", "nmtdecode-int8", "ctranslate2-int8", "nmtdecode-bf16"]


def prepare_marian(n_sentences: int):
    from nmtdecode.models.checkpoint import read_json
    from nmtdecode.models.formats.huggingface import load_network

    hf_dir = marian_base(os.path.join(OUT, "marian-base"))
    model, _, _ = load_network(hf_dir, read_json(os.path.join(hf_dir, "config.json")))
    tokens = token_strings(VOCAB_BASE, {0: "</s>", 1: "<unk>", VOCAB_BASE - 1: "<pad>"})
    ct2_dir = os.path.join(OUT, "marian-base-ct2")
    if not os.path.isfile(os.path.join(ct2_dir, "model.bin")):
        to_ctranslate2(model, tokens, ct2_dir)
    g = torch.Generator().manual_seed(1)
    sources = [torch.randint(2, VOCAB_BASE - 1, (int(torch.randint(10, 40, (1,), generator=g)),),
                             generator=g).tolist() + [0] for _ in range(n_sentences)]
    task = {"format": "huggingface", "sources": sources, "tokens": tokens, "max_length": 256,
            "banned": [VOCAB_BASE - 1]}
    return {"native": hf_dir, "transformers": hf_dir, "ctranslate2": ct2_dir}, task


def prepare_demo(n_sentences: int, demo: str):
    from nmtdecode.models.loading import load_model

    loaded = load_model(demo)
    sp = loaded.tokenizer.target
    tokens = [sp.id_to_piece(i) for i in range(sp.get_piece_size())]
    hf_dir, ct2_dir = os.path.join(OUT, "demo-hf"), os.path.join(OUT, "demo-ct2")
    to_transformers(loaded.model, hf_dir)  # converted every run: the demo model may have been retrained
    to_ctranslate2(loaded.model, tokens, ct2_dir)
    with open(os.path.join(demo, "test.en"), encoding="utf-8") as f:
        lines = [line.rstrip("\n") for line in f][:n_sentences]
    task = {"format": "native", "sources": [loaded.tokenizer.encode(line) for line in lines], "tokens": tokens,
            "max_length": 64, "banned": list(loaded.rules.banned_ids)}
    return {"native": demo, "transformers": hf_dir, "ctranslate2": ct2_dir}, task, loaded


def measure(system, model_dir, task_file, beam, threads, fixed_length=0):
    cmd = [sys.executable, os.path.join(HERE, "worker.py"), system, model_dir, task_file, "--beam", str(beam),
           "--threads", str(threads), "--batch", "32"]
    if fixed_length:
        cmd += ["--fixed-length", str(fixed_length)]
    env = dict(os.environ, PYTHONPATH=ROOT, OMP_NUM_THREADS=str(threads))
    run = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if run.returncode != 0:
        raise RuntimeError(f"{system} failed:\n{run.stderr[-3000:]}")
    return json.loads(run.stdout.splitlines()[-1])


def directory_for(system, dirs):
    return dirs["native"] if system.startswith("nmtdecode") else dirs[system.split("-")[0]]


def bleu_chrf(outputs, loaded, references):
    import sacrebleu

    hyps = [loaded.tokenizer.decode(o) for o in outputs]
    return (sacrebleu.corpus_bleu(hyps, [references]).score, sacrebleu.corpus_chrf(hyps, [references]).score)


def agreement(a, b):
    return sum(x == y for x, y in zip(a, b)) / len(a)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--quick", action="store_true", help="few sentences: a smoke test of the harness")
    parser.add_argument("--repeat", type=int, default=3, help="runs per system; the fastest is reported")
    parser.add_argument("--models", default="marian-base,demo")
    parser.add_argument("--demo", default=os.path.join(ROOT, "data", "demo"), help="the demo model directory")
    args = parser.parse_args()
    os.makedirs(OUT, exist_ok=True)
    rows, notes = [], []
    n_marian, n_demo = (8, 16) if args.quick else (64, 1000)
    for name in args.models.split(","):
        loaded, references = None, None
        if name == "marian-base":
            dirs, task = prepare_marian(n_marian)
            fixed = 32
        else:
            dirs, task, loaded = prepare_demo(n_demo, args.demo)
            fixed = 0
            with open(os.path.join(args.demo, "test.de"), encoding="utf-8") as f:
                references = [line.rstrip("\n") for line in f][:n_demo]
        # Sources sorted by length, then cut into batches of 32 in that order, for every system:
        # what the nmtdecode CLI and CTranslate2 (whose translate_batch sorts a long input by
        # length before cutting it) do by themselves, so no system gets tighter batches.
        order = sorted(range(len(task["sources"])), key=lambda i: len(task["sources"][i]))
        task["sources"] = [task["sources"][i] for i in order]
        if references is not None:
            references = [references[i] for i in order]
        task_file = os.path.join(OUT, f"{name}-task.json")
        with open(task_file, "w", encoding="utf-8") as f:
            json.dump(task, f)
        for beam in (1, 5):
            # Round-robin repeats, fastest run kept: on a shared machine the speed drifts by
            # 10-20% over minutes, and interleaving gives every system the same conditions.
            results = {}
            for repeat in range(args.repeat):
                for system in SYSTEMS:
                    print(f"{name} beam {beam}: {system} (run {repeat + 1}) ...", file=sys.stderr, flush=True)
                    r = measure(system, directory_for(system, dirs), task_file, beam, args.threads, fixed)
                    if system not in results or r["seconds"] < results[system]["seconds"]:
                        results[system] = r
            ours = results["nmtdecode"]
            for system, r in results.items():
                row = {"model": name, "beam": beam, "system": system, "sent_s": r["sentences"] / r["seconds"],
                       "tok_s": r["target_tokens"] / r["seconds"], "rss": r["peak_rss_mb"],
                       "speedup": (ours["target_tokens"] / ours["seconds"]) / (r["target_tokens"] / r["seconds"]),
                       "same_as_fp32": agreement(r["outputs"], ours["outputs"])}
                if references is not None:
                    row["bleu"], row["chrf"] = bleu_chrf(r["outputs"], loaded, references)
                rows.append(row)
    memory = memory_rows(args) if "demo" in args.models.split(",") else []
    write_results(rows, memory, args)


def memory_rows(args):
    """Peak RSS of the whole CLI job on the demo test set and on ten times as many lines."""
    with open(os.path.join(args.demo, "test.en"), encoding="utf-8") as f:
        lines = f.read().splitlines()
    rows = []
    for copies in (1, 10) if not args.quick else (1,):
        path = os.path.join(OUT, f"demo-{copies}x.en")
        with open(path, "w", encoding="utf-8") as f:
            f.write("\n".join(lines * copies) + "\n")
        print(f"memory: {len(lines) * copies} lines ...", file=sys.stderr, flush=True)
        rows.append(measure("nmtdecode-file", args.demo, path, 5, args.threads))
    return rows


def write_results(rows, memory, args):
    lines = [f"Machine: {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, "
             f"{args.threads} threads; torch {torch.__version__}; {time.strftime('%Y-%m-%d')}",
             f"Command: `python bench/run.py --threads {args.threads} --repeat {args.repeat}"
             f"{' --quick' if args.quick else ''}` (fastest of {args.repeat} interleaved runs per system)",
             "",
             "| model | beam | system | sentences/s | target tokens/s | peak RSS MB | nmtdecode speed / this | "
             "same output as nmtdecode fp32 | BLEU | chrF |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        quality = f"{r['bleu']:.1f} | {r['chrf']:.1f}" if "bleu" in r else "– | –"
        lines.append(f"| {r['model']} | {r['beam']} | {r['system']} | {r['sent_s']:.2f} | {r['tok_s']:.1f} | "
                     f"{r['rss']:.0f} | {r['speedup']:.2f}× | {100 * r['same_as_fp32']:.0f}% | {quality} |")
    if memory:
        lines += ["", "Peak memory of the whole CLI job (demo model, beam 5, batch 32):", "",
                  "| input lines | seconds | peak RSS MB |", "|---|---|---|"]
        lines += [f"| {m['sentences']} | {m['seconds']:.1f} | {m['peak_rss_mb']:.0f} |" for m in memory]
    table = "\n".join(lines) + "\n"
    print(table)
    with open(os.path.join(HERE, "results.md"), "w", encoding="utf-8") as f:
        f.write("# Benchmark results\n\n" + table)


if __name__ == "__main__":
    main()
