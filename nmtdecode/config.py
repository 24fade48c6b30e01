"""Configuration: one dataclass per concern, filled from YAML and command-line flags.

Every option has the same name in YAML and on the command line (`-` -> `_`).
Precedence, highest first: command line, YAML file, the model's own defaults
(e.g. a Hugging Face `generation_config.json`), the defaults below.

Validation happens before any model is loaded: unknown keys, wrong types and
impossible values raise `ConfigError`, whose message names the key and the
valid choices; the CLI turns it into exit code 2.

Reading a YAML file is config_file.py's, planning a run of many files jobs.py's,
and the OpenNMT-py/eole option names opennmt_options.py's.
"""

from __future__ import annotations

import math
import types
import typing
from dataclasses import MISSING, dataclass, field, fields, replace

from .opennmt_options import peer_option_message


class ConfigError(ValueError):
    """A usage or configuration mistake (exit code 2)."""


def _check_choice(key, value, choices):
    if value not in choices:
        raise ConfigError(f"{key}: {value!r} is not one of {', '.join(map(str, choices))}")


def _check_min(key, value, minimum):
    if value is not None and value < minimum:
        raise ConfigError(f"{key}: must be >= {minimum}, got {value}")


@dataclass
class DecodingConfig:
    beam_size: int = 5
    n_best: int = 1
    max_length: int = 256
    max_len_a: float = 0.0
    max_len_b: int | None = None
    min_length: int = 0
    length_penalty: str = "avg"
    alpha: float = 1.0
    early_stopping: str = "top"
    no_repeat_ngram_size: int = 0
    ban_unk: bool = False
    src_lang: str | None = None
    tgt_lang: str | None = None
    repetition_penalty: float = 1.0
    coverage_penalty: str = "none"
    beta: float = 0.0
    alignment: bool = False
    attention: bool = False
    beam_groups: int = 1
    diversity_penalty: float = 0.0
    block_ngram_repeat: int = 0
    ignore_when_blocking: list[str] = field(default_factory=list)  # target pieces
    banned_tokens: list[str] = field(default_factory=list)  # target pieces
    sampling: bool = False  # random sampling (search/sampling.py): n_best samples per line
    temperature: float = 1.0
    top_k: int = 0  # 0: off
    top_p: float = 1.0  # 1.0: off
    seed: int = 0

    @property
    def rows_per_sentence(self) -> int:
        """Hypotheses decoded side by side for each sentence: the beam, or the samples."""
        return self.n_best if self.sampling else self.beam_size

    def validate(self):
        _check_min("beam_size", self.beam_size, 1)
        _check_min("n_best", self.n_best, 1)
        self._validate_sampling()
        if self.n_best > self.beam_size and not self.sampling:
            raise ConfigError(f"n_best: {self.n_best} is greater than beam_size ({self.beam_size})")
        _check_min("max_length", self.max_length, 1)
        _check_min("max_len_a", self.max_len_a, 0)
        _check_min("max_len_b", self.max_len_b, 0)
        _check_min("min_length", self.min_length, 0)
        if self.min_length > self.max_length:
            raise ConfigError(f"min_length: {self.min_length} is greater than max_length ({self.max_length})")
        _check_choice("length_penalty", self.length_penalty, ["none", "avg", "wu"])
        _check_choice("early_stopping", self.early_stopping, ["top", "true", "false", "never"])
        _check_min("no_repeat_ngram_size", self.no_repeat_ngram_size, 0)
        if not self.repetition_penalty > 0:
            raise ConfigError(f"repetition_penalty: must be > 0 (1 is off), got {self.repetition_penalty}")
        _check_choice("coverage_penalty", self.coverage_penalty, ["none", "wu", "summary"])
        _check_min("beta", self.beta, 0)
        _check_min("beam_groups", self.beam_groups, 1)
        if self.beam_size % self.beam_groups:
            raise ConfigError(f"beam_groups: beam_size ({self.beam_size}) is not divisible by beam_groups "
                              f"({self.beam_groups})")
        _check_min("diversity_penalty", self.diversity_penalty, 0)
        if self.beam_groups > 1 and self.diversity_penalty == 0:
            raise ConfigError("diversity_penalty: must be > 0 with beam_groups > 1 (without it every group finds "
                              "the same hypotheses)")
        _check_min("block_ngram_repeat", self.block_ngram_repeat, 0)

    def _validate_sampling(self):
        if not self.temperature > 0:
            raise ConfigError(f"temperature: must be > 0, got {self.temperature} (for the most probable token at "
                              "every step, leave out --sampling and use --beam-size 1)")
        _check_min("top_k", self.top_k, 0)
        if not 0 < self.top_p <= 1:
            raise ConfigError(f"top_p: must be in (0, 1], got {self.top_p}")
        if not 0 <= self.seed < 2**64:
            raise ConfigError(f"seed: must be in [0, 2^64), got {self.seed}")
        if self.sampling and self.beam_groups > 1:
            raise ConfigError(f"beam_groups: {self.beam_groups} with sampling; diverse groups are a beam search")


