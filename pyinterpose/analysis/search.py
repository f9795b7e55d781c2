"""``np.searchsorted`` for many needles in no order: the same indices, searched in ascending order.

A binary search per needle into a large sorted array (the device clock's ops: 8.6 M at 100 M events)
misses the cache at nearly every step when the needles come in no order (the accesses' touches
grouped by block); in ascending order each search starts where the last one left the cache.  At
8.6 M ops and 0.8 M needles: 1.6 s in no order, 0.2 s sorted first (argsort, search, scatter back).
(In the analysis layer: a module under ``trace/`` is part of the table cache's reader fingerprint.)

A narrower haystack: numpy searches in the common type of the haystack and the needles, so an int32
array searched for an int64 needle (or a Python int: numpy casts it to int64 for a search) is first
copied whole to int64 — 20 ms for 11 M segment starts, every call: at 100 M events ~5 s of the access
analysis' chunked passes, each asking where a chunk starts.  :func:`searchsorted` and :func:`position`
cast the needles to the haystack's type instead, when every needle lies in its range (the same answers).
"""
from __future__ import annotations

import numpy as np

# below these the plain search is as fast (the array fits the cache, or too few needles to sort)
MIN_NEEDLES, MIN_HAYSTACK = 1 << 12, 1 << 16
# needles sorted and searched at a time: the temporaries (their order, the sorted copy, the answers) are
# a piece's, not every needle's (issue 30: ~0.3 GB for the 9.5 M needles of the swap problem at 100 M
# events); a piece of 1 Mi sorted needles still walks the array in order
PIECE = 1 << 20


def _needles(a: np.ndarray, v: np.ndarray) -> np.ndarray:
    """``v`` in ``a``'s integer type where numpy would otherwise copy all of a narrower ``a`` to
    ``v``'s type for the search (fewer needles than ``a`` has values, every needle in ``a``'s range);
    else ``v`` as it is."""
    if a.dtype == v.dtype or a.dtype.kind not in "iu" or v.dtype.kind not in "iu" or v.size >= len(a):
        return v
    common = np.promote_types(a.dtype, v.dtype)
    if common == a.dtype or common.kind not in "iu":
        return v                # numpy casts the needles, not the haystack (or searches in float64)
    info = np.iinfo(a.dtype)
    if v.size and (v.min() < info.min or v.max() > info.max):
        return v                # numpy's own search (exact, with the copy)
    return v.astype(a.dtype)


def position(a: np.ndarray, key, side: str = "left") -> int:
    """``int(np.searchsorted(a, key, side=side))`` for one integer ``key`` (``a`` ascending),
    without copying a narrower ``a`` to the key's type."""
    return int(np.searchsorted(a, _needles(a, np.asarray(key)), side=side))


def searchsorted(a: np.ndarray, v, side: str = "left") -> np.ndarray:
    """``np.searchsorted(a, v, side=side)`` for a 1-d ``v`` (``a`` ascending), element for element."""
    v = _needles(a, np.asarray(v))
    if v.ndim != 1 or len(v) < MIN_NEEDLES or len(a) < MIN_HAYSTACK or not (v[1:] < v[:-1]).any():
        return np.searchsorted(a, v, side=side)
    out = np.empty(len(v), np.intp)
    for lo in range(0, len(v), PIECE):
        piece = v[lo:lo + PIECE]
        order = np.argsort(piece, kind="stable")
        out[lo:lo + len(piece)][order] = np.searchsorted(a, piece[order], side=side)
    return out


def merge_places(first: np.ndarray, second: np.ndarray, piece: int = PIECE):
    """Where each element of two ascending arrays lands in their stable merge, ``first``'s before
    ``second``'s at equal values (the order of a stable sort of their concatenation), a piece at a time:
    yields ``(0, lo, places)`` for ``first[lo:lo + len(places)]``, then ``(1, lo, places)`` for
    ``second``'s (int64 places).  An element's place is its place in its own array plus the number of
    the other's elements before it: no sort, and no temporaries of the merged length (issue 30)."""
    for which, mine, other, side in ((0, first, second, "left"), (1, second, first, "right")):
        for lo in range(0, len(mine), piece):
            x = mine[lo:lo + piece]
            at = np.searchsorted(other, x, side=side).astype(np.int64, copy=False)
            at += np.arange(lo, lo + len(x), dtype=np.int64)
            yield which, lo, at
