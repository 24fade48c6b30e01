"""YAML config files: reading one (`-c FILE`) and writing the effective options (`--dump-config`).

A file is a flat mapping of option names to values. A key given twice is an error
naming its line, and relative file names are resolved from the file's own directory,
so that a config works from any working directory. What the values mean is
config.py's; how a file's `jobs:` list becomes jobs is plan.py's.
"""

from __future__ import annotations

import os

import yaml

from .bounded import MAX_CONFIG_BYTES, TooLarge, check_bytes, check_size, shown
from .config import Config, flat_values
from .foreign import listed, unknown_key_message
from .layers import option_names
from .option import ConfigError
from .peers import MARIAN_DECODER_YML
from .table import KEY_SECTION, PLAN_KEYS

# Options naming files: in a config file, a relative path is relative to that file's directory.
PATH_KEYS = ("model", "src", "output", "output_dir", "prefix", "dump_beam", "tokenizer")


class _KeyTwice(Exception):
    def __init__(self, key: object, line: int) -> None:
        super().__init__(key, line)
        self.key, self.line = key, line


class _UniqueKeyLoader(yaml.SafeLoader):  # PyYAML's own parser: one file read once, its messages kept
    """yaml.safe_load, except that a key given twice in a mapping is an error (naming it and its
    line) instead of the last one silently winning, as on the command line."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict:
        seen = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if key in seen:
                raise _KeyTwice(key, key_node.start_mark.line + 1)
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


def load_yaml(path: str) -> dict:
    """Read a YAML config file: a flat mapping of option names (`-` or `_`) to values.

    Relative paths in it (`PATH_KEYS`) are resolved from the file's own directory, so a
    config works from any working directory; `-` (stdin/stdout) stays as it is.
    """
    try:
        with open(path, "rb") as f:
            raw = f.read(MAX_CONFIG_BYTES + 1)  # the rest of a larger one is never read
            size = max(len(raw), os.fstat(f.fileno()).st_size)
    except OSError as e:
        raise ConfigError(f"cannot read config file {path}: {e.strerror}") from None
    try:
        check_bytes(size, MAX_CONFIG_BYTES)
        data = yaml.load(raw.decode("utf-8"), Loader=_UniqueKeyLoader)  # a leading BOM is read by YAML itself
        check_size(data)
    except TooLarge as e:
        raise ConfigError(f"config file {path}: larger than any config: {e}") from None
    except RecursionError:
        raise ConfigError(f"config file {path}: larger than any config: it nests too deeply") from None
    except UnicodeDecodeError as e:
        line = raw[: e.start].count(b"\n") + 1
        raise ConfigError(f"config file {path}:{line}: invalid UTF-8 at byte {e.start}") from None
    except _KeyTwice as e:
        raise ConfigError(f"config file {path}:{e.line}: {shown(e.key)} is given twice") from None
    except yaml.MarkedYAMLError as e:  # one line: where, and what went wrong there
        mark = e.problem_mark or e.context_mark
        where = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark is not None else path
        raise ConfigError(f"config file {where}: not valid YAML: {e.problem or e.context}") from None
    except yaml.YAMLError as e:
        raise ConfigError(f"config file {path}: not valid YAML: {' '.join(str(e).split())}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"config file {path} must be a mapping of option: value")
    values = option_names(data, f"config file {path}")
    _check_keys(path, raw, values)
    base = os.path.dirname(path)
    _resolve_paths(values, base)
    jobs = values.get("jobs")
    if jobs is not None and not isinstance(jobs, list):  # jobs.py says what a list must hold
        raise ConfigError(
            f"config file {path}: jobs: expected a list of {{src: FILE, output: FILE, ...}} items, got {shown(jobs)}"
        )
    for item in jobs or []:
        if isinstance(item, dict):
            _resolve_paths(item, base)
    return values


def _check_keys(path: str, raw: bytes, values: dict) -> None:
    """Refuse the unknown keys of the file and of the items of its `jobs:`, all in one error (a
    file written for another tool has several), each with its line and our name for it or the
    nearest spellings (the lines are looked up only then); a Marian decoder.yml as a whole."""
    known = {*KEY_SECTION, *PLAN_KEYS}
    unknown: list[tuple[int | None, str]] = [(None, key) for key in values if key not in known]
    if any(key in MARIAN_DECODER_YML for _, key in unknown):
        raise ConfigError(marian_decoder_yml_message(path))
    jobs = values.get("jobs")
    items = jobs if isinstance(jobs, list) else []
    unknown += [
        (n, key)
        for n, item in enumerate(items)
        if isinstance(item, dict)
        for key in option_names(item, f"jobs: item {n + 1}")
        if key not in known
    ]
    if not unknown:
        return
    where = [
        f"{_key_line(raw, key, item)}" + ("" if item is None else f": jobs: item {item + 1}") for item, key in unknown
    ]
    if len(unknown) == 1:
        raise ConfigError(f"config file {path}:{where[0]}: {unknown_key_message(unknown[0][1])}")
    each = [f"line {line}: {unknown_key_message(key)}" for line, (_, key) in zip(where, unknown)]
    raise ConfigError(listed(f"config file {path}", each))


def marian_decoder_yml_message(path: str) -> str:
    """A -c file that is Marian's decoder.yml (it names `models:` and `vocabs:`): nmtdecode reads
    it as part of the model, given to --model."""
    folder, name = os.path.split(path)
    if name.endswith(".npz.decoder.yml"):  # Marian's own MODEL.npz.decoder.yml
        model = path[: -len(".decoder.yml")]
    elif name == "decoder.yml":  # an OPUS-MT folder's
        model = folder or "."
    else:
        model = "the model's folder (holding it as decoder.yml) or its .npz (MODEL.npz.decoder.yml beside it)"
    return (
        f"config file {path} is Marian's decoder.yml (models:, vocabs:), not nmtdecode's options: give "
        f"--model {model}, and nmtdecode reads this file with the model (its vocabularies, beam-size, "
        "normalize, max-length-factor, allow-unk)"
    )


def _key_line(raw: bytes, key: str, item: int | None) -> int | str:
    """The line of `key` at the top of the file, or in item `item` of its `jobs:` ('?' if not found)."""
    node = yaml.compose(raw.decode("utf-8"), Loader=yaml.SafeLoader)
    if item is not None:
        jobs = next(v for k, v in node.value if str(k.value).replace("-", "_") == "jobs")
        node = jobs.value[item]
    return next((k.start_mark.line + 1 for k, _ in node.value if str(k.value).replace("-", "_") == key), "?")


def _resolve_paths(values: dict, base: str) -> None:
    """File names (`PATH_KEYS`, alone or in a list) relative to `base`; `-` stays as it is."""

    def resolve(value: object) -> object:
        if isinstance(value, str) and value != "-":
            return os.path.join(base, os.path.expanduser(value))  # join keeps an absolute path
        return value

    for key in PATH_KEYS:
        if key in values:
            value = values[key]
            values[key] = [resolve(v) for v in value] if isinstance(value, list) else resolve(value)


def dump(config: Config, model_defaults: dict | None) -> str:
    """The effective configuration as YAML, usable as a `-c` file: `config` over the model's own
    decoding defaults (native `decoding:`, Hugging Face `generation_config.json`), which only
    loading it tells; None when no model is given, and then the built-in defaults show."""
    header = "# nmtdecode: effective options (command line, then -c file, then the model's defaults)\n"
    if model_defaults is None:
        header += "# no model given: its defaults (if any) are not included\n"
    else:
        config = config.with_model_defaults(model_defaults)
    return header + yaml.safe_dump(flat_values(config), sort_keys=False, allow_unicode=True)
