"""Resident pages of memory-mapped columns, given back once a streamed pass is done with them.

A column read from the columnar cache (:mod:`pyinterpose.trace.colcache`) is a private, copy-on-write file mapping;
every page a pass reads stays resident (and counts in the process's RSS) until the mapping goes,
although the kernel can read it again from the page cache at any time.  :func:`drop_pages` unmaps
the resident pages of a range of such a column (``madvise(MADV_DONTNEED)``): the next read faults
them in again from the file, with the same contents.  Arrays not backed by a file mapping (anything
the program computed) are left alone: dropping anonymous pages would lose their data.

The analyses never write into a table's columns (a trace's tables are shared and read-only), so a
mapped column's pages are always the file's; a page written to anyway would go back to the file's
contents — the reason only file-backed ``mmap`` objects are ever touched here.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import mmap

import numpy as np

_PAGE = mmap.PAGESIZE
_MADV_DONTNEED = 4
_libc = None


def _madvise():
    global _libc
    if _libc is None:
        try:
            lib = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
            f = lib.madvise
            f.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
            f.restype = ctypes.c_int
            _libc = f
        except (OSError, AttributeError):
            _libc = False
    return _libc


def _mapping(a: np.ndarray):
    """(start address, length) of the file mapping ``a`` lies in, or None when it is not one."""
    x = a
    while isinstance(x, np.ndarray):
        x = x.base
    if not isinstance(x, mmap.mmap) or x.closed:
        return None
    try:
        start = np.frombuffer(x, np.uint8).ctypes.data
    except (TypeError, ValueError):
        return None
    return start, len(x)


def drop_pages(a: np.ndarray, start: int = 0, stop: int | None = None) -> bool:
    """Give back the resident pages of ``a[start:stop]`` (1-D) when ``a`` is a view of a file mapping
    (a cached column); True when it did.  Reading the range again later is correct, only slower."""
    if not isinstance(a, np.ndarray) or a.ndim != 1 or len(a) == 0:
        return False
    stop = len(a) if stop is None else min(int(stop), len(a))
    if stop <= start:
        return False
    f = _madvise()
    m = _mapping(a) if f else None
    if m is None:
        return False
    base, size = m
    item = a.strides[0]
    if item <= 0:
        return False
    lo = a.ctypes.data + int(start) * item
    hi = a.ctypes.data + (int(stop) - 1) * item + a.itemsize
    lo = max(base, lo - (lo - base) % _PAGE)                   # whole pages, inside the mapping
    hi = min(base + size, hi + (-(hi - base)) % _PAGE)
    if hi <= lo:
        return False
    return f(lo, hi - lo, _MADV_DONTNEED) == 0


def drop_all(*arrays) -> None:
    """:func:`drop_pages` of each whole array (those not mapped are skipped)."""
    for a in arrays:
        drop_pages(a)


def drop_tables(trace) -> None:
    """:func:`drop_pages` of every mapped column of the trace's tables (categoricals: their codes)."""
    for name in ("blocks", "accesses", "launches", "copies", "markers", "nvml", "processes"):
        df = getattr(trace, name, None)
        if df is None or not hasattr(df, "columns"):
            continue
        for c in df.columns:
            col = df[c]
            x = col.cat.codes.to_numpy() if hasattr(col, "cat") else col.to_numpy()
            drop_pages(x)
