"""One device's live-bytes curve, reduced to a plotting budget, in one pass over its events in
pieces (issue 30): what ``report.data.memory_timeline`` draws, without an array per event.

The curve (``data.memory_timeline``'s definition): every allocation (+bytes) and free (-bytes) of
the device's blocks, on each block's process clock (``analysis.clock.block_times``), in time order
with the "free" kind first at an equal time (an event whose delta is not positive: a free, or an
allocation of 0 bytes) and then the blocks' order; live bytes after each event (and per class,
when classes are given); the peak (the first event reaching the maximum).  Points kept: the last
event of each instant; when there are more instants than ``max_points``, ``max_points // 2`` equal
time bins over the whole run, each keeping its first peak and its last event.

Here the events are never built: the two kinds are sorted by time separately (block-length
arrays: the rows and the times), each event's place in the merged list comes from a binary
search, and the merged list is walked ``trace.chunking.chunk_rows()`` events at a time with the
running totals, the instant being closed and the time bin being filled carried from one piece to
the next.  Memory: a few arrays of the device's block count, and the points kept.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from ..analysis.clock import block_times
from ..trace.chunking import chunk_rows, spans
from ..trace.pages import release
from .class_lookup import ClassLookup

_COLUMNS = ("block_id", "pid", "size", "device_bytes", "freed", "t_alloc", "t_free", "seq_alloc", "seq_free")


class _Sorted:
    """The device's events as two time-sorted kinds: ``g0`` (deltas <= 0: the frees, then the
    allocations of 0 bytes, each in block order before the sort) and ``g1`` (allocations of > 0
    bytes); ``pos0[i]``: the place of g0's i-th event in the merged list."""

    def __init__(self, trace, bl: pd.DataFrame, rows: np.ndarray):
        n = len(rows)
        cols = [c for c in _COLUMNS if c in bl.columns]
        size_col = "device_bytes" if "device_bytes" in bl.columns else "size"
        ta = np.empty(n, np.int64)
        tf = np.empty(n, np.int64)
        self.delta = np.empty(n, np.int64)          # the block's counted bytes
        freed = np.empty(n, bool)
        sub = bl[cols]
        mapped = [bl[c].to_numpy() for c in cols]      # the columns read, to give their pages back
        for s, e in spans(n):
            piece = sub.iloc[rows[s:e]]
            a, f = block_times(trace, piece)
            ta[s:e], tf[s:e] = a, f
            self.delta[s:e] = piece[size_col].to_numpy(np.int64)
            freed[s:e] = piece["freed"].to_numpy(bool)
            if e > s:                   # the pages of the rows this piece read (issue 30: ~0.3 GB at 100 M)
                lo, hi = int(rows[s:e].min()), int(rows[s:e].max()) + 1
                for x in mapped:
                    release(x, lo, hi)
        del mapped
        idx = np.int32 if 2 * n < (1 << 31) else np.int64      # block and event indices
        j = np.arange(n, dtype=idx)
        zero = self.delta <= 0
        g0_j = np.concatenate([j[freed], j[zero]])
        g0_alloc = np.concatenate([np.zeros(int(freed.sum()), bool), np.ones(int(zero.sum()), bool)])
        g0_t = np.concatenate([tf[freed], ta[zero]])
        o = np.argsort(g0_t, kind="stable")
        self.g0_j, self.g0_alloc, self.g0_t = g0_j[o], g0_alloc[o], g0_t[o]
        del g0_j, g0_alloc, g0_t, o
        g1_j = j[~zero]
        g1_t = ta[~zero]
        o = np.argsort(g1_t, kind="stable")
        self.g1_j, self.g1_t = g1_j[o], g1_t[o]
        del ta, tf, o, j
        self.pos0 = (np.searchsorted(self.g1_t, self.g0_t, side="left") + np.arange(len(self.g0_t))).astype(idx)
        self.n = len(self.g0_t) + len(self.g1_t)

    def piece(self, c0: int, c1: int):
        """Events ``[c0, c1)`` of the merged list: (block j, time, delta)."""
        i0, i1 = np.searchsorted(self.pos0, [c0, c1], side="left")
        is0 = np.zeros(c1 - c0, bool)
        is0[self.pos0[i0:i1] - c0] = True
        j = np.empty(c1 - c0, np.int64)
        t = np.empty(c1 - c0, np.int64)
        j[is0], t[is0] = self.g0_j[i0:i1], self.g0_t[i0:i1]
        j[~is0], t[~is0] = self.g1_j[c0 - i0:c1 - i1], self.g1_t[c0 - i0:c1 - i1]
        d = self.delta[j]
        free = np.zeros(c1 - c0, bool)
        free[is0] = ~self.g0_alloc[i0:i1]
        d[free] = -d[free]
        return j, t, d

    def time_at(self, p: int) -> int:
        i = int(np.searchsorted(self.pos0, p, side="left"))
        if i < len(self.pos0) and int(self.pos0[i]) == p:
            return int(self.g0_t[i])
        return int(self.g1_t[p - i])


def class_codes(classes: pd.Series, block_ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(names, code per block): ``np.unique`` of each block's class name (``str`` of its class,
    "other" without one) and the index of each block's name in it, looked up in pieces."""
    look = ClassLookup(classes)
    labels = np.array([str(v) for v in look.values] + ["other"], dtype=object)
    vcode = np.empty(len(block_ids), np.int64)
    for s, e in spans(len(block_ids)):
        vcode[s:e] = look.codes(block_ids[s:e])
    vcode[vcode < 0] = len(labels) - 1
    used = np.zeros(len(labels), bool)
    used[vcode] = True                       # "other" only when some block has no class
    names, inv = np.unique(labels[used], return_inverse=True)
    remap = np.full(len(labels), -1, np.int64)
    remap[np.flatnonzero(used)] = inv.reshape(-1)
    dt = np.int16 if len(names) < (1 << 15) else np.int64
    return names, remap[vcode].astype(dt)


