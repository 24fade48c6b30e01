"""The summary line of what a job decoded, and the counts behind it (no torch)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..engine.messages import count, print_warning

if TYPE_CHECKING:
    from ..engine.batching import Example


@dataclass
class Summary:
    """What a job (or a rank's share of it) decoded, for its last line on stderr."""

    sentences: int = 0
    target_tokens: int = 0
    truncated: int = 0
    replaced: int = 0
    joined: int = 0  # outputs whose line breaks were written as spaces (writing.py)
    unfinished: int = 0  # outputs whose best hypothesis the step limit cut before EOS
    seconds: float = 0.0

    def add(self, other: "Summary") -> None:
        for name in ("sentences", "target_tokens", "truncated", "replaced", "joined", "unfinished", "seconds"):
            setattr(self, name, getattr(self, name) + getattr(other, name))

    def count(self, examples: list[Example]) -> None:
        """Count decoded source lines, and those cut to the model's length; the first cut one
        of the job gets a warning."""
        truncated = sum(e.truncated for e in examples)
        if truncated and not self.truncated:
            print_warning("source lines longer than the model's positions (or --max-src-length) are cut")
        self.sentences += len(examples)
        self.truncated += truncated

    def count_joined(self, n: int) -> None:
        """Count outputs written as one line though their text held line breaks; the first of
        the job gets a warning."""
        if n and not self.joined:
            print_warning(
                "the model generated line breaks: each is written as a space, so that every input line has "
                "one output line (--format jsonl keeps them)"
            )
        self.joined += n

    def line(self, prefix: str = "nmtdecode:") -> str:
        rate = self.target_tokens / self.seconds if self.seconds > 0 else 0.0
        text = (
            f"{prefix} {count(self.sentences, 'sentence')}, {count(self.target_tokens, 'target token')} "
            f"in {self.seconds:.2f} s ({rate:.1f} tokens/s)"
        )
        if self.truncated:
            text += f"; {count(self.truncated, 'source line')} truncated"
        if self.replaced:
            text += f"; {count(self.replaced, 'line')} with invalid UTF-8 replaced"
        if self.joined:
            text += f"; {count(self.joined, 'output')} with line breaks written as spaces"
        if self.unfinished:
            text += (
                f"; {self.unfinished} of {count(self.sentences, 'output')} unfinished (cut by the step limit "
                "before EOS: raise --max-length)"
            )
        return text


def timing(load_seconds: float | None, wall_seconds: float) -> str:
    """What a run's last summary line adds: the model's load time (None: loaded before) and the wall time."""
    loaded = "" if load_seconds is None else f"model loaded in {load_seconds:.2f} s, "
    return f"; {loaded}{wall_seconds:.2f} s in all"


def seconds_left(elapsed: float, done: int, total: int | None) -> float | None:
    """The time left when `done` of `total` units (source bytes) took `elapsed` seconds: a rate
    per byte of source, not per line, since batches come longest first (batching.py) and a
    line-rate would overestimate the rest. None while nothing is done or the total is unknown."""
    if not total or done <= 0:
        return None
    return elapsed * max(total - done, 0) / done
