"""Stage 4: a small Transformer with teacher forcing, label smoothing and Adam with
warmup, for a time budget (or a step count), with periodic checkpoints that
`--resume` continues from; the last `--final-share` of the steps favour everyday
words and phrases.

oneDNN reads ONEDNN_PRIMITIVE_CACHE_CAPACITY when torch starts: `train_demo.py`
sets it before this module imports torch.
"""

from __future__ import annotations

import argparse
import math
import os
import time
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F

from .batches import collate, encode_split, epoch_batches, everyday_copies, expand, polish_mix
from .common import BOS, EOS, PAD, UNK, log, read_lines

# --------------------------------------------------------------------------- model


# --architecture: the demo model's pre-norm layers, or Marian's (post-norm, no final layer
# norms, swish), which bench/convert.py exports as a Hugging Face Marian checkpoint.
ARCHITECTURES = {
    "demo": dict(activation="relu", pre_norm=True, encoder_final_norm=True, decoder_final_norm=True),
    "marian": dict(activation="silu", pre_norm=False, encoder_final_norm=False, decoder_final_norm=False),
}


def model_config(args, vocab_size: int):
    from nmtdecode.models.transformer import TransformerConfig

    # Untied source embedding: with one matrix for both sides, pieces that only occur
    # in English are never targets and their rows collapse in short runs (every input
    # then gets the same output). The target embedding doubles as the output layer.
    return TransformerConfig(
        src_vocab_size=vocab_size,
        tgt_vocab_size=vocab_size,
        d_model=args.d_model,
        heads=args.heads,
        encoder_layers=args.encoder_layers,
        decoder_layers=args.decoder_layers,
        ffn_dim=args.ffn_dim,
        positions="sinusoidal",
        max_positions=args.max_tokens,
        **ARCHITECTURES[args.architecture],
        embed_scale=math.sqrt(args.d_model),
        share_embeddings=False,
        tie_output=True,
        dropout=args.dropout,
        pad_id=PAD,
        unk_id=UNK,
        bos_id=BOS,
        eos_id=EOS,
        decoder_start_id=BOS,
    )


def init_weights(model):
    """Embeddings N(0, d^-1/2) (scaled by sqrt(d) they are N(0, 1), like the positions,
    and the tied output layer starts with small logits); Xavier for the projections."""
    d = model.cfg.d_model
    for name, p in model.named_parameters():
        if "tokens" in name:
            torch.nn.init.normal_(p, std=d**-0.5)
        elif p.dim() == 2:
            torch.nn.init.xavier_uniform_(p)
        elif name.endswith("bias"):
            torch.nn.init.zeros_(p)


def learning_rate(step: int, peak: float, warmup: int) -> float:
    """Linear warmup to `peak`, then inverse square root decay."""
    step = max(step, 1)
    return peak * min(step / warmup, math.sqrt(warmup / step))


@torch.no_grad()
def valid_loss(model, examples, batch_tokens: int) -> float:
    """Mean per-token NLL (no smoothing) of the valid split, teacher forced."""
    was_training = model.training
    model.eval()
    total, tokens = 0.0, 0
    for batch in epoch_batches(examples, 0, 0, batch_tokens):
        src, mask, tgt_in, gold = collate(examples, batch)
        logits = model(src, mask, tgt_in)
        total += F.cross_entropy(
            logits.reshape(-1, logits.size(-1)), gold.reshape(-1), ignore_index=PAD, reduction="sum"
        ).item()
        tokens += (gold != PAD).sum().item()
    model.train(was_training)
    return total / tokens


PROBES = ["dog", "cat", "house", "water", "good morning", "thank you", "the children", "How are you?"]


@torch.no_grad()
def probe(model, sp, texts=PROBES) -> str:
    """Greedy translations with the project's own Translator: a quick sign of life."""
    from nmtdecode.options.config import DecodingConfig
    from nmtdecode.models.checkpoint import ModelRules
    from nmtdecode.engine.decoding import BatchDecoder

    was_training = model.training
    model.eval()
    translator = BatchDecoder(model, DecodingConfig(beam_size=1, max_length=32), ModelRules(banned_ids=(PAD, BOS)))
    hyps = translator.decode([sp.encode(t) + [EOS] for t in texts]).nbests
    model.train(was_training)
    return "; ".join(f"{t} -> {sp.decode(h[0].tokens)}" for t, h in zip(texts, hyps))


# --------------------------------------------------------------------------- checkpoints

# Options that must not change between a checkpoint and the run that resumes it.
RESUME_KEYS = (
    "seed",
    "vocab_size",
    "d_model",
    "heads",
    "encoder_layers",
    "decoder_layers",
    "ffn_dim",
    "max_tokens",
    "dropout",
    "label_smoothing",
    "lr",
    "warmup",
    "batch_tokens",
    "ema_decay",
    "precision",
    "max_copies",
    "architecture",
)


