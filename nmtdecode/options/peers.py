"""OpenNMT-py's `onmt_translate` and eole's `predict` option names, and nmtdecode's for each.

A YAML file written for them runs here once their names are ours (docs/formats.md, "Coming from
OpenNMT-py or eole"); an unknown key that is one of their names is refused with ours. On the
command line, other tools' spellings are refused naming ours (`spelling_message`, called by
cli.check_spelling) instead of being misread: OpenNMT-py's single-dash and underscore forms
(`-beam_size`, `--beam_size`, which click would read as `-b eam_size`), the flags of fairseq,
CTranslate2, Marian and transformers (`PEER_FLAGS`, also when given with one dash: `-fp16`,
`-beam`, `-nbest`), and Marian's `-b`, its beam size, which is not an option here.
"""

from __future__ import annotations

from .bounded import shown

# Their option names that are spelled differently here, and how ours are spelled.
PEER_RENAMES = {
    "max_length_ratio": "max_len_a with max_len_b: 5 (their step limit is |src| x ratio + 5)",
    "random_sampling_topk": "top_k, with sampling: true (their -1, the whole distribution, is top_k: 0; their 1, "
    "the arg-max, is beam_size: 1 without sampling)",
    "random_sampling_topp": "top_p, with sampling: true (their 0, no nucleus, is top_p: 1)",
    "random_sampling_temp": "temperature, with sampling: true",
    "ban_unk_token": "ban_unk",
    "gpu": "device (gpu: 0 is device: cuda:0, gpu: -1 is device: cpu)",
    "precision": "dtype (float32, float16, bfloat16; int8 is quantize: int8)",
    "compute_dtype": "dtype (float32, float16, bfloat16; int8 is quantize: int8)",
    "fp16": "dtype: float16",
    "with_score": "format: nbest or jsonl",
}
# Their options that ask for something nmtdecode does without (logging, multi-GPU launch,
# tokenization given in the model's own options) or does not have.
PEER_WITHOUT_EQUIVALENT = (
    "verbose",
    "report_time",
    "log_file",
    "attn_debug",
    "align_debug",
    "world_size",
    "gpu_ranks",
    "tgt",
    "phrase_table",
    "stepwise_penalty",
    "ratio",
    "transforms",
    "src_subword_model",
    "tgt_subword_model",
)


def peer_option_message(key: str) -> str | None:
    """Why `key`, an OpenNMT-py/eole name, is not an option here and what to write instead;
    None when `key` is not one of their names."""
    if key in PEER_RENAMES:
        return f"unknown option {shown(key)} (an OpenNMT-py/eole name): nmtdecode's is {PEER_RENAMES[key]}"
    if key in PEER_WITHOUT_EQUIVALENT:
        return f"unknown option {shown(key)} (an OpenNMT-py/eole name): nmtdecode has no equivalent; remove it"
    return None


# Other tools' double-dash flags that are not ours: (whose, what to write here).
PEER_FLAGS = {
    "--gpu": ("OpenNMT-py", "--device cuda:N (--device cpu for the CPU)"),
    "--gpus": ("transformers/Lightning", "--device cuda:N, or torchrun for several"),
    "--cpu": ("fairseq", "--device cpu"),
    "--max-tokens": ("fairseq", "--batch-size N --batch-type tokens"),
    "--max-batch-size": ("CTranslate2", "--batch-size N"),
    "--mini-batch": ("Marian", "--batch-size N"),
    "--nbest": ("fairseq", "--n-best N (with --format nbest or jsonl)"),
    "--num-hypotheses": ("CTranslate2", "--n-best N (with --format nbest or jsonl)"),
    "--num-return-sequences": ("transformers", "--n-best N (with --format nbest or jsonl)"),
    "--beam": ("fairseq", "--beam-size K"),
    "--num-beams": ("transformers", "--beam-size K"),
    "--lenpen": ("fairseq", "--alpha A (with the default --length-penalty avg)"),
    "--compute-type": ("CTranslate2", "--dtype float32|float16|bfloat16, or --quantize int8"),
    "--print-alignment": ("fairseq", "--report-align (Pharaoh pairs after the text)"),
    "--models": ("Marian", "--model A B (several models decode as an ensemble)"),
    "--input": ("Marian", "--src FILE"),
    "--word-scores": ("Marian", "--token-scores (with --format nbest-marian or jsonl)"),
    "--fp16": ("fairseq", "--dtype float16"),
    "--bf16": ("fairseq", "--dtype bfloat16"),
}
# OpenNMT-py's single-dash options that have no namesake here, and what to write instead.
OPENNMT_FLAGS = {
    "-gpu": "--device cuda:N",
    "-fp32": "--dtype float32",
    "-int8": "--quantize int8",
    "-tgt": "nmtdecode score --tgt FILE (the log-probability of given targets)",
    "-verbose": "--format nbest or jsonl (each hypothesis with its score; the summary line is on stderr)",
}
# Marian's -b is its beam size: here it is no option at all, so that `-b 6` cannot silently mean
# something else (docs/usage.md, "Habits from other tools").
MARIAN_B = (
    "-b: that is Marian's beam size (-b, --beam-size); nmtdecode's beam is --beam-size K (or -k K), "
    "its batch size --batch-size N"
)


def spelling_message(arg: str, ours: set[str]) -> str | None:
    """Why `arg`, a command-line word that is not one of `ours` (a command's long flags), is another
    tool's spelling, and what to write instead; None when it is not one we know."""
    if arg == "-b":
        return MARIAN_B
    if not arg.startswith("-") or arg in ours or len(arg) < 3 or not arg.lstrip("-")[:1].isalpha():
        return None
    name = arg.lstrip("-")
    hyphenated = "--" + name.replace("_", "-")
    if hyphenated in ours:  # -beam_size, --beam_size, -src: argparse's spellings of our flags
        return f"{arg}: that is OpenNMT-py's spelling; nmtdecode's is {hyphenated}"
    if hyphenated in PEER_FLAGS:
        whose, instead = PEER_FLAGS[hyphenated]
        theirs = hyphenated if arg != hyphenated else ""
        return f"no such option: {arg} (that is {whose}'s{' ' + theirs if theirs else ''}); nmtdecode's is {instead}"
    if "-" + name in OPENNMT_FLAGS:
        return f"{arg}: that is OpenNMT-py's option; nmtdecode's is {OPENNMT_FLAGS['-' + name]}"
    if "_" in arg:
        return f"no such option: {arg} (nmtdecode's options start with two dashes and use hyphens; --help lists them)"
    return None
