"""`torchrun ... tests/stopped_merge.py translate ARGS`: nmtdecode whose rank 0 kills itself
(SIGKILL) during the merge, once STOP_AFTER_RECORDS lines of OUT.tmp are written and flushed: a
kill point injected, not timed (tests/test_ranks.py)."""

import os
import signal
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # this checkout's nmtdecode

from nmtdecode.jobs import signals  # noqa: E402
from nmtdecode.jobs.output_file import OutputFile  # noqa: E402


def kill_during_merge(after: int):
    opened = OutputFile.open

    def open_merge(self, resume, signature):
        done = opened(self, resume, signature)
        if signature == "merge":
            write, written = self.stream.write, []

            def write_then_die(text):
                write(text)
                written.append(text)
                if len(written) == after:
                    self.stream.flush()
                    os.kill(os.getpid(), signal.SIGKILL)

            self.stream.write = write_then_die
        return done

    OutputFile.open = open_merge


if __name__ == "__main__":
    kill_during_merge(int(os.environ["STOP_AFTER_RECORDS"]))
    signals.install()
    from nmtdecode.cli import main

    main(sys.argv[1:])
