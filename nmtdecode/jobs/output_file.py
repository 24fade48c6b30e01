"""The output file of a job: complete or resumable, never two jobs spliced, never the input.

`--output FILE` (a regular file, or a name not taken yet) is written as
FILE.tmp and renamed to FILE when the job completes. FILE.tmp.progress, the
journal, records after each chunk of input how many input lines and bytes of
FILE.tmp are final, a hash of those bytes, the job signature (what the output
depends on), a hash of the input bytes those lines came from, and a checksum of
the record itself. `--resume` checks the record and that FILE.tmp holds the
bytes it describes, truncates FILE.tmp to them, re-reads and re-hashes the input
up to the recorded line and continues; so the finished file is byte-identical to
an uninterrupted run, and an edited or corrupt record or FILE.tmp is refused.

Misuse is refused or made harmless:

* A job holds an exclusive lock on FILE.lock (flock) from before the model
  loads until it ends; a second job on the same FILE fails at once (exit 2).
  The lock is checked again whenever the job writes beside FILE (opening,
  each checkpoint, the final rename): if FILE.lock or FILE.tmp is no longer
  the file this job holds (removed, or another job's), the job stops (exit 1)
  and touches neither.
* `--src` naming FILE or one of the files beside it (same inode, through
  links) is refused before anything is opened for writing.
* Files beside FILE are created exclusively (O_EXCL | O_NOFOLLOW) after
  unlinking whatever held the name: a planted link is removed, never followed.
* A new job removes the journal before it writes anything, so a later
  `--resume` never continues one job's output with another's; and once its
  outputs are claimed (before the model loads, which can take minutes) it
  keeps a FILE.tmp, empty until the first checkpoint, until it completes, so
  that a `--resume` after it stopped, even during the load, redoes it rather
  than taking an older FILE for its output.
* FILE that is a symbolic link or not a regular file (a device such as
  /dev/null or /dev/stdout, a FIFO) is written through: no temporary file,
  no rename, no lock and no resume.
* FILE, when replaced, keeps its permission bits.
* `--resume` when FILE exists and neither FILE.tmp nor the journal does: the
  job completed, there is nothing to do.
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import json
import os
import stat
import sys
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Iterable, Iterator

from ..options.config import ConfigError


def side_files(path: str) -> tuple[str, str, str, str]:
    """What a job writes beside its output FILE: FILE.tmp, its journal FILE.tmp.progress, the
    journal's next version, and the lock FILE.lock."""
    return f"{path}.tmp", f"{path}.tmp.progress", f"{path}.tmp.progress.new", f"{path}.lock"


JOURNAL_LIMIT = 1 << 16  # a progress record is a few hundred bytes


# What a job stopped with only outputs written directly (stdout, a link, a device or a FIFO) left.
NOT_RESUMABLE = (
    "what was written so far is kept, but the output (standard output, a link, a device or a FIFO) "
    "is written directly, so the job cannot be resumed: run it again"
)


class OutputRefused(ConfigError):
    """The output cannot be opened or resumed as asked (usage error, exit code 2)."""


class OutputWriteError(RuntimeError):
    """Writing the output failed, e.g. the disk is full (runtime error, exit code 1)."""


class OutputTaken(RuntimeError):
    """FILE.lock or FILE.tmp stopped being this job's while it ran (exit code 1)."""


@dataclass
class Progress:
    """What a journal records: the first `lines` input lines (`input_bytes` bytes, hashed as
    `input_hash`) have their output in the first `bytes` bytes of FILE.tmp."""

    lines: int = 0
    bytes: int = 0
    input_bytes: int = 0
    input_hash: str = ""
    output_hash: str = ""  # sha256 of those first `bytes` bytes of FILE.tmp


