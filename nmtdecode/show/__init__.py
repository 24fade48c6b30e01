"""`nmtdecode show DUMP [--output PAGE.html]`: the searches of a --dump-beam file as one page
(by default beside the dump: beams.jsonl -> beams.html).

Reads JSON only (no torch, no model): read the dump (one object per input line), lay out each
sentence's beam tree (tree.py), write the page (page.py) whole, through PAGE.html.tmp.
"""

from __future__ import annotations

import json
import os

from ..options.config import ConfigError
from ..jobs.output_file import written_whole
from .page import page_html

REQUIRED = ("index", "source", "source_pieces", "search", "pieces", "beams", "nbest")


def read_dump(path: str) -> list[dict]:
    """The records of a --dump-beam file, in order; a line that is not one fails naming it."""
    try:
        with open(path, encoding="utf-8") as f:
            lines = f.read().splitlines()
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(f"show: cannot read {path}: {getattr(e, 'strerror', None) or e}") from None
    records = []
    for number, line in enumerate(lines, 1):
        try:
            record = json.loads(line)
        except json.JSONDecodeError as e:
            raise ConfigError(f"show: {path} line {number} is not JSON ({e.msg}); give a --dump-beam file") from None
        missing = [key for key in REQUIRED if not isinstance(record, dict) or key not in record]
        if missing:
            raise ConfigError(f"show: {path} line {number} is not a --dump-beam record (no {missing[0]!r})")
        records.append(record)
    if not records:
        raise ConfigError(f"show: {path} is empty")
    return records


def page_path(dump: str) -> str:
    """Where the page of `dump` goes when no --output is given: its name with .html for its extension."""
    return os.path.splitext(dump)[0] + ".html"


def write_page(dump: str, output: str, sentence: int | None = None) -> None:
    """The page of every line of `dump`, or of input line `sentence` (1-based) only."""
    records = read_dump(dump)
    if sentence is not None:
        if not 1 <= sentence <= len(records):
            raise ConfigError(f"sentence: {sentence} is not a line of {dump} (1 to {len(records)})")
        records = [records[sentence - 1]]
    html = page_html(records, f"nmtdecode show: {os.path.basename(dump)}")
    with written_whole(output, [dump]) as stream:
        stream.write(html)
