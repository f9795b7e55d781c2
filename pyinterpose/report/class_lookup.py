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


class ClassLookup:
    """``values``: the distinct classes (``pd.factorize`` of the Series' values, in its order);
    :meth:`codes` gives, per block id, the index of its class in ``values`` or -1 (no class)."""

    def __init__(self, classes: pd.Series, values=None):
        """``values``: the Series' values to factorize, when not ``classes.to_numpy(object)`` (e.g.
        ``classes.array``: a text column as stored, without an object copy of it)."""
        if not classes.index.is_unique:
            classes.reindex(classes.index[:1])      # raises as a reindex on these labels would
        codes, uniq = pd.factorize(classes.to_numpy(object) if values is None else values, use_na_sentinel=True)
        self.values = list(pd.Series(uniq, dtype=object))
        self._codes = codes.astype(np.int16 if len(uniq) < (1 << 15) else np.int64)
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
