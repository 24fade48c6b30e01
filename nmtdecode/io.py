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
in input order, one entry per input line. The output file itself (temporary
file, journal, lock, resume) is `output.py`.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import stat
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


class LineReader:
    """Lines of a UTF-8 file or of stdin (`-`), without line endings and BOM.

    Invalid UTF-8 raises InputError naming the file and line, or with
    on_invalid="replace" becomes U+FFFD and is counted in `replaced_lines`.
    `position()` is the bytes read so far and their hash: what identifies the
    input lines already translated when a job resumes.
    """

    def __init__(self, path: str, on_invalid: str = "error"):
        self.path, self.on_invalid = path, on_invalid
        self.name = "<stdin>" if path == "-" else path
        self.replaced_lines = 0
        self.consumed, self.hash = 0, hashlib.blake2b(digest_size=16)

    def position(self) -> tuple[int, str]:
        """(bytes read, blake2b of those bytes) up to the end of the last line read."""
        return self.consumed, self.hash.hexdigest()

    def __iter__(self) -> Iterator[str]:
        stream = _stdin() if self.path == "-" else _open(self.path)
        try:
            for number, raw in enumerate(stream, start=1):
                self.consumed += len(raw)
                self.hash.update(raw)
                if number == 1 and raw.startswith(b"\xef\xbb\xbf"):
                    raw = raw[3:]
                yield self._decode(raw, number).rstrip("\r\n")
        finally:
            if self.path != "-":
                stream.close()

    def _decode(self, raw: bytes, number: int) -> str:
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError as e:
            if self.on_invalid != "replace":
                raise InputError(f"{self.name}:{number}: invalid UTF-8 at byte {e.start} "
                                 "(--on-invalid-utf8 replace decodes it as U+FFFD)") from None
            self.replaced_lines += 1
            return raw.decode("utf-8", errors="replace")


def read_lines(path: str, on_invalid: str = "error") -> Iterator[str]:
    return iter(LineReader(path, on_invalid))


def check_readable(path: str):
    """Fail early (before a model loads) on an input that cannot be read. A FIFO is not
    opened here: opening and closing it would disturb the process writing into it."""
    if path == "-":
        return
    try:
        mode = os.stat(path).st_mode
    except OSError as e:
        raise InputError(f"cannot read {path}: {e.strerror}") from None
    if stat.S_ISDIR(mode):
        raise InputError(f"cannot read {path}: it is a directory")
    if stat.S_ISREG(mode):
        _open(path).close()
    elif not os.access(path, os.R_OK):
        raise InputError(f"cannot read {path}: permission denied")


def count_lines(path: str) -> int | None:
    """Lines in a regular file, or in the rest of a regular file redirected to stdin (`< FILE`);
    a last line without a newline counts. None for pipes and devices, which cannot be read twice."""
    if path != "-":
        if not os.path.isfile(path):
            return None
        with _open(path) as f:
            return _count_from(f.fileno(), 0)
    stdin = getattr(sys.stdin, "buffer", sys.stdin)
    try:
        fd = stdin.fileno()
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        return _count_from(fd, stdin.tell())  # tell(): the reader's position, its buffer taken into account
    except (OSError, ValueError, AttributeError):  # stdin closed or without a descriptor
        return None


def _count_from(fd: int, offset: int) -> int:
    """Lines from `offset` to the end, read with pread: the file position is left where it is."""
    lines, last = 0, b"\n"
    while block := os.pread(fd, 1 << 20, offset):
        lines += block.count(b"\n")
        last, offset = block[-1:], offset + len(block)
    return lines + (last != b"\n")


def _stdin():
    if sys.stdin is None:  # started with standard input closed (`<&-`)
        raise InputError("cannot read <stdin>: standard input is closed (give --src FILE)")
    return sys.stdin.buffer


def _open(path: str):
    try:
        return open(path, "rb")
    except OSError as e:
        raise InputError(f"cannot read {path}: {e.strerror}") from None


def chunk_size(batch_size: int, batch_type: str) -> int:
    """Lines sorted together: enough for many full batches."""
    return batch_size * SORT_CHUNK_BATCHES if batch_type == "sents" else max(batch_size, 1024)


def chunks(items: Iterable, size: int) -> Iterator[list]:
    """Consecutive lists of `size` items (the last may be shorter)."""
    chunk = []
    for item in items:
        chunk.append(item)
        if len(chunk) >= size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


def cut(chunk: list[Example], batch_size: int, batch_type: str) -> Iterator[list[Example]]:
    """One chunk -> batches, longest sources first."""
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
    if fmt == "nbest-marian":  # Marian's: the model's total log-prob as feature F0, then the ranking score
        return "".join(f"{result.index} ||| {text} ||| F0= {hyp.total:.6f} ||| {hyp.score:.6f}\n"
                       for hyp, text in zip(result.hypotheses, result.texts))
    hyps = []
    for hyp, text in zip(result.hypotheses, result.texts):
        entry = {"text": text, "score": _finite(hyp.score), "log_prob": _finite(hyp.total), "ended": hyp.ended}
        if token_scores or hyp.alignment is not None or hyp.attention is not None:
            entry["tokens"] = hyp.tokens
        if token_scores:  # one per token; EOS's apart (null when the step limit cut the hypothesis)
            entry["token_scores"] = hyp.token_scores
            entry["eos_score"] = hyp.eos_score
        if hyp.alignment is not None:
            entry["alignment"] = hyp.alignment
        if hyp.attention is not None:
            entry["attention"] = hyp.attention
        hyps.append(entry)
    return json.dumps({"index": result.index, "hypotheses": hyps}, ensure_ascii=False) + "\n"


def _finite(x: float) -> float | None:
    """JSON has no infinity: a hypothesis with no possible continuation reports null."""
    return x if math.isfinite(x) else None


class OrderedWriter:
    """Writes results in input order, whatever order they arrive in.

    `stream` is a text stream; `first_index` is the input line the output starts at
    (not 0 when a job resumes).
    """

    def __init__(self, stream, fmt: str, token_scores: bool = False, first_index: int = 0):
        self.stream, self.fmt, self.token_scores = stream, fmt, token_scores
        self.pending: dict[int, Result] = {}
        self.next_index = first_index

    def put(self, result: Result):
        self.pending[result.index] = result
        while self.next_index in self.pending:
            self.stream.write(format_result(self.pending.pop(self.next_index), self.fmt, self.token_scores))
            self.next_index += 1

    def close(self):
        if self.pending:
            raise RuntimeError(f"results for lines {sorted(self.pending)[:5]}... could not be written in order")
        self.stream.flush()
