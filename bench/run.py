"""Speed benchmark: nmtdecode against CTranslate2, `transformers` `generate` and OpenNMT-py, in one run.

    make bench                     # or: python bench/run.py [--quick] [--threads 2] [--repeat 3] [--isa avx2]

Models, each converted to every system (bench/convert.py):
  marian-base    Transformer-base shaped Marian with seeded random weights; every hypothesis
                 is forced to 32 tokens (EOS banned until then), so all systems do the same work;
  demo           the bundled English->German model on its 1,000 held-out test lines, natural lengths;
  marian-demo    a Hugging Face Marian checkpoint trained by the demo recipe
                 (`scripts/train_demo.py --architecture marian`, see MARIAN_DEMO), same test
                 lines, natural lengths; skipped with a note when it has not been trained;
  opennmt-base   Transformer-base shaped OpenNMT-py 3.5.1 checkpoint (.pt) with seeded random weights
                 (bench/opennmt_py.py), every output forced to 32 tokens, against OpenNMT-py's own
                 Translator and CTranslate2's converter on the same file, after a check that
                 nmtdecode and OpenNMT-py give the same tokens at beam 5;
  nllb-600m      an M2M100 of NLLB-200-distilled-600M's sizes with seeded random weights, 16
                 sentences of 32 tokens, beam 1 and 4; in int8 each system reads the model its
                 own converter stored in int8, and nmtdecode quantizing at load is a row too.
Beam 1 and 5, batches of 32 cut from the length-sorted input, float32, int8 and bfloat16, on
CPU with --threads threads; on the natural-length models also each system at its best use of
the cores, --threads batches at once with one thread each (nmtdecode --inter-threads,
CTranslate2 inter_threads). Each measurement runs in its own process (bench/worker.py), so
peak memory is its own; systems are interleaved and the fastest of --repeat runs is kept.

Which rows are compared: nmtdecode with its defaults (stop rule `top`, average length
penalty) against CTranslate2 with its defaults, in float32 and int8; nmtdecode with
Hugging Face's stop rule (`--early-stopping false`) against `transformers`; and, on the
natural-length models, both with the `top` rule and no length penalty (CTranslate2 applies
its early exit only then), where the outputs should agree.

--isa avx2 caps every process's instruction set at AVX2 (oneDNN, torch, MKL and CTranslate2's own
kernels: bench/common.py ISA_CAPS): on a CPU with AVX-512 it emulates an AVX2 one, and the results
say so. Also the whole command-line job on the demo test set (process start, model load, reading,
decoding, writing) and peak memory against input size. Writes --output (bench/results/results.md;
bench/out/results-quick.md with --quick). The figures in README.md and docs/speed.md come from the per-CPU copies
kept in bench/results/ (results-intel-xeon-amx.md, results-amd-epyc-zen5.md, results-amd-epyc-zen4.md,
results-amd-epyc-zen3.md).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

import torch

from common import BENCH as HERE, ISA_CAPS, OUT, RESULTS, ROOT, cap_children, timed  # noqa: E402  (first: the repository on sys.path)
from convert import (
    VOCAB_600M,
    VOCAB_BASE,
    marian_base,
    marian_base_tokens,
    nllb_600m_shape,
    random_sources,
    to_ctranslate2,
    to_marian,  # noqa: E402
    to_native,
    to_transformers,
    token_strings,
)
from report import machine_lines, write_results  # noqa: E402

import opennmt_py  # noqa: E402

MARIAN_DEMO = os.path.join(OUT, "marian-demo-native")
MARIAN_DEMO_RECIPE = (
    "python scripts/train_demo.py --architecture marian --minutes 600 --max-steps 3000 "
    "--scratch scripts/out/marian --model-dir bench/out/marian-demo-native"
)

# (label, system, worker options, label of the row it is compared with)
COMPARED = [
    ("nmtdecode", "nmtdecode", {}, None),
    ("nmtdecode --gemm torch", "nmtdecode", {"gemm": "torch"}, "nmtdecode"),
    ("ctranslate2", "ctranslate2", {}, "nmtdecode"),
    ("nmtdecode int8", "nmtdecode", {"precision": "int8"}, "nmtdecode"),  # "same 1-best": int8's agreement
    ("ctranslate2 int8", "ctranslate2", {"precision": "int8"}, "nmtdecode int8"),
    ("nmtdecode bf16", "nmtdecode", {"precision": "bfloat16"}, "nmtdecode"),
    ("nmtdecode --early-stopping false", "nmtdecode", {"rule": "false"}, None),
    ("transformers", "transformers", {}, "nmtdecode --early-stopping false"),
]
SAME_RULE = [  # natural lengths, beam > 1: the `top` rule on both sides
    ("nmtdecode top, no length penalty", "nmtdecode", {"length_penalty": 0.0}, None),
    ("ctranslate2 length_penalty 0", "ctranslate2", {"length_penalty": 0.0}, "nmtdecode top, no length penalty"),
]

# opennmt-base: OpenNMT-py's Translator has no int8 on CPU (3.5.1's -precision int8 quantizes nothing)
OPENNMT_ROWS = [
    ("nmtdecode", "nmtdecode", {}, None),
    ("opennmt-py Translator", "opennmt-py", {}, "nmtdecode"),
    ("ctranslate2", "ctranslate2", {}, "nmtdecode"),
    ("nmtdecode int8", "nmtdecode", {"precision": "int8"}, "nmtdecode"),
    ("ctranslate2 int8", "ctranslate2", {"precision": "int8"}, "nmtdecode int8"),
]


# nllb-600m: a real-size model, where load time and memory count as much as decoding. In int8 each
# system reads the model its converter stored in int8 (as their users store one: `nmtdecode
# convert --quantize int8`, ct2-transformers-converter --quantization int8); `--quantize int8`
# quantizing the float32 checkpoint at load is a row of its own
BIG_ROWS = [
    ("nmtdecode", "nmtdecode", {}, None),
    ("ctranslate2", "ctranslate2", {}, "nmtdecode"),
    ("nmtdecode int8", "nmtdecode", {"precision": "int8"}, "nmtdecode"),  # "same 1-best": int8's agreement
    ("nmtdecode int8 (converted)", "nmtdecode", {"precision": "int8"}, "nmtdecode int8"),
    ("ctranslate2 int8", "ctranslate2", {"precision": "int8"}, "nmtdecode int8 (converted)"),
    ("nmtdecode bf16", "nmtdecode", {"precision": "bfloat16"}, "nmtdecode"),
    ("nmtdecode --early-stopping false", "nmtdecode", {"rule": "false"}, None),
    ("transformers", "transformers", {}, "nmtdecode --early-stopping false"),
]
BIG_SENTENCES, BIG_BEAMS = 16, (1, 4)  # one batch of 16, as NLLB's users run it (its beam size is 4)


def best_setting_rows(threads: int) -> list:
    """Each system at its best use of the cores: `threads` batches at once, one thread each
    (nmtdecode --inter-threads, CTranslate2 inter_threads), beside the equal setting's one batch
    at a time with `threads` threads for each operation."""
    ours = f"nmtdecode --inter-threads {threads} --threads 1"
    setting = {"inter_threads": threads, "threads": 1}
    return [
        (ours, "nmtdecode", setting, None),
        (f"ctranslate2 inter_threads {threads}, intra_threads 1", "ctranslate2", setting, ours),
    ]


def rows_for(beam: int, natural: bool, threads: int = 1):
    best = best_setting_rows(threads) if natural and threads > 1 else []
    if beam == 1:  # greedy: no stop rule or length penalty to tell apart
        rows = [r for r in COMPARED if "early-stopping" not in r[0]]
        return [(lab, sys_, opt, "nmtdecode" if lab == "transformers" else ref) for lab, sys_, opt, ref in rows] + best
    return COMPARED + (SAME_RULE if natural else []) + best


def sorted_task(sources, **task):
    """Sources sorted by length (then cut into batches of 32 in that order, for every system):
    what the nmtdecode CLI and CTranslate2 (which sorts a long input itself) do, so no system
    gets tighter batches. Returns the task and the order (to sort references alike)."""
    order = sorted(range(len(sources)), key=lambda i: len(sources[i]))
    return {**task, "sources": [sources[i] for i in order]}, order


def prepare_marian(n_sentences: int):
    from nmtdecode.models.checkpoint import read_json
    from nmtdecode.models.formats.huggingface import load_network

    hf_dir = marian_base(os.path.join(OUT, "marian-base"))
    model, _, _ = load_network(hf_dir, read_json(os.path.join(hf_dir, "config.json")))
    tokens = marian_base_tokens()
    ct2_dir = os.path.join(OUT, "marian-base-ct2")
    if not os.path.isfile(os.path.join(ct2_dir, "model.bin")):
        to_ctranslate2(model, tokens, ct2_dir)
    sources = random_sources(n_sentences, 2, VOCAB_BASE - 1, [0])
    task, _ = sorted_task(sources, format="huggingface", tokens=tokens, max_length=256, banned=[VOCAB_BASE - 1])
    return {"nmtdecode": hf_dir, "transformers": hf_dir, "ctranslate2": ct2_dir}, task


def prepare_nllb(n_sentences: int):
    """The NLLB-600M shaped model (bench/convert.py), CTranslate2's conversions of it in float32
    and int8, and a task of `n_sentences` random sources of 10-40 tokens."""
    from nmtdecode.models.checkpoint import read_json
    from nmtdecode.models.formats.huggingface import load_network

    hf_dir = nllb_600m_shape(os.path.join(OUT, "nllb-600m"))
    tokens = token_strings(VOCAB_600M, {0: "<s>", 1: "<pad>", 2: "</s>", 3: "<unk>"})
    dirs = {"nmtdecode": hf_dir, "transformers": hf_dir}
    dirs["nmtdecode int8 (converted)"] = to_native(hf_dir, tokens, os.path.join(OUT, "nllb-600m-native-int8"))
    for label, quantization in (("ctranslate2", None), ("ctranslate2 int8", "int8")):
        dirs[label] = os.path.join(OUT, "nllb-600m-ct2" + (f"-{quantization}" if quantization else ""))
        if not os.path.isfile(os.path.join(dirs[label], "model.bin")):
            model, _, _ = load_network(hf_dir, read_json(os.path.join(hf_dir, "config.json")))
            to_ctranslate2(model, tokens, dirs[label], quantization)
            del model
    sources = random_sources(n_sentences, 4, VOCAB_600M, [2])
    task, _ = sorted_task(sources, format="huggingface", tokens=tokens, max_length=256, banned=[])
    return dirs, task


def prepare_opennmt(n_sentences: int, threads: int):
    """The checkpoint, CTranslate2's conversion of it, the task (source ids without EOS, as
    OpenNMT-py feeds its encoder); checks first that nmtdecode and OpenNMT-py agree at beam 5."""
    checkpoint = opennmt_py.opennmt_base(os.path.join(OUT, "opennmt-base"))
    ct2_dir = opennmt_py.to_ctranslate2(checkpoint, os.path.join(OUT, "opennmt-base-ct2"))
    vocab = opennmt_py.VOCAB
    g = torch.Generator().manual_seed(1)
    sources = [
        torch.randint(
            len(opennmt_py.SPECIALS), len(vocab), (int(torch.randint(10, 40, (1,), generator=g)),), generator=g
        ).tolist()
        for _ in range(n_sentences)
    ]
    task, _ = sorted_task(sources, format="opennmt-py", tokens=vocab, max_length=256, banned=[])
    dirs = {"nmtdecode": checkpoint, "opennmt-py": checkpoint, "ctranslate2": ct2_dir}
    check = {**task, "sources": task["sources"][:: max(1, len(sources) // 4)]}  # a few, short to long
    check_file = os.path.join(OUT, "opennmt-base-check.json")
    with open(check_file, "w", encoding="utf-8") as f:
        json.dump(check, f)
    print("opennmt-base: nmtdecode and OpenNMT-py at beam 5 ...", file=sys.stderr, flush=True)
    ours, theirs = (
        measure(system, checkpoint, check_file, 5, threads, {}, 32)["outputs"] for system in ("nmtdecode", "opennmt-py")
    )
    if ours != theirs:
        raise RuntimeError(f"opennmt-base: nmtdecode and OpenNMT-py disagree at beam 5:\n{ours}\n{theirs}")
    return dirs, task


def test_lines(demo_dir: str, n: int):
    with open(os.path.join(demo_dir, "test.en"), encoding="utf-8") as f:
        sources = [line.rstrip("\n") for line in f][:n]
    with open(os.path.join(demo_dir, "test.de"), encoding="utf-8") as f:
        references = [line.rstrip("\n") for line in f][:n]
    return sources, references


def prepare_natural(name: str, n: int, demo: str):
    """demo or marian-demo: directories per system, the task, the loaded model, references."""
    from nmtdecode.models.loading import load_model

    native_dir = demo if name == "demo" else MARIAN_DEMO
    loaded = load_model(native_dir)
    sp = loaded.tokenizer.target
    tokens = [sp.id_to_piece(i) for i in range(sp.get_piece_size())]
    hf_dir, ct2_dir = os.path.join(OUT, f"{name}-hf"), os.path.join(OUT, f"{name}-ct2")
    banned = list(loaded.rules.banned_ids)
    if name == "demo":  # rebuilt every run: the model may be new
        to_transformers(loaded.model, hf_dir)
    else:
        to_marian(loaded.model, hf_dir, banned)
    to_ctranslate2(loaded.model, tokens, ct2_dir)
    lines, references = test_lines(demo, n)
    # demo: nmtdecode reads the native directory; marian-demo: the Hugging Face Marian checkpoint
    task, order = sorted_task(
        [loaded.tokenizer.encode(line) for line in lines],
        tokens=tokens,
        max_length=64,
        banned=banned,
        format="native" if name == "demo" else "huggingface",
    )
    dirs = {"nmtdecode": native_dir if name == "demo" else hf_dir, "transformers": hf_dir, "ctranslate2": ct2_dir}
    return dirs, task, loaded, [references[i] for i in order]


def read_through(path: str) -> None:
    """Every file of a model (a directory or one file) read once, so that each system's load reads
    from the page cache, as a model used every day is read, not from the disk."""
    files = [path] if os.path.isfile(path) else [os.path.join(path, name) for name in sorted(os.listdir(path))]
    for name in files:
        if os.path.isfile(name):
            with open(name, "rb", buffering=0) as f:
                while f.read(64 << 20):
                    pass


def measure(system, model_dir, task_file, beam, threads, options, fixed_length=0, batch=32):
    """One worker process's result, with the wall time of the whole process (`process_seconds`:
    start, imports, load, a warm-up on 4 sentences, decoding, exit: worker.end_as_the_cli_does), its
    model's files read beforehand (read_through), and the machine's 1-minute load average as it
    started (`load`)."""
    cmd = [
        sys.executable,
        os.path.join(HERE, "worker.py"),
        system,
        model_dir,
        task_file,
        "--beam",
        str(beam),
        "--threads",
        str(threads),
        "--batch",
        str(batch),
    ]
    cmd += [f"--{key.replace('_', '-')}={value}" for key, value in options.items()]
    if fixed_length:
        cmd += ["--fixed-length", str(fixed_length)]
    env = dict(os.environ, PYTHONPATH=ROOT, OMP_NUM_THREADS=str(threads))
    read_through(model_dir)
    load = os.getloadavg()[0]
    seconds, run = timed(lambda: subprocess.run(cmd, capture_output=True, text=True, env=env))
    if run.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{run.stderr[-3000:]}")
    return {**json.loads(run.stdout.splitlines()[-1]), "process_seconds": seconds, "load": load}


def bleu_chrf(outputs, loaded, references):
    import sacrebleu

    hyps = [loaded.tokenizer.decode(o) for o in outputs]
    return sacrebleu.corpus_bleu(hyps, [references]).score, sacrebleu.corpus_chrf(hyps, [references]).score


def agreement(a, b):
    return sum(x == y for x, y in zip(a, b)) / len(a)


def only(rows, labels: str):
    """The rows named in `labels` (comma-separated; all when empty), with the rows they are
    compared with."""
    if not labels:
        return rows
    wanted = set(labels.split(","))
    while True:  # and theirs, down the chain
        more = {reference for label, _, _, reference in rows if label in wanted and reference} - wanted
        if not more:
            return [row for row in rows if row[0] in wanted]
        wanted |= more


def benchmark_model(name, dirs, task, beam, args, loaded=None, references=None, fixed=0, rows=None, batch=32):
    """One model at one beam size: every row of `rows` (rows_for's by default), interleaved,
    fastest of --repeat. A row's model is dirs[label] where there is one, else dirs[system]."""
    rows = only(rows or rows_for(beam, natural=not fixed, threads=args.threads), args.rows)
    task_file = os.path.join(OUT, f"{name}-task.json")
    with open(task_file, "w", encoding="utf-8") as f:
        json.dump(task, f)
    best = {}
    for repeat in range(args.repeat):  # interleaved: on a shared machine the speed drifts over minutes
        for label, system, options, _ in rows:
            print(f"{name} beam {beam}: {label} (run {repeat + 1}) ...", file=sys.stderr, flush=True)
            r = measure(system, dirs.get(label, dirs[system]), task_file, beam, args.threads, options, fixed, batch)
            if label not in best or r["seconds"] < best[label]["seconds"]:
                best[label] = r
    table = []
    for label, _, _, reference in rows:
        r = best[label]
        row = {
            "model": name,
            "beam": beam,
            "isa": args.isa,
            "system": label,
            "sent_s": r["sentences"] / r["seconds"],
            "cpu_s": r["cpu_seconds"],
            "load": r["load"],
            "tok_s": r["target_tokens"] / r["seconds"],
            "rss": r["peak_rss_mb"],
            "gemm": r["gemm"],
            "load_s": r["load_seconds"],
            "process_s": r["process_seconds"],
            "vs": reference,
        }
        if reference:
            ref = best[reference]
            row["ratio"] = r["seconds"] / ref["seconds"]  # > 1: the reference (an nmtdecode row) is faster
            row["process_ratio"] = r["process_seconds"] / ref["process_seconds"]
            row["same"] = agreement(r["outputs"], ref["outputs"])
        if references is not None:
            row["bleu"], row["chrf"] = bleu_chrf(r["outputs"], loaded, references)
        table.append(row)
    return table


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
        rows.append(measure("nmtdecode-file", args.demo, path, 5, args.threads, {}))
    return rows


def whole_job_rows(args, n: int):
    """Wall time of whole processes translating the demo test file: nmtdecode's CLI, and the
    same job written for CTranslate2 and transformers (bench/peer_job.py), fastest of --repeat."""
    lines, _ = test_lines(args.demo, n)
    src = os.path.join(OUT, "demo-test.en")
    with open(src, "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")
    out = os.path.join(OUT, "job-output.txt")
    env = dict(os.environ, PYTHONPATH=ROOT, OMP_NUM_THREADS=str(args.threads))
    cli = [sys.executable, "-m", "nmtdecode", "translate", "--model", args.demo, "--src", src, "--output", out]
    peer = [sys.executable, os.path.join(HERE, "peer_job.py")]
    ct2 = peer + ["ctranslate2", os.path.join(OUT, "demo-ct2"), args.demo, src, out]
    jobs = {
        "nmtdecode translate (CLI)": cli + ["--threads", str(args.threads), "--quiet"],
        f"nmtdecode translate (CLI) --inter-threads {args.threads} --threads 1": cli
        + ["--inter-threads", str(args.threads), "--threads", "1", "--quiet"],
        "ctranslate2 (Python job)": ct2 + [str(args.threads)],
        f"ctranslate2 (Python job) inter_threads {args.threads}, intra_threads 1": ct2 + ["1", str(args.threads)],
        "transformers (Python job)": peer
        + ["transformers", os.path.join(OUT, "demo-hf"), args.demo, src, out, str(args.threads)],
    }
    best = {}
    for repeat in range(args.repeat):
        for label, cmd in jobs.items():
            print(f"whole job: {label} (run {repeat + 1}) ...", file=sys.stderr, flush=True)
            seconds, run = timed(lambda: subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT))
            if run.returncode != 0:
                raise RuntimeError(f"{label} failed:\n{run.stderr[-3000:]}")
            best[label] = min(best.get(label, float("inf")), seconds)
    return [
        {"job": label, "lines": len(lines), "seconds": s, "ratio": s / best["nmtdecode translate (CLI)"]}
        for label, s in best.items()
    ]


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--quick", action="store_true", help="few sentences: a smoke test of the harness")
    parser.add_argument("--repeat", type=int, default=3, help="runs per system; the fastest is reported")
    parser.add_argument("--models", default="marian-base,nllb-600m,demo,marian-demo,opennmt-base")
    parser.add_argument(
        "--rows",
        default="",
        help="only these rows, by their system label (e.g. ctranslate2: with the row it is compared with); "
        "the demo's whole jobs and memory rows run only without it",
    )
    parser.add_argument("--demo", default=os.path.join(ROOT, "data", "demo"), help="the demo model directory")
    parser.add_argument(
        "--isa",
        default="native",
        choices=sorted(ISA_CAPS),
        help="cap every system's instruction set (avx2: an AVX2 CPU, emulated on one with AVX-512)",
    )
    parser.add_argument(
        "--output",
        help="the results file (default bench/results/results.md, results-avx2.md with --isa avx2; one per "
        "CPU and ISA is kept in bench/results/: results-VENDOR-MODEL[-ISA].md)",
    )
    args = parser.parse_args()
    default_name = "results.md" if args.isa == "native" else f"results-{args.isa}.md"
    args.output = args.output or os.path.join(RESULTS, default_name)
    cap_children(args.isa)  # every worker and job process from here on
    os.makedirs(OUT, exist_ok=True)
    rows, notes = [], []
    n_marian, n_natural = (8, 16) if args.quick else (64, 1000)
    for name in args.models.split(","):
        if name == "marian-demo" and not os.path.isfile(os.path.join(MARIAN_DEMO, "model.safetensors")):
            notes.append(f"marian-demo skipped: train it first with `{MARIAN_DEMO_RECIPE}`")
            continue
        if name == "opennmt-base":
            opennmt_dirs, opennmt_task = prepare_opennmt(n_marian, args.threads)  # once: it checks agreement
        if name == "nllb-600m":
            nllb_dirs, nllb_task = prepare_nllb(n_marian // 4)
            for beam in BIG_BEAMS:
                rows += benchmark_model(
                    name, nllb_dirs, nllb_task, beam, args, fixed=32, rows=BIG_ROWS, batch=BIG_SENTENCES
                )
            continue
        for beam in (1, 5):
            if name == "marian-base":
                dirs, task = prepare_marian(n_marian)
                rows += benchmark_model(name, dirs, task, beam, args, fixed=32)
            elif name == "opennmt-base":
                rows += benchmark_model(name, opennmt_dirs, opennmt_task, beam, args, fixed=32, rows=OPENNMT_ROWS)
            else:
                dirs, task, loaded, references = prepare_natural(name, n_natural, args.demo)
                rows += benchmark_model(name, dirs, task, beam, args, loaded, references)
    whole = "demo" in args.models.split(",") and not args.rows  # --rows: those rows only
    jobs = whole_job_rows(args, n_natural) if whole else []
    memory = memory_rows(args) if whole else []
    path = os.path.join(OUT, "results-quick.md") if args.quick else args.output
    write_results(path, machine_lines(args), rows, jobs, memory, notes)


if __name__ == "__main__":
    main()
