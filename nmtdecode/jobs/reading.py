"""Reading a job's input: files or stdin (`-`), UTF-8, one line per sentence.

The line ending (`\\n` or `\\r\\n`) and a UTF-8 byte-order mark at the start are
removed; a last line without a final newline is read like any other. Invalid UTF-8
stops the job naming the file and line, or is decoded as U+FFFD. The --prefix file
is read in step with the source. What an empty line becomes is the engine's
(engine.make_example); batching is batching.py's.

A pipe, a terminal or a FIFO is read as its lines arrive (`ArrivingLines`): the reader
tells whether another line is already waiting (`LineReader.ready`), so that the job
decodes what has come instead of waiting for more, and counts the time it spent
blocked on input (`LineReader.waited`), which is not decoding time.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import select
import stat
import struct
import sys
import termios
import time
from typing import BinaryIO, Iterable, Iterator


class InputError(RuntimeError):
    """The input cannot be read (runtime error, exit code 1)."""


class LineReader:
    """Lines of a UTF-8 file or of stdin (`-`), without line endings and BOM.

    Invalid UTF-8 raises InputError naming the file and line, or with
    on_invalid="replace" becomes U+FFFD and is counted in `replaced_lines`.
    `position()` is the bytes read so far and their hash: what identifies the
    input lines already translated when a job resumes.
    """

    def __init__(self, path: str, on_invalid: str = "error") -> None:
        self.path, self.on_invalid = path, on_invalid
        self.name = "<stdin>" if path == "-" else path
        self.replaced_lines = 0
        self.consumed, self.hash = 0, hashlib.blake2b(digest_size=16)
        self.arriving: ArrivingLines | None = None  # a pipe, terminal or FIFO, once reading started

    def position(self) -> tuple[int, str]:
        """(bytes read, blake2b of those bytes) up to the end of the last line read."""
        return self.consumed, self.hash.hexdigest()

    def ready(self) -> bool:
        """Whether the next line (or the end of the input) can be read without waiting for input:
        always from a file; from a pipe or terminal when it has arrived."""
        return self.arriving is None or self.arriving.ready()

    @property
    def waited(self) -> float:
        """Seconds spent blocked waiting for input to arrive (0 for a file)."""
        return 0.0 if self.arriving is None else self.arriving.waited

    def __iter__(self) -> Iterator[str]:
        stream = _stdin() if self.path == "-" else _open(self.path)
        lines: Iterable[bytes] = stream
        fd = _pipe_descriptor(stream)
        if fd is not None:
            self.arriving = ArrivingLines(fd)
            lines = self.arriving
        try:
            for number, raw in enumerate(lines, start=1):
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
                raise InputError(
                    f"{self.name}:{number}: invalid UTF-8 at byte {e.start} "
                    "(--on-invalid-utf8 replace decodes it as U+FFFD)"
                ) from None
            self.replaced_lines += 1
            return raw.decode("utf-8", errors="replace")


class ArrivingLines:
    """The lines of a pipe, terminal or FIFO (a file descriptor), as they arrive. `ready()` says,
    without waiting, whether a whole line (or the end) is there; iterating waits only when none
    is, and counts that time in `waited`. The descriptor is read directly: nothing else reads it."""

    def __init__(self, fd: int) -> None:
        self.fd, self.pending, self.ended, self.waited = fd, bytearray(), False, 0.0

    def ready(self) -> bool:
        if b"\n" not in self.pending and not self.ended and select.select([self.fd], [], [], 0)[0]:
            self._read()  # what is there: a read of a readable descriptor does not wait
        return b"\n" in self.pending or self.ended

    def _read(self) -> None:
        data = os.read(self.fd, 1 << 16)
        self.pending += data
        self.ended = not data

    def __iter__(self) -> Iterator[bytes]:
        while True:
            end = self.pending.find(b"\n")
            if end >= 0:
                line = bytes(self.pending[: end + 1])
                del self.pending[: end + 1]  # a bytearray drops its front without copying the rest
                yield line
            elif self.ended:
                if self.pending:
                    yield bytes(self.pending)
                return
            else:
                start = time.perf_counter()
                self._read()  # waits for input
                self.waited += time.perf_counter() - start


def _pipe_descriptor(stream: BinaryIO) -> int | None:
    """The descriptor of a stream that is a pipe, terminal, socket or FIFO (nothing has read from it
    yet: the job's reader is the first), or None: a regular file, which is always ready, or a
    stream in memory."""
    try:
        fd = stream.fileno()
        mode = os.fstat(fd).st_mode
    except (OSError, ValueError, AttributeError):  # io.BytesIO and the like: no descriptor
        return None
    return None if stat.S_ISREG(mode) else fd


def read_lines(path: str, on_invalid: str = "error") -> Iterator[str]:
    return iter(LineReader(path, on_invalid))


def check_readable(path: str) -> None:
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


class PrefixLines:
    """The --prefix file, read in step with the source: `line(i)` for increasing line indices i
    (lines a resumed job skips are read past). It must have exactly one line per source line:
    checked before decoding when both are regular files (files.check_prefix), else as they are read."""

    def __init__(self, path: str, on_invalid: str = "error") -> None:
        self.path, self.lines, self.read = path, iter(LineReader(path, on_invalid)), 0

    def line(self, index: int) -> str:
        for _ in range(index - self.read + 1):
            current = next(self.lines, None)
            if current is None:
                raise InputError(
                    f"--prefix {self.path} has {self.read} lines, fewer than the source "
                    f"(line {index + 1}); give one prefix line per source line"
                )
            self.read += 1
        return current

    def check_end(self) -> None:
        """After the last source line: the prefix file has no more lines."""
        if next(self.lines, None) is not None:
            raise InputError(
                f"--prefix {self.path} has more lines than the source ({self.read}); "
                "give one prefix line per source line"
            )


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


def _stdin() -> BinaryIO:
    if sys.stdin is None:  # started with standard input closed (`<&-`)
        raise InputError("cannot read <stdin>: standard input is closed (give --src FILE)")
    return sys.stdin.buffer


def _open(path: str) -> BinaryIO:
    try:
        return open(path, "rb")
    except OSError as e:
        raise InputError(f"cannot read {path}: {e.strerror}") from None


def has_ended_empty(path: str) -> bool:
    """Whether the input `path` (`-`: stdin) is known, without reading or waiting, to hold no bytes:
    an empty regular file (or the rest of one redirected to stdin), /dev/null, or stdin as a pipe,
    FIFO or socket whose writer has closed it with nothing written; then the model need not load.
    Anything else, a pipe still open included, is not known to be empty: False."""
    try:
        if path == "-":
            if sys.stdin is None:
                return False  # closed: reading it is the error
            fd = sys.stdin.buffer.fileno()
            offset = sys.stdin.buffer.tell() if stat.S_ISREG(os.fstat(fd).st_mode) else 0
            return _ended(fd, offset)
        if not os.path.isfile(path):
            return False  # a FIFO is not opened before the job reads it; a device is read as it comes
        return os.path.getsize(path) == 0
    except (OSError, ValueError, AttributeError):  # stdin without a descriptor: read as it comes
        return False


def _ended(fd: int, offset: int) -> bool:
    """Whether the descriptor `fd` holds nothing from `offset` on, and never will: a regular file
    ends there, it is /dev/null, or it is a pipe, FIFO or socket that is readable with no byte
    waiting in it (its writer closed it; FIONREAD counts the bytes without reading them)."""
    st = os.fstat(fd)
    if stat.S_ISREG(st.st_mode):
        return st.st_size <= offset
    if stat.S_ISCHR(st.st_mode):  # a terminal or another device: only /dev/null is known to be empty
        return st.st_rdev == os.stat(os.devnull).st_rdev
    if not select.select([fd], [], [], 0)[0]:
        return False
    waiting = fcntl.ioctl(fd, termios.FIONREAD, struct.pack("i", 0))
    return struct.unpack("i", waiting)[0] == 0