@dataclass
class BatchingConfig:
    batch_size: int = 32
    batch_type: str = "sents"
    max_src_length: int | None = None

    def validate(self):
        _check_min("batch_size", self.batch_size, 1)
        _check_choice("batch_type", self.batch_type, ["sents", "tokens"])
        _check_min("max_src_length", self.max_src_length, 1)


@dataclass
class RuntimeConfig:
    device: str = "auto"
    dtype: str = "float32"
    quantize: str = "none"
    gemm: str = "auto"
    threads: int | None = None
    quiet: bool = False

    def validate(self):
        if self.device not in ("auto", "cpu", "cuda") and not self.device.startswith("cuda:"):
            raise ConfigError(f"device: {self.device!r} is not one of auto, cpu, cuda, cuda:N")
        if self.dtype not in ("float32", "float16", "bfloat16"):
            raise ConfigError(f"dtype: {self.dtype!r} is not one of float32 (fp32, float), float16 (fp16, half), "
                              "bfloat16 (bf16)")
        _check_choice("quantize", self.quantize, ["none", "int8"])
        if self.quantize == "int8" and self.dtype != "float32":
            raise ConfigError("quantize: int8 works with --dtype float32 (activations stay float32)")
        _check_choice("gemm", self.gemm, ["auto", "onednn", "torch"])
        _check_min("threads", self.threads, 1)


FORMATS = ["text", "nbest", "nbest-marian", "jsonl"]


@dataclass
class IOConfig:
    model: str | None = None
    src: str = "-"
    output: str = "-"
    format: str = "text"
    token_scores: bool = False
    on_invalid_utf8: str = "error"
    resume: bool = False
    stream: bool = False
    prefix: str | None = None  # file of target prefixes, one per source line

    def validate(self):
        _check_choice("format", self.format, FORMATS)
        _check_choice("on_invalid_utf8", self.on_invalid_utf8, ["error", "replace"])
        if self.resume and self.output == "-":
            raise ConfigError("resume: needs an output file (--output FILE); stdout cannot be resumed")
        if self.stream and self.resume:
            raise ConfigError("stream: cannot be combined with resume")
        if self.prefix == "-":
            raise ConfigError("prefix: needs a file (stdin is the source's)")


# Other tools' spellings of a dtype (PyTorch, Hugging Face, CTranslate2), each unambiguous.
DTYPE_ALIASES = {"fp32": "float32", "float": "float32", "fp16": "float16", "half": "float16",
                 "bf16": "bfloat16"}


def _number(value) -> float | None:
    """A number given as one (YAML) or as text (a flag), else None."""
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        return None
    try:
        return float(value)
    except ValueError:
        return None


def expand_aliases(values: dict) -> dict:
    """One layer of options (a YAML file, or the flags) with other tools' spellings made ours:
    `dtype: fp16` -> float16, and a numeric `length_penalty: 0.6` (as transformers,
    CTranslate2 and fairseq give it) -> `length_penalty: avg, alpha: 0.6`."""
    values = dict(values)
    dtype = values.get("dtype")
    if isinstance(dtype, str) and dtype.lower() in DTYPE_ALIASES:
        values["dtype"] = DTYPE_ALIASES[dtype.lower()]
    alpha = _number(values.get("length_penalty"))
    if alpha is not None:
        if values.get("alpha") is not None:
            raise ConfigError(f"length_penalty: a number ({values['length_penalty']}) means avg with that alpha; "
                              "give it or alpha, not both")
        values["length_penalty"], values["alpha"] = "avg", alpha
    return values


SECTIONS = {"decoding": DecodingConfig, "batching": BatchingConfig, "runtime": RuntimeConfig, "io": IOConfig}
KEY_SECTION = {f.name: name for name, cls in SECTIONS.items() for f in fields(cls)}
# Keys a config file may hold besides the options: they plan a run of many files (jobs.py).
PLAN_KEYS = ("jobs", "output_dir", "suffix")


def unknown_key_error(key: str) -> ConfigError:
    """The error for an unknown key, naming our equivalent where it is another tool's name."""
    message = peer_option_message(key)
    if message is not None:
        return ConfigError(message)
    return ConfigError(f"unknown option {key!r}; valid options: {', '.join(sorted([*KEY_SECTION, *PLAN_KEYS]))}")


