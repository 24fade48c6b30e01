"""What an option is: its declaration (`Option`, made by `option` on a config field), and how a
value given for it is checked: its type (`coerce`), its choices and its range (`check_option`).
The options themselves are declared in table.py."""

from __future__ import annotations

import math
import os
import types
import typing
from dataclasses import dataclass, field
from typing import Any

from .bounded import shown

# No option's value reaches 2^64 (the largest, --seed, is below it): a larger integer (YAML's
# `beam_size: 1000...0` of 400 digits) is refused by name before anything converts it to a float.
MAX_INT = 1 << 64


class ConfigError(ValueError):
    """A usage or configuration mistake (exit code 2)."""


@dataclass(frozen=True)
class Option:
    """What an option means and which values it takes. `range` is written as in mathematics:
    ">= 1", "> 0", "(0, 1]", "[0, 2^64)"; `hint` follows a range error; `aliases` are other
    tools' spellings of a choice; `many`: the command line takes several values (--src a b: one job
    each; --model A B: an ensemble)."""

    help: str
    short: str | None = None
    choices: tuple[str, ...] | None = None
    range: str | None = None
    hint: str = ""
    aliases: dict | None = None
    many: bool = False
    metavar: str | None = None


def option(default: Any, help: str, **declaration: Any) -> Any:
    """A config field with its declaration."""
    meta = {"option": Option(help, **declaration)}
    if isinstance(default, list):
        return field(default_factory=lambda: list(default), metadata=meta)
    return field(default=default, metadata=meta)


def coerce(key: str, hint: Any, value: Any) -> Any:
    """Check a YAML/CLI value of option `key` against its type `hint`; ints are accepted for floats,
    and the Python API's `pathlib.Path`s (any os.PathLike) as the paths they name."""
    if isinstance(value, os.PathLike):
        value = os.fspath(value)
    elif isinstance(value, (list, tuple)) and any(isinstance(v, os.PathLike) for v in value):
        value = [os.fspath(v) if isinstance(v, os.PathLike) else v for v in value]
    if hint == list[str]:
        return _pieces(key, value)
    allowed = typing.get_args(hint) if isinstance(hint, types.UnionType) else (hint,)
    if value is None and type(None) in allowed:
        return None
    if isinstance(value, (list, tuple)) and list[float] in allowed:
        return [coerce(key, float, v) for v in value]
    if isinstance(value, (list, tuple)) and list[str] in allowed:  # paths: model: [A, B] (one alone is A)
        if not value or not all(isinstance(v, str) and v for v in value):
            raise ConfigError(f"{key}: expected a path or a list of paths, got {shown(value)}")
        return list(value) if len(value) > 1 else value[0]
    if bool in allowed and isinstance(value, bool):
        return value
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= MAX_INT:
        raise ConfigError(f"{key}: {shown(value)} is larger than any setting of it (each is below 2^64)")
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
    names = " or ".join(getattr(t, "__name__", str(t)) for t in allowed if t is not type(None))
    raise ConfigError(f"{key}: expected {names}, got {shown(value)}")


def _pieces(key: str, value: object) -> list[str]:
    """A list of target pieces: a YAML list of strings, or one string of pieces separated by
    whitespace (a piece never contains whitespace; commas do not separate, `,` is a piece)."""
    if isinstance(value, str):
        return value.split()
    if isinstance(value, (list, tuple)) and all(
        isinstance(v, str) and v and not any(c.isspace() for c in v) for v in value
    ):
        return list(value)
    raise ConfigError(
        f"{key}: expected target pieces, as a list of strings or one string separated by spaces, got {shown(value)}"
    )


def _bound(text: str) -> float:
    base, _, power = text.strip().partition("^")
    return float(base) ** int(power) if power else float(base)


def in_range(value: float, range_text: str) -> bool:
    """Whether `value` lies in a range written ">= 1", "> 0", "(0, 1]" or "[0, 2^64)"."""
    if range_text.startswith(">="):
        return value >= _bound(range_text[2:])
    if range_text.startswith(">"):
        return value > _bound(range_text[1:])
    low, high = (_bound(x) for x in range_text[1:-1].split(","))
    above = value > low if range_text[0] == "(" else value >= low
    below = value < high if range_text[-1] == ")" else value <= high
    return above and below


def check_option(key: str, declared: Option, value: Any) -> None:
    """A value of option `key` against its declared choices and range."""
    if declared.choices is not None and value is not None and value not in declared.choices:
        names = [
            f"{c} ({', '.join(a for a, to in declared.aliases.items() if to == c)})"
            if declared.aliases and c in declared.aliases.values()
            else c
            for c in declared.choices
        ]
        raise ConfigError(f"{key}: {shown(value)} is not one of {', '.join(names)}")
    if declared.range is not None and value is not None and not in_range(value, declared.range):
        where = declared.range if declared.range[0] in "<>" else f"in {declared.range}"
        hint = f" ({declared.hint})" if declared.hint else ""
        raise ConfigError(f"{key}: must be {where}, got {shown(value)}{hint}")