def device_curve(trace, rows: np.ndarray, groupings: list, max_points: int) -> list[dict]:
    """The curve of the blocks at ``rows`` of ``trace.blocks`` (one device, block order), once per
    grouping of ``groupings`` (each a Series block_id -> class, or None) from one pass over the
    events: ``{"t", "total", "series" (name -> values at the points; None without classes), "names",
    "peak", "peak_t", "events", "reduced"}`` each (the points are the same for every grouping)."""
    bl = trace.blocks
    ev = _Sorted(trace, bl, rows)
    groups = []                          # per grouping: (names, code per block, offset in the stacked series)
    K = 0
    for classes in groupings:
        if classes is None:
            groups.append((None, None, K))
            continue
        names, code = class_codes(classes, bl["block_id"].to_numpy()[rows])
        groups.append((names, code, K))
        K += len(names)
    n = ev.n
    if n == 0:
        z = np.zeros(0, np.int64)
        return [{"t": z, "total": z, "series": {str(k): z for k in names} if names is not None else None,
                 "names": names, "peak": 0, "peak_t": 0, "events": 0, "reduced": False}
                for names, _, _ in groups]
    t_first, t_last = ev.time_at(0), ev.time_at(n - 1)
    nbins = max(1, max_points // 2)
    edges = np.linspace(t_first, t_last + 1, nbins + 1)
    carry = 0
    carry_k = np.zeros(K, np.int64)
    peak, peak_t = None, 0
    lat_count = 0                        # events that are the last at their instant, so far
    all_pts: list[tuple] | None = []     # every such event while there are at most max_points
    kept: list[tuple] = []               # closed bins' points: (lat index, t, total, class values)
    run = None                           # the open bin: [bin, max, peak point, last point]
    step = max(1, chunk_rows() // 8)     # a piece holds ~10 + (classes) int64 per event
    for c0, c1 in spans(n, step):
        j, t, d = ev.piece(c0, c1)
        tot = carry + np.cumsum(d)
        carry = int(tot[-1])
        if K:
            per = np.empty((K, len(d)), np.int64)
            for names, code, off in groups:
                if names is None:
                    continue
                cls = code[j]
                for k in range(len(names)):
                    per[off + k] = carry_k[off + k] + np.cumsum(np.where(cls == k, d, 0))
            carry_k = per[:, -1].copy()
        i = int(np.argmax(tot))
        if peak is None or int(tot[i]) > peak:
            peak, peak_t = int(tot[i]), int(t[i])
        nxt = ev.time_at(c1) if c1 < n else None
        last = np.empty(len(t), bool)
        last[:-1] = t[1:] != t[:-1]
        last[-1] = True if nxt is None else (nxt != int(t[-1]))
        li = np.flatnonzero(last)
        if len(li) == 0:
            continue
        lt, lv = t[li], tot[li]
        lk = per[:, li] if K else None
        idx = lat_count + np.arange(len(li), dtype=np.int64)
        lat_count += len(li)
        if all_pts is not None:
            if lat_count <= max_points:
                all_pts.append((lt, lv, lk))
            else:
                all_pts = None
        b = np.clip(np.searchsorted(edges, lt, side="right") - 1, 0, nbins - 1)
        starts = np.flatnonzero(np.r_[True, b[1:] != b[:-1]])
        ends = np.r_[starts[1:] - 1, len(b) - 1]
        run_max = np.maximum.reduceat(lv, starts)
        run_of = np.repeat(np.arange(len(starts)), np.diff(np.r_[starts, len(b)]))
        hit = np.flatnonzero(lv == run_max[run_of])
        peaks = hit[np.r_[True, run_of[hit][1:] != run_of[hit][:-1]]]

        def point(q):
            return (int(idx[q]), int(lt[q]), int(lv[q]), lk[:, q].copy() if K else None)

        for r in range(len(starts)):
            if r == 0 and run is not None and run[0] == int(b[0]):
                if int(run_max[0]) > run[1]:
                    run[1], run[2] = int(run_max[0]), point(peaks[0])
                run[3] = point(ends[0])
            else:
                if run is not None:
                    _close(run, kept)
                run = [int(b[starts[r]]), int(run_max[r]), point(peaks[r]), point(ends[r])]
            if r < len(starts) - 1:
                _close(run, kept)
                run = None
    if run is not None:
        _close(run, kept)
    if all_pts is not None:              # at most max_points instants: every one of them
        t_k = np.concatenate([p[0] for p in all_pts])
        v_k = np.concatenate([p[1] for p in all_pts])
        s_k = np.concatenate([p[2] for p in all_pts], axis=1) if K else None
    else:
        t_k = np.array([p[1] for p in kept], np.int64)
        v_k = np.array([p[2] for p in kept], np.int64)
        s_k = np.array([p[3] for p in kept], np.int64).T.reshape(K, len(kept)) if K else None
    out = []
    for names, _, off in groups:
        series = None if names is None else {str(names[k]): s_k[off + k] for k in range(len(names))}
        out.append({"t": t_k, "total": v_k, "series": series, "names": names, "peak": int(peak),
                    "peak_t": int(peak_t), "events": int(n), "reduced": len(t_k) < lat_count})
    return out


def _close(run, kept: list) -> None:
    """A bin's points: its first peak, then its last event (once when they are the same)."""
    kept.append(run[2])
    if run[3][0] != run[2][0]:
        kept.append(run[3])