def _coerce(key: str, value):
    """Check a YAML/CLI value against the field's type; ints are accepted for floats."""
    hint = typing.get_type_hints(SECTIONS[KEY_SECTION[key]])[key]
    if hint == list[str]:
        return _pieces(key, value)
    allowed = typing.get_args(hint) if isinstance(hint, types.UnionType) else (hint,)
    if value is None and type(None) in allowed:
        return None
    if bool in allowed and isinstance(value, bool):
        return value
    if int in allowed and isinstance(value, int) and not isinstance(value, bool):
        return value
    if float in allowed and isinstance(value, (int, float)) and not isinstance(value, bool):
        if not math.isfinite(value):  # YAML's .nan and .inf, or `--alpha nan` on the command line
            raise ConfigError(f"{key}: must be a finite number, got {value}")
        return float(value)
    if str in allowed:
        if isinstance(value, bool):  # YAML reads `early_stopping: true` as a boolean
            return str(value).lower()
        if isinstance(value, (str, int, float)):
            return str(value)
    names = " or ".join(t.__name__ for t in allowed if t is not type(None))
    raise ConfigError(f"{key}: expected {names}, got {value!r}")


def _pieces(key: str, value) -> list[str]:
    """A list of target pieces: a YAML list of strings, or one string of pieces separated by
    whitespace (a piece never contains whitespace; commas do not separate, `,` is a piece)."""
    if isinstance(value, str):
        return value.split()
    if isinstance(value, (list, tuple)) and all(isinstance(v, str) and v and not any(c.isspace() for c in v)
                                                for v in value):
        return list(value)
    raise ConfigError(f"{key}: expected target pieces, as a list of strings or one string separated by spaces, "
                      f"got {value!r}")


@dataclass
class Config:
    decoding: DecodingConfig = field(default_factory=DecodingConfig)
    batching: BatchingConfig = field(default_factory=BatchingConfig)
    runtime: RuntimeConfig = field(default_factory=RuntimeConfig)
    io: IOConfig = field(default_factory=IOConfig)
    user_keys: frozenset = frozenset()  # keys set by the YAML file or the command line

    @classmethod
    def from_values(cls, values: dict) -> "Config":
        """Build and validate a config from flat {key: value} (YAML and CLI merged, each layer
        through `expand_aliases` first)."""
        values = expand_aliases(values)
        unknown = sorted(k for k in values if k not in KEY_SECTION)
        if unknown:
            raise unknown_key_error(unknown[0])
        grouped = {name: {} for name in SECTIONS}
        for key, value in values.items():
            grouped[KEY_SECTION[key]][key] = _coerce(key, value)
        config = cls(**{name: SECTIONS[name](**grouped[name]) for name in SECTIONS}, user_keys=frozenset(values))
        config.validate()
        return config

    def validate(self):
        for name in SECTIONS:
            getattr(self, name).validate()
        if self.decoding.sampling and "beam_size" in self.user_keys and self.decoding.beam_size > 1:
            raise ConfigError(f"beam_size: {self.decoding.beam_size} with sampling; sampling draws --n-best "
                              "independent samples (no beam sampling): leave out --beam-size or give 1")

    def values(self) -> dict:
        """The options set by the YAML file or the command line, as flat {key: value}."""
        return {key: getattr(getattr(self, KEY_SECTION[key]), key) for key in self.user_keys}

    def with_model_defaults(self, defaults: dict) -> "Config":
        """Fill the keys the user did not set from the model's own defaults, then re-validate."""
        decoding = {k: v for k, v in defaults.items() if k not in self.user_keys}
        if decoding.get("sampling") and {"beam_size", "beam_groups"} & self.user_keys:
            decoding.pop("sampling")  # a beam asked for: the model's sampling gives way (no beam sampling here)
        unknown = sorted(k for k in decoding if KEY_SECTION.get(k) != "decoding")
        if unknown:
            raise ConfigError(f"model defaults name unknown decoding options: {', '.join(unknown)}")
        coerced = {k: _coerce(k, v) for k, v in decoding.items()}
        config = replace(self, decoding=replace(self.decoding, **coerced))
        config.validate()
        return config


def option_names(data: dict, where: str) -> dict:
    """Keys as option names (`-` -> `_`); `beam-size` and `beam_size` together are one key twice."""
    values = {str(k).replace("-", "_"): v for k, v in data.items()}
    if len(values) < len(data):
        twice = next(k for k in values if sum(str(o).replace("-", "_") == k for o in data) > 1)
        raise ConfigError(f"{where}: {twice!r} is given twice (spelt with - and with _)")
    return values


def flat_values(config: Config) -> dict:
    """Every option and its value, by section order: what `--dump-config` prints (a valid `-c` file)."""
    return {f.name: getattr(getattr(config, name), f.name) for name, cls in SECTIONS.items() for f in fields(cls)}


def default_of(key: str):
    """The built-in default of an option (for --help)."""
    f = next(f for f in fields(SECTIONS[KEY_SECTION[key]]) if f.name == key)
    return None if f.default is MISSING else f.default
