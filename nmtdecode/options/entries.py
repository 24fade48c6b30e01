"""What each way in to the options refuses, declared as data next to the option table.

An entry is one way a job's options arrive: the command line's translate and score, a job
shared among torchrun's processes, an item of a config file's `jobs:`, the Python API's load()
and each of its methods (which the CTranslate2 stand-in calls too). Of its own layer (the
options it is given) an entry may take only some keys, or refuse some, each with why
(`check_given`, before the layer is merged, so that the message says why the entry takes no
such key rather than what is wrong with its value); of the options as they will run it may
add rules (rules.Rule), which `Config.validate(entry)` checks after the declarations and the
rules every entry shares.
"""

from __future__ import annotations

import string
from dataclasses import dataclass, field
from typing import Any, Mapping

from .bounded import shown
from .foreign import unknown_keys_error
from .option import ConfigError
from .rules import Rule
from .table import CALL_KEYS, KEY_SECTION, PER_JOB_KEYS, SCORE_FORMATS


@dataclass(frozen=True)
class Entry:
    """What one way in refuses. Messages are templates of {key} (`{key!r}`: quoted, as `shown`
    quotes), {why}, {entry} (its name), {takes} and what the caller adds (an item's number)."""

    takes: frozenset[str] | None = None  # the keys its own layer may hold (None: any)
    outside: str = "{key}: {why}"  # what a key outside `takes` is told
    why_fixed: str = ""  # ... when it is an option this entry does not take
    why_unknown: str = "unknown option"  # ... when it is no option at all (keywords: named at once instead)
    refused: Mapping[str, str] = field(default_factory=dict)  # key -> message, checked before `takes`
    rules: tuple[Rule, ...] = ()  # over the options as they will run
    keywords: bool = False  # its keys are keyword arguments: every one that is no option is named at once


class _Quoted(string.Formatter):
    """str.format, with `!r` quoting a user's value as every message does (bounded.shown)."""

    def convert_field(self, value: Any, conversion: str | None) -> Any:
        return shown(value) if conversion == "r" else super().convert_field(value, conversion)


def check_given(name: str, given: Mapping[str, Any], **context: Any) -> None:
    """The keys of entry `name`'s own layer `given`: for keyword arguments, every one that is no
    option (with ours where it is another tool's name: foreign.py); then the first refused one
    (sorted), else the first one outside what it takes, is an error saying why."""
    entry, fill = ENTRIES[name], _Quoted().format
    unknown = sorted(key for key in given if key not in KEY_SECTION)
    if entry.keywords and unknown:
        raise unknown_keys_error(unknown, "call", where=name)
    refused = sorted(key for key in given if key in entry.refused)
    if refused:
        raise ConfigError(fill(entry.refused[refused[0]], key=refused[0], entry=name, **context))
    outside = sorted(key for key in given if entry.takes is not None and key not in entry.takes)
    if outside:
        why = entry.why_fixed if outside[0] in KEY_SECTION else entry.why_unknown
        takes = ", ".join(sorted(entry.takes or ()))
        raise ConfigError(fill(entry.outside, key=outside[0], why=why, entry=name, takes=takes, **context))


def _api_call(refuses_prefix: bool = False, rules: tuple[Rule, ...] = ()) -> Entry:
    """A Python API method: the options of one call (CALL_KEYS); those that read sources from a
    list take their prefixes as a list too."""
    refused = {"prefix": "prefix: {entry} takes its prefixes as a list, prefixes=[...]"} if refuses_prefix else {}
    return Entry(
        takes=CALL_KEYS,
        why_fixed="is fixed when the model loads: give it to Translator.load()",
        refused=refused,
        rules=rules,
        keywords=True,
    )


# generate_tokens() yields one hypothesis a token at a time: no beam, one hypothesis.
ONE_HYPOTHESIS = (
    Rule(
        "beam_size",
        lambda o: o.beam_size > 1 and not o.sampling,
        "beam_size: generate_tokens() decodes greedily or samples (beam_size=1 or sampling=True); "
        "translate_batch() runs a beam",
    ),
    Rule(
        "n_best",
        lambda o: o.n_best > 1,
        "n_best: generate_tokens() yields one hypothesis; translate_batch() gives n_best",
    ),
)

ENTRIES: dict[str, Entry] = {
    # A translate job writing its file (the command line's, translate_file()'s): the text format
    # writes one line per input line, so n-best lists need a format with room for them (a warning
    # was easy to miss, and onmt_translate users expect N lines: --format nbest gives them).
    "translate": Entry(
        rules=(
            Rule(
                "n_best",
                lambda o: o.n_best > 1 and o.format == "text" and o.dump_beam is None,
                lambda o: (
                    f"n_best: {o.n_best} hypotheses do not fit --format text, which writes one "
                    "line per input line; --format nbest writes N lines per input (INDEX ||| TEXT ||| SCORE, "
                    "as onmt_translate -n_best N writes N lines), jsonl one record with all N"
                ),
            ),
        )
    ),
    # A job shared among torchrun's processes (its files: jobs/files.py).
    "torchrun": Entry(
        rules=(
            Rule(
                "src",
                lambda o: o.src == "-",
                "under torchrun every process reads the whole input: give --src FILE, not stdin",
            ),
            Rule(
                "stream",
                lambda o: o.stream,
                "--stream answers each line as it arrives, in one process: under torchrun leave it out",
            ),
            Rule(
                "dump_beam",
                lambda o: o.dump_beam is not None,
                "--dump-beam writes one file in one process: under torchrun leave it out",
            ),
        )
    ),
    # score writes a log-prob a line, or JSONL with per-token log-probs.
    "score": Entry(
        rules=(
            Rule(
                "format",
                lambda o: o.format not in SCORE_FORMATS,
                lambda o: f"format: score writes {' or '.join(SCORE_FORMATS)}, not {o.format}",
            ),
        )
    ),
    # An item of a config file's `jobs:` may set only what needs no other model load.
    "jobs: item": Entry(
        takes=PER_JOB_KEYS,
        outside="jobs: item {item} sets {key!r}, which cannot differ between the jobs of one run "
        "(one model load): {why}; an item may set {takes}",
        why_fixed="set it at the top of the file",
    ),
    # The Python API's load() and Translator(): the model is their `path`, files go to translate_file().
    **{
        name: Entry(
            refused={
                key: "{key}: not an option of " + name + "; give the model as `path` and files to translate_file()"
                for key in ("model", "src", "output")
            },
            keywords=True,
        )
        for name in ("load()", "Translator()")
    },
    "translate()": _api_call(refuses_prefix=True),
    "translate_batch()": _api_call(refuses_prefix=True),
    "translate_iterable()": _api_call(refuses_prefix=True),
    "generate_tokens()": _api_call(refuses_prefix=True, rules=ONE_HYPOTHESIS),
    "translate_file()": _api_call(),
    "score()": _api_call(),
    "score_batch()": _api_call(),
}
