"""The rules between options, each stated once with its message, and the one check that applies
them together with each option's own declaration (`check`).

An option's own type, choices and range are its declaration (table.py, checked by option.py);
what one option asks of another is a `Rule` here: the option its message names, when the
options break it, and what the message says. A section of options checks its declarations and
the rules that name one of its options (`table.Section.validate`); a whole config checks every
section and then what one way in (the command line's translate, torchrun, score, an API method)
refuses of it (entries.py), all before any model loads. Checks that need the loaded model are
engine/resolve.py's; checks of files and of the machine are jobs/files.py's and engine/system.py's.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any, Callable, Iterable, Mapping

from .bounded import shown
from .option import ConfigError, Option, check_option


@dataclass(frozen=True)
class Rule:
    """What the options ask of each other: `broken(o)` says when the options (`o.beam_size`, ...)
    break the rule, `message` says so in one line, starting with the option `key` it is about
    (or with where that option is refused: "under torchrun ...")."""

    key: str
    broken: Callable[[Any], bool]
    message: str | Callable[[Any], str]

    def says(self, options: Any) -> str:
        return self.message if isinstance(self.message, str) else self.message(options)


def _models(o: Any) -> int:
    """How many models the options name: one, or an ensemble's."""
    return len(o.model) if isinstance(o.model, list) else 1


def _device_named(o: Any) -> bool:
    return o.device in ("auto", "cpu", "cuda") or o.device.startswith("cuda:")


# By section (decoding, runtime, io), in the order they are checked.
RULES: tuple[Rule, ...] = (
    Rule(
        "n_best",
        lambda o: o.n_best > o.beam_size and not o.sampling,
        lambda o: f"n_best: {o.n_best} is greater than beam_size ({o.beam_size})",
    ),
    Rule(
        "min_length",
        lambda o: o.min_length > o.max_length,
        lambda o: f"min_length: {o.min_length} is greater than max_length ({o.max_length})",
    ),
    Rule(
        "beam_groups",
        lambda o: o.beam_size % o.beam_groups != 0,
        lambda o: f"beam_groups: beam_size ({o.beam_size}) is not divisible by beam_groups ({o.beam_groups})",
    ),
    Rule(
        "early_stopping",
        lambda o: o.beam_groups > 1 and o.early_stopping == "ctranslate2",
        "early_stopping: ctranslate2 is CTranslate2's rule for its beam search, which has no "
        "groups; with beam_groups use top, true, false or never",
    ),
    Rule(
        "diversity_penalty",
        lambda o: o.beam_groups > 1 and o.diversity_penalty == 0,
        "diversity_penalty: must be > 0 with beam_groups > 1 (without it every group finds the same hypotheses)",
    ),
    Rule(
        "device",
        lambda o: not _device_named(o),
        lambda o: f"device: {shown(o.device)} is not one of auto, cpu, cuda, cuda:N",
    ),
    Rule(
        "quantize",
        lambda o: o.quantize == "int8" and o.dtype != "float32",
        "quantize: int8 works with --dtype float32 (activations stay float32)",
    ),
    Rule(
        "ensemble_weights",
        lambda o: o.ensemble_weights is not None and _models(o) == 1,
        "ensemble_weights: weights are for an ensemble (several models: --model A B)",
    ),
    Rule(
        "ensemble_weights",
        lambda o: o.ensemble_weights is not None and len(o.ensemble_weights) != _models(o),
        lambda o: f"ensemble_weights: {len(o.ensemble_weights)} weights for {_models(o)} models; give one per model",
    ),
    Rule(
        "ensemble_weights",
        lambda o: o.ensemble_weights is not None and any(w <= 0 for w in o.ensemble_weights),
        lambda o: f"ensemble_weights: each must be > 0, got {o.ensemble_weights}",
    ),
    Rule(
        "ensemble_rule",
        lambda o: o.ensemble_rule is not None and _models(o) == 1,
        "ensemble_rule: a rule is for an ensemble (several models: --model A B)",
    ),
    Rule(
        "resume",
        lambda o: o.resume and o.output == "-",
        "resume: needs an output file (--output FILE); stdout cannot be resumed",
    ),
    Rule("stream", lambda o: o.stream and o.resume, "stream: cannot be combined with resume"),
    Rule("prefix", lambda o: o.prefix == "-", "prefix: needs a file (stdin is the source's)"),
    Rule(
        "dump_beam",
        lambda o: o.dump_beam in ("-", ""),
        "dump_beam: needs a file name (stdout is the output's)",
    ),
    Rule(
        "dump_beam",
        lambda o: o.dump_beam is not None and o.resume,
        "dump_beam: cannot be combined with resume (the dump is written whole, by one uninterrupted run)",
    ),
)


def check(options: Mapping[str, Any], declared: Mapping[str, Option], rules: Iterable[Rule]) -> None:
    """The one check of options that needs no model, file or device: the value in `options`
    (every option, by name) of each option `declared` against its declaration, then each rule."""
    for key, declaration in declared.items():
        check_option(key, declaration, options[key])
    view = SimpleNamespace(**options)
    for rule in rules:
        if rule.broken(view):
            raise ConfigError(rule.says(view))
