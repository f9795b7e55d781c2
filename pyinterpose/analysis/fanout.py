"""One trace fanned out: the per-process work of a single trace on the job's executor.

Loading a trace used to dominate, so a trace's processes (the ranks of one ``torchrun``) were
analysed one after another by the task that loaded it (pyinterpose.analysis.job).  With the
memory-mapped columnar cache beside the trace (pyinterpose.trace.colcache), a worker loads it in
milliseconds and touches only the columns it reads, so the per-process work can fan out: one task
per process, on the same executor as a job's traces (a local process pool by default, Dask with
``--scheduler``).  A task gets ``(path, pid)``, loads the trace (from its cache) and returns plain
values; the results come back in process order, so they are those of a serial run.

Fan-out happens only where it can pay and stay exact: at least two processes, on a local pool a
trace of at least ``PYINTERPOSE_FANOUT_MIN_BLOCKS`` blocks (default 1 M: starting the pool takes
seconds, more than a small trace's whole analysis; any size on Dask), a valid cache for the
trace's file (else every worker would parse the whole file), the trace's tables not replaced since
loading, and only from the process that set :func:`using` (workers run serially: no nested pools).
"""
from __future__ import annotations

import contextlib
import os

from .executor import executor
from ..trace import colcache
from ..trace.reader import load
from .iterations import find_iterations

_settings: dict | None = None      # set by using(): {"scheduler": ..., "max_workers": ...}


@contextlib.contextmanager
def using(scheduler: str | None = None, max_workers: int | None = None):
    """Fan the per-process work of the analyses run inside this block out on this executor."""
    global _settings
    prev, _settings = _settings, {"scheduler": scheduler, "max_workers": max_workers}
    try:
        yield
    finally:
        _settings = prev


MIN_BLOCKS = 1_000_000   # a local pool takes seconds to start: below this (~10 M events) serial is faster


def min_blocks() -> int:
    try:
        return int(os.environ.get("PYINTERPOSE_FANOUT_MIN_BLOCKS", MIN_BLOCKS))
    except ValueError:
        return MIN_BLOCKS


def _fannable(trace, n: int) -> bool:
    if _settings is None or n < 2 or not trace.path:
        return False
    if not _settings["scheduler"] and ((_settings["max_workers"] or os.cpu_count() or 1) < 2
                                       or len(trace.blocks) < min_blocks()):
        return False

    cached = colcache.read(trace.path)
    if cached is None:
        return False
    # the trace in hand must be the file's, unchanged (a view or a replaced table would differ)
    return all(len(getattr(trace, t)) == len(getattr(cached, t)) for t in ("blocks", "launches", "markers")) \
        and trace.counts == cached.counts


def iterations_task(item: tuple[str, int]) -> int:
    """How many training iterations process ``pid`` of the trace at ``path`` ran (a worker's task)."""
    path, pid = item

    return int(find_iterations(load(path), int(pid)).count)


def iterations_per_process(trace, pids: list[int]) -> list[int]:
    """``find_iterations(trace, pid).count`` for each pid, fanned out when :func:`using` allows it."""

    pids = [int(p) for p in pids]
    if not _fannable(trace, len(pids)):
        return [int(find_iterations(trace, p).count) for p in pids]
    with executor(_settings["scheduler"], _settings["max_workers"], len(pids)) as ex:
        return [int(c) for c in ex.map(iterations_task, [(trace.path, p) for p in pids])]