def save_checkpoint(path: Path, model, optimizer, ema, state: dict, args):
    """Atomic: a run killed while writing leaves the previous checkpoint intact."""
    tmp = path.with_suffix(".tmp")
    torch.save(
        {
            "model": model.state_dict(),
            "optimizer": optimizer.state_dict(),
            "ema": ema,
            "state": state,
            "rng": torch.get_rng_state(),
            "args": {k: getattr(args, k) for k in RESUME_KEYS},
        },
        tmp,
    )
    os.replace(tmp, path)


def load_checkpoint(path: Path, model, optimizer, args) -> tuple[list, dict]:
    saved = torch.load(path, weights_only=True)
    mismatched = [k for k in RESUME_KEYS if saved["args"][k] != getattr(args, k)]
    if mismatched:
        were = ", ".join(f"{k}={saved['args'][k]}" for k in mismatched)
        raise SystemExit(f"--resume: the checkpoint was trained with other settings ({were})")
    model.load_state_dict(saved["model"])
    optimizer.load_state_dict(saved["optimizer"])
    torch.set_rng_state(saved["rng"])
    return saved["ema"], saved["state"]


# --------------------------------------------------------------------------- the run


@dataclass
class Run:
    """One training run: the model and everything a step changes."""

    args: argparse.Namespace
    model: torch.nn.Module
    params: list[torch.nn.Parameter]
    optimizer: torch.optim.Optimizer
    # An exponential moving average of the weights: a cheap ensemble over the
    # last few thousand steps, usually better than the last step of a short run.
    ema: list[torch.Tensor]
    state: dict  # step, epoch, position, train_seconds, history; "polish": the final phase's cursor


def new_run(args, vocab_size: int) -> Run:
    """A freshly initialised model (seeded) with its optimizer."""
    from nmtdecode.models.transformer import Transformer

    torch.manual_seed(args.seed)
    model = Transformer(model_config(args, vocab_size))
    init_weights(model)
    params = list(model.parameters())
    optimizer = torch.optim.Adam(params, lr=args.lr, betas=(0.9, 0.98), eps=1e-9)
    ema = [p.detach().clone() for p in params]
    state = {"step": 0, "epoch": 0, "position": 0, "train_seconds": 0.0, "history": []}
    return Run(args, model, params, optimizer, ema, state)


def resume(run: Run, checkpoint: Path):
    """With --resume, continue from the checkpoint if there is one."""
    if run.args.resume and checkpoint.exists():
        run.ema, run.state = load_checkpoint(checkpoint, run.model, run.optimizer, run.args)
        state = run.state
        log(f"resumed at step {state['step']} (epoch {state['epoch']}, {state['train_seconds'] / 60:.1f} min trained)")
    elif run.args.resume:
        log("--resume: no checkpoint yet, starting from scratch")


def in_final_phase(state: dict, args, budget: float) -> bool:
    """The last `--final-share` of the steps (or of the time budget) train on polish_mix."""
    if args.max_steps:
        return state["step"] >= (1 - args.final_share) * args.max_steps
    return state["train_seconds"] >= (1 - args.final_share) * budget


def out_of_time(state: dict, args, budget: float) -> bool:
    if args.max_steps:
        return state["step"] >= args.max_steps
    return state["train_seconds"] >= budget


class Batches:
    """Where the next batch comes from: the main phase's epochs, then the final
    phase's. The main phase's epoch and position live in `state`, the final
    phase's in state["polish"], so a checkpoint knows where the run stands."""

    def __init__(self, examples, polish, args, budget: float):
        self.examples, self.polish, self.args, self.budget = examples, polish, args, budget
        self.batches, self.key = None, None

    def next(self, state: dict) -> tuple[list, dict, list[int]]:
        """(the phase's examples, its cursor, the example indices of the next batch)."""
        while True:
            polishing = in_final_phase(state, self.args, self.budget)
            if polishing and "polish" not in state:
                state["polish"] = {"epoch": 0, "position": 0, "from_step": state["step"]}
                log(f"final phase from step {state['step']}: everyday pairs and a sample of the rest")
            data, cursor = (self.polish, state["polish"]) if polishing else (self.examples, state)
            if self.key != (polishing, cursor["epoch"]):
                self.batches = epoch_batches(data, cursor["epoch"], self.args.seed + polishing, self.args.batch_tokens)
                self.key = (polishing, cursor["epoch"])
                if not polishing:
                    state["epoch_batches"] = len(self.batches)
            if cursor["position"] < len(self.batches):
                return data, cursor, self.batches[cursor["position"]]
            cursor["epoch"], cursor["position"] = cursor["epoch"] + 1, 0


