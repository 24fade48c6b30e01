"""Batching: a job's examples in chunks, each sorted by length and cut into batches.

Lines are read in chunks, sorted by length inside a chunk (longest first, as
CTranslate2 does: similar lengths waste less padding, and the rows that finish
first are at the end) and cut into batches of N sentences or of at most N
tokens counting padding (rows x longest source). Lines with nothing to decode
(empty ones) form a batch of their own.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, Iterable, Iterator

if TYPE_CHECKING:  # only named: the job layer reads and batches lines before torch is imported
    from ..search.base import Hypothesis

SORT_CHUNK_BATCHES = 32  # batches' worth of lines sorted together


@dataclass
class Example:
    index: int  # 0-based line number in the input
    text: str | list[str]  # the line, or its pieces (the Python API's token input)
    ids: list[int] | None = None  # None: nothing to decode (empty line)
    truncated: bool = False
    prefix: list[int] | None = None  # target ids the output must start with (--prefix)
    target: list[int] | None = None  # target ids to score (`score`)

    def ids_to_decode(self) -> list[int]:
        """`ids`, of a line in a batch to decode (`cut` keeps the lines without any apart)."""
        if self.ids is None:
            raise ValueError(f"input line {self.index + 1} has nothing to decode")
        return self.ids

    def target_to_score(self) -> list[int]:
        """`target`, of a pair to score (jobs/scoring.py:pair_examples sets it)."""
        if self.target is None:
            raise ValueError(f"input line {self.index + 1} has no target to score")
        return self.target


@dataclass
class Result:
    index: int
    hypotheses: list[Hypothesis]
    texts: list[str] = field(default_factory=list)
    search: dict | None = None  # the line's search, for --dump-beam (beam_dump.py)
    # --report-align: the source's pieces, each hypothesis's pieces and its Pharaoh pairs (word_alignment.py)
    source_pieces: list[str] | None = None
    pieces: list[list[str]] | None = None
    pharaoh: list[str] | None = None


@dataclass
class PairScore:
    """A (source, target) pair as `score` scores it: the total log-probability of the target (EOS
    included), and with per-token scores its tokens, their log-probabilities and EOS's."""

    index: int
    total: float
    length: int  # the tokens scored: the target's and its EOS (a forced first token is not chosen: not counted)
    tokens: list[int] | None = None  # the target's ids, any forced first token included, EOS not
    token_scores: list[float] | None = None  # one per token (a forced token: 0)
    eos_score: float | None = None

    def by_token(self) -> tuple[list[int], list[float], float]:
        """tokens, token_scores and eos_score, of a pair scored token by token."""
        if self.tokens is None or self.token_scores is None or self.eos_score is None:
            raise ValueError(f"pair {self.index + 1} was not scored token by token")
        return self.tokens, self.token_scores, self.eos_score


def finite_or_null(x: float) -> float | None:
    """JSON has no infinity: an impossible score (a hypothesis with no possible continuation, an
    empty beam slot) is null."""
    return x if math.isfinite(x) else None


def chunk_size(batch_size: int, batch_type: str) -> int:
    """Lines sorted together: enough for many full batches."""
    return batch_size * SORT_CHUNK_BATCHES if batch_type == "sents" else max(batch_size, 1024)


def chunks(items: Iterable, size: int, more_ready: Callable[[], bool] | None = None) -> Iterator[list]:
    """Consecutive lists of `size` items (the last may be shorter); with `more_ready`, a list also
    ends when it says no more item can be had without waiting."""
    chunk = []
    for item in items:
        chunk.append(item)
        if len(chunk) >= size or (more_ready is not None and not more_ready()):
            yield chunk
            chunk = []
    if chunk:
        yield chunk


def cut(chunk: list[Example], batch_size: int, batch_type: str) -> Iterator[list[Example]]:
    """One chunk -> batches, longest sources first."""
    empty = [e for e in chunk if e.ids is None]
    if empty:
        yield empty  # a batch of lines with nothing to decode
    chunk = sorted((e for e in chunk if e.ids is not None), key=lambda e: len(e.ids_to_decode()), reverse=True)
    batch: list[Example] = []  # sorted is stable: equal lengths keep their input order
    for example in chunk:
        longest = len((batch[0] if batch else example).ids_to_decode())  # sorted: the first is the longest
        size = len(batch) + 1 if batch_type == "sents" else (len(batch) + 1) * longest
        if batch and size > batch_size:
            yield batch
            batch = []
        batch.append(example)
    if batch:
        yield batch
