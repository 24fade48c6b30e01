"""Where bytes meet the decoder: reading sources, batching, and writing in input order.

Reading: files or stdin (`-`), UTF-8, one example per line. The line ending
(`\\n` or `\\r\\n`) and a UTF-8 byte-order mark at the start are removed. An
empty or whitespace-only line is not decoded: it gets an empty output in its
place. A last line without a final newline is read like any other.

Batching: lines are read in chunks, sorted by length inside a chunk (longest
first, as CTranslate2 does: similar lengths waste less padding, and the rows
that finish first are at the end) and cut into batches of N sentences or of
at most N tokens counting padding (rows x longest source).

Writing: `OrderedWriter` takes results in any order and emits them strictly
in input order, one entry per input line.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field
from typing import Iterable, Iterator

from .search.base import Hypothesis

SORT_CHUNK_BATCHES = 32  # batches' worth of lines sorted together


class InputError(RuntimeError):
    """The input cannot be read (runtime error, exit code 1)."""


@dataclass
class Example:
    index: int  # 0-based line number in the input
    text: str
    ids: list[int] | None = None  # None: nothing to decode (empty line)
    truncated: bool = False


@dataclass
class Result:
    index: int
    hypotheses: list[Hypothesis]
    texts: list[str] = field(default_factory=list)


def read_lines(path: str) -> Iterator[str]:
    """Lines of a UTF-8 file or of stdin (`-`), without line endings and BOM."""
    stream = sys.stdin.buffer if path == "-" else _open(path)
    name = "<stdin>" if path == "-" else path
    try:
        for number, raw in enumerate(stream, start=1):
            if number == 1 and raw.startswith(b"\xef\xbb\xbf"):
                raw = raw[3:]
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError as e:
                raise InputError(f"{name}:{number}: invalid UTF-8 at byte {e.start}") from None
            yield text.rstrip("\r\n")
    finally:
        if stream is not sys.stdin.buffer:
            stream.close()


def _open(path: str):
    try:
        return open(path, "rb")
    except OSError as e:
        raise InputError(f"cannot read {path}: {e.strerror}") from None


def batches(examples: Iterable[Example], batch_size: int, batch_type: str = "sents") -> Iterator[list[Example]]:
    """Length-sorted batches, chunk by chunk. Examples with nothing to decode
    (ids None) come together in batches of their own."""
    chunk_lines = batch_size * SORT_CHUNK_BATCHES if batch_type == "sents" else max(batch_size, 1024)
    chunk: list[Example] = []
    for example in examples:
        chunk.append(example)
        if len(chunk) >= chunk_lines:
            yield from _cut(chunk, batch_size, batch_type)
            chunk = []
    yield from _cut(chunk, batch_size, batch_type)


def _cut(chunk: list[Example], batch_size: int, batch_type: str) -> Iterator[list[Example]]:
    empty = [e for e in chunk if e.ids is None]
    if empty:
        yield empty  # a batch of lines with nothing to decode
    chunk = sorted((e for e in chunk if e.ids is not None), key=lambda e: len(e.ids), reverse=True)
    batch: list[Example] = []  # sorted is stable: equal lengths keep their input order
    for example in chunk:
        longest = len(batch[0].ids) if batch else len(example.ids)  # sorted: the first is the longest
        size = len(batch) + 1 if batch_type == "sents" else (len(batch) + 1) * longest
        if batch and size > batch_size:
            yield batch
            batch = []
        batch.append(example)
    if batch:
        yield batch


def format_result(result: Result, fmt: str, token_scores: bool = False) -> str:
    """The output text of one input line, with its trailing newline(s)."""
    if fmt == "text":
        return (result.texts[0] if result.texts else "") + "\n"
    if fmt == "nbest":
        return "".join(f"{result.index} ||| {text} ||| {hyp.score:.6f}\n" for hyp, text in zip(result.hypotheses, result.texts))
    hyps = []
    for hyp, text in zip(result.hypotheses, result.texts):
        entry = {"text": text, "score": hyp.score, "log_prob": hyp.total, "ended": hyp.ended}
        if token_scores:
            entry["tokens"] = hyp.tokens
            entry["token_scores"] = hyp.token_scores
        hyps.append(entry)
    return json.dumps({"index": result.index, "hypotheses": hyps}, ensure_ascii=False) + "\n"


class OrderedWriter:
    """Writes results in input order, whatever order they arrive in."""

    def __init__(self, stream, fmt: str, token_scores: bool = False):
        self.stream, self.fmt, self.token_scores = stream, fmt, token_scores
        self.pending: dict[int, Result] = {}
        self.next_index = 0

    def put(self, result: Result):
        self.pending[result.index] = result
        while self.next_index in self.pending:
            self.stream.write(format_result(self.pending.pop(self.next_index), self.fmt, self.token_scores))
            self.next_index += 1

    def flush(self):
        self.stream.flush()

    def close(self):
        if self.pending:
            raise RuntimeError(f"results for lines {sorted(self.pending)[:5]}... could not be written in order")
        self.flush()
