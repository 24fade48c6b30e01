"""Several batches decoded at once, their results in the order given (--inter-threads).

Decoding, torch releases the GIL inside its operations, so one batch's matrix products run
while another's Python bookkeeping does, as CTranslate2's inter_threads replicas do. The
model and the decoder are shared; all per-batch state (search, cache, processors) is the
batch's own.
"""

from __future__ import annotations

from collections import deque
from concurrent.futures import ThreadPoolExecutor
from typing import Callable, Iterable, Iterator, TypeVar

Item = TypeVar("Item")
Out = TypeVar("Out")


def in_order(work: Callable[[Item], Out], items: Iterable[Item], at_once: int = 1) -> Iterator[tuple[Item, Out]]:
    """(item, work(item)) for each item, in the order given, with `at_once` items worked on at the
    same time, each by a thread of its own."""
    if at_once == 1:
        for item in items:
            yield item, work(item)
        return
    with ThreadPoolExecutor(at_once, thread_name_prefix="nmtdecode-batch") as pool:
        pending: deque = deque()  # (item, future) in the order given, at most at_once
        try:
            for item in items:
                pending.append((item, pool.submit(work, item)))
                if len(pending) == at_once:
                    item, future = pending.popleft()
                    yield item, future.result()
            while pending:
                item, future = pending.popleft()
                yield item, future.result()
        finally:  # stopped early (an error, a signal): what has not started never will
            for _, future in pending:
                future.cancel()
