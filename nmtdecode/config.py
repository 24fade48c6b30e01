"""Configuration: one dataclass per concern, filled from YAML and command-line flags.

Every option has the same name in YAML and on the command line (`-` -> `_`).
Precedence, highest first: command line, YAML file, the model's own defaults
(e.g. a Hugging Face `generation_config.json`), the defaults below.

Validation happens before any model is loaded: unknown keys, wrong types and
impossible values raise `ConfigError`, whose message names the key and the
valid choices; the CLI turns it into exit code 2.
"""

from __future__ import annotations

import math
import os
import types
import typing
from dataclasses import MISSING, dataclass, field, fields, replace

import yaml


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


# onmt_translate / eole predict option names that are spelled differently here: a YAML written
# for them runs after these renames (README "Coming from OpenNMT-py or eole").
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
# Their options that nmtdecode spells the same way, with the same meaning (tests check that each is a key).
PEER_SAME_NAMES = ("model", "src", "output", "beam_size", "n_best", "min_length", "max_length", "length_penalty",
                   "alpha", "coverage_penalty", "beta", "block_ngram_repeat", "ignore_when_blocking", "seed",
                   "batch_size", "batch_type")
# Their options that ask for something nmtdecode does without (logging, multi-GPU launch,
# tokenization given in the model's own options) or does not have.
PEER_WITHOUT_EQUIVALENT = ("verbose", "report_time", "log_file", "attn_debug", "align_debug", "dump_beam",
                           "world_size", "gpu_ranks", "tgt", "replace_unk", "phrase_table", "stepwise_penalty",
                           "ratio", "transforms", "src_subword_model", "tgt_subword_model")


def unknown_key_error(key: str) -> ConfigError:
    """The error for an unknown key, naming our equivalent where it is another tool's name."""
    if key in PEER_RENAMES:
        return ConfigError(f"unknown option {key!r} (an OpenNMT-py/eole name): nmtdecode's is {PEER_RENAMES[key]}")
    if key in PEER_WITHOUT_EQUIVALENT:
        return ConfigError(f"unknown option {key!r} (an OpenNMT-py/eole name): nmtdecode has no equivalent; "
                           "remove it")
    return ConfigError(f"unknown option {key!r}; valid options: {', '.join(sorted([*KEY_SECTION, *PLAN_KEYS]))}")


SECTIONS = {"decoding": DecodingConfig, "batching": BatchingConfig, "runtime": RuntimeConfig, "io": IOConfig}
KEY_SECTION = {f.name: name for name, cls in SECTIONS.items() for f in fields(cls)}


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


# Options naming files: in a config file, a relative path is relative to that file's directory.
PATH_KEYS = ("model", "src", "output", "output_dir", "prefix")
# Keys that plan a run of many files (`plan_jobs`), not options of one job.
PLAN_KEYS = ("jobs", "output_dir", "suffix")
# What an item of `jobs:` may set for itself: its files and what needs no other model load.
ITEM_KEYS = frozenset({"src", "output", "format", "token_scores", "on_invalid_utf8", "prefix"}
                      | {f.name for f in fields(DecodingConfig)} | {f.name for f in fields(BatchingConfig)})


def _as_list(key: str, value) -> list[str]:
    values = value if isinstance(value, (list, tuple)) else [value]
    if not values or not all(isinstance(v, str) for v in values):
        raise ConfigError(f"{key}: expected a file name or a list of file names, got {value!r}")
    return list(values)


def output_name(src: str, output_dir: str | None, suffix: str | None) -> str:
    """The output of `src` by the --output-dir/--suffix rule: the input's name in `output_dir`
    (default: the input's own directory), its last extension replaced by `suffix` if given."""
    if src == "-":
        raise ConfigError("output_dir: stdin (-) has no name to derive an output from; use --output")
    name = os.path.basename(src)
    if suffix is not None:
        name = os.path.splitext(name)[0] + suffix
    return os.path.join(output_dir if output_dir is not None else os.path.dirname(src), name)


def _items(values: dict) -> list[dict]:
    """The {src, output, overrides...} of each job, from `jobs:` or from src/output lists."""
    output_dir, suffix = values.pop("output_dir", None), values.pop("suffix", None)
    for key, value in (("output_dir", output_dir), ("suffix", suffix)):
        if value is not None and not isinstance(value, str):
            raise ConfigError(f"{key}: expected a string, got {value!r}")
    derive = output_dir is not None or suffix is not None
    sources, outputs = values.pop("src", None), values.pop("output", None)
    if derive and outputs is not None:
        raise ConfigError("output: give either --output or --output-dir/--suffix, not both")
    if "jobs" in values:
        if sources is not None or outputs is not None:
            raise ConfigError("jobs: give either jobs: or src:/output: at the top of the file, not both")
        return [_job_item(n, item, output_dir, suffix) for n, item in enumerate(_job_list(values.pop("jobs")), 1)]
    sources = _as_list("src", "-" if sources is None else sources)
    outputs = [output_name(s, output_dir, suffix) for s in sources] if derive else outputs
    outputs = _as_list("output", "-" if outputs is None else outputs)
    if len(outputs) != len(sources):
        raise ConfigError(f"output: {len(sources)} input files but {len(outputs)} outputs; give one output per "
                          "input, or --output-dir DIR / --suffix SUFFIX")
    return [{"src": s, "output": o} for s, o in zip(sources, outputs)]


def _job_list(jobs) -> list:
    if not isinstance(jobs, list) or not jobs:
        raise ConfigError("jobs: expected a list of {src: FILE, output: FILE, ...} items")
    return jobs