class OutputFile:
    """One job's `--output`. Use: refuse_source, claim, open, checkpoint..., finish or
    abandon, and release (always)."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.tmp, self.journal, _, self.lock_path = side_files(path)
        self.direct = path == "-" or _written_through(path)
        self.stream: Any = None  # _Sink, or sys.stdout for `-`, once open
        self.resumed = Progress()
        self._recorded = (0, (0, ""))  # the lines and input position of the last checkpoint
        self.marks = False  # resumable: a FILE.tmp with nothing final is kept (empty) as a mark
        self._lock_fd: int | None = None

    def refuse_source(self, src: str) -> None:
        """Refuse an input that this job would overwrite before reading it: the output itself
        or a file beside it, compared by device and inode (so through links as well)."""
        if self.path == "-":
            return
        source = _regular_identity(src)
        if source is None:
            return
        for name in (self.path, *side_files(self.path)):
            try:
                st = os.stat(name)
            except OSError:
                continue
            if (st.st_dev, st.st_ino) == source:
                what = "the output file" if name == self.path else f"{name}, a file the job writes for --output"
                raise OutputRefused(
                    f"--src {src} is {what}; it would be overwritten before it is read: "
                    "choose another --output (or --output-dir, --suffix)"
                )

    def claim(self, resume: bool, resumable: bool = True) -> bool:
        """Before the model loads: lock FILE (a second job fails at once) and check that the
        directory is writable. Returns True when --resume finds the job already complete.

        resumable: False for `score` and torchrun's merged FILE (whose parts carry the job's
        progress): nothing is kept of them when they stop (see `mark_unfinished`)."""
        if self.path == "-" and sys.stdout is None:  # started with standard output closed (`>&-`)
            raise OutputRefused("output: standard output is closed (give --output FILE)")
        if self.direct:
            if resume:
                raise OutputRefused(
                    f"--resume: {self.path} is not a regular file (a link, device or pipe is "
                    "written directly, without FILE.tmp), so there is nothing to resume"
                )
            if os.path.exists(self.path) and not os.access(self.path, os.W_OK):
                raise OutputRefused(f"output: cannot write {self.path}: permission denied")
            return False
        self._lock_fd = _lock(self.lock_path, self.path)
        self.marks = resumable
        if not resume or not os.path.lexists(self.path) or os.path.lexists(self.tmp):
            return False
        if os.path.lexists(self.journal) and self._renamed_complete():
            remove(self.journal)  # stopped after the final rename, before this: the job is complete
        return not os.path.lexists(self.journal)

    def _renamed_complete(self) -> bool:
        """Whether the journal records a complete output that is FILE, byte for byte (its hash)."""
        try:
            record = self._journal_record()
            with open(self.path, "rb") as f:
                digest = _hash_prefix(f.fileno(), os.fstat(f.fileno()).st_size)
        except (OutputRefused, OSError):
            return False
        return (
            isinstance(record, dict)
            and record.get("complete") is True
            and record.get("check") == _checksum(record)
            and record.get("output_hash") == digest.hexdigest()
        )

    def mark_unfinished(self) -> None:
        """A new resumable job whose run has started: an empty FILE.tmp and no journal say that
        FILE is not its output yet, so that `--resume` after a stop starts it over instead of
        finding an older FILE complete. Kept until the job completes (`abandon` empties it)."""
        if self.marks and not self.direct and self.stream is None:
            self._check_held()
            remove(self.journal)  # an earlier job's record must never describe this job's FILE.tmp
            os.close(_create(self.tmp))

    def open(self, resume: bool, signature: str) -> int:
        """Open for writing; returns the number of input lines already done."""
        self.signature = signature
        if self.path == "-":
            self.stream = sys.stdout
            return 0
        if self.direct:
            self.stream = _Sink(_open_through(self.path), self.path)
            return 0
        self._check_held()
        if self.resumes(resume):
            self.resumed = self._read_journal()
            self._recorded = (self.resumed.lines, (self.resumed.input_bytes, self.resumed.input_hash))
            fd, digest = self._reopen_tmp(self.resumed)
            self.stream = _Sink(fd, self.tmp, self.resumed.bytes, digest)
            return self.resumed.lines
        remove(self.journal)  # an earlier job's record must never describe this job's FILE.tmp
        self.stream = _Sink(_create(self.tmp), self.tmp, digest=hashlib.sha256())
        return 0

    def resumes(self, resume: bool) -> bool:
        """Whether `open(resume)` continues a partial output: FILE.tmp with its journal, under --resume."""
        return resume and not self.direct and os.path.lexists(self.tmp) and os.path.lexists(self.journal)

    def checkpoint(self, lines_done: int, input_position: tuple[int, str], complete: bool = False) -> None:
        """Everything up to input line `lines_done` is written: make it durable and record it.
        `complete`: the whole output (written by `finish`, just before the rename)."""
        self.stream.flush()
        if self.direct:
            return
        self._check_held()
        self._recorded = (lines_done, input_position)
        input_bytes, input_hash = input_position
        record = {
            "lines": lines_done,
            "bytes": self.stream.tell(),
            "input_bytes": input_bytes,
            "input_hash": input_hash,
            "output_hash": self.stream.digest.hexdigest(),
            "signature": self.signature,
        }
        if complete:
            record["complete"] = True
        record["check"] = _checksum(record)
        new = self.journal + ".new"
        try:
            fd = _create(new)
        except OutputRefused as e:  # mid-run: a runtime failure (exit 1), not a usage error
            raise OutputWriteError(str(e)) from None
        sink = _Sink(fd, new)
        sink.write(json.dumps(record))
        sink.close()
        _replace(new, self.journal)

    def finish(self) -> None:
        """Complete FILE: recorded as complete (so that a stop between the rename and the removal
        of the journal leaves a job `--resume` finds complete, not one it redoes), renamed, and
        the journal removed."""
        self.stream.flush()
        if self.path == "-":
            return
        if not self.direct:
            self.checkpoint(*self._recorded, complete=True)  # the last chunk's lines: all of them
            _keep_mode(self.path, self.stream.fd)
        self.stream.close()
        if not self.direct:
            _replace(self.tmp, self.path)
            remove(self.journal)

    def abandon(self) -> None:
        """After a failure: close, keeping FILE.tmp and its journal for --resume. A FILE.tmp with
        no journal holds nothing final: emptied, it stays as the mark that FILE is not this job's
        output (removed when the job is not resumable)."""
        if self.stream is None or self.path == "-":
            return
        ours = self._holds()  # another job's files are left alone
        self.stream.close(quietly=True)
        if ours and not self.direct and not os.path.lexists(self.journal):
            if self.marks:
                _empty(self.tmp)
            else:
                remove(self.tmp, quietly=True)

    def release(self) -> None:
        """Give up the lock (and its file) at the end of the job, whatever happened."""
        if self._lock_fd is not None:
            if _is_file(self.lock_path, self._lock_fd):  # not another job's, made after ours was removed
                remove(self.lock_path, quietly=True)  # while still holding it: see _lock
            os.close(self._lock_fd)
            self._lock_fd = None

    def _holds(self) -> bool:
        """Whether FILE.lock is still the file this job locked, and FILE.tmp (when open) the file
        it writes: a process that removed the lock lets another job in, which makes its own."""
        if self._lock_fd is None:
            return True  # no lock taken: nothing to compare (written through)
        tmp_ours = self.stream is None or self.stream.fd < 0 or _is_file(self.tmp, self.stream.fd)
        return _is_file(self.lock_path, self._lock_fd) and tmp_ours

    def _check_held(self) -> None:
        if not self._holds():
            raise OutputTaken(
                f"output: {self.lock_path} was removed while this job ran, so another job may be "
                f"writing {self.path}: stopping without touching it or {self.tmp}"
            )

    def _journal_record(self) -> dict:
        """The journal as a JSON object (a regular file, never followed if a link), or OutputRefused."""
        name = self.journal
        try:
            fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
        except OSError as e:
            raise OutputRefused(f"--resume: cannot read {name}: {_reason(e)}") from None
        with os.fdopen(fd, "rb") as f:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise OutputRefused(f"--resume: {name} is not a regular file")
            data = f.read(JOURNAL_LIMIT + 1)
        try:
            record = json.loads(data.decode("utf-8"))
        except (UnicodeDecodeError, ValueError):
            record = None
        if not isinstance(record, dict):
            raise OutputRefused(
                f"--resume: {name} is not a valid progress record (not a JSON object); "
                "run without --resume to start over"
            )
        return record

    def _read_journal(self) -> Progress:
        name, record = self.journal, self._journal_record()
        if record.get("signature") != self.signature:
            raise OutputRefused(
                f"--resume: {self.tmp} was written with other options or another model; "
                "run without --resume to start over"
            )
        try:
            progress = Progress(
                **{k: record[k] for k in ("lines", "bytes", "input_bytes", "input_hash", "output_hash")}
            )
        except KeyError as e:
            raise OutputRefused(
                f"--resume: {name} is not a valid progress record (no {e.args[0]!r}); "
                "run without --resume to start over"
            ) from None
        if not (
            all(type(v) is int and v >= 0 for v in (progress.lines, progress.bytes, progress.input_bytes))
            and isinstance(progress.input_hash, str)
            and isinstance(progress.output_hash, str)
        ):
            raise OutputRefused(
                f"--resume: {name} is not a valid progress record (bad values); run without --resume to start over"
            )
        if record.get("check") != _checksum(record):
            raise OutputRefused(
                f"--resume: {name} is not a valid progress record (edited or corrupt: its checksum "
                "does not match); run without --resume to start over"
            )
        return progress

    def _reopen_tmp(self, progress: Progress) -> tuple[int, Any]:
        """FILE.tmp opened for appending after the `progress.bytes` bytes its record describes,
        once their hash is checked, and that hash to go on from."""
        size = progress.bytes
        try:
            fd = os.open(self.tmp, os.O_RDWR | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
        except OSError as e:
            raise OutputRefused(f"--resume: cannot open {self.tmp}: {_reason(e)}") from None
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_size < size:
            os.close(fd)
            problem = "is not a regular file" if not stat.S_ISREG(st.st_mode) else "is shorter than its progress record"
            raise OutputRefused(f"--resume: {self.tmp} {problem}")
        os.set_blocking(fd, True)
        digest = _hash_prefix(fd, size)
        if digest.hexdigest() != progress.output_hash:
            os.close(fd)
            raise OutputRefused(
                f"--resume: {self.tmp} does not hold the output its progress record describes "
                "(edited or corrupt); run without --resume to start over"
            )
        os.ftruncate(fd, size)
        os.lseek(fd, size, os.SEEK_SET)
        return fd, digest

    def check_input(self, input_bytes: int, input_hash: str) -> None:
        """That the input lines a resumed job reads past, `input_bytes` bytes hashed as `input_hash`,
        are the input its partial output was made from (the job's source reads them: pipeline.py)."""
        expected = self.resumed
        if (input_bytes, input_hash) != (expected.input_bytes, expected.input_hash):
            raise OutputRefused(
                f"--resume: the input is not the one {self.tmp} was made from (its first "
                f"{expected.lines} lines differ); run without --resume to start over"
            )


@contextmanager
def written_whole(path: str, sources: Iterable[str] = ()) -> Iterator[Any]:
    """The stream of a file written whole (`show`'s page, a CTranslate2 script's translate_file):
    locked, through PATH.tmp, renamed when the block ends and removed when it fails; never one of
    `sources`."""
    out = OutputFile(path)
    for source in sources:
        out.refuse_source(source)
    out.claim(False, resumable=False)
    try:
        out.open(False, signature="")
        try:
            yield out.stream
        except BaseException:
            out.abandon()
            raise
        out.finish()
    finally:
        out.release()


def _checksum(record: dict) -> str:
    """sha256 of a journal record's fields (but `check`), in a fixed order."""
    fields = {k: v for k, v in record.items() if k != "check"}
    return hashlib.sha256(json.dumps(fields, sort_keys=True).encode("utf-8")).hexdigest()


def _hash_prefix(fd: int, size: int) -> Any:  # a hashlib sha256
    """sha256 of the first `size` bytes of the file `fd` (read from its start)."""
    digest, done = hashlib.sha256(), 0
    while done < size:
        data = os.pread(fd, min(1 << 20, size - done), done)
        if not data:
            break
        digest.update(data)
        done += len(data)
    return digest


def _empty(path: str) -> None:
    """Truncate a file of ours to nothing (quietly: this runs while a failure unwinds)."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return
    try:
        os.ftruncate(fd, 0)
    except OSError:
        pass
    finally:
        os.close(fd)


def _written_through(path: str) -> bool:
    """True for a link or a special file (written directly); False for a regular file or a free name."""
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return False
    except OSError as e:
        raise OutputRefused(f"output: cannot use {path}: {_reason(e)}") from None
    if stat.S_ISDIR(mode):
        raise OutputRefused(f"output: {path} is a directory")
    return not stat.S_ISREG(mode)


def _regular_identity(src: str) -> tuple[int, int] | None:
    """(device, inode) of the input when it is a regular file (a path, or stdin redirected from one)."""
    try:
        st = os.stat(src) if src != "-" else os.fstat(sys.stdin.fileno())
    except (OSError, ValueError, AttributeError):  # no such file, or a stdin without a descriptor
        return None
    return (st.st_dev, st.st_ino) if stat.S_ISREG(st.st_mode) else None


def _lock(lock_path: str, path: str) -> int:
    """An exclusive, non-blocking flock on `lock_path`. The file is removed by its holder at the
    end, so after locking check that the name still leads to the file locked (else retry)."""
    while True:
        try:
            fd = os.open(lock_path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o666)
        except OSError as e:  # named by the output, not by the lock file the user never asked for
            if e.errno in (errno.ENOENT, errno.ENOTDIR):
                raise OutputRefused(
                    f"output: cannot write {path}: its directory {os.path.dirname(path) or '.'} does not exist"
                ) from None
            raise OutputRefused(f"output: cannot write {path}: {_reason(e)}") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as e:
            holder = os.read(fd, 32).decode("ascii", "replace").strip()
            os.close(fd)
            if e.errno not in (errno.EAGAIN, errno.EACCES):
                raise OutputRefused(f"output: cannot lock {lock_path}: {_reason(e)}") from None
            who = f"another job (process {holder})" if holder.isdigit() else "another job"
            raise OutputRefused(f"output: {path} is being written by {who}; it holds {lock_path}") from None
        try:
            same = os.path.samestat(os.stat(lock_path, follow_symlinks=False), os.fstat(fd))
        except FileNotFoundError:
            same = False
        if same:
            os.ftruncate(fd, 0)
            os.write(fd, f"{os.getpid()}\n".encode())
            return fd
        os.close(fd)


def _is_file(path: str, fd: int) -> bool:
    """Whether the name `path` (not followed if a link) is the file open as `fd`."""
    try:
        return os.path.samestat(os.stat(path, follow_symlinks=False), os.fstat(fd))
    except OSError:
        return False


def _create(path: str) -> int:
    """A new, empty file at `path`, whatever held the name before (a link is removed, not followed)."""
    remove(path)
    try:
        return os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o666)
    except OSError as e:
        raise OutputRefused(f"output: cannot create {path}: {_reason(e)}") from None


def _open_through(path: str) -> int:
    try:
        return os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o666)
    except OSError as e:
        raise OutputRefused(f"output: cannot write {path}: {_reason(e)}") from None


def remove(path: str, quietly: bool = False) -> None:
    """Remove a file the job owns (a lost one is fine); failing, name it (unless `quietly`)."""
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
    except OSError as e:
        if not quietly:
            raise OutputRefused(f"output: cannot remove {path}: {_reason(e)}") from None


def _replace(source: str, target: str) -> None:
    try:
        os.replace(source, target)
    except OSError as e:
        raise OutputWriteError(f"cannot rename {source} to {target}: {_reason(e)}") from None


def _keep_mode(path: str, fd: int) -> None:
    """Give the new file the permission bits of the regular file it replaces."""
    try:
        st = os.lstat(path)
    except OSError:
        return
    if stat.S_ISREG(st.st_mode):
        os.fchmod(fd, stat.S_IMODE(st.st_mode))


def _reason(error: OSError) -> str:
    return error.strerror or str(error)


class _Sink:
    """UTF-8 text onto a file descriptor, buffered, with `tell` in bytes; a failed write names
    the file (a full disk is an OutputWriteError, not a bare errno)."""

    BUFFER = 1 << 16

    def __init__(self, fd: int, name: str, offset: int = 0, digest: Any = None) -> None:
        """digest: a hashlib object that every byte written goes through (the journal's hash
        of the output), or None."""
        self.fd, self.name, self.digest = fd, name, digest
        self.written, self.pending, self.pending_size = offset, list[bytes](), 0

    def write(self, text: str) -> None:
        data = text.encode("utf-8")
        self.pending.append(data)
        self.pending_size += len(data)
        if self.pending_size >= self.BUFFER:
            self.flush()

    def flush(self) -> None:
        data = b"".join(self.pending)
        view = memoryview(data)
        self.pending, self.pending_size = [], 0
        if self.digest is not None:
            self.digest.update(data)
        while view:
            try:
                count = os.write(self.fd, view)
            except OSError as e:
                raise OutputWriteError(f"cannot write {self.name}: {_reason(e)}") from None
            self.written += count
            view = view[count:]

    def tell(self) -> int:
        return self.written + self.pending_size

    def close(self, quietly: bool = False) -> None:
        """Flush and close; `quietly` (after a failure) ignores errors on the way."""
        if self.fd < 0:
            return
        fd, error = self.fd, None
        try:
            self.flush()
        except OutputWriteError as e:
            error = e
        self.fd = -1
        try:
            os.close(fd)
        except OSError as e:
            error = error or OutputWriteError(f"cannot write {self.name}: {_reason(e)}")
        if error is not None and not quietly:
            raise error
