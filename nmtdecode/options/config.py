"""A job's options: `Config`, its four sections built from layers of options and checked once.

Where an option is declared and checked, all before any model loads:

    table.py     each option once: section, type, default, choices, range, help (option.py checks
                 a value against its declaration)
    layers.py    each layer as it comes in (keys known, types, other tools' spellings, one
                 strategy) and the one rule that merges the layers
    rules.py     the rules between options, each with its message
    entries.py   what each way in (translate, torchrun, score, an item of `jobs:`, each API
                 method) refuses, as data
    plan.py      how a config file's `jobs:` and the --src/--output lists become jobs

`Config.validate(entry)` is the one check of the options as they will run: every section's
declarations and rules, then what `entry` refuses. Each error is a ConfigError naming the key
(and the valid choices), which the CLI turns into exit code 2. What needs the loaded model is
checked by engine/resolve.py; files and the machine by jobs/files.py and engine/system.py.

The rest of the package, and its users, import the table's names from here.
"""

from __future__ import annotations

from typing import Any
from dataclasses import dataclass, field, replace

from .entries import ENTRIES
from .layers import checked_defaults, checked_layer, layered
from .option import ConfigError, Option
from .rules import check
from .table import (
    COVERAGE_PENALTIES,
    DTYPE_ALIASES,
    EARLY_STOPPING,
    ENSEMBLE_RULES,
    FORMATS,
    GEMM_BACKENDS,
    KEY_SECTION,
    LENGTH_PENALTIES,
    OPTIONS,
    PER_JOB_KEYS,
    PLAN_KEYS,
    PLAN_OPTIONS,
    SCORE_FORMATS,
    SCORE_KEYS,
    SECTIONS,
    TYPES,
    BatchingConfig,
    DecodingConfig,
    IOConfig,
    RuntimeConfig,
    default_of,
)

__all__ = [  # the table's names, as the package imports them
    "COVERAGE_PENALTIES",
    "DTYPE_ALIASES",
    "EARLY_STOPPING",
    "ENSEMBLE_RULES",
    "FORMATS",
    "GEMM_BACKENDS",
    "KEY_SECTION",
    "LENGTH_PENALTIES",
    "OPTIONS",
    "PER_JOB_KEYS",
    "PLAN_KEYS",
    "PLAN_OPTIONS",
    "SCORE_FORMATS",
    "SCORE_KEYS",
    "TYPES",
    "BatchingConfig",
    "Config",
    "ConfigError",
    "DecodingConfig",
    "IOConfig",
    "Option",
    "RuntimeConfig",
    "default_of",
    "flat_values",
]


@dataclass
class Config:
    decoding: DecodingConfig = field(default_factory=DecodingConfig)
    batching: BatchingConfig = field(default_factory=BatchingConfig)
    runtime: RuntimeConfig = field(default_factory=RuntimeConfig)
    io: IOConfig = field(default_factory=IOConfig)
    layers: tuple = ()  # the user's layers of options, lowest first (checked_layer)

    @classmethod
    def from_values(cls, values: dict) -> "Config":
        """A config from one layer of options, {key: value}."""
        return cls.from_layers([values])

    @classmethod
    def from_layers(cls, layers: list[dict], model_defaults: dict | None = None) -> "Config":
        """Build and validate a config from layers of options, lowest first, over the model's
        own decoding defaults (when known) and the declared defaults."""
        checked = tuple(checked_layer(layer) for layer in layers)
        defaults = checked_defaults(model_defaults or {})
        grouped: dict[str, dict] = {name: {} for name in SECTIONS}
        for key, value in layered([defaults, *checked]).items():
            grouped[KEY_SECTION[key]][key] = value
        config = cls(**{name: SECTIONS[name](**grouped[name]) for name in SECTIONS}, layers=checked)
        config.validate()
        return config

    def with_model_defaults(self, defaults: dict) -> "Config":
        """This config with the model's own decoding defaults under the user's options (they are
        decoding options: the other sections stay as they are)."""
        return replace(self, decoding=Config.from_layers(list(self.layers), model_defaults=defaults).decoding)

    def over(self, *layers: dict) -> "Config":
        """This config with more layers of options over it (a job item, an API call)."""
        return Config.from_layers([*self.layers, *layers])

    def validate(self, entry: str | None = None) -> None:
        """The one check of options that needs no model, file or device: each section's options
        against their declarations and the rules that name them (rules.py), then what `entry`
        (entries.py: "translate", "torchrun", "score", an API method) refuses of them."""
        everything = flat_values(self)
        for name in SECTIONS:
            getattr(self, name).validate(everything)
        if entry is not None:
            check(everything, {}, ENTRIES[entry].rules)

    @property
    def user_keys(self) -> frozenset:
        """The keys set by the user (config file, job item, command line, API call)."""
        return frozenset(layered(list(self.layers)))

    def value(self, key: str) -> Any:
        return getattr(getattr(self, KEY_SECTION[key]), key)


def flat_values(config: Config) -> dict:
    """Every option and its value, by section order: what `--dump-config` prints (a valid `-c` file)."""
    return {key: config.value(key) for key in KEY_SECTION}
