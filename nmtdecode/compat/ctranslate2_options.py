"""CTranslate2's Translator arguments, with its names and defaults (its python/cpp/translator.cc),
and nmtdecode's options for each: what nmtdecode.compat.ctranslate2 passes to the Python API.

An argument is mapped to options of ours, or only shapes the result (return_scores), or is not
supported: refused, with every such argument of the call named in one error, when it is given
a value other than CTranslate2's default (a script that leaves it alone runs). The decoding
rule is CTranslate2's own: `early_stopping: ctranslate2` with the average length penalty of
exponent `length_penalty` (docs/search.md), the step limit `max_decoding_length` alone (no
relative limit of the model's), and EOS banned before `min_decoding_length` tokens.
"""

from __future__ import annotations

from typing import Any

# translate_batch's decoding arguments and their defaults; translate_iterable, translate_file and
# generate_tokens take them too (generate_tokens a few).
DECODING_DEFAULTS: dict[str, Any] = {
    "beam_size": 2,
    "patience": 1.0,
    "num_hypotheses": 1,
    "length_penalty": 1.0,
    "coverage_penalty": 0.0,
    "repetition_penalty": 1.0,
    "no_repeat_ngram_size": 0,
    "disable_unk": False,
    "suppress_sequences": None,
    "end_token": None,
    "return_end_token": False,
    "prefix_bias_beta": 0.0,
    "max_input_length": 1024,
    "max_decoding_length": 256,
    "min_decoding_length": 1,
    "use_vmap": False,
    "return_scores": False,
    "return_logits_vocab": False,
    "return_attention": False,
    "return_alternatives": False,
    "min_alternative_expansion_prob": 0.0,
    "sampling_topk": 1,
    "sampling_topp": 1.0,
    "sampling_temperature": 1.0,
    "replace_unknowns": False,
}
# Translator(...)'s arguments after model_path and device, and their defaults.
LOAD_DEFAULTS: dict[str, Any] = {
    "device_index": 0,
    "compute_type": "default",
    "inter_threads": 1,
    "intra_threads": 0,
    "max_queued_batches": 0,
    "flash_attention": False,
    "tensor_parallel": False,
    "files": None,
}
# What nmtdecode does not do, by argument: refused unless given CTranslate2's default.
UNSUPPORTED = {
    "patience": "the beam stops by CTranslate2's rule at patience 1",
    "coverage_penalty": "CTranslate2's coverage penalty is not reproduced",
    "return_end_token": "hypotheses are returned without their end token",
    "prefix_bias_beta": "a target prefix is forced, not a bias",
    "use_vmap": "the whole target vocabulary is scored (no vocabulary map)",
    "return_logits_vocab": "the step logits are not kept",
    "return_alternatives": "no alternatives are expanded",
    "end_token": "only the model's EOS ends a hypothesis",
    "flash_attention": "attention runs as PyTorch's",
    "tensor_parallel": "a model runs on one device",
    "files": "the model is read from model_path",
}
# compute_type -> nmtdecode's options; CTranslate2's "default" and "auto" keep the model's own
# precision (float32, or int8 for a CTranslate2 folder stored in int8; "auto" may choose int8 in
# CTranslate2: give "int8" for that); "float32" asks for float products (an int8 folder dequantized).
COMPUTE_TYPES: dict[str, dict[str, str]] = {
    "default": {},
    "auto": {},
    "float32": {"dtype": "float32", "gemm": "torch"},
    "float16": {"dtype": "float16"},
    "bfloat16": {"dtype": "bfloat16"},
    "int8": {"quantize": "int8"},
    "int8_float32": {"quantize": "int8"},
}


class UnsupportedArgument(ValueError):
    """CTranslate2 arguments (or values of them) that nmtdecode cannot honour."""


def refuse_unsupported(method: str, given: dict[str, Any], defaults: dict[str, Any]) -> None:
    """One error naming every argument of `given` that is not supported and not at its default."""
    refused = [
        f"{key}={given[key]!r} ({UNSUPPORTED[key]})"
        for key in given
        if key in UNSUPPORTED and given[key] != defaults.get(key)
    ]
    if refused:
        raise UnsupportedArgument(f"{method}: nmtdecode.compat.ctranslate2 does not support " + "; ".join(refused))