def train_step(run: Run, src, mask, tgt_in, gold, step: int):
    """One optimizer step and the weight average's update; returns the loss."""
    args = run.args
    for group in run.optimizer.param_groups:
        group["lr"] = learning_rate(step, args.lr, args.warmup)
    # bfloat16 autocast: matmuls in bf16 (AMX / AVX512-BF16 make them ~1.7x faster
    # here), weights, optimizer state and the loss stay float32.
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=args.precision == "bf16"):
        logits = run.model(src, mask, tgt_in)
    loss = F.cross_entropy(
        logits.float().reshape(-1, logits.size(-1)),
        gold.reshape(-1),
        ignore_index=PAD,
        label_smoothing=args.label_smoothing,
    )
    run.optimizer.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(run.params, 1.0)
    run.optimizer.step()
    with torch.no_grad():
        torch._foreach_lerp_(run.ema, [p.detach() for p in run.params], 1.0 - args.ema_decay)
    return loss


def train_loop(run: Run, batches: Batches, sp, valid, checkpoint: Path, budget: float):
    """Steps until the budget is spent: loss reports, valid loss and probes, checkpoints."""
    args, state = run.args, run.state
    run.model.train()
    started, base = time.monotonic(), state["train_seconds"]
    last_save = started
    window = [0.0, 0, 0]  # loss x tokens, target tokens, steps since the last report
    while not out_of_time(state, args, budget):
        data, cursor, batch = batches.next(state)
        src, mask, tgt_in, gold = collate(data, batch)
        step = state["step"] + 1
        loss = train_step(run, src, mask, tgt_in, gold, step)
        state["step"], cursor["position"] = step, cursor["position"] + 1
        state["train_seconds"] = base + time.monotonic() - started

        tokens = int((gold != PAD).sum())
        window = [window[0] + loss.item() * tokens, window[1] + tokens, window[2] + 1]
        if step % args.report_every == 0:
            log(
                f"step {step} epoch {state['epoch']} lr {learning_rate(step, args.lr, args.warmup):.2e} "
                f"loss {window[0] / window[1]:.3f} {window[1] / window[2]:.0f} tgt tokens/step "
                f"trained {state['train_seconds'] / 60:.1f} min"
            )
            window = [0.0, 0, 0]
        if step % args.eval_every == 0:
            nll = valid_loss(run.model, valid, args.batch_tokens)
            state["history"].append((step, round(nll, 4)))
            log(f"valid nll {nll:.3f} | {probe(run.model, sp)}")
        if time.monotonic() - last_save > args.checkpoint_minutes * 60:
            save_checkpoint(checkpoint, run.model, run.optimizer, run.ema, state, args)
            last_save = time.monotonic()
    save_checkpoint(checkpoint, run.model, run.optimizer, run.ema, state, args)
    log(f"training stopped at step {state['step']} ({state['train_seconds'] / 60:.1f} min)")


def train(args, scratch: Path, budget: float):
    """Stage 4. Returns the trained model, its EMA weights, the run's state, the
    SentencePiece model and the valid examples."""
    import sentencepiece as spm

    sp = spm.SentencePieceProcessor(model_file=str(scratch / "spm.model"))
    copies = everyday_copies(read_lines(scratch / "train.en"), args.max_copies)
    pairs = encode_split(sp, scratch, "train", args.max_tokens, copies)
    examples, polish = expand(pairs), polish_mix(pairs, args.seed)
    valid = expand(encode_split(sp, scratch, "valid", args.max_tokens))
    log(f"{sum(c > 1 for c in copies):,} everyday pairs shown more than once per epoch")
    run = new_run(args, sp.get_piece_size())
    log(
        f"model: {sum(p.numel() for p in run.params):,} parameters; {len(examples):,} training examples per epoch, "
        f"{len(polish):,} in the final phase's"
    )
    checkpoint = scratch / "checkpoint.pt"
    resume(run, checkpoint)

    run.state["everyday_pairs"], run.state["epoch_examples"] = sum(c > 1 for c in copies), len(examples)
    run.state["polish_examples"] = len(polish)
    train_loop(run, Batches(examples, polish, args, budget), sp, valid, checkpoint, budget)
    return run.model, run.ema, run.state, sp, valid


def pick_weights(model, ema, sp, valid, args) -> str:
    """Keep the last or the averaged weights, whichever has the lower valid loss."""
    last = valid_loss(model, valid, args.batch_tokens)
    saved = [p.detach().clone() for p in model.parameters()]
    with torch.no_grad():
        for p, e in zip(model.parameters(), ema):
            p.copy_(e)
    averaged = valid_loss(model, valid, args.batch_tokens)
    log(f"valid nll: last weights {last:.4f}, averaged weights {averaged:.4f}")
    if averaged <= last:
        return f"exponential moving average of the weights (decay {args.ema_decay}; valid NLL {averaged:.3f})"
    with torch.no_grad():
        for p, s in zip(model.parameters(), saved):
            p.copy_(s)
    return f"weights of the last step (valid NLL {last:.3f})"
