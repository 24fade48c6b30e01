"""Layers of options and the one rule that merges them, each layer over the ones below it:

    the model's defaults < config file < item of `jobs:` < command line < API call

A layer is checked as it comes in (`checked_layer`): other tools' spellings made ours, every
key known (or named: our equivalent of another tool's name, or the nearest spellings), every
value of its option's type. One exception makes the strategy coherent: a layer that asks for a
beam (beam_size or beam_groups above 1) drops sampling from the layers below it, and one that
asks for sampling drops their beam; one layer asking for both is an error (there is no beam
sampling). What the merged options must satisfy is the table's and the rules' (config.py
checks them once merged).
"""

from __future__ import annotations

import difflib

from .bounded import shown
from .option import ConfigError, coerce
from .peers import peer_option_message
from .table import KEY_SECTION, OPTIONS, PLAN_KEYS, TYPES

# Sampling and a beam exclude each other: what a layer asking for one drops from the layers below.
BEAM_KEYS = ("beam_size", "beam_groups", "diversity_penalty")


def unknown_key_message(key: str) -> str:
    """Why `key` is not an option: our equivalent where it is another tool's name, else the
    nearest spellings among every option and plan key."""
    message = peer_option_message(key)
    if message is not None:
        return message
    close = difflib.get_close_matches(key, sorted([*KEY_SECTION, *PLAN_KEYS]), n=3, cutoff=0.6)
    hint = f"did you mean {' or '.join(close)}?" if close else "nmtdecode translate --help lists the options"
    return f"unknown option {shown(key)} ({hint})"


def unknown_keys_error(keys: list[str]) -> ConfigError:
    """One error for every unknown key of a layer (`unknown_key_message` of each)."""
    return ConfigError("; ".join(unknown_key_message(key) for key in keys))


def _number(value: object) -> float | None:
    """A number given as one (YAML) or as text (a flag), else None."""
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        return None
    try:
        return float(value)
    except ValueError:
        return None


def expand_aliases(values: dict) -> dict:
    """One layer of options with other tools' spellings made ours: `dtype: fp16` -> float16, and
    a numeric `length_penalty: 0.6` (as transformers, CTranslate2 and fairseq give it) ->
    `length_penalty: avg, alpha: 0.6`."""
    values = dict(values)
    for key, value in values.items():
        aliases = OPTIONS[key].aliases if key in OPTIONS else None
        if aliases and isinstance(value, str) and value.lower() in aliases:
            values[key] = aliases[value.lower()]
    alpha = _number(values.get("length_penalty"))
    if alpha is not None:
        if values.get("alpha") is not None:
            raise ConfigError(
                f"length_penalty: a number ({values['length_penalty']}) means avg with that alpha; "
                "give it or alpha, not both"
            )
        values["length_penalty"], values["alpha"] = "avg", alpha
    return values


def asks_for(layer: dict) -> str | None:
    """'beam', 'sampling' or None: the strategy one layer of options chooses."""
    beam = [k for k in ("beam_size", "beam_groups") if (layer.get(k) or 1) > 1]
    if layer.get("sampling") and beam:
        hint = (
            "sampling draws --n-best independent samples (no beam sampling): leave out --beam-size or give 1"
            if beam[0] == "beam_size"
            else "diverse groups are a beam search"
        )
        raise ConfigError(f"{beam[0]}: {layer[beam[0]]} with sampling; {hint}")
    return "beam" if beam else "sampling" if layer.get("sampling") else None


def layered(layers: list[dict]) -> dict:
    """Checked layers of options (`checked_layer`), lowest first, as one {key: value}: each layer's
    keys over the ones below, a layer asking for a beam or for sampling dropping the other."""
    merged: dict = {}
    for layer in layers:
        strategy = asks_for(layer)
        for key in BEAM_KEYS if strategy == "sampling" else ("sampling",) if strategy == "beam" else ():
            merged.pop(key, None)
        merged.update(layer)
    return merged


def checked_layer(values: dict) -> dict:
    """One layer of options (a config file, an item, the flags, a call) with aliases expanded,
    every key known and every value of its option's type."""
    values = expand_aliases(values)
    unknown = sorted(k for k in values if k not in KEY_SECTION)
    if unknown:
        raise unknown_keys_error(unknown)
    return {key: coerce(key, TYPES[key], value) for key, value in values.items()}


def checked_defaults(values: dict) -> dict:
    """A model's own decoding defaults (native `decoding:`, generation_config.json) as the lowest
    layer: checked as any layer, and decoding options only."""
    defaults = checked_layer(values)
    unknown = sorted(k for k in defaults if KEY_SECTION[k] != "decoding")
    if unknown:
        raise ConfigError(f"model defaults name options that are not decoding options: {', '.join(unknown)}")
    return defaults


def option_names(data: dict, where: str) -> dict:
    """Keys as option names (`-` -> `_`); `beam-size` and `beam_size` together are one key twice."""
    values = {str(k).replace("-", "_"): v for k, v in data.items()}
    if len(values) < len(data):
        twice = next(k for k in values if sum(str(o).replace("-", "_") == k for o in data) > 1)
        raise ConfigError(f"{where}: {shown(twice)} is given twice (spelt with - and with _)")
    return values
