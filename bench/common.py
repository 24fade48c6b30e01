"""What the benchmark's scripts share: where things are, and how a piece of work is timed.

Importing it puts the repository (for `nmtdecode` and `tests`) and bench/ (for the
benchmark's own modules: convert, report, worker, ...) on `sys.path`, so a script runs as
`python bench/NAME.py` or `python bench/experiments/NAME.py` from anywhere. An experiment
finds this module with one line first: `sys.path.insert(0, <bench/>)`.
"""

from __future__ import annotations

import os
import statistics
import sys
import time
from typing import Callable, TypeVar

BENCH = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(BENCH)
DEMO = os.path.join(ROOT, "data", "demo")
RESULTS = os.path.join(BENCH, "results")  # the tables kept, one per machine
OUT = os.path.join(BENCH, "out")  # what a run writes and nobody keeps

for _path in (BENCH, ROOT):
    if _path not in sys.path:
        sys.path.insert(0, _path)

T = TypeVar("T")


def timed(work: Callable[[], T]) -> tuple[float, T]:
    """The wall seconds of one call of `work`, and what it returned."""
    start = time.perf_counter()
    result = work()
    return time.perf_counter() - start, result


def best_seconds(work: Callable[[], object], repeat: int) -> float:
    """The fastest of `repeat` calls: what the work costs when nothing else gets in the way."""
    return min(timed(work)[0] for _ in range(repeat))


def median_seconds(work: Callable[[], object], repeat: int) -> float:
    """The median of `repeat` calls: what a shared machine gives most of the time."""
    return statistics.median(timed(work)[0] for _ in range(repeat))
