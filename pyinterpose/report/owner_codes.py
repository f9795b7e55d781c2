"""The owner library of each device block as a ``report.block_codes.BlockCodes`` (issue 30): what
``report.timeline._owners`` names it, without a string per block.

A block's owner is a function of its (owner, api) categories only, so ``_owners`` itself is run once
per distinct pair, on a table holding one row per pair; every row's pair is read a piece at a time.
Traces whose owner or api column is not categorical take ``_owners`` over the device blocks.
"""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pandas as pd

from ..trace.chunking import spans
from ..trace.pages import release
from .block_codes import BlockCodes, _small_code_type
from .timeline import _owners


def _categorical(bl: pd.DataFrame, col: str) -> bool:
    return col in bl.columns and isinstance(bl[col].dtype, pd.CategoricalDtype)


def owner_codes(trace) -> BlockCodes | None:
    """The owner library of each device block (``trace.blocks["counts_device"]``), as
    ``report.timeline._owners(trace, device blocks)`` names it; None without device blocks.  Rows not
    on a device have code -1."""
    bl = trace.blocks
    n = len(bl)
    dev = bl["counts_device"].to_numpy(bool)
    if not dev.any():
        return None
    cols = [c for c in ("owner", "api") if c in bl.columns]
    if not all(_categorical(bl, c) for c in cols):
        rows = np.flatnonzero(dev)
        names, inv = np.unique(np.array([str(v) for v in _owners(trace, bl[cols].iloc[rows]).tolist()],
                                        dtype=object), return_inverse=True)
        code = np.full(n, -1, _small_code_type(len(names)))
        code[rows] = inv.reshape(-1)
        return BlockCodes(names, code)
    cats = [bl[c].cat.categories for c in cols]
    width = [len(k) + 1 for k in cats]                  # +1: code -1 (missing) shifted to 0
    mapped = [bl[c].cat.codes.to_numpy() for c in cols]
    # every row's (owner, api) pair as one number; block_owners reads every block (its "has owners"
    # test), so the pair table holds every row's pair; read a piece at a time (two passes: the
    # distinct pairs, then each row's index among them), the device rows' pairs marked as used

    def pairs(s, e):
        p = np.zeros(e - s, np.int64)
        for m, w in zip(mapped, width):
            p = p * w + (m[s:e].astype(np.int64) + 1)
        return p

    uniq = np.zeros(0, np.int64)
    for s, e in spans(n):
        uniq = np.union1d(uniq, pairs(s, e))
    inv = np.empty(n, _small_code_type(len(uniq) + 1))
    used = np.zeros(len(uniq), bool)
    for s, e in spans(n):
        k = np.searchsorted(uniq, pairs(s, e))
        used[k[dev[s:e]]] = True
        k[~dev[s:e]] = len(uniq)                             # rows off the devices
        inv[s:e] = k
        for m in mapped:
            release(m, s, e)
    # the pairs' codes back from their numbers, as categoricals of the trace's own categories
    parts = []
    rest = uniq.copy()
    for w in reversed(width):
        parts.append(rest % w - 1)
        rest //= w
    parts.reverse()
    table = pd.DataFrame({c: pd.Categorical.from_codes(p, dtype=bl[c].dtype) for c, p in zip(cols, parts)})
    names_of_pair = np.array([str(v) for v in _owners(SimpleNamespace(blocks=table), table).tolist()], dtype=object)
    names, pair_name = np.unique(names_of_pair[used], return_inverse=True)
    remap = np.full(len(uniq) + 1, -1, _small_code_type(len(names)))      # last entry: rows off the devices
    remap[np.flatnonzero(used)] = pair_name.reshape(-1)
    code = np.empty(n, remap.dtype)
    for s, e in spans(n):
        code[s:e] = remap[inv[s:e]]
    return BlockCodes(names, code)
