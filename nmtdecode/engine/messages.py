"""What nmtdecode tells the person running it on stderr: one line at a time.

Imports nothing heavy (no torch): the job layer speaks through it before the model loads.
"""

from __future__ import annotations

import sys


def say(line: str) -> None:
    """One line on stderr, written whole by one call: with an unbuffered stderr (PYTHONUNBUFFERED,
    `python -u`) `print` writes the text and then its newline, and under torchrun two ranks'
    lines said at once became one line with two newlines after it."""
    if sys.stderr is not None:
        sys.stderr.write(line + "\n")
        sys.stderr.flush()


def print_warning(message: str) -> None:
    """One warning line on stderr, for the person running the command."""
    say(f"nmtdecode: warning: {message}")


def count(n: int, noun: str) -> str:
    """`1 sentence`, `2 sentences`."""
    return f"{n} {noun}{'' if n == 1 else 's'}"
