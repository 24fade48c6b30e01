"""Train the bundled demo model: English -> German words and phrases from FreeDict.

The data are Debian's FreeDict dictionaries (packages dict-freedict-eng-deu and
dict-freedict-deu-eng, generated from the Ding dictionary). The recipe runs in
stages, each one skipped when its output already exists in the scratch
directory (so a re-run or `--resume` continues where it stopped):

    1. pairs   read both dictionaries, clean every (English, German) pair and
               pick one main translation per English source
    2. split   shuffle the English sources with a fixed seed; test and valid
               get ~1000 sources each, every pair of a held-out source leaves
               training (no source is seen in training and tested)
    3. spm     a joint SentencePiece model whose ids are the model's ids
    4. train   a small Transformer with teacher forcing, label smoothing and
               Adam with warmup, for a time budget (`--minutes`), with
               periodic checkpoints that `--resume` continues from; the
               last 15% of the steps favour everyday words and phrases
    5. export  the native model directory (fp16 safetensors + config.yaml +
               SentencePiece model), then beam-5 BLEU/chrF on the test split
               with the project's own decoder and a model card (README.md)

    python scripts/train_demo.py --minutes 120          # the committed weights
    python scripts/train_demo.py --minutes 120 --resume # continue after a stop
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

# oneDNN keeps a compiled kernel for every matmul shape it has seen; with bf16 and
# batches of ever-changing shapes its default cache (1024 kernels) grows to
# several GB. 256 kernels keep memory flat at no measurable cost in speed.
os.environ.setdefault("ONEDNN_PRIMITIVE_CACHE_CAPACITY", "256")
import torch  # noqa: E402  (after the variable, which oneDNN reads when it starts)

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))  # this checkout's nmtdecode package (installed or not) and scripts.demo

# The stages, in scripts/demo/: freedict.py (dictd files and markup), pairs.py (1, 2),
# tokenizer.py (3), batches.py and train.py (4), export.py and card.py + card.md (5).
from scripts.demo.card import dictionary_facts, write_card  # noqa: E402
from scripts.demo.common import log  # noqa: E402
from scripts.demo.export import common_words, demo_sample, evaluate, export  # noqa: E402
from scripts.demo.freedict import DICT_DIR  # noqa: E402
from scripts.demo.pairs import data_key, prepare_data  # noqa: E402
from scripts.demo.tokenizer import train_spm  # noqa: E402
from scripts.demo.train import pick_weights, train  # noqa: E402


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add = parser.add_argument
    add("--minutes", type=float, default=30, help="wall-clock budget of the whole recipe (default 30)")
    add("--max-steps", type=int, help="train exactly this many steps instead of using the time budget")
    add("--resume", action="store_true", help="continue from the checkpoint in the scratch directory")
    add("--dict-dir", default=DICT_DIR, help="where the freedict-eng-deu / freedict-deu-eng files are")
    add("--scratch", default="scripts/out", help="pairs, tokenizer and checkpoints (relative to the repository)")
    add("--model-dir", default="data/demo", help="the exported model (relative to the repository)")
    add("--seed", type=int, default=1)
    add("--threads", type=int, default=2)
    data = parser.add_argument_group("data")
    data.add_argument("--max-words", type=int, default=25, help="longest pair side in words")
    data.add_argument("--n-test", type=int, default=1000)
    data.add_argument("--n-valid", type=int, default=1000)
    data.add_argument("--vocab-size", type=int, default=6000)
    model = parser.add_argument_group("model")
    model.add_argument(
        "--architecture",
        choices=["demo", "marian"],
        default="demo",
        help="demo: pre-norm; marian: post-norm Marian layers (for bench/convert.py's Marian export)",
    )
    model.add_argument("--d-model", type=int, default=256)
    model.add_argument("--heads", type=int, default=4)
    model.add_argument("--encoder-layers", type=int, default=3)
    model.add_argument("--decoder-layers", type=int, default=2)
    model.add_argument("--ffn-dim", type=int, default=768)
    model.add_argument("--max-tokens", type=int, default=128, help="longest sequence in pieces (and position table)")
    opt = parser.add_argument_group("training")
    opt.add_argument("--batch-tokens", type=int, default=3000, help="rows x longest sequence per batch")
    opt.add_argument(
        "--max-copies",
        type=int,
        default=40,
        help="most copies per epoch of an everyday word or phrase (1: every pair once)",
    )
    opt.add_argument(
        "--final-share",
        type=float,
        default=0.15,
        help="share of the training budget spent on everyday pairs at the end (0: none)",
    )
    opt.add_argument(
        "--precision",
        choices=["bf16", "fp32"],
        default="bf16",
        help="compute precision of the training steps (bf16 autocast; weights stay fp32)",
    )
    opt.add_argument("--lr", type=float, default=1e-3)
    opt.add_argument("--warmup", type=int, default=1000)
    opt.add_argument("--dropout", type=float, default=0.1)
    opt.add_argument("--label-smoothing", type=float, default=0.1)
    opt.add_argument("--ema-decay", type=float, default=0.999)
    opt.add_argument("--eval-minutes", type=float, default=2, help="time kept back for export and evaluation")
    opt.add_argument("--checkpoint-minutes", type=float, default=5)
    opt.add_argument("--report-every", type=int, default=200)
    opt.add_argument("--eval-every", type=int, default=500, help="valid loss and probe translations")
    return parser.parse_args(argv)


def load_progress(path: Path) -> dict:
    if path.exists():
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    return {}


def save_progress(path: Path, progress: dict):
    with open(path, "w", encoding="utf-8") as f:
        json.dump(progress, f, indent=1)


def prepare(args, scratch: Path) -> dict:
    """Stages 1-3, cached in the scratch directory, keyed by the options they depend on.
    Returns the progress record (sizes and build times)."""
    progress_file = scratch / "progress.json"
    progress = load_progress(progress_file)
    key = data_key(args)
    if progress.get("data_key") != key:
        started = time.monotonic()
        progress = {"data_key": key, "sizes": prepare_data(args, scratch), "data_seconds": time.monotonic() - started}
        save_progress(progress_file, progress)
    spm_key = {**key, "vocab_size": args.vocab_size}
    if progress.get("spm_key") != spm_key or not (scratch / "spm.model").exists():
        started = time.monotonic()
        train_spm(args, scratch)
        progress.update(spm_key=spm_key, spm_seconds=time.monotonic() - started)
        save_progress(progress_file, progress)
        (scratch / "checkpoint.pt").unlink(missing_ok=True)  # trained on other ids
    return progress


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    scratch, model_dir = REPO / args.scratch, REPO / args.model_dir
    scratch.mkdir(parents=True, exist_ok=True)
    progress = prepare(args, scratch)
    prep_seconds = progress["data_seconds"] + progress["spm_seconds"]
    log(f"data and tokenizer ready ({prep_seconds / 60:.1f} min when built)")

    if not args.resume and (scratch / "checkpoint.pt").exists():
        log("a checkpoint exists; training from scratch (use --resume to continue it)")
        (scratch / "checkpoint.pt").unlink()
    budget = args.minutes * 60 - args.eval_minutes * 60 - prep_seconds
    model, ema, state, sp, valid = train(args, scratch, budget)
    weights = pick_weights(model, ema, sp, valid, args)

    started = time.monotonic()
    size = export(model, scratch, model_dir)
    metrics, sources, hyps, accepted = evaluate(args, scratch, model_dir)
    chosen = common_words(scratch, model_dir, sources, hyps, accepted)
    demo, _ = demo_sample(args, scratch, model_dir)
    timings = {"prep": prep_seconds, "train": state["train_seconds"], "eval": time.monotonic() - started}
    timings["total"] = sum(timings.values())
    shown = [a for a in argv if a != "--resume"]
    command = "python scripts/train_demo.py" + (" " + " ".join(shown) if shown else "")
    n_params = sum(p.numel() for p in model.parameters())
    write_card(
        model_dir / "README.md",
        args=args,
        command=command,
        facts=dictionary_facts(args.dict_dir),
        sizes=progress["sizes"],
        cfg=model.cfg,
        n_params=n_params,
        size=size,
        state=state,
        timings=timings,
        weights=weights,
        metrics=metrics,
        chosen=chosen,
        demo=demo,
    )
    with open(scratch / "metrics.json", "w", encoding="utf-8") as f:
        json.dump({"metrics": metrics, "steps": state["step"], "timings": timings, "command": command}, f, indent=1)
    card = f"{os.path.relpath(model_dir, REPO)}/README.md"
    log(f"done in {timings['total'] / 60:.1f} min (recipe total); model card {card}")


if __name__ == "__main__":
    main()
