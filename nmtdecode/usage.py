"""How the command line meets its users' habits: other tools' spellings, options that would do
nothing, and the effective configuration (`--dump-config`).

* OpenNMT-py writes its options with one dash and underscores (`-beam_size 5`); click would
  read that as `-b eam_size`. `check_spelling` stops first, naming our option.
* Usage errors are one line, `nmtdecode: error: ...`, like every other error (`one_line`).
* `ineffective` lists options given that change nothing (warnings, not errors: a shared YAML
  file may well set them for another format).
"""

from __future__ import annotations

import re

import click
import yaml

from .config import Config, flat_values

SINGLE_DASH = re.compile(r"-[A-Za-z][A-Za-z0-9_]+")
# OpenNMT-py spellings with no namesake here.
OPENNMT = {"-gpu": "--device cuda:N", "-fp32": "--dtype float32", "-int8": "--quantize int8"}


class UsageError(click.UsageError):
    """A command-line mistake found before click parses (exit code 2)."""


def check_spelling(group: click.Group, argv: list[str]):
    """Refuse OpenNMT's single-dash long options (`-beam_size`, `-src`) naming ours (`--beam-size`)."""
    names = [i for i, arg in enumerate(argv) if arg in group.commands]
    if not names:
        return
    command = group.commands[argv[names[0]]]
    longs = {opt for param in command.params for opt in param.opts + param.secondary_opts if opt.startswith("--")}
    for arg in argv[names[0] + 1:]:
        if arg == "--":
            return
        if not SINGLE_DASH.fullmatch(arg):
            continue
        ours = "--" + arg[1:].replace("_", "-")
        if ours in longs:
            raise UsageError(f"{arg}: nmtdecode's options start with two dashes: {ours}")
        if arg in OPENNMT:
            raise UsageError(f"{arg}: that is OpenNMT-py's option; nmtdecode's is {OPENNMT[arg]}")
        if "_" in arg:
            raise UsageError(f"no such option: {arg} (nmtdecode's options start with two dashes and use "
                             f"hyphens; nmtdecode {command.name} --help lists them)")


def one_line(error: click.ClickException) -> str:
    """click's error without its `Usage: ... Try ...` block, plus where the help is."""
    message = " ".join(error.format_message().split())
    ctx = getattr(error, "ctx", None)
    if isinstance(error, click.UsageError) and ctx is not None:
        message += f" ({ctx.command_path} --help)"
    return message


def ineffective(config: Config, max_positions: int, device_type: str) -> list[str]:
    """Warnings for options that change nothing (or only slow things down) in this job."""
    io, decoding, notes = config.io, config.decoding, []
    if decoding.n_best > 1 and io.format == "text":
        notes.append(f"n_best: {decoding.n_best} has no effect with --format text, which writes the best "
                     "hypothesis only (--format nbest or jsonl writes them all)")
    if io.token_scores and io.format != "jsonl":
        notes.append(f"token_scores: has no effect with --format {io.format} (it adds fields to jsonl)")
    for key in ("alignment", "attention"):
        if getattr(decoding, key) and io.format != "jsonl":
            notes.append(f"{key}: has no effect with --format {io.format} (it adds fields to jsonl)")
    if "beta" in config.user_keys and decoding.beta != 0 and decoding.coverage_penalty == "none":
        notes.append(f"beta: {decoding.beta} has no effect without --coverage-penalty wu or summary")
    if decoding.coverage_penalty != "none" and decoding.beta == 0:
        notes.append(f"coverage_penalty: {decoding.coverage_penalty} with beta 0 changes nothing (--beta B, B > 0)")
    if "max_length" in config.user_keys and decoding.max_length > max_positions:
        notes.append(f"max_length: {decoding.max_length} is above the model's {max_positions} target positions, "
                     f"which cap every output at {max_positions} tokens")
    if "diversity_penalty" in config.user_keys and decoding.beam_groups == 1:
        notes.append("diversity_penalty: has no effect without --beam-groups above 1")
    if decoding.ignore_when_blocking and not decoding.block_ngram_repeat:
        notes.append("ignore_when_blocking: has no effect without --block-ngram-repeat")
    if not decoding.sampling:
        for key in ("temperature", "top_k", "top_p", "seed"):
            if key in config.user_keys:
                notes.append(f"{key}: has no effect without --sampling (sampling: true)")
    elif "early_stopping" in config.user_keys:
        notes.append("early_stopping: has no effect with --sampling (each sample ends at EOS or the step limit)")
    if config.runtime.dtype == "float16" and device_type == "cpu":
        notes.append("dtype: float16 on CPU has few native kernels and is usually slower than float32 "
                     "(bfloat16 is fast on CPUs with AMX)")
    return notes


def dump(config: Config) -> str:
    """The effective configuration as YAML, usable as a `-c` file. A model's own defaults
    (native `decoding:`, Hugging Face `generation_config.json`) are known only by loading it,
    so the model is loaded when one is given; without one, the built-in defaults show."""
    header = "# nmtdecode: effective options (command line, then -c file, then the model's defaults)\n"
    if config.io.model is not None:
        from .models.loading import load_model

        config = config.with_model_defaults(load_model(config.io.model).defaults)
    else:
        header += "# no model given: its defaults (if any) are not included\n"
    return header + yaml.safe_dump(flat_values(config), sort_keys=False, allow_unicode=True)
