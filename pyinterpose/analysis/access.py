"""Access analysis (paper 1: "Pinpointing the Memory Behaviors of DNN Training").

Pure functions over :class:`~pyinterpose.trace.model.Trace` tables:

* :func:`access_intervals` — one row per interval between consecutive touches of a
  block (allocation, each access, free), vectorised for millions of accesses;
* :func:`link_bandwidth` — host<->device bandwidth from the trace's NVML link data;
* :func:`analyze` — ATI distribution, the bandwidth filter, outliers and their share
  of memory pressure, stability across iterations (the ``pyinterpose access`` report).
"""
from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from ..errors import PyinterposeError
from ..trace.model import Trace

INTERVAL_KINDS = ["alloc_to_first", "between", "last_to_free", "unaccessed"]
INTERVAL_COLUMNS = ["block_id", "pid", "size", "start_t", "end_t", "start_seq", "end_seq",
                    "ati_ns", "kind", "block_kind", "api", "freed", "counts_device"]


def _select_blocks(trace: Trace, pid: int | None) -> pd.DataFrame:
    b = trace.blocks
    if pid is not None:
        b = b[b["pid"] == pid]
    return b


def access_intervals(trace: Trace, pid: int | None = None) -> pd.DataFrame:
    """Intervals between consecutive touches of each block.

    For a block with ``k`` distinct accesses (distinct access ``seq``) the rows are
    alloc->first access (``alloc_to_first``), ``k-1`` access->access (``between``) and
    last access->free (``last_to_free``); a block never accessed gives one alloc->free
    row of kind ``unaccessed``.  A block never freed ends at the trace end (its
    ``t_free``/``seq_free`` per the Trace contract) and has ``freed`` False.

    Columns: block_id, pid, size, start_t, end_t, start_seq, end_seq, ati_ns
    (= end_t - start_t), kind (category of :data:`INTERVAL_KINDS`), block_kind and api
    (the block's ``kind``/``api``), freed, counts_device.  Rows are ordered by
    (block_id, start_seq).  Accesses outside the block's [seq_alloc, seq_free] window
    or naming unknown blocks are ignored.
    """
    b = _select_blocks(trace, pid).sort_values("block_id", kind="stable")
    bid = b["block_id"].to_numpy(np.int64)
    nb = len(bid)
    seq_alloc = b["seq_alloc"].to_numpy(np.int64)
    seq_free = b["seq_free"].to_numpy(np.int64)
    t_alloc = b["t_alloc"].to_numpy(np.int64)
    t_free = b["t_free"].to_numpy(np.int64)

    a = trace.accesses
    a_bid = a["block_id"].to_numpy(np.int64)
    a_seq = a["seq"].to_numpy(np.int64)
    a_t = a["t"].to_numpy(np.int64)
    if nb and len(a_bid):
        row = np.searchsorted(bid, a_bid)
        row_c = np.minimum(row, nb - 1)
        ok = (row < nb) & (bid[row_c] == a_bid)
        row = row_c[ok]
        a_seq, a_t = a_seq[ok], a_t[ok]
        inside = (a_seq >= seq_alloc[row]) & (a_seq <= seq_free[row])
        row, a_seq, a_t = row[inside], a_seq[inside], a_t[inside]
        # sort by (block row, seq); skip the sort when already in order (common case)
        key_sorted = len(row) < 2 or bool(np.all(
            (np.diff(row) > 0) | ((np.diff(row) == 0) & (np.diff(a_seq) >= 0))))
        if not key_sorted:
            order = np.lexsort((a_seq, row))
            row, a_seq, a_t = row[order], a_seq[order], a_t[order]
        # one touch per (block, seq): a launch naming a block twice is one access
        if len(row) > 1:
            keep = np.ones(len(row), dtype=bool)
            keep[1:] = (row[1:] != row[:-1]) | (a_seq[1:] != a_seq[:-1])
            row, a_seq, a_t = row[keep], a_seq[keep], a_t[keep]
    else:
        row = np.zeros(0, dtype=np.int64)
        a_seq = np.zeros(0, dtype=np.int64)
        a_t = np.zeros(0, dtype=np.int64)

    # points per block: alloc, accesses..., free  -> intervals between neighbours
    cnt = np.bincount(row, minlength=nb).astype(np.int64) if nb else np.zeros(0, np.int64)
    npts = cnt + 2
    p_start = np.cumsum(npts) - npts                      # offset of each block's alloc point
    total = int(npts.sum())
    pt_seq = np.empty(total, dtype=np.int64)
    pt_t = np.empty(total, dtype=np.int64)
    pt_seq[p_start] = seq_alloc
    pt_t[p_start] = t_alloc
    p_end = p_start + cnt + 1
    pt_seq[p_end] = seq_free
    pt_t[p_end] = t_free
    if len(row):
        acc_start = np.cumsum(cnt) - cnt                  # offset of each block's first access
        within = np.arange(len(row), dtype=np.int64) - acc_start[row]
        pos = p_start[row] + 1 + within
        pt_seq[pos] = a_seq
        pt_t[pos] = a_t
    is_start = np.ones(total, dtype=bool)
    is_start[p_end] = False                               # a block's free point starts nothing
    s_idx = np.flatnonzero(is_start)
    e_idx = s_idx + 1
    rows_of_interval = np.repeat(np.arange(nb, dtype=np.int64), cnt + 1)

    # kind codes: 0 alloc_to_first, 1 between, 2 last_to_free, 3 unaccessed
    first_of_block = np.zeros(len(s_idx), dtype=bool)
    last_of_block = np.zeros(len(s_idx), dtype=bool)
    if nb:
        i_start = np.cumsum(cnt + 1) - (cnt + 1)
        first_of_block[i_start] = True
        last_of_block[i_start + cnt] = True
    code = np.where(first_of_block & last_of_block, 3,
                    np.where(first_of_block, 0, np.where(last_of_block, 2, 1))).astype(np.int8)

    start_t, end_t = pt_t[s_idx], pt_t[e_idx]
    out = pd.DataFrame({
        "block_id": bid[rows_of_interval],
        "pid": b["pid"].to_numpy()[rows_of_interval].astype(np.int32),
        "size": b["size"].to_numpy(np.int64)[rows_of_interval],
        "start_t": start_t,
        "end_t": end_t,
        "start_seq": pt_seq[s_idx],
        "end_seq": pt_seq[e_idx],
        "ati_ns": end_t - start_t,
        "kind": pd.Categorical.from_codes(code, categories=INTERVAL_KINDS),
        "block_kind": b["kind"].to_numpy()[rows_of_interval],
        "api": b["api"].to_numpy()[rows_of_interval],
        "freed": b["freed"].to_numpy(bool)[rows_of_interval],
        "counts_device": b["counts_device"].to_numpy(bool)[rows_of_interval],
    })
    for c in ("block_kind", "api"):
        out[c] = out[c].astype("category")
    return out
