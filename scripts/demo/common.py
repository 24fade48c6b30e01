"""What every stage shares: the repository root, the special ids, logging, line files."""

from __future__ import annotations

import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

# Special ids: SentencePiece is trained with the same ids, so its ids are the model's.
PAD, UNK, BOS, EOS = 0, 1, 2, 3


def log(message: str):
    print(f"[{time.strftime('%H:%M:%S')}] {message}", flush=True)


def write_lines(path: Path, lines):
    with open(path, "w", encoding="utf-8", newline="\n") as f:
        for line in lines:
            f.write(line + "\n")


def read_lines(path: Path) -> list[str]:
    with open(path, encoding="utf-8") as f:
        return [line.rstrip("\n") for line in f]
