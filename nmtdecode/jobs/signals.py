"""SIGINT and SIGTERM: the program ends with exit code 130 or 143 and one line, whenever they come.

Two phases, because what is safe to do differs:

* start-up (imports, model loading): nothing has been written yet, and an exception
  raised inside an import can be swallowed by a library's `except` or leave a half
  initialised extension module behind (which then fails to load "more than once per
  process"). So the process says so and ends at once (`os._exit`).
* the job (from `job_started()`, called just before the output is opened): the signal
  is raised as KeyboardInterrupt or `Terminated`, which unwind through the job so that
  partial output is kept resumable; the CLI turns them into the exit code.

Once the job has ended, however (`job_ended`: the program is reporting how, or exiting), a
signal is ignored: the program already says one line and exits with its code (under torchrun
a peer's failure and the launcher's SIGTERM come together).

A signal whose exception is raised while a finalizer runs (a `weakref.finalize` callback, a
`__del__`, which the garbage collector may start at any moment) would be lost: Python reports an
exception raised there as "Exception ignored" and goes on, and the job, blocked on its input,
would wait for ever. `install` also sets `sys.unraisablehook`, which delivers such a signal
again, to the main thread, once the finalizer has returned.

A signal that the process inherited as ignored (`nohup`, `cmd &` in a script for SIGINT)
stays ignored, as the shell asked. Only `install` (the program, not the library) sets
handlers; with none installed, nothing here has an effect.
"""

from __future__ import annotations

import _thread
import os
import signal
import sys
import threading
from typing import Any

EXIT_CODES = {signal.SIGINT: 130, signal.SIGTERM: 143}
# The attribute by which a job that stops says what it left, when its output cannot be resumed
# (the program's last line on stderr; by default "partial output kept, rerun with --resume").
STOPPED_NOTE = "stopped_note"
_in_job = False
_ended = False
_reported = sys.__unraisablehook__  # what reports the other exceptions raised where none can be


class Terminated(BaseException):
    """SIGTERM during a job: stop like Ctrl-C. A BaseException, as KeyboardInterrupt is, so that
    no `except Exception` on the way (in torch, in a library) swallows it."""


def install() -> None:
    for signum in EXIT_CODES:
        if signal.getsignal(signum) is not signal.SIG_IGN:
            signal.signal(signum, _handle)
    global _reported
    if sys.unraisablehook is not _unraisable:
        _reported, sys.unraisablehook = sys.unraisablehook, _unraisable


def job_started() -> None:
    """From now on a signal unwinds the job instead of ending the process at once."""
    global _in_job, _ended
    _in_job, _ended = True, False


def job_ended() -> None:
    """From now on a signal is ignored: the run is over, its line is being said."""
    global _in_job, _ended
    _in_job, _ended = False, True


def ignore() -> None:
    """After the job, while the process exits with the job's own code."""
    for signum in EXIT_CODES:
        signal.signal(signum, signal.SIG_IGN)


def _handle(signum: int, frame: object) -> None:
    if _ended:
        return
    if _in_job:
        raise KeyboardInterrupt() if signum == signal.SIGINT else Terminated()
    what = "interrupted" if signum == signal.SIGINT else "terminated"
    os.write(2, f"nmtdecode: {what} during start-up; nothing was written\n".encode())
    os._exit(EXIT_CODES[signal.Signals(signum)])


def _unraisable(unraisable: Any) -> None:  # sys.UnraisableHookArgs
    """A signal's exception raised inside a finalizer during a job: delivered again, by a thread,
    to the main thread (which may be blocked reading its input: the signal interrupts the read),
    once the finalizer has returned; any other exception is reported as before."""
    kind = unraisable.exc_type
    signum = signal.SIGINT if kind is KeyboardInterrupt else signal.SIGTERM if kind is Terminated else None
    if signum is None or not _in_job:
        _reported(unraisable)
        return
    # a bare thread: threading.Thread.start would wait for it, and the signal would arrive here
    main = threading.main_thread().ident
    assert main is not None  # the main thread is running (typeshed allows None for a thread not started)
    _thread.start_new_thread(signal.pthread_kill, (main, signum))