def filled(method: str, given: dict[str, Any], defaults: dict[str, Any]) -> dict[str, Any]:
    """`given` over `defaults`; a keyword that is not one of them is a TypeError, as Python's own."""
    unknown = sorted(set(given) - set(defaults))
    if unknown:
        raise TypeError(f"{method}() got an unexpected keyword argument {unknown[0]!r}")
    return {**defaults, **given}


def load_options(device: str, args: dict[str, Any]) -> dict[str, Any]:
    """Translator(model_path, device, **args) as the options of nmtdecode's Translator.load."""
    refuse_unsupported("Translator", args, LOAD_DEFAULTS)
    index, compute = args["device_index"], args["compute_type"]
    if isinstance(index, list):
        if len(index) != 1:
            raise UnsupportedArgument(
                f"Translator: device_index={index!r}: one device only (a translator per "
                "device, or torchrun for several)"
            )
        index = index[0]
    if isinstance(compute, dict):  # a compute type per device
        compute = compute.get(device, "default")
    if compute not in COMPUTE_TYPES:
        raise UnsupportedArgument(
            f"Translator: compute_type={compute!r}: nmtdecode computes in {', '.join(COMPUTE_TYPES)}"
        )
    where = {"cpu": "cpu", "auto": "auto"}.get(device, f"{device}:{index}")
    return {
        "device": where,
        "inter_threads": args["inter_threads"],
        "threads": args["intra_threads"] or None,
        **COMPUTE_TYPES[compute],
    }


def decoding_options(method: str, args: dict[str, Any], max_positions: int) -> dict[str, Any]:
    """CTranslate2's decoding arguments (all of them: `filled`) as nmtdecode's call options.
    `max_positions`: the model's target positions, which cap the step limit anyway."""
    refuse_unsupported(method, args, DECODING_DEFAULTS)
    options = {
        "beam_size": args["beam_size"],
        "n_best": args["num_hypotheses"],
        "length_penalty": "avg",
        "alpha": args["length_penalty"],
        "repetition_penalty": args["repetition_penalty"],
        "no_repeat_ngram_size": args["no_repeat_ngram_size"],
        "ban_unk": args["disable_unk"],
        "banned_tokens": banned_pieces(method, args["suppress_sequences"]),
        "max_src_length": args["max_input_length"] or None,
        "max_length": min(args["max_decoding_length"], max_positions),
        "max_len_b": None,
        "min_length": args["min_decoding_length"],
        "attention": args["return_attention"],
        "alignment": args["replace_unknowns"],
    }
    if args["sampling_topk"] == 1:  # the most probable token: greedy search, or a beam
        return {**options, "early_stopping": "ctranslate2"}
    if args["beam_size"] > 1:
        raise UnsupportedArgument(
            f"{method}: sampling_topk={args['sampling_topk']} with beam_size="
            f"{args['beam_size']}: nmtdecode samples without a beam (beam_size=1)"
        )
    return {
        **options,
        "beam_size": 1,
        "sampling": True,
        "top_k": args["sampling_topk"],
        "top_p": args["sampling_topp"],
        "temperature": args["sampling_temperature"],
    }


def banned_pieces(method: str, sequences: list[list[str]] | None) -> list[str]:
    """suppress_sequences as banned target pieces: each must be one token."""
    longer = [s for s in sequences or [] if len(s) != 1]
    if longer:
        raise UnsupportedArgument(f"{method}: suppress_sequences={longer[0]!r}: nmtdecode bans single tokens only")
    return [s[0] for s in sequences or []]


def batching_options(max_batch_size: int, batch_type: str, examples: int) -> dict[str, Any]:
    """max_batch_size (0: the whole call in one batch) and batch_type as nmtdecode's batching."""
    if batch_type not in ("examples", "tokens"):
        raise ValueError(f"Invalid batch type {batch_type}")
    if max_batch_size == 0:
        return {"batch_size": max(1, examples), "batch_type": "sents"}
    return {"batch_size": max_batch_size, "batch_type": "sents" if batch_type == "examples" else "tokens"}
