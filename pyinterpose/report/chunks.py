"""Format chunks of a large output on a few threads, consumed in order.

The chunk formatters of the exports (report.csv_fast, report.pickle_stream) are numpy
operations that release the GIL, so two threads use both cores of a small machine; at most
``threads + 1`` chunks are in flight, so memory stays bounded."""
from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Callable, Iterable, Iterator, TypeVar

T = TypeVar("T")
R = TypeVar("R")


def in_order(fn: Callable[[T], R], items: Iterable[T], threads: int = 2) -> Iterator[R]:
    """``map(fn, items)`` computed on ``threads`` threads, yielded in the items' order."""
    items = list(items)
    if threads <= 1 or len(items) <= 1:
        for it in items:
            yield fn(it)
        return
    with ThreadPoolExecutor(threads) as ex:
        pending = []
        for it in items:
            pending.append(ex.submit(fn, it))
            if len(pending) > threads:
                yield pending.pop(0).result()
        for fut in pending:
            yield fut.result()
