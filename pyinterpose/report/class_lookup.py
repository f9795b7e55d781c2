"""A block's lifetime class, looked up a piece of blocks at a time (the streamed exports).

The classifier's result is a Series block_id -> class name.  ``classes.reindex(block_ids)`` over
every block makes an object array (and, for an unsorted index, a hash table) of block length;
:class:`ClassLookup` keeps the distinct class values and one small code per classified block, and
finds the code of any piece of block ids by binary search (or the index's own lookup when its ids
are not sorted).
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from ..trace.chunking import spans
from ..trace.piecewise import piece_rows


class ClassLookup:
    """``values``: the distinct classes (``pd.factorize`` of the Series' values, in its order);
    :meth:`codes` gives, per block id, the index of its class in ``values`` or -1 (no class)."""

    def __init__(self, classes: pd.Series, values=None):
        """``values``: the Series' values to factorize, when not ``classes.to_numpy(object)`` (e.g.
        ``classes.array``: a text column as stored, without an object copy of it)."""
        if not classes.index.is_unique:
            classes.reindex(classes.index[:1])      # raises as a reindex on these labels would
        codes, uniq = factorize(classes.to_numpy(object) if values is None else values)
        self.values = list(pd.Series(uniq, dtype=object))
        self._codes = codes
        keys = classes.index
        self._sorted = keys.dtype.kind in "iu" and bool(keys.is_monotonic_increasing)
        self._keys = keys.to_numpy(np.int64) if self._sorted else keys

    def codes(self, block_ids: np.ndarray) -> np.ndarray:
        bid = np.asarray(block_ids).astype(np.int64, copy=False)
        if self._sorted:
            n = len(self._keys)
            if n == 0:
                return np.full(len(bid), -1, np.int64)
            k = np.searchsorted(self._keys, bid)
            kk = np.minimum(k, n - 1)
            hit = (k < n) & (self._keys[kk] == bid)
        else:
            kk = self._keys.get_indexer(bid)
            hit = kk >= 0
        out = np.full(len(bid), -1, np.int64)
        out[hit] = self._codes[kk[hit]]
        return out


def factorize(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``pd.factorize(values, use_na_sentinel=True)`` with the codes as int16 (int64 from 2**15
    distinct values on), made a piece of ``piece_rows()`` values at a time: no int64 code per value
    and no hash of every value at once (at 100 M events the one-shot factorize of 11 M classes held
    ~0.3 GB).  Each piece is factorized, then its distinct values after the ones seen so far (the
    seen ones first, so they keep their codes): the same first-appearance order and equality as
    one factorize of the whole."""
    n = len(values)
    out = np.empty(n, np.int16)
    uniq = np.zeros(0, object)
    for lo, hi in spans(n, piece_rows()):
        c, u = pd.factorize(values[lo:hi], use_na_sentinel=True)
        g, uniq = pd.factorize(np.concatenate([uniq, np.asarray(u, object)]), use_na_sentinel=True)
        remap = np.append(g[len(g) - len(u):], -1).astype(np.int64)     # the piece's codes, then -1 -> -1
        if len(uniq) >= (1 << 15) and out.dtype != np.int64:
            out = out.astype(np.int64)
        out[lo:hi] = remap[c]
    return out, uniq
