"""Names that are not ours, answered where they come in: a command line's flags (`flag_problems`),
a YAML file's keys and an API call's keywords (`unknown_key_message`, `unknown_keys_error`).

Each is answered with what to write instead, from the other tools' tables (peers.py) spelt as
that way in spells options ("flag": `--beam-size K`, "key": `beam_size: K`, "call":
`beam_size=K`), or with the nearest of our names. Every unknown name of a command line, a file
or a call is named in one error (`listed`), so that a command written for another tool is fixed
in one pass.
"""

from __future__ import annotations

import difflib
import re
from typing import Iterable

from .bounded import shown
from .option import ConfigError
from .peers import MARIAN_ALIGNMENT, PEERS, Peer
from .table import KEY_SECTION, OPTIONS, PLAN_KEYS, PLAN_OPTIONS, TYPES

SURFACES = ("flag", "key", "call")
_NOTATION = re.compile(r"\{([a-z_]+)(?:=([^}]*))?\}")
_PLACEHOLDER = re.compile(r"[A-Z]+( [A-Z]+)*|-?[0-9.]+")


def flag_of(key: str) -> str:
    """An option's long flag: `beam_size` -> `--beam-size`."""
    return "--" + key.replace("_", "-")


def _spelled_one(key: str, value: str | None, surface: str) -> str:
    """One option of the notation as `surface` spells it; a switch without a value is `true`."""
    if value is None and TYPES.get(key) is bool:
        value = "true"
    if surface == "flag":
        if value in ("true", "false") and TYPES.get(key) is bool:
            return flag_of(key) if value == "true" else "--no-" + flag_of(key)[2:]
        return flag_of(key) + ("" if value is None else f" {value}")
    if value is None:
        return key
    if surface == "key":
        return f"{key}: {value}"
    shown_value = value.title() if value in ("true", "false") else value
    return f"{key}={shown_value if _PLACEHOLDER.fullmatch(value) or value in ('true', 'false') else repr(value)}"


def spelled(notation: str, surface: str) -> str:
    """A peers.py text with each `{key}` / `{key=VALUE}` as `surface` spells it."""
    return _NOTATION.sub(lambda m: _spelled_one(m.group(1), m.group(2), surface), notation)


def _answers(name: str) -> list[tuple[Peer, str, bool]]:
    """(tool, its text, whether it is ours) for each tool whose option `name` is, in PEERS order."""
    found = []
    for peer in PEERS:
        if name in peer.ours:
            found.append((peer, peer.ours[name], True))
        elif name in peer.without:
            found.append((peer, peer.without[name], False))
    return found


def _advice(text: str, is_ours: bool, surface: str) -> str:
    if is_ours:
        return f"nmtdecode's is {spelled(text, surface)}"
    return f"nmtdecode has no equivalent, remove it: {spelled(text, surface)}"


def _joined(names: list[str]) -> str:
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]


def peer_key_message(key: str, surface: str = "key") -> str | None:
    """Why `key` (a YAML key or a keyword argument) is not an option and what to write instead,
    when it is another tool's name; else None."""
    found = _answers(key)
    if not found:
        return None
    whose = _joined([peer.name for peer, _, _ in found])
    article = "an" if whose[0].lower() in "aeiou" else "a"
    _, text, is_ours = found[0]  # the tables agree on a shared name (tests/test_peer_habits.py)
    return f"unknown option {shown(key)} ({article} {whose} name): {_advice(text, is_ours, surface)}"


def unknown_key_message(key: str, surface: str = "key") -> str:
    """Why `key` is not an option: our equivalent where it is another tool's name, else the
    nearest spellings among every option and plan key."""
    message = peer_key_message(key, surface)
    if message is not None:
        return message
    close = difflib.get_close_matches(key, sorted([*KEY_SECTION, *PLAN_KEYS]), n=3, cutoff=0.6)
    hint = f"did you mean {' or '.join(close)}?" if close else "nmtdecode translate --help lists the options"
    return f"unknown option {shown(key)} ({hint})"


def listed(header: str, items: list[str]) -> str:
    """One error line naming every item: `header: item`, or for several `header: N unknown
    options: (1) item; (2) item`, numbered since an item's own text may hold a `;`."""
    numbered = "; ".join(f"({n}) {item}" for n, item in enumerate(items, 1))
    text = items[0] if len(items) == 1 else f"{len(items)} unknown options: {numbered}"
    return f"{header}: {text}" if header else text


