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

import itertools

import numpy as np
import pandas as pd

from ..analysis.clock import block_times
from ..trace.chunking import chunk_rows, spans
from ..trace.pages import release
from ..heap import give_back
from .block_codes import BlockCodes, _small_code_type
from .class_lookup import ClassLookup

_COLUMNS = ("block_id", "pid", "size", "device_bytes", "freed", "t_alloc", "t_free", "seq_alloc", "seq_free")


class _Sorted:
    """The device's events as two time-sorted kinds: ``g0`` (deltas <= 0: the frees, then the
    allocations of 0 bytes, each in block order before the sort) and ``g1`` (allocations of > 0
    bytes); ``pos0[i]``: the place of g0's i-th event in the merged list."""

    def __init__(self, trace, bl: pd.DataFrame, rows: np.ndarray):
        n = len(rows)
        size_col = "device_bytes" if "device_bytes" in bl.columns else "size"
        cols = [c for c in _COLUMNS if c in bl.columns and c != "block_id" and (c != "size" or size_col == "size")]
        idx = np.int32 if 2 * n < (1 << 31) else np.int64      # block and event indices
        delta = np.empty(n, np.int32)          # the block's counted bytes: 32 bits while they fit (checked)
        # the two kinds' events in block order, a piece of blocks at a time: g1 (allocations of > 0
        # bytes) and the frees; the allocations of 0 bytes (few) apart, to follow the frees in g0
        # (their blocks are not stored: g1's are the blocks of > 0 bytes, g0's the freed ones then the
        # blocks of <= 0 bytes, each in block order, found again from ``delta`` and ``freed`` when sorted)
        g1_t, n1 = np.empty(n, np.int64), 0
        g0_t, nf = np.empty(n, np.int64), 0
        freed = np.empty(n, bool)
        zt = []
        mapped = [bl[c].to_numpy() for c in cols]      # the columns read, to give their pages back
        # an eighth of a piece of blocks at a time: the piece's columns (7 x 8 bytes a row) are copied
        for s, e in spans(n, max(1, chunk_rows() // 8)):
            r = rows[s:e]
            piece = pd.DataFrame({c: x[r] for c, x in zip(cols, mapped)}, copy=False)
            a, f = block_times(trace, piece)
            d = piece[size_col].to_numpy(np.int64)
            fr = piece["freed"].to_numpy(bool)
            if delta.dtype != np.int64 and len(d) and (int(d.min()) <= -(1 << 31) or int(d.max()) >= (1 << 31)):
                delta = delta.astype(np.int64)
            delta[s:e] = d
            freed[s:e] = fr
            pos = d > 0
            k = int(pos.sum())
            g1_t[n1:n1 + k] = a[pos]
            n1 += k
            k = int(fr.sum())
            g0_t[nf:nf + k] = f[fr]
            nf += k
            zt.append(a[~pos])
            del piece, a, f, d, fr, pos
            if e > s:                   # the pages of the rows this piece read (issue 30: ~0.3 GB at 100 M)
                lo, hi = int(r.min()), int(r.max()) + 1
                for x in mapped:
                    release(x, lo, hi)
        del mapped
        self.delta = delta
        nz = sum(len(x) for x in zt)
        if nf + nz > n:                 # blocks of 0 bytes that were freed: both a free and an allocation
            g0_t = np.resize(g0_t, nf + nz)
        for t_ in zt:
            g0_t[nf:nf + len(t_)] = t_
            nf += len(t_)
        nf -= nz
        del zt
        # each kind by time, stable (its order above at an equal time: block order; in g0 the frees first)
        self.g1 = _Kind(g1_t[:n1], _blocks_where(lambda s, e: delta[s:e] > 0, n), n1, n)
        del g1_t
        self.g0 = _Kind(g0_t[:nf + nz], itertools.chain(_blocks_where(lambda s, e: freed[s:e], n),
                                                        _blocks_where(lambda s, e: delta[s:e] <= 0, n)), nf, n)
        del g0_t, freed, delta
        # pos0: g0's i-th event's place in the merged list (an eighth of a piece of g0 at a time: each
        # makes four int64 temporaries of its length)
        self.pos0 = np.empty(len(self.g0), idx)
        for s, e in spans(len(self.g0), max(1, chunk_rows() // 8)):
            self.pos0[s:e] = self.g1.first_at_or_after(self.g0.t(s, e)) + np.arange(s, e)
        self.n = len(self.g0) + len(self.g1)

    def piece(self, c0: int, c1: int):
        """Events ``[c0, c1)`` of the merged list: (block j, time, delta)."""
        i0, i1 = np.searchsorted(self.pos0, [c0, c1], side="left")
        is0 = np.zeros(c1 - c0, bool)
        is0[self.pos0[i0:i1] - c0] = True
        j = np.empty(c1 - c0, np.int64)
        t = np.empty(c1 - c0, np.int64)
        j[is0], t[is0] = self.g0.j(i0, i1), self.g0.t(i0, i1)
        j[~is0], t[~is0] = self.g1.j(c0 - i0, c1 - i1), self.g1.t(c0 - i0, c1 - i1)
        d = self.delta[j].astype(np.int64, copy=False)
        free = np.zeros(c1 - c0, bool)
        free[is0] = ~self.g0.later(i0, i1)
        d[free] = -d[free]
        return j, t, d

    def time_at(self, p: int) -> int:
        i = int(np.searchsorted(self.pos0, p, side="left"))
        if i < len(self.pos0) and int(self.pos0[i]) == p:
            return int(self.g0.t(i, i + 1)[0])
        return int(self.g1.t(p - i, p - i + 1)[0])


def _blocks_where(cond, n: int):
    """The block indices ``i < n`` where ``cond(s, e)`` (a mask of blocks ``[s, e)``) holds, ascending,
    a piece of blocks at a time."""
    for s, e in spans(n):
        yield np.flatnonzero(cond(s, e)) + s


# the bits of one sort key: (time - the first time, whether the event comes later at its time, block)
_KEY_BITS = 63


class _Kind:
    """One kind's events sorted by (time, ``later``, block index ``j``): ``later`` is whether the event
    is at or past position ``n_first`` of the events given (g0's allocations of 0 bytes, after its
    frees; ``j_parts``: their block indices, in pieces), and the events given are in that order at an
    equal time (blocks ascending in each part), so this is their stable sort by time.  Where the times' span, the flag and the block index fit in
    63 bits, each event is one int64 key ``(t - lo) << (bits + 1) | later << bits | j``, made in ``t``'s
    own buffer and sorted in place (distinct keys), which gives back the time, the flag and the block
    (issue 30: at 100 M events no sorted block-index array beside the times, ~45 MB a kind, nor the
    order's copy while sorting); else the times and the block indices apart (a stable argsort)."""

    def __init__(self, t: np.ndarray, j_parts, n_first: int, n_blocks: int):
        n = len(t)
        self.n = n
        self.bits = max(1, int(max(n_blocks, 1) - 1).bit_length())
        self.lo = int(t.min()) if n else 0
        self.span = (int(t.max()) - self.lo + 1) if n else 1     # every time is below lo + span
        self.key = None
        if self.span >> (_KEY_BITS - self.bits - 1) == 0:
            key = t                                   # the caller's buffer, reused
            key -= self.lo
            key <<= self.bits + 1
            at = 0
            for j in j_parts:
                key[at:at + len(j)] |= j
                at += len(j)
            assert at == n, "one block per event"
            key[n_first:] |= 1 << self.bits
            key.sort()
            self.key = key
            return
        j = np.concatenate([np.zeros(0, np.int64), *j_parts])
        o = np.argsort(t, kind="stable")
        self._t, self._j, self._later = t[o], j[o], o >= n_first

    def __len__(self) -> int:
        return self.n

    def t(self, i0: int, i1: int) -> np.ndarray:
        if self.key is None:
            return self._t[i0:i1]
        return (self.key[i0:i1] >> (self.bits + 1)) + self.lo

    def j(self, i0: int, i1: int) -> np.ndarray:
        if self.key is None:
            return self._j[i0:i1]
        return self.key[i0:i1] & ((1 << self.bits) - 1)

    def later(self, i0: int, i1: int) -> np.ndarray:
        if self.key is None:
            return self._later[i0:i1]
        return (self.key[i0:i1] >> self.bits & 1).astype(bool)

    def first_at_or_after(self, times: np.ndarray) -> np.ndarray:
        """For each of ``times`` (ascending): the number of this kind's events before it in time."""
        if self.key is None:
            return np.searchsorted(self._t, times, side="left")
        # a time past either end: the same answer, and no overflow of the key
        needle = np.clip(times, self.lo, self.lo + self.span) - self.lo
        needle <<= self.bits + 1
        return np.searchsorted(self.key, needle, side="left")


def class_codes(classes, block_ids: np.ndarray, rows: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(names, code per block): ``np.unique`` of each block's class name (``str`` of its class,
    "other" without one) and the index of each block's name in it.  ``classes``: a Series block_id ->
    class, looked up in pieces for ``block_ids``; or a ``report.block_codes.BlockCodes``, read at
    ``rows`` (of ``trace.blocks``)."""
    if isinstance(classes, BlockCodes):
        labels = np.array([str(v) for v in classes.names] + ["other"], dtype=object)
        vcode = classes.code[rows].astype(np.int64)
    else:
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
    return names, remap[vcode].astype(_small_code_type(len(names)))


def device_curve(trace, rows: np.ndarray, groupings: list, max_points: int) -> list[dict]:
    """The curve of the blocks at ``rows`` of ``trace.blocks`` (one device, block order), once per
    grouping of ``groupings`` (each a Series block_id -> class, a ``BlockCodes``, or None) from one pass over the
    events: ``{"t", "total", "series" (name -> values at the points; None without classes), "names",
    "peak", "peak_t", "events", "reduced"}`` each (the points are the same for every grouping)."""
    bl = trace.blocks
    groups = []                          # per grouping: (names, code per block, offset in the stacked series)
    K = 0
    for classes in groupings:
        if classes is None:
            groups.append((None, None, K))
            continue
        ids = None if isinstance(classes, BlockCodes) else bl["block_id"].to_numpy()[rows]
        names, code = class_codes(classes, ids, rows)
        groups.append((names, code, K))
        K += len(names)
    # after the codes: their lookups' temporaries are gone by then, and on a long trace the heap
    # they freed is given back before the pass and again after its sorts (``heap.give_back``)
    long = len(rows) > chunk_rows()
    if long:
        give_back()
    ev = _Sorted(trace, bl, rows)
    if long:
        give_back()
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
    kept = _Kept(2 * nbins, K)           # closed bins' points: (lat index, t, total, class values)
    run = None                           # the open bin: [bin, max, peak point, last point]
    step = max(1, chunk_rows() // 32)    # a piece holds ~10 + (classes) int64 per event
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
        t_k, v_k, s_k = kept.arrays()
    out = []
    for names, _, off in groups:
        series = None if names is None else {str(names[k]): s_k[off + k] for k in range(len(names))}
        out.append({"t": t_k, "total": v_k, "series": series, "names": names, "peak": int(peak),
                    "peak_t": int(peak_t), "events": int(n), "reduced": len(t_k) < lat_count})
    return out


def _close(run, kept: "_Kept") -> None:
    """A bin's points: its first peak, then its last event (once when they are the same)."""
    kept.add(run[2])
    if run[3][0] != run[2][0]:
        kept.add(run[3])


class _Kept:
    """The points kept from the closed bins (at most two a bin), in arrays rather than a tuple and an
    array each (issue 30: ~0.1 GB at 200 000 points): their times, totals and class values."""

    def __init__(self, cap: int, K: int):
        self.m, self.K = 0, K
        self.t = np.empty(max(1, cap), np.int64)
        self.v = np.empty(max(1, cap), np.int64)
        self.k = np.empty((K, max(1, cap)), np.int64)

    def add(self, p) -> None:
        if self.m == len(self.t):           # never with two points a bin; kept for safety
            self.t, self.v = np.resize(self.t, 2 * self.m), np.resize(self.v, 2 * self.m)
            self.k = np.concatenate([self.k, np.empty_like(self.k)], axis=1)
        self.t[self.m], self.v[self.m] = p[1], p[2]
        if self.K:
            self.k[:, self.m] = p[3]
        self.m += 1

    def arrays(self):
        m = self.m
        return self.t[:m].copy(), self.v[:m].copy(), self.k[:, :m].copy() if self.K else None
