"""CTranslate2's Translator arguments, with its names and defaults (its python/cpp/translator.cc),
and nmtdecode's options for each: what nmtdecode.compat.ctranslate2 passes to the Python API.

An argument is mapped to options of ours, or only shapes the result (return_scores), or is not
supported: refused, with every such argument of the call named in one error, when it is given
a value other than CTranslate2's default (a script that leaves it alone runs). The decoding
rule is CTranslate2's own: `early_stopping: ctranslate2` with the average length penalty of
exponent `length_penalty` (docs/search.md), the step limit `max_decoding_length` alone (no
relative limit of the model's), and EOS banned before `min_decoding_length` tokens. The device
and compute type are resolved as CTranslate2 resolves them ("auto"), from what this machine runs
natively (`get_supported_compute_types`); the iterables are read a window at a time (`windows`).
"""

from __future__ import annotations

from itertools import zip_longest
from typing import Any, Iterable, Iterator

from ..engine.batching import chunk_size, chunks

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
# generate_tokens' decoding arguments (a greedy search or a sample: no beam).
GENERATE_KEYS = (
    "max_decoding_length",
    "min_decoding_length",
    "sampling_topk",
    "sampling_topp",
    "sampling_temperature",
    "repetition_penalty",
    "no_repeat_ngram_size",
    "disable_unk",
    "suppress_sequences",
    "end_token",
    "max_input_length",
    "use_vmap",
)
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
    "end_token": "only the model's EOS ends a hypothesis",
    "flash_attention": "attention runs as PyTorch's",
    "tensor_parallel": "a model runs on one device",
    "files": "the model is read from model_path",
}
# compute_type -> nmtdecode's options. "default" keeps the model's own precision (float32, or int8
# for a CTranslate2 folder stored in int8); "float32" asks for float products (an int8 folder
# dequantized); "auto" is CTranslate2's choice for the device (`auto_compute_type`).
COMPUTE_TYPES: dict[str, dict[str, str]] = {
    "default": {},
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
    """Translator(model_path, device, **args) as the options of nmtdecode's Translator.load, the
    device resolved ("auto": a GPU where there is one, as CTranslate2 chooses) and
    compute_type="auto" resolved to CTranslate2's choice for it."""
    refuse_unsupported("Translator", args, LOAD_DEFAULTS)
    index, compute = args["device_index"], args["compute_type"]
    if isinstance(index, list):
        if len(index) != 1:
            raise UnsupportedArgument(
                f"Translator: device_index={index!r}: one device only (a translator per "
                "device, or torchrun for several)"
            )
        index = index[0]
    device = resolved_device(device)
    if isinstance(compute, dict):  # a compute type per device
        compute = compute.get(device, "default")
    if compute == "auto":
        compute = auto_compute_type(device, index)
    if compute not in COMPUTE_TYPES:
        raise UnsupportedArgument(
            f"Translator: compute_type={compute!r}: nmtdecode computes in auto, {', '.join(COMPUTE_TYPES)}"
        )
    return {
        "device": device if device == "cpu" else f"{device}:{index}",
        "inter_threads": args["inter_threads"],
        "threads": args["intra_threads"] or None,
        **COMPUTE_TYPES[compute],
    }


def resolved_device(device: str) -> str:
    """CTranslate2's device names: "auto" is "cuda" where a GPU is visible, else "cpu"."""
    if device != "auto":
        return device
    import torch

    return "cuda" if torch.cuda.device_count() > 0 else "cpu"


def auto_compute_type(device: str, index: int = 0) -> str:
    """What compute_type="auto" computes in, as CTranslate2 chooses it (its resolve_compute_type):
    on a CPU, int8 with float32 activations where int8 products run natively, else float32
    (CTranslate2 picks int16 next, which nmtdecode does not have); on a GPU, CTranslate2 picks
    int8_float16 where the GPU has int8 products, which nmtdecode does not have on CUDA: its
    next choice, float16 where the GPU has fast float16, else float32."""
    choice = "int8_float32" if device == "cpu" else "float16"
    return choice if choice in get_supported_compute_types(device, index) else "float32"


def get_supported_compute_types(device: str, device_index: int = 0) -> set[str]:
    """The compute types nmtdecode runs natively on `device` ("cpu" or "cuda"), in CTranslate2's
    names: float32 always; on a CPU, int8 and int8_float32 where int8 products are native and
    bfloat16 or float16 where this CPU multiplies in them (`natively_computed`); on a GPU,
    float16 from compute capability 7 and bfloat16 from 8, as CTranslate2 decides (nmtdecode's
    int8 runs on CPUs only). As CTranslate2's, a GPU that is not there is a RuntimeError."""
    if device == "cpu":
        native = {"float32"} | {p for p in ("bfloat16", "float16") if natively_computed(p)}
        return native | ({"int8", "int8_float32"} if natively_computed("int8") else set())
    if device != "cuda":
        raise ValueError(f"unsupported device {device}")
    import torch

    if device_index >= torch.cuda.device_count():
        raise RuntimeError(f"no CUDA device {device_index}: {torch.cuda.device_count()} visible")
    capability = torch.cuda.get_device_capability(device_index)
    return {"float32"} | {kind for kind, least in (("float16", (7, 0)), ("bfloat16", (8, 0))) if capability >= least}


def natively_computed(precision: str) -> bool:
    """Whether this CPU computes `precision` (float32, bfloat16, float16 or int8) with native
    kernels: int8 through fbgemm (x86 with AVX2), bfloat16 with bf16 products in hardware
    (AVX512_BF16 or AMX), float16 with oneDNN's float16 kernels (AVX512_FP16 or AMX-FP16). The
    stand-in's one question about the CPU (get_supported_compute_types and compute_type="auto"
    ask it), answered from torch's own queries, which respect ATEN_CPU_CAPABILITY; models/cpu.py,
    where every kernel choice of nmtdecode asks, is to answer it once it lands."""
    import torch

    isa = torch.backends.cpu.get_cpu_capability()  # AVX512, AVX2, DEFAULT, ...
    if precision == "int8":
        return isa in ("AVX2", "AVX512") and "fbgemm" in torch.backends.quantized.supported_engines
    if precision == "bfloat16":
        flags = ("avx512_bf16", "amx_tile")  # torch.cpu's queries of the hardware
        return isa == "AVX512" and any(getattr(torch.cpu, f"_is_{flag}_supported", lambda: False)() for flag in flags)
    if precision == "float16":
        return bool(torch.ops.mkldnn._is_mkldnn_fp16_supported())
    return precision == "float32"


def decoding_options(method: str, args: dict[str, Any], max_positions: int) -> dict[str, Any]:
    """CTranslate2's decoding arguments (all of them: `filled`; none refused: `refuse_unsupported`)
    as nmtdecode's call options. `max_positions`: the model's target positions, which cap the
    step limit anyway."""
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
    if args["sampling_topk"] == 1 or args["sampling_temperature"] == 0:  # the most probable token:
        return {**options, "early_stopping": "ctranslate2"}  # a greedy search, or a beam
    beam = args["beam_size"]
    if beam > 1 and args["num_hypotheses"] > beam:
        raise ValueError("The number of hypotheses cannot be greater than beam_size * patience")
    # CTranslate2 samples a beam's candidates; here each of beam_size samples draws its own tokens,
    # and the best num_hypotheses of them are kept (docs/ctranslate2.md)
    return {
        **options,
        "beam_size": 1,
        "n_best": max(beam, args["num_hypotheses"]),
        "sampling": True,
        "top_k": args["sampling_topk"],
        "top_p": args["sampling_topp"],
        "temperature": args["sampling_temperature"],
    }


def check_alternatives(args: dict[str, Any], callback: Any) -> None:
    """return_alternatives' own checks: its probability threshold, as CTranslate2's (a
    ValueError), and no callback (its tokens come from two searches, not one)."""
    if not 0 <= args["min_alternative_expansion_prob"] <= 1:
        raise ValueError("The minimum alternative expansion probability must be between 0 and 1")
    if callback is not None:
        raise UnsupportedArgument("translate_batch: a callback with return_alternatives=True: give one or the other")


def banned_pieces(method: str, sequences: list[list[str]] | None) -> list[str]:
    """suppress_sequences as banned target pieces: each must be one token."""
    longer = [s for s in sequences or [] if len(s) != 1]
    if longer:
        raise UnsupportedArgument(f"{method}: suppress_sequences={longer[0]!r}: nmtdecode bans single tokens only")
    return [s[0] for s in sequences or []]


def start_groups(tokenizer: Any, firsts: list | None, count: int) -> list[tuple[str | None, list[int], list | None]]:
    """Where a CTranslate2 folder leaves the decoder start to the user (config.json's
    decoder_start_token null, mBART-25's: CTranslate2 starts the decoder with the first token of
    each target prefix, or of each target it scores), the `count` items grouped by that token:
    (its language code, the items' indices, their prefixes or targets without it) per group. The
    token must be one of the model's language tags (nmtdecode starts such a model from --tgt-lang's
    tag). Any other model: one group, (None, every index, `firsts` as given)."""
    if not getattr(tokenizer, "user_start", False):
        return [(None, list(range(count)), firsts)]
    codes = {tokenizer.tag_piece.format(code): code for code in tokenizer.languages}
    groups: dict[str, tuple[list[int], list]] = {}
    for i, first in enumerate(firsts or [None] * count):
        if not first:
            raise ValueError("One input has no decoder start token")  # CTranslate2's words
        if first[0] not in codes:
            raise UnsupportedArgument(
                f"target_prefix: {first[0]!r} as the decoder start: nmtdecode starts this model with a "
                f"language tag ({', '.join(list(codes)[:12])}{', ...' if len(codes) > 12 else ''})"
            )
        indices, rests = groups.setdefault(codes[first[0]], ([], []))
        indices.append(i)
        rests.append(list(first[1:]))
    return [(code, indices, rests) for code, (indices, rests) in groups.items()]


def batching_options(max_batch_size: int, batch_type: str, examples: int) -> dict[str, Any]:
    """max_batch_size (0: the whole call in one batch) and batch_type as nmtdecode's batching."""
    if batch_type not in ("examples", "tokens"):
        raise ValueError(f"Invalid batch type {batch_type}")
    if max_batch_size == 0:
        return {"batch_size": max(1, examples), "batch_type": "sents"}
    return {"batch_size": max_batch_size, "batch_type": "sents" if batch_type == "examples" else "tokens"}


def windows(
    first: Iterable, second: Iterable | None, max_batch_size: int, batch_type: str
) -> Iterator[tuple[list, list | None]]:
    """Windows of (first, second) items, as CTranslate2's iterables read them: a sort chunk at a time."""
    if max_batch_size < 1:
        raise ValueError("max_batch_size must be >= 1")
    pairs = ((item, None) for item in first) if second is None else zip_longest(first, second)
    window = chunk_size(max_batch_size, "sents" if batch_type == "examples" else "tokens")
    for chunk in chunks(pairs, window):
        if second is not None and any(a is None or b is None for a, b in chunk):
            raise ValueError("Input iterables do not have the same length")
        yield [a for a, _ in chunk], None if second is None else [b for _, b in chunk]
