"""Fields every Hugging Face family's config.json spells alike, read and checked by name, without
torch: the token ids, the activation functions, the sizes. The families' mappings (hf_config.py
for Marian, BART, mBART, M2M100/NLLB and Pegasus; hf_t5.py for T5) read them through here."""

from __future__ import annotations

from ...options.bounded import shown
from ..checkpoint import ModelError

# transformers' activation names (ACT2FN) -> ours (architecture.ACTIVATION_NAMES)
ACTIVATIONS = {
    "relu": "relu",
    "gelu": "gelu",
    "gelu_new": "gelu_tanh",
    "gelu_pytorch_tanh": "gelu_tanh",
    "swish": "silu",
    "silu": "silu",
}

# Token ids a config.json or generation_config.json may give: each an integer, or null.
TOKEN_IDS = (
    "pad_token_id",
    "bos_token_id",
    "eos_token_id",
    "unk_token_id",
    "decoder_start_token_id",
    "forced_bos_token_id",
    "forced_eos_token_id",
)


def check_token_ids(values: dict, where: str) -> None:
    for key in TOKEN_IDS:
        value = values.get(key)
        if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 0):
            raise ModelError(f"{where}: {key}: expected a token id (an integer >= 0) or null, got {shown(value)}")


def check_positive(hf: dict, where: str, required: tuple[str, ...], optional: tuple[str, ...] = ()) -> None:
    """Each key of `required`, and of `optional` where given, a positive integer."""
    for key in required + optional:
        value = hf.get(key)
        if value is None and key not in required:
            continue
        if value is None:
            raise ModelError(f"{where}: {key} is missing")
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ModelError(f"{where}: {key}: expected a positive integer, got {shown(value)}")


def token_id(hf: dict, key: str, default: int) -> int:
    """A token id of config.json (checked by check_token_ids), or `default` where it is null or absent."""
    value = hf.get(key)
    return default if value is None else value
