"""A Marian vocabulary file (`vocab.yml`, `opus.spm32k-spm32k.vocab.yml`) read line by line, the way
Marian's yaml-cpp reads what its emitter writes: one `piece: id` a line, the piece plain, or in
double quotes with YAML's escapes (`"\\x96"`, `"\\u2028"`, `"\\""`), or in single quotes (`''` for
a quote), or as a complex key (`? piece`, then `: id`).

Not a YAML library on purpose. PyYAML refuses a whole vocabulary for one piece of web text: a raw
C1 control character (U+0080 to U+009F, which older yaml-cpp writes unescaped inside quotes)
is "unacceptable", and U+0085, U+2028 and U+2029 end its lines where yaml-cpp's do not.
Here only a line feed ends a line (a carriage return before it is dropped), any character may
be in a piece, and each line is read on its own: nothing nests and nothing refers to anything
else (a YAML anchor, alias, tag, flow or block collection is refused by line), so the cost is the
file's size, which is bounded. CTranslate2's Marian converter reads these files line by line for
the same reason. A `.json` vocabulary, or one written in YAML's flow style (`{...}`), is JSON.
"""

from __future__ import annotations

import json
import os
import re
from typing import Iterator

from ...options.bounded import shown
from ..architecture import LIMITS
from ..checkpoint import ModelError, note_read

MAX_BYTES = 1 << 28  # 256 MB; a 256k-piece vocabulary is a few MB
MAX_ENTRIES = LIMITS["tgt_vocab_size"]
# YAML's escapes in double quotes (YAML 1.2, 5.7) but the numeric ones \x, \u and \U.
ESCAPES = {
    "0": "\0",
    "a": "\a",
    "b": "\b",
    "t": "\t",
    "\t": "\t",
    "n": "\n",
    "v": "\v",
    "f": "\f",
    "r": "\r",
    "e": "\x1b",
    " ": " ",
    '"': '"',
    "/": "/",
    "\\": "\\",
    "N": "\x85",
    "_": "\xa0",
    "L": "\u2028",
    "P": "\u2029",
}
HEX_DIGITS = {"x": 2, "u": 4, "U": 8}
# After a key: the colon, the id (YAML's plain integer), an optional comment.
VALUE = re.compile(r"\s*:\s+(\d+)\s*(?:#.*)?|\s*:(\d+)\s*")
# What YAML reads as something else than a plain piece at the start of a line: anchors, aliases,
# tags, flow and block collections, block scalars, directives, reserved indicators.
NOT_PLAIN = tuple("&*![]{}|>%@`,#\t") + tuple(a + b for a in "-?:" for b in " \t")


class VocabularyError(ValueError):
    """A line that is not a `piece: id` entry (the message names the line)."""


def read_entries(path: str) -> list[tuple[str, int]]:
    """The file's (piece, id) entries in order; ModelError naming the file (and line) when it is
    not a vocabulary."""
    try:
        if os.path.getsize(note_read(path)) > MAX_BYTES:
            raise VocabularyError(f"it holds more than {MAX_BYTES >> 20} MB, more than any vocabulary")
        with open(path, encoding="utf-8-sig", newline="") as f:
            text = f.read()
        entries = _json_entries(text) if path.endswith(".json") or text.lstrip().startswith("{") else yaml_entries(text)
        return list(_bounded(entries))
    except (OSError, UnicodeDecodeError, VocabularyError) as e:
        raise ModelError(f"{path} cannot be read: {e}") from None


def _bounded(entries: Iterator[tuple[str, int]]) -> Iterator[tuple[str, int]]:
    for count, entry in enumerate(entries):
        if count == MAX_ENTRIES:
            raise VocabularyError(f"it holds more than {MAX_ENTRIES:,} entries, more than any model's vocabulary")
        yield entry


