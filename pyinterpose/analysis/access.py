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
from .iterations import _mix64
from .lifetimes import QUANTILES, _quantiles  # noqa: F401  (one definition of the quantile summary)

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

    Computed once per trace and process (``Trace.derived``): the table is shared, callers
    must not modify it in place.
    """
    key = ("access.intervals", None if pid is None else int(pid))
    return trace.derived(key, lambda: _intervals(trace, pid))


def _block_rows(trace: Trace, pid: int | None) -> np.ndarray:
    """Rows of ``trace.blocks`` of the process (all with ``pid`` None), in block_id order."""
    b = trace.blocks
    rows = np.flatnonzero(b["pid"].to_numpy() == pid) if pid is not None else np.arange(len(b))
    bid = b["block_id"].to_numpy(np.int64)[rows]
    if len(bid) > 1 and not (np.diff(bid) > 0).all():
        rows = rows[np.argsort(bid, kind="stable")]
    return rows


def _intervals(trace: Trace, pid: int | None) -> pd.DataFrame:
    b = trace.blocks
    rows = _block_rows(trace, pid)
    nb = len(rows)
    all_bid = b["block_id"].to_numpy(np.int64)
    bid = all_bid[rows]
    seq_alloc = b["seq_alloc"].to_numpy(np.int64)[rows]
    seq_free = b["seq_free"].to_numpy(np.int64)[rows]

    a = trace.accesses
    a_bid = a["block_id"].to_numpy(np.int64)
    seq_alloc = np.ascontiguousarray(seq_alloc)
    seq_free = np.ascontiguousarray(seq_free)
    if nb and len(a_bid):
        # block row of each access: a direct table when block ids are small (the reader's: dense)
        hi = int(bid[-1]) if len(bid) else -1
        if 0 <= int(bid[0]) and hi < 4 * (len(all_bid) + len(a_bid)) + 1024:
            lut = np.full(hi + 2, -1, dtype=np.int32)
            lut[bid] = np.arange(nb, dtype=np.int32)
            row = lut[np.clip(a_bid, -1, hi + 1)]
        else:
            pos = np.searchsorted(bid, a_bid)
            pos_c = np.minimum(pos, nb - 1)
            row = np.where((pos < nb) & (bid[pos_c] == a_bid), pos_c, -1).astype(np.int32)
    else:
        row = np.full(len(a_bid), -1, np.int32)
    # touches per block (C: grouped, in seq order, one per seq), then the intervals between them
    from .._core import ffi, lib

    def ptr(x):
        return ffi.from_buffer({"<i8": "int64_t[]", "<i4": "int32_t[]", "|i1": "int8_t[]"}[x.dtype.str], x)

    t_alloc = np.ascontiguousarray(b["t_alloc"].to_numpy(np.int64)[rows])
    t_free = np.ascontiguousarray(b["t_free"].to_numpy(np.int64)[rows])
    cnt = np.zeros(nb, np.int64)
    touch_seq = np.empty(len(a_bid), np.int64)
    touch_t = np.empty(len(a_bid), np.int64)
    n_touch = lib.pi_access_touches(nb, ptr(seq_alloc), ptr(seq_free), len(a_bid), ptr(row),
                                    ptr(np.ascontiguousarray(a["seq"].to_numpy(np.int64))),
                                    ptr(np.ascontiguousarray(a["t"].to_numpy(np.int64))), ptr(cnt),
                                    ptr(touch_seq), ptr(touch_t))
    if n_touch < 0:
        raise MemoryError("out of memory building access intervals")
    del row
    m = int(n_touch) + nb
    start_seq, end_seq = np.empty(m, np.int64), np.empty(m, np.int64)
    start_t, end_t = np.empty(m, np.int64), np.empty(m, np.int64)
    code = np.empty(m, np.int8)
    lib.pi_access_intervals(nb, ptr(seq_alloc), ptr(seq_free), ptr(t_alloc), ptr(t_free), ptr(cnt),
                            ptr(touch_seq), ptr(touch_t), ptr(start_seq), ptr(end_seq), ptr(start_t), ptr(end_t),
                            ptr(code))
    del touch_seq, touch_t, t_alloc, t_free
    rows_of_interval = np.repeat(rows.astype(np.int32 if len(b) < 1 << 31 else np.int64), cnt + 1)
    out = pd.DataFrame({
        "block_id": all_bid[rows_of_interval],
        "pid": b["pid"].to_numpy()[rows_of_interval].astype(np.int32),
        "size": b["size"].to_numpy(np.int64)[rows_of_interval],
        "start_t": start_t,
        "end_t": end_t,
        "start_seq": start_seq,
        "end_seq": end_seq,
        "ati_ns": end_t - start_t,
        "kind": pd.Categorical.from_codes(code, categories=INTERVAL_KINDS),
        "block_kind": _take_category(b["kind"], rows_of_interval),
        "api": _take_category(b["api"], rows_of_interval),
        "freed": b["freed"].to_numpy(bool)[rows_of_interval],
        "counts_device": b["counts_device"].to_numpy(bool)[rows_of_interval],
    }, copy=False)   # fresh arrays: no consolidation copy
    return out


def _take_category(col: pd.Series, rows: np.ndarray) -> pd.Categorical:
    """col[rows] as a Categorical without materialising strings (fast on millions of rows)."""
    if not isinstance(col.dtype, pd.CategoricalDtype):
        col = col.astype("category")
    return pd.Categorical.from_codes(col.cat.codes.to_numpy()[rows], dtype=col.dtype)


# ---------------------------------------------------------------------------------------
# the report: ATI distribution, bandwidth filter, outliers, stability
# ---------------------------------------------------------------------------------------



def resolve_link(trace: Trace, bandwidth=None, latency_us: float | None = None,
                 cache_path: str | None = None):
    """(Bandwidth or None, note).  ``bandwidth``: a Bandwidth, GB/s per direction, or None
    (then a cached measurement for the trace's GPU, else the trace's NVML link data)."""
    from .bandwidth import Bandwidth, resolve_bandwidth

    if isinstance(bandwidth, Bandwidth):
        return bandwidth, bandwidth.source
    try:
        bw = resolve_bandwidth(trace, gbps=bandwidth, latency_us=latency_us, cache_path=cache_path)
    except PyinterposeError as e:
        if bandwidth is not None or (latency_us is not None and latency_us < 0):
            raise
        return None, f"bandwidth filter skipped: {e}"
    return bw, bw.source


def swap_cost_ns(size: np.ndarray, bw) -> np.ndarray:
    """Time to swap a block out and back in: size/BW_d2h + size/BW_h2d + both latencies (ns)."""
    s = np.asarray(size, dtype=np.float64)
    return (bw.d2h_seconds(s) + bw.h2d_seconds(s)) * 1e9


def _share(part: float, whole: float) -> float | None:
    return float(part) / float(whole) if whole else None


def _overlap(start: np.ndarray, end: np.ndarray, lo: int, hi: int) -> np.ndarray:
    ov = np.minimum(end, hi)
    ov -= np.maximum(start, lo)
    return np.clip(ov, 0, None, out=ov)


def _member(q: np.ndarray, ref: np.ndarray) -> np.ndarray:
    """q[i] in ref, by sorting (numpy's isin is slow on millions of uint64)."""
    if len(ref) == 0:
        return np.zeros(len(q), bool)
    r = np.sort(ref)
    order = np.argsort(q)
    qs = q[order]                           # sorted queries: cache-friendly search
    i = np.minimum(np.searchsorted(r, qs), len(r) - 1)
    out = np.empty(len(q), bool)
    out[order] = r[i] == qs
    return out


def _segments(sorted_ids: np.ndarray) -> np.ndarray:
    """Start of each run of equal values (of an array ordered by value)."""
    if len(sorted_ids) == 0:
        return np.zeros(0, np.int64)
    return np.concatenate([[0], np.flatnonzero(sorted_ids[1:] != sorted_ids[:-1]) + 1])


def _cumcount(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``groupby([a, b]).cumcount()``: the rank of each row among the earlier rows with the same (a, b)."""
    n = len(a)
    if n == 0:
        return np.zeros(0, np.int64)
    order = np.lexsort((b, a))                           # stable: equal keys keep their order
    sa, sb = a[order], b[order]
    new = np.ones(n, bool)
    new[1:] = (sa[1:] != sa[:-1]) | (sb[1:] != sb[:-1])
    start = np.maximum.accumulate(np.where(new, np.arange(n), 0))
    out = np.empty(n, np.int64)
    out[order] = np.arange(n) - start
    return out


def _peak(trace: Trace, mask: np.ndarray) -> tuple[int, int]:
    """(time, bytes) of the peak of live bytes of the blocks in ``mask`` (the first time it is
    reached; (0, 0) for none): ``live_bytes_curve(trace.blocks[mask])`` without sorting again."""
    from ..trace.model import live_bytes_curve, live_events

    t, d, r = live_events(trace)
    if len(d):
        live = np.cumsum(d * mask[r])
        i = int(np.argmax(live))
        if live[i] > 0 and mask[r[i]]:
            return int(t[i]), int(live[i])
    t, live = live_bytes_curve(trace.blocks[mask])
    i = int(np.argmax(live)) if len(live) else 0
    return (int(t[i]), int(live[i])) if len(live) else (0, 0)


def stability(intervals: pd.DataFrame, classes: pd.DataFrame, count: int) -> dict[str, Any] | None:
    """Share of blocks allocated inside regular steps whose size, relative position (n-th
    allocation of that size in the step) and access count repeat exactly in the next step
    (the previous one for the last step)."""
    if count < 2:
        return None
    c = classes[(classes["iter_alloc"] >= 0) & classes["counts_device"]]
    if len(c) == 0:
        return None
    ib = intervals["block_id"].to_numpy(np.int64)     # intervals per block (ordered by block)
    if len(ib) < 2 or (ib[1:] >= ib[:-1]).all():
        first = _segments(ib)
        ub, n_int = ib[first], np.diff(np.append(first, len(ib)))
    else:
        ub, n_int = np.unique(ib, return_counts=True)
    c = c.sort_values("seq_alloc")
    cb = c["block_id"].to_numpy(np.int64)
    k = np.minimum(np.searchsorted(ub, cb), max(len(ub) - 1, 0))
    acc = (np.where((k < len(ub)) & (ub[k] == cb), n_int[k], 1) if len(ub) else np.ones(len(cb), np.int64)) - 1
    key = pd.DataFrame({
        "block_id": c["block_id"].to_numpy(), "it": c["iter_alloc"].to_numpy(np.int64),
        "size": c["size"].to_numpy(np.int64), "acc": acc,
    })
    it = key["it"].to_numpy(np.int64)
    nth = _cumcount(it, key["size"].to_numpy(np.int64))
    nb = np.where(it + 1 < count, it + 1, it - 1)
    sizes_i = key["size"].to_numpy(np.int64)

    def h(*cols):   # 64-bit hash of a tuple of int columns
        z = np.zeros(len(cols[0]), np.uint64)
        for c in cols:
            z = _mix64(z ^ c.astype(np.uint64))
        return z

    hit = _member(h(nb, sizes_i, nth, acc), h(it, sizes_i, nth, acc))
    pos_hit = _member(h(nb, sizes_i, nth), h(it, sizes_i, nth))
    sizes = sizes_i.astype(np.float64)
    return {
        "blocks": int(len(key)),
        "stable_blocks": _share(hit.sum(), len(key)),
        "stable_bytes": _share(sizes[hit].sum(), sizes.sum()),
        "same_size_and_position": _share(pos_hit.sum(), len(key)),
    }


def analyze(trace: Trace, bandwidth=None, latency_us: float | None = None, *, pid: int | None = None,
            iters=None, ati_quantile: float = 0.9, size_quantile: float = 0.9, top: int = 10,
            cache_path: str | None = None) -> dict[str, Any]:
    """Paper 1's access analysis of one process's device blocks (default: the main process).

    ``bandwidth``: GB/s per direction (or a :class:`~pyinterpose.analysis.bandwidth.Bandwidth`);
    None = cached measurement or the trace's NVML link data; with neither the bandwidth
    filter is skipped (``filtered_fraction`` None, ``bandwidth_note`` says why).
    Outliers: intervals with ATI >= the ``ati_quantile`` of all ATIs and block size >= the
    ``size_quantile`` of all block sizes."""
    from .iterations import find_iterations
    from .lifetimes import classify

    for name, q in (("ati_quantile", ati_quantile), ("size_quantile", size_quantile)):
        if not 0.0 <= q <= 1.0:
            raise PyinterposeError(f"{name} must be between 0 and 1 (got {q})")
    if iters is None:
        iters = find_iterations(trace, pid)
    if pid is None:
        pid = iters.pid
    iv_all = access_intervals(trace, pid)     # shared: the device rows' columns are taken, not the table
    dev_iv = iv_all["counts_device"].to_numpy(bool)
    runs = None
    if not dev_iv.all():                      # the device rows: a few long runs (one per host block gap)
        edge = np.flatnonzero(dev_iv[1:] != dev_iv[:-1]) + 1
        bounds = np.concatenate([[0], edge, [len(dev_iv)]])
        if len(bounds) <= 512:
            runs = [(int(lo), int(hi)) for lo, hi in zip(bounds[:-1], bounds[1:]) if dev_iv[lo]]

    def col(name: str, dtype=None) -> np.ndarray:
        x = iv_all[name].cat.codes.to_numpy() if dtype is None else iv_all[name].to_numpy(dtype)
        if runs is None:
            return x if dev_iv.all() else x[dev_iv]
        return np.concatenate([x[lo:hi] for lo, hi in runs]) if runs else x[:0].copy()
    in_blocks = trace.blocks["counts_device"].to_numpy(bool)      # the process's device blocks
    if pid is not None:
        in_blocks = in_blocks & (trace.blocks["pid"].to_numpy() == pid)
    block_size = trace.blocks["size"].to_numpy(np.int64)[in_blocks]
    ati = col("ati_ns", np.int64)
    size = col("size", np.int64)
    bid = col("block_id", np.int64)
    kcode = col("kind")
    masks = {k: kcode == i for i, k in enumerate(INTERVAL_KINDS)}
    n_blocks = int(len(block_size))
    # intervals are ordered by block: one segment per block
    seg = _segments(bid)
    seg_size = size[seg].astype(np.float64)

    def per_block_any(mask: np.ndarray) -> np.ndarray:
        return np.logical_or.reduceat(mask, seg) if len(seg) else np.zeros(0, bool)
    block_bytes = float(block_size.sum())
    out: dict[str, Any] = {
        "pid": pid,
        "iterations": {"source": iters.source, "count": iters.count},
        "intervals": int(len(ati)),
        "blocks": n_blocks,
        "accessed_blocks": int(per_block_any(~masks["unaccessed"]).sum()),
        "accesses": int(masks["between"].sum() + masks["alloc_to_first"].sum()),
        "ati_quantiles": _quantiles(ati),
        "ati_by_kind": {k: {"intervals": int(m.sum()), "quantiles": _quantiles(ati[m])}
                        for k, m in masks.items() if m.any()},
    }

    # bandwidth filter
    bw, note = resolve_link(trace, bandwidth, latency_us, cache_path)
    out["bandwidth"] = None if bw is None else {
        "h2d_bytes_per_s": bw.h2d_bytes_per_s, "d2h_bytes_per_s": bw.d2h_bytes_per_s,
        "latency_s": bw.latency_s, "source": bw.source}
    out["bandwidth_note"] = note
    hides = None
    if bw is not None:
        hides = ati >= swap_cost_ns(size, bw)
        sw = per_block_any(hides)
        sw_bytes = float(seg_size[sw].sum())
        out["filtered_fraction"] = {
            "intervals": _share((~hides).sum(), len(hides)),
            "blocks": _share(n_blocks - int(sw.sum()), n_blocks),
            "bytes": _share(block_bytes - sw_bytes, block_bytes),
        }
        out["filtered_by_kind"] = {k: _share((~hides[m]).sum(), m.sum()) for k, m in masks.items() if m.any()}
        out["swappable"] = {"intervals": int(hides.sum()), "blocks": int(sw.sum()),
                            "bytes": int(sw_bytes)}
    else:
        out["filtered_fraction"] = None

    # outliers and their share of memory pressure
    out["outliers"] = None
    if len(ati):
        ati_thr = float(np.quantile(ati, ati_quantile))
        size_thr = float(np.quantile(block_size, size_quantile))
        is_out = (ati >= ati_thr) & (size >= size_thr)
        t_peak, peak_bytes = _peak(trace, in_blocks)
        # pressure window: the regular step holding the peak, else the whole process
        if iters.count and iters.boundaries_t[0] <= t_peak < iters.boundaries_t[-1]:
            k = int(np.searchsorted(iters.boundaries_t, t_peak, side="right") - 1)
            lo, hi, wname = int(iters.boundaries_t[k]), int(iters.boundaries_t[k + 1]), f"iteration {k}"
        else:
            lo, hi, wname = None, None, "whole trace"
        st, en = col("start_t", np.int64), col("end_t", np.int64)
        if lo is None:
            lo, hi = int(st.min()), int(en.max())
        area = size.astype(np.float64) * _overlap(st, en, lo, hi)
        at_peak = (st <= t_peak) & (en > t_peak)
        ob = per_block_any(is_out)
        order = np.argsort(-(size[is_out].astype(np.float64) * ati[is_out]), kind="stable")[:top]
        sel = np.flatnonzero(is_out)[order]
        out["outliers"] = {
            "ati_threshold_ns": ati_thr, "size_threshold_bytes": size_thr,
            "ati_quantile": ati_quantile, "size_quantile": size_quantile,
            "intervals": int(is_out.sum()), "blocks": int(ob.sum()),
            "bytes": int(seg_size[ob].sum()),
            "swappable_intervals": None if hides is None else int((is_out & hides).sum()),
            "peak_bytes": peak_bytes, "peak_t": t_peak,
            "share_of_peak_bytes": _share(size[is_out & at_peak].sum(), peak_bytes),
            "pressure_window": {"name": wname, "start_t": lo, "end_t": hi},
            "share_of_pressure": _share(area[is_out].sum(), area.sum()),
            "top": [{"block_id": int(bid[i]), "size": int(size[i]), "ati_ns": int(ati[i]),
                     "kind": INTERVAL_KINDS[kcode[i]], "start_t": int(st[i]), "end_t": int(en[i])} for i in sel],
        }
        del st, en, area, at_peak, is_out, ob
    ati = size = kcode = masks = hides = seg = seg_size = None      # free them before the classes are built

    out["stability"] = stability(pd.DataFrame({"block_id": bid}, copy=False), classify(trace, iters, pid),
                                 iters.count) if iters.count else None
    # kernels inside CUDA graph replays are not recorded one by one: their accesses are missing
    la = trace.launches
    g = int(la.loc[la["pid"] == pid, "graph"].sum()) if pid is not None and len(la) else int(la["graph"].sum())
    out["graph_launches"] = g
    out["notes"] = [] if not g else [
        f"{g} CUDA graph launches: the kernels inside graph replays are not seen, so their accesses are "
        "missing here (ATIs across a replay are too long, blocks used only inside graphs look untouched)"]
    return out
