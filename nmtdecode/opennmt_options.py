"""OpenNMT-py's `onmt_translate` and eole's `predict` option names, and nmtdecode's for each.

A YAML file written for them runs here once their names are ours (docs/formats.md, "Coming from
OpenNMT-py or eole"); an unknown key that is one of their names is refused with ours.
"""

from __future__ import annotations

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
PEER_WITHOUT_EQUIVALENT = ("verbose", "report_time", "log_file", "attn_debug", "align_debug", "dump_beam",
                           "world_size", "gpu_ranks", "tgt", "phrase_table", "stepwise_penalty",
                           "ratio", "transforms", "src_subword_model", "tgt_subword_model")


def peer_option_message(key: str) -> str | None:
    """Why `key`, an OpenNMT-py/eole name, is not an option here and what to write instead;
    None when `key` is not one of their names."""
    if key in PEER_RENAMES:
        return f"unknown option {key!r} (an OpenNMT-py/eole name): nmtdecode's is {PEER_RENAMES[key]}"
    if key in PEER_WITHOUT_EQUIVALENT:
        return f"unknown option {key!r} (an OpenNMT-py/eole name): nmtdecode has no equivalent; remove it"
    return None
