"""Give back the resident pages of memory-mapped cache columns once a pass over them is done.

A column read from the table cache (``trace.colcache``) is a copy-on-write map of its ``.npy``
file; every page a pass touches stays resident, and counts in the process's RSS, until the
process ends.  A streamed pass over a column longer than memory calls :func:`release` on each
piece it has finished with (``madvise(MADV_DONTNEED)``): the kernel drops those pages from this
process (they stay in the page cache, and the next read maps them again).  Only whole pages inside
the array's own bytes are dropped, and only when every one of them is a clean page of the file:
DONTNEED on a private map throws away what was written to it (a copy-on-write page would go back
to the file's bytes) and zeroes anonymous memory, so an array that is not a file map is left alone,
and so is a range holding a page written to since it was mapped (``/proc/self/pagemap`` says which
pages are the file's).  ``PYINTERPOSE_KEEP_PAGES=1`` turns it off (to measure what it saves).

One module for every streamed pass (the live curve, the clock, access intervals, the exports).
"""
from __future__ import annotations

import mmap
import os

import numpy as np

_PAGE = mmap.PAGESIZE


def _file_map(a: np.ndarray):
    """The ``mmap.mmap`` an array's data lies in (through its chain of bases), or None."""
    x = a
    while x is not None:
        if isinstance(x, mmap.mmap):
            return x
        x = getattr(x, "base", None)
    return None


def enabled() -> bool:
    return os.environ.get("PYINTERPOSE_KEEP_PAGES", "") in ("", "0")


def _array(a):
    """The numpy array behind ``a`` (a pandas Series or extension array: its values; a categorical:
    its codes), or None."""
    if isinstance(a, np.ndarray):
        return a
    a = getattr(a, "_values", a)
    a = getattr(a, "_ndarray", a)       # pandas extension arrays wrapping numpy
    codes = getattr(a, "codes", None)   # a categorical: its codes are the mapped array
    if codes is not None and not isinstance(a, np.ndarray):
        a = codes
    return a if isinstance(a, np.ndarray) else None


def release(a, start: int = 0, stop: int | None = None) -> int:
    """Drop the resident pages of rows ``[start, stop)`` of the 1-d array ``a`` (or a pandas Series)
    when it is a view of a file map (a cached column); returns the bytes advised (0: nothing to do)."""
    if not enabled():
        return 0
    a = _array(a)
    if a is None:
        return 0
    if a.ndim != 1 or len(a) == 0:
        return 0
    m = _file_map(a)
    if m is None or getattr(m, "closed", False):
        return 0
    stop = len(a) if stop is None else min(stop, len(a))
    if stop <= start:
        return 0
    try:
        base = np.frombuffer(m, np.uint8, count=1).ctypes.data
    except (TypeError, ValueError):
        return 0
    lo = a.ctypes.data + start * a.strides[0] - base
    hi = a.ctypes.data + (stop - 1) * a.strides[0] + a.itemsize - base
    if a.strides[0] < 0:
        lo, hi = a.ctypes.data + (stop - 1) * a.strides[0] - base, a.ctypes.data + start * a.strides[0] + a.itemsize - base
    lo = -(-lo // _PAGE) * _PAGE                    # whole pages inside [lo, hi) only
    hi = min(hi // _PAGE * _PAGE, len(m))
    if hi <= lo or lo < 0:
        return 0
    if not _clean_file_pages(base + lo, (hi - lo) // _PAGE):
        return 0
    try:
        m.madvise(mmap.MADV_DONTNEED, lo, hi - lo)
    except (OSError, ValueError, AttributeError):
        return 0
    return hi - lo


def _clean_file_pages(addr: int, pages: int) -> bool:
    """Every page of ``pages`` from ``addr`` is either not resident or a page of the file (pagemap bit
    61: file page or shared; a private copy made by a write is anonymous, bit 61 clear)."""
    try:
        with open("/proc/self/pagemap", "rb") as f:
            f.seek(addr // _PAGE * 8)
            raw = f.read(pages * 8)
    except OSError:
        return False
    if len(raw) != pages * 8:
        return False
    e = np.frombuffer(raw, "<u8")
    present = (e >> np.uint64(63)) & np.uint64(1)
    file_page = (e >> np.uint64(61)) & np.uint64(1)
    return not bool((present & ~file_page & np.uint64(1)).any())


def release_frame(df) -> int:
    """:func:`release` every column of a table (the whole of each); returns the bytes advised."""
    total = 0
    for name in df.columns:
        total += release(df[name])
    return total


def release_all(*arrays) -> int:
    """:func:`release` of each whole array (those not mapped are skipped)."""
    return sum(release(a) for a in arrays)


def release_tables(trace, names=("blocks", "launches", "copies", "accesses", "gpu_activity")) -> int:
    """:func:`release_frame` of the trace's long tables: between the steps of a command, so that each
    step's reads of the cached columns do not stay resident through the next ones."""
    return sum(release_frame(getattr(trace, n)) for n in names if getattr(trace, n, None) is not None)