def _json_entries(text: str) -> Iterator[tuple[str, int]]:
    try:
        data = json.loads(text)
    except (ValueError, RecursionError) as e:
        raise VocabularyError(f"not a JSON object of pieces and ids ({e})") from None
    if not isinstance(data, dict):
        raise VocabularyError("a vocabulary maps pieces to ids; this file holds no mapping")
    for piece, value in data.items():
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise VocabularyError(f"{shown(piece)}: expected an id (an integer >= 0), got {shown(value)}")
        yield piece, value


def yaml_entries(text: str) -> Iterator[tuple[str, int]]:
    """The (piece, id) entries of a vocabulary's text; VocabularyError naming the first line that
    is not one."""
    key: str | None = None  # a complex key (`? piece`) waiting for its `: id` line
    for number, line in enumerate(text.split("\n"), 1):
        line = line.removesuffix("\r")
        if not line.strip(" \t") or line.lstrip(" \t").startswith("#") or line in ("---", "..."):
            continue  # blank, a comment, a document's start or end
        try:
            if key is not None:
                yield key, _value(line, line)
                key = None
            elif line.startswith("? "):
                key, rest = _scalar(line[2:])
                if rest.strip():
                    raise VocabularyError("text after the key")
            else:
                yield _entry(line)
        except VocabularyError as e:
            raise VocabularyError(f"line {number}: {e}: {shown(line)}") from None
    if key is not None:
        raise VocabularyError(f"the file ends before the id of {shown(key)}")


def _entry(line: str) -> tuple[str, int]:
    if line.startswith((" ", "\t")):
        raise VocabularyError("an indented line (a nested YAML mapping?)")
    if line.startswith(("'", '"')):
        piece, rest = _scalar(line)
        return piece, _value(rest, line)
    piece, colon, value = line.partition(": ")  # a plain piece holds no ": " (YAML would end it there)
    return _plain(piece if colon else line), _value(colon + value, line)


def _value(text: str, line: str) -> int:
    found = VALUE.fullmatch(text)
    if found is None:
        raise VocabularyError("not a `piece: id` entry")
    return int(found.group(1) or found.group(2))


def _plain(text: str) -> str:
    """A plain (unquoted) piece, as YAML reads it: its spaces around trimmed."""
    piece = text.strip(" ")
    if not piece or piece.startswith(NOT_PLAIN) or piece in ("-", "?", ":") or " #" in piece or "\t" in piece:
        raise VocabularyError("not a plain piece (a YAML construct a vocabulary does not use)")
    return piece


def _scalar(text: str) -> tuple[str, str]:
    """The piece at the start of `text` (quoted, or plain up to the end) and what follows it."""
    if text.startswith('"'):
        return _double_quoted(text)
    if text.startswith("'"):
        end = 1
        while True:
            end = text.find("'", end)
            if end == -1:
                raise VocabularyError("no closing quote")
            if text.startswith("''", end):
                end += 2
                continue
            return text[1:end].replace("''", "'"), text[end + 1 :]
    return _plain(text), ""


def _double_quoted(text: str) -> tuple[str, str]:
    out: list[str] = []
    i = 1
    while i < len(text):
        char = text[i]
        if char == '"':
            return "".join(out), text[i + 1 :]
        if char != "\\":
            out.append(char)
            i += 1
            continue
        code = text[i + 1 : i + 2]
        if code in ESCAPES:
            out.append(ESCAPES[code])
            i += 2
        elif code in HEX_DIGITS:
            digits = text[i + 2 : i + 2 + HEX_DIGITS[code]]
            if len(digits) != HEX_DIGITS[code] or not all(c in "0123456789abcdefABCDEF" for c in digits):
                raise VocabularyError(f"\\{code} needs {HEX_DIGITS[code]} hexadecimal digits")
            if int(digits, 16) > 0x10FFFF:
                raise VocabularyError(f"\\{code}{digits} is not a character")
            out.append(chr(int(digits, 16)))
            i += 2 + HEX_DIGITS[code]
        else:
            raise VocabularyError(f"\\{code} is not an escape of YAML")
    raise VocabularyError("no closing quote")
