"""One trace fanned out: the per-process or per-iteration-range work of a single trace on the job's executor.

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

Per iteration range (issue 30: one long process): :func:`row_ranges` cuts the blocks table (rows in
allocation order) into ranges of whole iterations of about equal length, one or a few per worker;
an analysis whose answer is a merge of per-range parts (each block's work independent of the
others', or each row's text its own) maps a task over them with :func:`fan_map`.  The csv export does
(report.csv_ranges), from ``EXPORT_MIN_BLOCKS`` blocks on a local pool (at 10 M events it did not pay on a
busy machine).
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
# an export's rows per range (report.csv_ranges): at 10 M events (1.1 M blocks) on the 2-core VM the fanned-out
# csv was 0.4-1.2 s faster than the serial one at load 1.6-2.0 and 0.9-1.7 s slower at load 1.8-2.5 (the pool's
# start, a process more on two busy cores); at 100 M (11.3 M blocks) 28-32 s against 43-45 s at load 1.4-2.4, but
# 63.6 s against 47.8 s at load 3.2-3.6 (docs/performance.md)
EXPORT_MIN_BLOCKS = 4_000_000


def min_blocks(default: int = MIN_BLOCKS) -> int:
    """``$PYINTERPOSE_FANOUT_MIN_BLOCKS`` (every kind of fan-out), else ``default``."""
    try:
        return int(os.environ.get("PYINTERPOSE_FANOUT_MIN_BLOCKS", default))
    except ValueError:
        return default


def fannable(trace, n: int, floor: int | None = None) -> bool:
    """Whether ``n`` tasks of this trace go to the executor of :func:`using` (see the module); ``floor``:
    the analysis' own least number of blocks on a local pool (:func:`min_blocks` ``(floor)``)."""
    return _fannable(trace, n, floor)


def width() -> int:
    """How many tasks to cut a trace's work into: ``--workers``, else the machine's cores (on Dask too:
    the scheduler balances them)."""
    if _settings is None:
        return 1
    return int(_settings["max_workers"] or os.cpu_count() or 1)


def asked() -> bool:
    """Whether the work goes where the user said: a Dask scheduler, or a number of local workers
    (``--workers N``) rather than the machine's cores."""
    return _settings is not None and bool(_settings["scheduler"] or _settings["max_workers"])


def fan_map(fn, items: list) -> list:
    """``[fn(i) for i in items]`` on the executor of :func:`using` (results in input order).  The
    caller checks :func:`fannable` first; ``fn`` must be a module-level function (pickled by name)."""
    with executor(_settings["scheduler"], _settings["max_workers"], len(items)) as ex:
        return list(ex.map(fn, items))


def fan_imap(fn, items: list):
    """:func:`fan_map` yielding each result in input order as it is taken (not all held at once)."""
    with executor(_settings["scheduler"], _settings["max_workers"], len(items)) as ex:
        yield from ex.imap(fn, items)


def row_ranges(trace, n: int, pid: int | None = None, iters=None) -> list[tuple[int, int]]:
    """The blocks table's rows ``[0, len)`` in at most ``n`` consecutive ranges ``(lo, hi)`` of about
    equal length, each cut where an iteration of ``pid`` begins (its first allocation's row), so that a
    range holds whole iterations (the first also what precedes the loop, the last what follows it).
    With no iterations found, or fewer boundaries than ranges, the cuts fall at equal row counts."""
    nb = len(trace.blocks)
    n = max(1, min(int(n), nb))
    if n == 1:
        return [(0, nb)]
    if iters is None:
        iters = find_iterations(trace, pid)
    even = [round(nb * k / n) for k in range(1, n)]
    cuts: list[int] = even
    if iters.count >= n:
        import numpy as np

        seq = trace.blocks["seq_alloc"].to_numpy()
        starts = np.unique(np.searchsorted(seq, np.asarray(iters.boundaries[1:-1], np.int64), side="left"))
        starts = starts[(starts > 0) & (starts < nb)]
        if len(starts) >= n - 1:
            # the iteration start nearest each even cut, kept increasing
            pick = np.clip(np.searchsorted(starts, even), 0, len(starts) - 1)
            lower = np.clip(pick - 1, 0, len(starts) - 1)
            near = np.where(np.abs(starts[lower] - even) <= np.abs(starts[pick] - even), lower, pick)
            cuts = sorted({int(starts[i]) for i in near})
    bounds = [0, *[c for c in cuts if 0 < c < nb], nb]
    return [(a, b) for a, b in zip(bounds, bounds[1:]) if b > a]


def _fannable(trace, n: int, floor: int | None = None) -> bool:
    if _settings is None or n < 2 or not trace.path:
        return False
    least = min_blocks() if floor is None else min_blocks(floor)
    if not _settings["scheduler"] and ((_settings["max_workers"] or os.cpu_count() or 1) < 2
                                       or len(trace.blocks) < least):
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