def _job_item(n: int, item, output_dir: str | None, suffix: str | None) -> dict:
    """Item `n` of `jobs:` checked: a src, an output (or the output_dir/suffix rule's), and only
    options that need no other model load."""
    if not isinstance(item, dict) or "src" not in item:
        raise ConfigError(f"jobs: item {n} must be a mapping with at least src: FILE")
    item = _option_names(item, f"jobs: item {n}")
    refused = sorted(k for k in item if k not in ITEM_KEYS)
    if refused:
        where = "set it at the top of the file" if refused[0] in KEY_SECTION else "unknown option"
        raise ConfigError(f"jobs: item {n} sets {refused[0]!r}, which cannot differ between the jobs of "
                          f"one run (one model load): {where}; an item may set {', '.join(sorted(ITEM_KEYS))}")
    if "output" not in item:
        if output_dir is None and suffix is None:
            raise ConfigError(f"jobs: item {n} has no output (give output:, or output_dir:/suffix: at the top)")
        item["output"] = output_name(item["src"], output_dir, suffix)
    return item


def plan_jobs(file_values: dict, flags: dict) -> list[Config]:
    """The jobs of one run, each a complete `Config`: the config file's values, an item's own
    (`jobs:`), then the command line's, which override both. Inputs given on the command
    line replace the file's; every job has its own output file (or the only one stdout)."""
    values = dict(file_values)
    if "src" in flags:
        values.pop("jobs", None)
    elif "output" in flags and "jobs" in values:
        raise ConfigError("output: the config file lists jobs, each with its output; give --src with --output")
    values.update(flags)
    items = _items(values)
    if len(items) > 1 and values.get("prefix") is not None:
        raise ConfigError("prefix: a prefix file goes with one input; with several, give each its own "
                          "(prefix: in each item of jobs:)")
    overrides = {k: v for k, v in flags.items() if k not in ("src", "output", *PLAN_KEYS)}
    jobs = [Config.from_values({**values, **item, **overrides}) for item in items]
    if len(jobs) > 1:
        seen = set()
        for job in jobs:
            if job.io.src == "-" or job.io.output == "-":
                raise ConfigError("src: with several inputs each needs its own output file; stdin and stdout "
                                  "serve only a single job")
            key = os.path.normpath(job.io.output)
            if key in seen:
                raise ConfigError(f"output: {job.io.output} is the output of two jobs")
            seen.add(key)
    return jobs


class _KeyTwice(Exception):
    def __init__(self, key, line: int):
        super().__init__(key, line)
        self.key, self.line = key, line


class _UniqueKeyLoader(yaml.SafeLoader):
    """yaml.safe_load, except that a key given twice in a mapping is an error (naming it and its
    line) instead of the last one silently winning, as on the command line."""

    def construct_mapping(self, node, deep=False):
        seen = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if key in seen:
                raise _KeyTwice(key, key_node.start_mark.line + 1)
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


def _option_names(data: dict, where: str) -> dict:
    """Keys as option names (`-` -> `_`); `beam-size` and `beam_size` together are one key twice."""
    values = {str(k).replace("-", "_"): v for k, v in data.items()}
    if len(values) < len(data):
        twice = next(k for k in values if sum(str(o).replace("-", "_") == k for o in data) > 1)
        raise ConfigError(f"{where}: {twice!r} is given twice (spelt with - and with _)")
    return values


def load_yaml(path: str) -> dict:
    """Read a YAML config file: a flat mapping of option names (`-` or `_`) to values.

    Relative paths in it (`PATH_KEYS`) are resolved from the file's own directory, so a
    config works from any working directory; `-` (stdin/stdout) stays as it is.
    """
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except OSError as e:
        raise ConfigError(f"cannot read config file {path}: {e.strerror}") from None
    try:
        data = yaml.load(raw.decode("utf-8"), Loader=_UniqueKeyLoader)  # a leading BOM is read by YAML itself
    except UnicodeDecodeError as e:
        line = raw[: e.start].count(b"\n") + 1
        raise ConfigError(f"config file {path}:{line}: invalid UTF-8 at byte {e.start}") from None
    except _KeyTwice as e:
        raise ConfigError(f"config file {path}:{e.line}: {e.key!r} is given twice") from None
    except yaml.YAMLError as e:
        raise ConfigError(f"config file {path} is not valid YAML: {e}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"config file {path} must be a mapping of option: value")
    values = expand_aliases(_option_names(data, f"config file {path}"))
    base = os.path.dirname(path)
    _resolve_paths(values, base)
    for item in values.get("jobs") or []:
        if isinstance(item, dict):
            _resolve_paths(item, base)
    return values


def _resolve_paths(values: dict, base: str):
    """File names (`PATH_KEYS`, alone or in a list) relative to `base`; `-` stays as it is."""
    def resolve(value):
        if isinstance(value, str) and value != "-":
            return os.path.join(base, os.path.expanduser(value))  # join keeps an absolute path
        return value

    for key in PATH_KEYS:
        if key in values:
            value = values[key]
            values[key] = [resolve(v) for v in value] if isinstance(value, list) else resolve(value)


def flat_values(config: Config) -> dict:
    """Every option and its value, by section order: what `--dump-config` prints (a valid `-c` file)."""
    return {f.name: getattr(getattr(config, name), f.name) for name, cls in SECTIONS.items() for f in fields(cls)}


def default_of(key: str):
    """The built-in default of an option (for --help)."""
    f = next(f for f in fields(SECTIONS[KEY_SECTION[key]]) if f.name == key)
    return None if f.default is MISSING else f.default