def unknown_keys_error(keys: Iterable[str], surface: str = "key", where: str = "") -> ConfigError:
    """One error naming every unknown key of a layer (`unknown_key_message` of each)."""
    return ConfigError(listed(where, [unknown_key_message(key, surface) for key in keys]))


def _is_number(word: str) -> bool:
    try:
        float(word)
    except ValueError:
        return False
    return True


def flag_message(arg: str, ours: dict[str, bool], command: str) -> str | None:
    """What is wrong with `arg`, a command-line word starting with `-` (its `=VALUE` cut), given
    `ours`, the command's flags (-> whether each takes a value); None when it is the command's or
    a cluster of its short flags (`-qk5`)."""
    if arg in ours:
        return None
    name = arg.lstrip("-")
    key = name.replace("-", "_")
    if flag_of(key) in ours:  # -beam_size, --beam_size, -src: argparse's spellings of our flags
        return f"{arg}: that is OpenNMT-py's spelling; nmtdecode's is {flag_of(key)}"
    short = next((peer for peer in PEERS if arg in peer.shorts), None)
    if short is not None:
        return _short_message(arg, short, ours, command)
    found = _answers(key) if len(name) > 1 else []
    if found:
        whose = _joined([f"{peer.flags_of}'s" for peer, _, _ in found])
        _, text, is_ours = found[0]
        return f"{arg}: that is {whose}; {_advice(text, is_ours, 'flag')}"
    if not arg.startswith("--") and arg[:2] in ours:
        return None  # click's -k5 (a value attached) or -qk 5 (short flags together)
    if key in KEY_SECTION or key in PLAN_OPTIONS:
        return f"{arg}: nmtdecode {command} has no such option ({flag_of(key)} is translate's)"
    longs = sorted(flag[2:] for flag in ours if flag.startswith("--"))
    close = difflib.get_close_matches(name.replace("_", "-"), longs, n=3, cutoff=0.6)
    hint = (
        f"did you mean {' or '.join('--' + c for c in close)}?" if close else f"nmtdecode {command} --help lists them"
    )
    return f"{arg}: no such option ({hint})"


def _short_message(arg: str, peer: Peer, ours: dict[str, bool], command: str) -> str:
    """A tool's one-letter flag: its long name's answer, or ours where its long name is ours."""
    theirs = peer.shorts[arg]
    whose = f"{peer.flags_of}'s {arg} ({flag_of(theirs)})"
    if theirs in peer.ours or theirs in peer.without:
        is_ours = theirs in peer.ours
        return f"{arg}: that is {whose}; {_advice((peer.ours if is_ours else peer.without)[theirs], is_ours, 'flag')}"
    if flag_of(theirs) not in ours:
        return f"{arg}: that is {whose}; nmtdecode {command} has no such option ({flag_of(theirs)} is translate's)"
    short = OPTIONS[theirs].short
    return f"{arg}: that is {whose}; nmtdecode's is {flag_of(theirs)}" + (f" (or {short})" if short in ours else "")


def flag_problems(args: list[str], ours: dict[str, bool], command: str) -> list[str]:
    """What is wrong with each flag of a command's arguments `args` (after the command's name),
    in their order; `ours`: the command's flags -> whether each takes a value. Words that do not
    start with `-` are values or arguments; numbers (`-0.5`) and `-` (stdin) are values."""
    problems: list[str] = []
    position = 0
    while position < len(args):
        word = args[position]
        position += 1
        if word == "--":
            break
        if not word.startswith("-") or word == "-" or _is_number(word):
            continue
        flag = word.split("=", 1)[0]
        message = flag_message(flag, ours, command)
        following = args[position] if position < len(args) else None
        if message is not None:
            problems.append(message)
        elif flag == "--alignment" and following in MARIAN_ALIGNMENT:
            problems.append(
                f"--alignment {following}: that is Marian's; nmtdecode's Pharaoh pairs after the text are "
                "--report-align (--alignment is a switch: JSONL source positions)"
            )
        elif ours.get(flag) and "=" not in word:
            position += 1  # its value, which may start with a dash
    return problems
