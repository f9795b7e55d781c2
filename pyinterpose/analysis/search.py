"""``np.searchsorted`` for many needles in no order: the same indices, searched in ascending order.

A binary search per needle into a large sorted array (the device clock's ops: 8.6 M at 100 M events)
misses the cache at nearly every step when the needles come in no order (the accesses' touches
grouped by block); in ascending order each search starts where the last one left the cache.  At
8.6 M ops and 0.8 M needles: 1.6 s in no order, 0.2 s sorted first (argsort, search, scatter back).
(In the analysis layer: a module under ``trace/`` is part of the table cache's reader fingerprint.)
"""
from __future__ import annotations

import numpy as np

# below these the plain search is as fast (the array fits the cache, or too few needles to sort)
MIN_NEEDLES, MIN_HAYSTACK = 1 << 12, 1 << 16
# needles sorted and searched at a time: the temporaries (their order, the sorted copy, the answers) are
# a piece's, not every needle's (issue 30: ~0.3 GB for the 9.5 M needles of the swap problem at 100 M
# events); a piece of 1 Mi sorted needles still walks the array in order
PIECE = 1 << 20


def searchsorted(a: np.ndarray, v, side: str = "left") -> np.ndarray:
    """``np.searchsorted(a, v, side=side)`` for a 1-d ``v`` (``a`` ascending), element for element."""
    v = np.asarray(v)
    if v.ndim != 1 or len(v) < MIN_NEEDLES or len(a) < MIN_HAYSTACK or not (v[1:] < v[:-1]).any():
        return np.searchsorted(a, v, side=side)
    out = np.empty(len(v), np.intp)
    for lo in range(0, len(v), PIECE):
        piece = v[lo:lo + PIECE]
        order = np.argsort(piece, kind="stable")
        out[lo:lo + len(piece)][order] = np.searchsorted(a, piece[order], side=side)
    return out
