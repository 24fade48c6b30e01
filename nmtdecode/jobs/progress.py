"""What a job shows while it runs: the progress bar on a terminal, and what it counts for its summary.

The bar counts input lines (a regular file is counted first, so it shows a percentage), the
target tokens per second and the time left, estimated by source bytes (summary.seconds_left);
it is shown on a terminal only, and not while answering line by line, where it would mix
with the typing. `JobProgress` is the pipeline's observer of a translate job: it counts each
decoded batch into the job's `Summary` and moves the bar.
"""

from __future__ import annotations

import os
import sys
import time

from tqdm import tqdm

from ..engine.batching import Example, Result
from ..options.config import Config
from .reading import count_lines
from .summary import Summary, seconds_left
from .writing import breaks_lines


def stdin_is_terminal() -> bool:
    return sys.stdin is not None and sys.stdin.isatty()


def stderr_is_terminal() -> bool:
    return sys.stderr is not None and sys.stderr.isatty()


def progress_bar(config: Config, done: int, wanted: bool = True, label: str = "") -> tqdm:
    """Lines done, of how many (a regular file is counted first: percent), tokens/s and the time
    left; named by `label` (one file of several); on a terminal only, and not with --stream."""
    shown = wanted and not config.runtime.quiet and not config.io.stream and stderr_is_terminal()
    total = count_lines(config.io.src) if shown else None
    layout = {} if total is None else {"bar_format": "{l_bar}{bar}| {n_fmt}/{total_fmt} [{elapsed}{postfix}]"}
    return tqdm(
        total=total,
        initial=done,
        unit=" lines",
        disable=not shown,
        dynamic_ncols=True,
        desc=os.path.basename(label) or None,
        **layout,
    )


def bytes_left(src: str, done: int, lines: int | None) -> int | None:
    """The source bytes still to decode of a regular file (`done` of its `lines` lines already are:
    their share of its size), or None (stdin, an uncounted input)."""
    if src == "-" or not lines or not os.path.isfile(src):
        return None
    return os.path.getsize(src) * (lines - done) // lines


class JobProgress:
    """Counts a translate job's decoded batches into `summary` and moves `bar` (tokens/s, time left)."""

    def __init__(self, config: Config, bar: tqdm, done: int) -> None:
        self.config, self.bar, self.summary = config, bar, Summary()
        self.start, self.source_bytes = time.perf_counter(), 0
        self.total_bytes = bytes_left(config.io.src, done, bar.total) if not bar.disable else None

    def __call__(self, batch: list[Example], results: list[Result]) -> None:
        summary, fmt = self.summary, self.config.io.format
        summary.target_tokens += sum(len(result.hypotheses[0].tokens) for result in results)
        summary.count(batch)
        summary.count_joined(sum(breaks_lines(result, fmt) for result in results))
        summary.unfinished += sum(not r.hypotheses[0].ended for r in results if r.hypotheses)
        elapsed, eta = time.perf_counter() - self.start, ""
        if self.total_bytes is not None:  # the bar shows the time left
            self.source_bytes += sum(len(str(e.text).encode("utf-8")) + 1 for e in batch)  # a file's lines: text
            left = seconds_left(elapsed, self.source_bytes, self.total_bytes)
            eta = "" if left is None else f", {tqdm.format_interval(left)} left"
        self.bar.set_postfix_str(f"{summary.target_tokens / max(elapsed, 1e-9):.0f} tokens/s{eta}", refresh=False)
        self.bar.update(len(batch))
