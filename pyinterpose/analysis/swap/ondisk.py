"""A long trace's swap problem in files (issue 30): the problem's arrays and the large arrays the runs keep
beside it (the orders, the votes' shared sorts, the WDOA points, the scheduler's packed inputs, the replay's
streams) written to files of this process's own (:class:`..spillfiles.Files`: removed at once, they live
while mapped) and mapped back, so that they count in RSS only while a pass reads them; :func:`release`
gives every such page back between the passes (:mod:`...trace.pages`: clean pages of the file only).

The values are the same arrays, byte for byte: only where they live changes, so every answer is the
in-memory one (``tests/unit/test_swap_ondisk.py``).  A problem goes on disk when it has more than
``ON_DISK_CANDIDATES`` candidates (the long-trace rule of the runs, ``LONG_CANDIDATES``); arrays under
``MIN_BYTES`` stay in memory."""
from __future__ import annotations

import os

import numpy as np
import pandas as pd

from ...heap import give_back
from ...trace import pages

ON_DISK_CANDIDATES: int = 2_000_000     # tests: 0 puts every problem with a candidate on disk
MIN_BYTES = 1 << 20                     # smaller arrays stay in memory (a file and a map each)
PREPARE_TO_FILES = True                 # the preparation's inputs (intervals, blocks) in files too (problem.prepare)
FLAG = "on_disk"                        # problem.memo[FLAG]: the problem's arrays are in files


def wanted(n_candidates: int, on: bool | None = None) -> bool:
    """Whether a problem of this many candidates goes on disk (``on``: the caller's choice, None: more
    than ``ON_DISK_CANDIDATES``; never with ``PYINTERPOSE_SWAP_ON_DISK=0``: the problem in memory,
    faster where the memory is there)."""
    if os.environ.get("PYINTERPOSE_SWAP_ON_DISK", "") == "0" or on is False:
        return False
    return n_candidates > ON_DISK_CANDIDATES


def is_on_disk(problem) -> bool:
    return bool(problem.memo.get(FLAG))


def to_file(x: np.ndarray) -> np.ndarray:
    """``x`` written to a file and mapped back (read-only when ``x`` was); small arrays, arrays of
    objects and arrays that are not 1-d as they are."""
    if not isinstance(x, np.ndarray) or x.ndim != 1 or not len(x) or x.nbytes < MIN_BYTES or x.dtype.hasobject \
            or pages._file_map(x) is not None:
        return x
    from ..spillfiles import Files  # lazy: see the note above swap.STRATEGIES

    try:
        f = Files("pyinterpose-swap-")
    except OSError:
        return x            # no room for a folder in TMPDIR: the array stays in memory, the answers the same
    try:
        f.add_column("x", x.dtype)
        step = max(1, (16 << 20) // max(x.itemsize, 1))     # 16 MiB at a time: no copy of the whole
        for lo in range(0, len(x), step):
            f.append("x", x[lo:lo + step])
        y = np.asarray(f.finish()["x"])
    except OSError:         # TMPDIR full (or gone): in memory, as a problem that is not on disk
        f.abort()
        return x
    except BaseException:
        f.abort()
        raise
    if not x.flags.writeable:
        y.flags.writeable = False
    return y


def kept(problem, x):
    """``x`` as the problem keeps it: in a file when the problem is on disk (arrays, and the arrays
    inside a dict, tuple or list, one level down and again inside those)."""
    if not is_on_disk(problem):
        return x
    return _each(x, to_file)


def _each(x, f):
    if isinstance(x, np.ndarray):
        return f(x)
    if isinstance(x, dict):
        return {k: _each(v, f) for k, v in x.items()}
    if isinstance(x, tuple):
        return tuple(_each(v, f) for v in x)
    if isinstance(x, list):
        return [_each(v, f) for v in x]
    return x


def _arrays(x, out: list) -> None:
    if isinstance(x, np.ndarray):
        out.append(x)
    elif isinstance(x, dict):
        for v in list(x.values()):
            _arrays(v, out)
    elif isinstance(x, (tuple, list)):
        for v in x:
            _arrays(v, out)


def put_on_disk(problem) -> None:
    """The problem's own arrays (the steps, the live bytes, the candidates' columns and steps, the
    replay's ops) into files, and the problem marked so that what the runs keep goes there too."""
    problem.memo[FLAG] = True
    events_view = problem.events_t is not None and len(problem.steps_t) and \
        np.shares_memory(problem.events_t, problem.steps_t)
    problem.steps_t = to_file(problem.steps_t)
    if events_view:
        ev = problem.steps_t[:-1]
        ev.flags.writeable = False
        problem.events_t = ev
    else:
        problem.events_t = to_file(problem.events_t)
    problem.live = to_file(problem.live)
    if problem.ev_d is not None:
        problem.ev_d = to_file(problem.ev_d)
    for k in ("lo_iv", "hi_iv"):
        if getattr(problem, k) is not None:
            setattr(problem, k, to_file(getattr(problem, k)))
    c = problem.candidates
    # a new table of the columns (setting a column copies it: the map would be lost)
    problem.candidates = pd.DataFrame({k: to_file(c[k].to_numpy()) for k in c.columns}, index=c.index, copy=False)
    del c
    if problem.ops is not None:
        problem.ops = {k: to_file(v) if isinstance(v, np.ndarray) else v for k, v in problem.ops.items()}
    release(problem)


def release(problem) -> int:
    """Give back the resident pages of every array of an on-disk problem that lies in a file (its own
    and those its memo keeps); the bytes advised.  Nothing for a problem in memory."""
    if not is_on_disk(problem):
        return 0
    found: list = []
    _arrays([problem.steps_t, problem.live, problem.events_t, problem.ev_d, problem.lo_iv, problem.hi_iv,
             problem.ops], found)
    _arrays(list(problem.memo.values()), found)
    c = problem.candidates
    total = pages.release_frame(c)
    for a in found:
        if a.ndim == 1:
            total += pages.release(a)
    give_back()         # the pass's freed heap too (heap.keep_freed_memory keeps it resident otherwise)
    return total
