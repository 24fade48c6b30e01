"""A model's own decoding defaults (a generation_config.json's num_beams, a decoder.yml's
beam-size, a native config.yaml's `decoding:`), checked as options where the format reads them,
so that a bad one (NaN, a string, a beam of 0) is refused naming the file it came from, not later
as if the user had given it."""

from __future__ import annotations

from ..options.config import Config, ConfigError
from .checkpoint import ModelError


def checked_defaults(defaults: dict, where: str) -> dict:
    """`defaults` when each is a valid value of its option (config.py), else ModelError naming `where`."""
    try:
        Config.from_layers([], model_defaults=defaults)
    except ConfigError as e:
        raise ModelError(f"{where}: decoding defaults: {e}") from None
    return defaults
