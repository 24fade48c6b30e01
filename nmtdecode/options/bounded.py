"""What a user's file may hold, and how much of a value a message shows.

A file is measured before it is parsed (`MAX_CONFIG_BYTES`, `vocabulary_bytes`): parsing costs
time and memory in proportion to its size (a 100 MB config.json took 66 s and 727 MB; YAML reads
about 0.2 MB a second), and no config holds more than kilobytes. Then a YAML file of 360 bytes
can hold nine nested aliases, each a list of nine references to the
one before: `yaml.safe_load` builds it in a blink (each alias is one shared object), but
anything that walks it, or prints it, meets 9^9 = 387 million values. So a YAML file is
measured as loaded (`check_size`: each shared object visited once) and refused when it
expands beyond what any real config holds (YAML is parsed by libyaml where PyYAML has it:
`safe_load`); and a message quotes a user's value through
`shown`, which looks at a few levels and items of it and at most SHOWN characters.
"""

from __future__ import annotations

import reprlib

import yaml

MAX_CONFIG_BYTES = 4 << 20  # a config file, YAML or JSON (real ones: kilobytes; a tokenizer_config.json, hundreds)
PIECE_BYTES = 256  # a vocabulary's entry, at most: a piece (SentencePiece's: 16 characters), quoted, and its id
MAX_VALUES = 1_000_000  # values of a config once its aliases are expanded (real ones: hundreds)
MAX_DEPTH = 50  # containers within containers (real configs: a handful)
SHOWN = 60  # characters of a value quoted in a message

# libyaml's parser where PyYAML was built with it (its wheels are): a tenth of the pure-Python
# parser's time, about 2 ms of every model load (a native model's config.yaml).
FAST_LOADER: type[yaml.SafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

_REPR = reprlib.Repr()
_REPR.maxlevel, _REPR.maxdict, _REPR.maxlist, _REPR.maxtuple, _REPR.maxset = 2, 4, 6, 6, 6
_REPR.maxstring, _REPR.maxother, _REPR.maxlong = SHOWN, SHOWN, SHOWN


class TooLarge(ValueError):
    """A file's data nests deeper, or expands to more values, than any config needs."""


def vocabulary_bytes(rows: int) -> int:
    """The most bytes a vocabulary file of a model with `rows` embedding rows may hold."""
    return MAX_CONFIG_BYTES + rows * PIECE_BYTES


def check_bytes(size: int, limit: int) -> None:
    """TooLarge when a file of `size` bytes holds more than `limit`, before anything parses it."""
    if size > limit:
        raise TooLarge(f"it holds {size:,} bytes; no such file needs more than {limit:,}")


def shown(value: object) -> str:
    """`value` as a message quotes it: its repr, cut to SHOWN characters (and to a few levels and
    items first, so that even a structure of millions of values costs nothing to show)."""
    text = _REPR.repr(value)
    return text if len(text) <= SHOWN else text[: SHOWN - 3] + "..."


def check_size(data: object, max_values: int = MAX_VALUES, max_depth: int = MAX_DEPTH) -> None:
    """Raise TooLarge when `data` (dicts, lists and scalars, as YAML or JSON load them) nests deeper
    than `max_depth` or holds more than `max_values` values with every shared container counted
    where it appears. Each container is visited once (its count is remembered), so checking a
    structure of aliases costs what it takes to store, not what it expands to."""
    counts: dict[int, int] = {}  # id(container) -> values within it, expanded
    open_ids: set[int] = set()  # containers being counted: one met again is inside itself

    def count(value: object, depth: int) -> int:
        if not isinstance(value, (dict, list)):
            return 1
        key = id(value)
        if key in counts:
            return counts[key]
        if key in open_ids:
            raise TooLarge("it refers to itself (a YAML alias inside its own anchor)")
        if depth > max_depth:
            raise TooLarge(f"it nests more than {max_depth} levels deep")
        open_ids.add(key)
        items = list(value.keys()) + list(value.values()) if isinstance(value, dict) else value
        total = 1
        for item in items:
            total += count(item, depth + 1)
            if total > max_values:
                raise TooLarge(f"it expands to more than {max_values:,} values (YAML aliases of aliases?)")
        open_ids.discard(key)
        counts[key] = total
        return total

    count(data, 0)


def safe_load(text: str | bytes) -> object:
    """yaml.safe_load, by libyaml's parser where PyYAML has it; TooLarge when what it loaded
    expands beyond any config (`check_size`)."""
    data = yaml.load(text, Loader=FAST_LOADER)
    check_size(data)
    return data
