"""Giving back the pages of a memory-mapped cache column once a streamed pass is done with them.

A column of the table cache (:mod:`.colcache`) is a copy-on-write mapping of its ``.npy`` file: every
page a pass reads stays resident in the process (``RssFile``) until the process ends, although the
kernel could read it again from the page cache at no cost.  :func:`release` unmaps the resident pages
of a column (or of rows ``start:stop`` of it) with ``madvise(MADV_DONTNEED)``: the next read faults
them in again from the page cache, with the same contents.

Only arrays that are views of a ``numpy.memmap`` are touched (an in-memory column is left alone:
``MADV_DONTNEED`` on anonymous memory would zero it).  The cache's columns are never written (a
trace is immutable once loaded), so no change made in place is lost.  ``PYINTERPOSE_KEEP_PAGES=1``
turns it off (to measure what it saves).
"""
from __future__ import annotations

import mmap
import os

import numpy as np

PAGE = mmap.PAGESIZE


def _mapping(a: np.ndarray):
    """(the mmap.mmap behind ``a``, the address of its first byte), or (None, 0)."""
    base = a
    while base is not None:
        if isinstance(base, np.memmap):
            mm = getattr(base, "_mmap", None)
            if mm is None or mm.closed:
                return None, 0
            addr = np.frombuffer(mm, np.uint8).ctypes.data if len(mm) else 0
            return mm, addr
        base = getattr(base, "base", None)
    return None, 0


def enabled() -> bool:
    return os.environ.get("PYINTERPOSE_KEEP_PAGES", "") in ("", "0")


def release(a, start: int = 0, stop: int | None = None) -> None:
    """Drop this process's resident pages of rows ``start:stop`` of the mapped column ``a`` (a numpy
    array or a pandas Series); nothing when ``a`` is not memory-mapped.  Only whole pages inside the
    rows are dropped."""
    if not enabled():
        return
    a = getattr(a, "_values", a)
    a = getattr(a, "_ndarray", a)       # pandas extension arrays wrapping numpy
    codes = getattr(a, "codes", None)   # a categorical: its codes are the mapped array
    if codes is not None and not isinstance(a, np.ndarray):
        a = codes
    if not isinstance(a, np.ndarray) or a.ndim != 1 or not a.flags.c_contiguous or not len(a):
        return
    mm, addr = _mapping(a)
    if mm is None:
        return
    n = len(a)
    stop = n if stop is None else min(int(stop), n)
    start = max(int(start), 0)
    if stop <= start:
        return
    lo = a.ctypes.data + start * a.itemsize - addr
    hi = a.ctypes.data + stop * a.itemsize - addr
    lo = -(-lo // PAGE) * PAGE          # whole pages inside the rows only
    hi = (hi // PAGE) * PAGE
    if lo < 0 or hi > len(mm) or hi <= lo:
        return
    try:
        mm.madvise(mmap.MADV_DONTNEED, lo, hi - lo)
    except (OSError, ValueError):
        pass
