"""OpenNMT-py's `onmt_translate` and eole's `predict` option names, and nmtdecode's for each.

A YAML file written for them runs here once their names are ours (docs/formats.md, "Coming from
OpenNMT-py or eole"); an unknown key that is one of their names is refused with ours. Other
tools' double-dash flags (fairseq, CTranslate2, Marian, transformers) are refused on the command
line with ours (`PEER_FLAGS`, cli.check_spelling), not with click's nearest spelling.
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
PEER_WITHOUT_EQUIVALENT = ("verbose", "report_time", "log_file", "attn_debug", "align_debug",
                           "world_size", "gpu_ranks", "tgt", "phrase_table", "stepwise_penalty",
                           "ratio", "transforms", "src_subword_model", "tgt_subword_model")


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
}


def peer_flag_message(flag: str) -> str | None:
    """Why `flag`, another tool's flag, is not ours and what to write instead; None if it is not one."""
    if flag not in PEER_FLAGS:
        return None
    whose, ours = PEER_FLAGS[flag]
    return f"no such option: {flag} (that is {whose}'s); nmtdecode's is {ours}"
