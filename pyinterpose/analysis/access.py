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
from ..heap import give_back
from ..trace.model import Trace
from .lifetimes import QUANTILES, _quantiles  # noqa: F401  (one definition of the quantile summary)
from ..trace import chunking, pages
from ..trace.live import scan
from ..trace.model import live_bytes_curve
from .bandwidth import Bandwidth, resolve_bandwidth
from .clock import clock_of
from .iterations import find_iterations
from .lifetimes import classify
from . import access_fan, access_spill, intervals
from .access_common import _repeat_rows, _share, _step, _top_order, swap_cost_ns  # noqa: F401
from .search import searchsorted
from .intervals import INTERVAL_COLUMNS, INTERVAL_KINDS, block_rows as _block_rows  # noqa: F401  (public names)

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

    The whole table at once (at 100 M events ~3 GB): the analyses read it a piece of blocks at a
    time instead (:func:`pyinterpose.analysis.intervals.pieces`, the same rows).  Computed once per
    trace and process (``Trace.derived``): the table is shared, callers must not modify it in place.
    """
    key = ("access.intervals", None if pid is None else int(pid))
    return trace.derived(key, lambda: intervals.whole(trace, pid))


# ---------------------------------------------------------------------------------------
# the report: ATI distribution, bandwidth filter, outliers, stability
# ---------------------------------------------------------------------------------------



def resolve_link(trace: Trace, bandwidth=None, latency_us: float | None = None,
                 cache_path: str | None = None):
    """(Bandwidth or None, note).  ``bandwidth``: a Bandwidth, GB/s per direction, or None
    (then a cached measurement for the trace's GPU, else the trace's NVML link data)."""

    if isinstance(bandwidth, Bandwidth):
        return bandwidth, bandwidth.source
    try:
        bw = resolve_bandwidth(trace, gbps=bandwidth, latency_us=latency_us, cache_path=cache_path)
    except PyinterposeError as e:
        if bandwidth is not None or (latency_us is not None and latency_us < 0):
            raise
        return None, f"bandwidth filter skipped: {e}"
    return bw, bw.source


def _quantile_summary(x: np.ndarray, extra: tuple[float, ...] = ()) -> tuple[dict[str, float] | None, list[float]]:
    """``lifetimes._quantiles(x)`` (same values, same keys) and the quantiles ``extra`` of ``x``,
    from one partition of ``x`` *in place* (``x`` is a scratch copy owned by the caller)."""
    if len(x) == 0:
        return None, []
    stats = dict(min=float(x.min()), max=float(x.max()), mean=float(x.mean()))   # the mean before reordering
    q = np.quantile(x, QUANTILES + tuple(extra), overwrite_input=True)
    d = {f"p{int(p * 100)}": float(v) for p, v in zip(QUANTILES, q)}
    d.update(stats)
    return d, [float(v) for v in q[len(QUANTILES):]]


class _Rows:
    """One column of the device rows of an intervals table, in table order, without copying it:
    a list of contiguous parts (views of the table's column); row ``i`` is ``parts[k][i - offs[k]]``."""

    def __init__(self, parts: list[np.ndarray]):
        self.parts = parts
        self.offs = np.cumsum([0] + [len(p) for p in parts])

    def __len__(self) -> int:
        return int(self.offs[-1])

    def chunks(self, step: int | None = None):
        """(part, local slice, device-row slice) over all rows, at most ``step`` rows each (default
        1 Mi, or ``chunk_rows()`` when that is smaller)."""
        step = step or _step()
        for k, p in enumerate(self.parts):
            o = int(self.offs[k])
            for a in range(0, len(p), step):
                b = min(a + step, len(p))
                yield p, slice(a, b), slice(o + a, o + b)

    def take(self, idx: np.ndarray) -> np.ndarray:
        """Values at sorted device-row indices ``idx``."""
        if len(self.parts) == 1:
            return self.parts[0][idx]
        cut = np.searchsorted(idx, self.offs)
        return np.concatenate([p[idx[cut[k]:cut[k + 1]] - self.offs[k]] for k, p in enumerate(self.parts)])

    def at(self, i: int):
        k = int(np.searchsorted(self.offs, i, side="right") - 1)
        return self.parts[k][i - self.offs[k]]

    def copy(self) -> np.ndarray:
        return self.parts[0].copy() if len(self.parts) == 1 else np.concatenate(self.parts)

    def where(self, mask: np.ndarray) -> np.ndarray:
        """The rows with ``mask`` (over device rows) true, in order (a copy)."""
        return np.concatenate([p[mask[s]] for p, _, s in self.chunks(len(mask) + 1)] or [self.parts[0][:0]])

    def segment_starts(self) -> np.ndarray:
        """Start of each run of equal values (``_segments`` of the concatenated column)."""
        out, last = [], None
        for k, p in enumerate(self.parts):
            if len(p) == 0:
                continue
            s = np.flatnonzero(p[1:] != p[:-1]) + 1
            if last is None or p[0] != last:
                s = np.concatenate([[0], s])
            out.append(s + self.offs[k])
            last = p[-1]
        return np.concatenate(out).astype(np.int64) if out else np.zeros(0, np.int64)


def _peak(trace: Trace, mask: np.ndarray) -> tuple[int, int]:
    """(time, bytes) of the peak of live bytes of the blocks in ``mask`` (the first time it is
    reached; (0, 0) for none): ``live_bytes_curve(trace.blocks[mask])`` without sorting again, one
    pass over the trace's live-event order in pieces (:func:`..trace.live.scan`: nothing full-length
    kept; the first event reaching a positive maximum is one of a masked block, whose delta raised it)."""
    best, at, t = scan(trace, mask)
    if at >= 0 and best > 0:
        return t, best
    t, live = live_bytes_curve(trace.blocks[mask])
    i = int(np.argmax(live)) if len(live) else 0
    return (int(t[i]), int(live[i])) if len(live) else (0, 0)


_LIVE_ORDER = ("model", "live_order")      # trace.live.live_order's memo key


def _peak_unkept(trace: Trace, mask: np.ndarray) -> tuple[int, int]:
    """:func:`_peak`; on a long trace (more blocks than a chunk) the live order it memoizes on the trace
    (int32 per allocation and free: 91 MB at 100 M events) let go again when it was not memoized before
    (the access analysis reads it only here: not held under the touches and the pass)."""
    memo = getattr(trace, "_derived", None)
    unkept = isinstance(memo, dict) and len(trace.blocks) > chunking.chunk_rows() and _LIVE_ORDER not in memo
    try:
        return _peak(trace, mask)
    finally:
        if unkept:
            memo.pop(_LIVE_ORDER, None)
            give_back()


def stability(intervals: pd.DataFrame, classes: pd.DataFrame, count: int) -> dict[str, Any] | None:
    """Share of blocks allocated inside regular steps whose size, relative position (n-th
    allocation of that size in the step) and access count repeat exactly in the next step
    (the previous one for the last step).  ``intervals``: the device rows of the access
    intervals (its ``block_id`` column); ``classes``: :func:`~.lifetimes.classify`."""
    if count < 2:
        return None
    ib = intervals["block_id"].to_numpy(np.int64)
    first = _Rows([ib]).segment_starts()
    keep = (classes["iter_alloc"].to_numpy(np.int64) >= 0) & classes["counts_device"].to_numpy(bool)
    cols = [classes[c].to_numpy(np.int64)[keep] for c in ("block_id", "seq_alloc", "iter_alloc", "size")]
    return _stability(ib[first], np.diff(np.append(first, len(ib))), ib, *cols, count)


_PACKED_KEY_LIMIT = 1 << 62     # step * (max size + 1) + size fits an int64 below this


def _stability(ub: np.ndarray, n_int: np.ndarray, ib, cb: np.ndarray, sa: np.ndarray, it: np.ndarray,
               size: np.ndarray, count: int, acc: np.ndarray | None = None) -> dict[str, Any] | None:
    """:func:`stability` of the blocks (``cb``: block ids, ``sa``: seq_alloc, ``it``: step of the
    allocation, ``size``) of the regular steps, from the intervals per block: ``n_int[j]`` intervals
    of block ``ub[j]`` (``ib``: the intervals' block ids, or a callable giving them, read only
    when ``ub`` is not increasing); ``acc``: the accesses of each block when the caller knows them
    (its intervals - 1).

    Exact, by a join on (step, size, rank) rather than by 64-bit hashes of those tuples."""
    cols = {"cb": cb, "sa": sa, "it": it, "size": size, "acc": acc}
    del cb, sa, it, size, acc
    return _stability_of(ub, n_int, ib, cols, count)


def _stability_of(ub, n_int, ib, cols: dict, count: int) -> dict[str, Any] | None:
    """:func:`_stability` with its per-block columns in ``cols`` ({"cb", "sa", "it", "size", "acc"}),
    taken out of the dict and each let go once read, the ids, ranks and counts held as int32 where they
    fit (the same values): at 100 M events ~11 M blocks, so each int64 array the join holds is ~90 MB."""
    cb, sa, it, size, acc = (cols.pop(k, None) for k in ("cb", "sa", "it", "size", "acc"))
    if count < 2 or len(cb) == 0:
        return None
    if acc is None:
        if len(ub) > 1 and not (ub[1:] > ub[:-1]).all():       # intervals not ordered by block
            ub, n_int = np.unique(ib() if callable(ib) else ib, return_counts=True)
        if len(ub):
            k = np.minimum(searchsorted(ub, cb), len(ub) - 1)
            acc = np.where(ub[k] == cb, n_int[k], 1) - 1          # accesses of each block
            del k
        else:
            acc = np.zeros(len(cb), np.int64)
    del ub, n_int, ib
    n = len(cb)
    if len(sa) > 1 and not (sa[1:] > sa[:-1]).all():       # in allocation order (as pandas sorts)
        o = pd.Series(sa).sort_values().index.to_numpy()
        it, size, acc = it[o], size[o], acc[o]
        del o
    del cb, sa
    idx = np.int32 if n < 1 << 31 else np.int64      # positions among the blocks
    nb = np.where(it + 1 < count, it + 1, it - 1)                  # the step compared with
    # (step, size) as one int64 key; a block's partner is the block of the same rank among the
    # blocks of its size in step nb (rank: allocation order within (step, size))
    span, skey = int(size.max()) + 1, size
    if size.min() < 0 or (max(int(it.max()), int(nb.max()), 0) + 1) * span >= _PACKED_KEY_LIMIT:
        skey = np.unique(size, return_inverse=True)[1].astype(np.int64)
        span = int(skey.max()) + 1
    key = it.astype(np.int64) * span
    key += skey
    del it
    q = nb.astype(np.int64) * span
    q += skey
    del nb, skey
    o = np.argsort(key, kind="stable").astype(idx, copy=False)
    ks = key[o]
    del key
    first = np.ones(n, bool)
    np.not_equal(ks[1:], ks[:-1], out=first[1:])
    rank = np.arange(n, dtype=idx)
    start = np.where(first, rank, idx(0))
    del first
    np.maximum.accumulate(start, out=start)
    rank -= start                                      # rank within its group, in sorted order
    del start
    partner = np.searchsorted(ks, q)
    partner[o] += rank                                 # + own rank (o maps sorted -> original)
    del rank
    np.minimum(partner, n - 1, out=partner)
    partner = partner.astype(idx, copy=False)
    pos_hit = ks[partner] == q
    del ks, q
    hit = acc[o[partner]] == acc
    hit &= pos_hit
    del partner, o, acc
    sizes = size.astype(np.float64)
    del size
    return {
        "blocks": int(n),
        "stable_blocks": _share(hit.sum(), n),
        "stable_bytes": _share(sizes[hit].sum(), sizes.sum()),
        "same_size_and_position": _share(pos_hit.sum(), n),
    }


def analyze(trace: Trace, bandwidth=None, latency_us: float | None = None, *, pid: int | None = None,
            iters=None, ati_quantile: float = 0.9, size_quantile: float = 0.9, top: int = 10,
            cache_path: str | None = None, between=None) -> dict[str, Any]:
    """Paper 1's access analysis of one process's device blocks (default: the main process).

    ``bandwidth``: GB/s per direction (or a :class:`~pyinterpose.analysis.bandwidth.Bandwidth`);
    None = cached measurement or the trace's NVML link data; with neither the bandwidth
    filter is skipped (``filtered_fraction`` None, ``bandwidth_note`` says why).
    Outliers: intervals with ATI >= the ``ati_quantile`` of all ATIs and block size >= the
    ``size_quantile`` of all block sizes."""

    for name, q in (("ati_quantile", ati_quantile), ("size_quantile", size_quantile)):
        if not 0.0 <= q <= 1.0:
            raise PyinterposeError(f"{name} must be between 0 and 1 (got {q})")
    if iters is None:
        iters = find_iterations(trace, pid)
    if pid is None:
        pid = iters.pid
    bw, note = resolve_link(trace, bandwidth, latency_us, cache_path)
    b = trace.blocks
    in_blocks = b["counts_device"].to_numpy(bool)      # the process's device blocks
    if pid is not None:
        in_blocks = in_blocks & (b["pid"].to_numpy() == pid)
    peak = _peak_unkept(trace, in_blocks)
    clock = clock_of(trace, pid)
    iv = _StreamedIntervals(trace, pid, int(np.count_nonzero(in_blocks)), iters)
    block_size = b["size"].to_numpy(np.int64)[in_blocks]       # read after the pass: not held under it
    del in_blocks
    if iv.spilled:
        intervals.release_tables(trace)   # the size column's pages just read
    if iv.spilled and not intervals.swap_follows(trace):
        clock.drop_ops()                  # a long trace: the pass was the last step to read them
        give_back()
    if between is not None:
        between(lambda: _between_rows(iv))
    if not iv.n:
        peak = None
    n_kind, kcode = iv.n_kind, iv.kcode
    if iv.spilled:                        # a long trace: the rows read from their files (access_spill)
        (ati_q, (ati_thr,)), by_kind = access_spill.quantile_summaries(iv, (ati_quantile,)) if iv.n else \
            ((None, (None,)), {})
    else:
        ati_q, (ati_thr,) = _quantile_summary(iv.ati.copy(), (ati_quantile,)) if iv.n else (None, (None,))
        by_kind = None
    out: dict[str, Any] = {
        "pid": pid,
        **clock.as_dict(),
        "iterations": {"source": iters.source, "count": iters.count},
        "intervals": iv.n,
        "blocks": iv.n_blocks,
        "accessed_blocks": None,
        "accesses": n_kind[INTERVAL_KINDS.index("between")] + n_kind[INTERVAL_KINDS.index("alloc_to_first")],
        "ati_quantiles": ati_q,
        "ati_by_kind": {k: {"intervals": n_kind[i], "quantiles": by_kind[i] if iv.spilled else
                            _quantile_summary(iv.ati.where(kcode == i))[0]} for i, k in iv.kinds},
    }
    unacc = INTERVAL_KINDS.index("unaccessed")
    if iv.uniform:                        # a block unaccessed has one row, of that kind
        out["accessed_blocks"] = iv.n_blocks - n_kind[unacc]
    elif iv.spilled:
        out["accessed_blocks"] = int(access_spill.per_block_any(iv, lambda s, c: c["kcode"] != unacc).sum())
    else:
        out["accessed_blocks"] = int(iv.per_block_any(kcode != unacc).sum())
    out["bandwidth"] = None if bw is None else {
        "h2d_bytes_per_s": bw.h2d_bytes_per_s, "d2h_bytes_per_s": bw.d2h_bytes_per_s,
        "latency_s": bw.latency_s, "source": bw.source}
    out["bandwidth_note"] = note
    filt = access_spill.bandwidth_filter if iv.spilled else _bandwidth_filter
    hides = filt(out, iv, bw, float(block_size.sum())) if bw is not None else None
    if bw is None:
        out["filtered_fraction"] = None
    if iv.spilled:
        access_spill.release_segments(iv)     # the per-segment columns' pages, when in files
    out["outliers"] = None
    if iv.n:
        outl = access_spill.outliers if iv.spilled else _outliers
        out["outliers"] = outl(iv, block_size, ati_thr, ati_quantile, size_quantile, peak, iters, hides, top)
        if iv.spilled:
            access_spill.release_segments(iv)
    long_trace = iv.spilled
    # the intervals per segment (a run of one block id): its block id and row count, all stability reads
    per_seg = {"ub": iv.bid.vals, "n_int": np.diff(np.append(iv.seg, iv.n))} if iters.count >= 2 else None
    del iv, kcode, hides, block_size
    if long_trace:
        give_back()                       # the steps' freed heap, before stability's arrays
    out["stability"] = _access_stability(trace, pid, iters, per_seg, long_trace) if iters.count else None
    del per_seg
    out["graph_launches"] = g = _graph_launches(trace, pid)
    # replays of graphs captured in the trace are expanded by the reader (trace/graphs.py); the others not
    unexpanded = min(g, int(trace.counts.get("graph_launches_unexpanded", g)))
    out["graph_launches_unexpanded"] = unexpanded
    out["notes"] = [] if not unexpanded else [
        f"{unexpanded} of {g} CUDA graph launches ran a graph not captured in the trace (instantiated before "
        "recording started, or built node by node): their kernels' accesses are missing here (ATIs across "
        "such a replay are too long, blocks used only inside it look untouched)"]
    return out


class _Chunk:
    """Rows ``s`` of a column, made for one chunk: indexed with ``s`` itself (as a one-part :class:`_Rows`'
    chunk is, whose local and global slices are the same)."""

    def __init__(self, x: np.ndarray, s: slice):
        self.x, self.s = x, s

    def __getitem__(self, ls: slice) -> np.ndarray:
        return self.x[ls.start - self.s.start:ls.stop - self.s.start]


class _SegRows:
    """A column whose value is constant along each segment (``seg``: the segment starts, ``vals``: one
    value a segment) over ``n`` rows, read like :class:`_Rows` without a row-sized array."""

    def __init__(self, vals: np.ndarray, seg: np.ndarray, n: int):
        self.vals, self.seg, self.n = vals, seg, n

    def __len__(self) -> int:
        return self.n

    def chunks(self, step: int | None = None):
        step = step or _step()
        for a in range(0, self.n, step):
            s = slice(a, min(a + step, self.n))
            yield _Chunk(_repeat_rows(self.vals, self.seg, s), s), s, s

    def _segment(self, idx):
        return searchsorted(self.seg, idx, side="right") - 1

    def take(self, idx: np.ndarray) -> np.ndarray:
        return self.vals[self._segment(np.asarray(idx))]

    def at(self, i: int):
        return self.vals[int(self._segment(i))]

    def copy(self) -> np.ndarray:
        return np.repeat(self.vals, np.diff(np.append(self.seg, self.n)))

    def segment_starts(self) -> np.ndarray:
        return self.seg


class _EndRows:
    """``start + ati`` (= the intervals' ``end_t``: ``ati_ns`` is ``end_t - start_t`` in int64), made a
    chunk at a time."""

    def __init__(self, start: np.ndarray, ati: np.ndarray):
        self.start, self.ati = start, ati

    def __len__(self) -> int:
        return len(self.start)

    def chunks(self, step: int | None = None):
        step = step or _step()
        for a in range(0, len(self.start), step):
            s = slice(a, min(a + step, len(self.start)))
            yield _Chunk(self.start[s] + self.ati[s], s), s, s

    @property
    def parts(self):
        return (c.x for c, _, _ in self.chunks())

    def take(self, idx: np.ndarray) -> np.ndarray:
        return self.start[idx] + self.ati[idx]

    def at(self, i: int):
        return self.start[i] + self.ati[i]


class _StreamedIntervals:
    """What the analysis reads of the device rows of ``access_intervals(trace, pid)``, made
    from its pieces (:func:`.intervals.pieces`, a range of blocks at a time) instead of the whole table:
    per row only the ATI, the start and the kind (17 bytes); per segment (a run of one block id) the
    block id and size; the end is start + ATI; a row's size is its segment's unless a segment holds
    rows of several sizes (block ids repeated in the blocks table), then kept per row.  The same values
    in the same order as the table's device rows, so every figure computed from them is the same."""

    def __init__(self, trace: Trace, pid: int | None, n_blocks: int, iters=None):
        self.n_blocks = n_blocks
        intervals.release_tables(trace)          # what the steps before read (the clock, the live bytes)
        fan = access_fan.plan(trace, pid, iters)     # inside fanout.using: the pass per range of blocks
        if fan is not None:
            self._fanned(trace, pid, *fan)
            return
        tc = intervals.touches(trace, pid)
        dev_b = trace.blocks["counts_device"].to_numpy(bool)[tc.rows]
        n = 0               # the device rows: a range of blocks at a time (no int64 arrays per block)
        for lo, hi in chunking.spans(len(dev_b)):
            d = dev_b[lo:hi]
            n += int(np.diff(tc.off[lo:hi + 1])[d].sum(dtype=np.int64)) + int(np.count_nonzero(d))
        files = access_spill.Rows.wanted(n)         # a long trace: the per-row columns to files
        if files is not None and intervals.drop_seqs(trace, tc):
            give_back()         # the touches' seqs (a piece reads its accesses' on the device clock)
        if files is None:
            ati, start, kcode = np.empty(n, np.int64), np.empty(n, np.int64), np.empty(n, np.int8)
        n_kind = np.zeros(len(INTERVAL_KINDS), np.int64)
        # per segment (at most one a block): its first row, block id and size, written in place as the
        # pieces come (no list of the pieces' arrays and their concatenation side by side)
        # (first rows and block ids as int32 when they fit: the same values, half the bytes)
        nseg_max = len(tc.rows)
        fits = (lambda lo, hi: np.int32 if -(1 << 31) <= lo and hi < (1 << 31) else np.int64)
        seg_t = fits(0, n)
        ub_t = fits(int(tc.bid[0]), int(tc.bid[-1])) if nseg_max else np.int64
        # a long trace with unique block ids: the per-segment columns to files too (not on the heap beside
        # the touches while the pass runs)
        segf = access_spill.Segments.wanted(files, tc.bid, seg_t, ub_t)
        if segf is None:
            seg_all, ub_all, size_all = np.empty(nseg_max, seg_t), np.empty(nseg_max, ub_t), np.empty(nseg_max, np.int64)
        row_sizes, mixed, done = [], False, []
        pos = nseg = 0
        cols = ("block_id", "size", "start_t", "ati_ns", "kind", "counts_device")
        sink = intervals.SwapRows.wanted(trace, pid)       # swap's problem reads this pass's rows too
        if sink is not None:
            cols += tuple(c for c in sink.columns if c not in cols)
        try:
            for p in intervals.pieces(trace, pid, columns=cols, tc=tc):
                if sink is not None:
                    sink.feed(p)
                dev = p["counts_device"]
                sel = slice(None) if dev.all() else dev
                a, st = p["ati_ns"][sel], p["start_t"][sel]
                k, bid, sz = p["kind"][sel], p["block_id"][sel], p["size"][sel]
                m = len(a)
                if files is None:
                    ati[pos:pos + m], start[pos:pos + m], kcode[pos:pos + m] = a, st, k
                else:
                    files.append("ati", a)
                    files.append("start", st)
                    files.append("kcode", k)
                    n_kind += np.bincount(k, minlength=len(INTERVAL_KINDS))[:len(INTERVAL_KINDS)]
                if m:
                    first = np.empty(m, bool)
                    first[0] = True
                    np.not_equal(bid[1:], bid[:-1], out=first[1:])
                    seg = np.flatnonzero(first)
                    g0, g1 = nseg, nseg + len(seg)
                    if segf is not None:
                        segf.append("seg", seg + pos)
                        segf.append("ub", bid[seg])
                        segf.append("size", sz[seg])
                    else:
                        np.add(seg, pos, out=seg_all[g0:g1])
                        ub_all[g0:g1] = bid[seg]
                        size_all[g0:g1] = sz[seg]
                    nseg = g1
                    if not mixed and not (sz[1:] == sz[:-1])[~first[1:]].all():
                        if segf is not None:       # not reached: unique ids, one size a segment
                            raise AssertionError("a segment of one block id with rows of several sizes")
                        mixed = True        # the rows' sizes of the pieces before, from their segments
                        row_sizes = [np.repeat(size_all[a0:a1], np.diff(np.append(seg_all[a0:a1] - p0, mm)))
                                     for a0, a1, p0, mm in done]
                        if files is not None:
                            files.add_column("size", np.int64)
                            for x in row_sizes:
                                files.append("size", x)
                            row_sizes = []
                    if mixed and files is not None:
                        files.append("size", np.array(sz, np.int64))
                    elif mixed:
                        row_sizes.append(np.array(sz, np.int64))
                    else:
                        done.append((g0, g1, pos, m))
                    del seg, first
                pos += m
                del p, a, st, k, bid, sz, dev
        except BaseException:
            if sink is not None:
                sink.abort()
            if files is not None:
                files.abort()
            if segf is not None:
                segf.abort()
            raise
        if sink is not None:
            sink.finish()
        self.spilled = files is not None
        self.row_size = None             # spilled: the rows' sizes when kept per row (mapped)
        if files is not None:
            cols = files.finish()
            ati, start, kcode = cols["ati"], cols["start"], cols["kcode"]
            self.row_size = cols.get("size")
        assert pos == n
        del tc
        intervals.release_tables(trace)
        self.n = n
        if segf is not None:
            c = segf.finish()
            self.seg, ub, self.seg_size_i = c["seg"], c["ub"], c["size"]
            del c
        else:
            self.seg, ub, self.seg_size_i = (intervals._shrink(x, nseg) for x in (seg_all, ub_all, size_all))
            del seg_all, ub_all, size_all
        self.ati_col = ati
        self.ati = _Rows([ati])
        self.kcode = kcode
        self.start = start
        self.bid = _SegRows(ub, self.seg, n)
        if self.row_size is not None:
            self.size = _Rows([self.row_size])
        else:
            self.size = _Rows([np.concatenate(row_sizes)]) if mixed else _SegRows(self.seg_size_i, self.seg, n)
        if self.spilled:
            self.n_kind = [int(x) for x in n_kind]
        else:
            self.n_kind = [int(np.count_nonzero(kcode == i)) for i in range(len(INTERVAL_KINDS))]
        self.kinds = [(i, k) for i, k in enumerate(INTERVAL_KINDS) if self.n_kind[i]]
        self.uniform = len(self.seg) == n_blocks
        del done, row_sizes
        if self.spilled:
            give_back()     # the pass's freed heap (the touches, the pieces): not kept under the next steps

    def _fanned(self, trace: Trace, pid, ranges, ub_t) -> None:
        """The pass fanned out per range of blocks (:mod:`.access_fan`): the same columns."""
        access_fan.run(self, trace, pid, ranges, ub_t)
        intervals.release_tables(trace)
        n = self.n
        self.ati = _Rows([self.ati_col])
        self.bid = _SegRows(self.ub, self.seg, n)
        del self.ub
        self.size = _SegRows(self.seg_size_i, self.seg, n)       # block ids unique: one size a segment
        self.kinds = [(i, k) for i, k in enumerate(INTERVAL_KINDS) if self.n_kind[i]]
        self.uniform = len(self.seg) == self.n_blocks
        if self.spilled:
            give_back()

    @property
    def seg_size(self) -> np.ndarray:
        """The segments' sizes as floats, made when read (not held beside ``seg_size_i``)."""
        return self.seg_size_i.astype(np.float64)

    def rows(self, name: str, dtype=None):
        if name == "start_t":
            return _Rows([self.start])
        if name == "end_t":
            return _EndRows(self.start, self.ati.parts[0])
        raise KeyError(name)

    def per_block_any(self, mask: np.ndarray) -> np.ndarray:
        return np.logical_or.reduceat(mask, self.seg) if len(self.seg) else np.zeros(0, bool)


def _between_rows(iv: "_StreamedIntervals"):
    """(ATI, size) of the device rows of kind ``between``, a chunk at a time, in table order."""
    if iv.spilled:
        yield from access_spill.between_rows(iv)
        return
    k = INTERVAL_KINDS.index("between")
    for (p, ls, s), (p_sz, ls_sz, _) in zip(iv.ati.chunks(), iv.size.chunks()):
        sel = iv.kcode[s] == k
        yield p[ls][sel], np.asarray(p_sz[ls_sz])[sel]


def _bandwidth_filter(out: dict, iv: "_StreamedIntervals", bw, block_bytes: float) -> np.ndarray:
    """An interval hides a swap of its block if ATI >= the block's swap cost: ``filtered_fraction``,
    ``filtered_by_kind`` and ``swappable`` into ``out``; the bool per interval."""
    n, n_blocks, seg = iv.n, iv.n_blocks, iv.seg
    cost = swap_cost_ns(iv.seg_size_i, bw)                   # per block (a function of the size)
    hides = np.empty(n, bool)
    for (p, ls, s), (p_sz, _, _) in zip(iv.ati.chunks(), iv.size.chunks()):
        np.greater_equal(p[ls], _repeat_rows(cost, seg, s) if iv.uniform else swap_cost_ns(p_sz[ls], bw),
                         out=hides[s])
    del cost
    n_hides = int(np.count_nonzero(hides))
    sw = iv.per_block_any(hides)
    sw_bytes = float(iv.seg_size[sw].sum())
    out["filtered_fraction"] = {
        "intervals": _share(n - n_hides, n),
        "blocks": _share(n_blocks - int(sw.sum()), n_blocks),
        "bytes": _share(block_bytes - sw_bytes, block_bytes),
    }
    out["filtered_by_kind"] = {k: _share(iv.n_kind[i] - int(np.count_nonzero((iv.kcode == i) & hides)), iv.n_kind[i])
                               for i, k in iv.kinds}
    out["swappable"] = {"intervals": n_hides, "blocks": int(sw.sum()), "bytes": int(sw_bytes)}
    return hides


def _pressure_window(iters, t_peak: int, st: _Rows, en: _Rows) -> tuple[int, int, str]:
    """The regular step holding the peak, else the whole process: (start, end, name)."""
    if iters.count and iters.boundaries_t[0] <= t_peak < iters.boundaries_t[-1]:
        k = int(np.searchsorted(iters.boundaries_t, t_peak, side="right") - 1)
        return int(iters.boundaries_t[k]), int(iters.boundaries_t[k + 1]), f"iteration {k}"
    return min(int(p.min()) for p in st.parts), max(int(p.max()) for p in en.parts), "whole trace"


def _outliers(iv: "_StreamedIntervals", block_size: np.ndarray, ati_thr, ati_quantile: float, size_quantile: float,
              peak: tuple[int, int], iters, hides: np.ndarray | None, top: int) -> dict[str, Any]:
    """Outliers (ATI and size both high) and their share of the peak and of memory pressure."""
    ati, size, seg, n = iv.ati, iv.size, iv.seg, iv.n
    size_thr = float(np.quantile(block_size, size_quantile))
    big = iv.seg_size_i >= size_thr
    is_out = np.empty(n, bool)
    for (p, ls, s), (p_sz, _, _) in zip(ati.chunks(), size.chunks()):
        np.greater_equal(p[ls], ati_thr, out=is_out[s])
        is_out[s] &= _repeat_rows(big, seg, s) if iv.uniform else p_sz[ls] >= size_thr
    del big
    t_peak, peak_bytes = peak
    st, en = iv.rows("start_t", np.int64), iv.rows("end_t", np.int64)
    lo, hi, wname = _pressure_window(iters, t_peak, st, en)
    # area = size * overlap with the window (bytes x ns), float64 a row, summed as one array:
    # the same floats as before
    area = np.empty(n, np.float64)
    peak_out = 0
    for (p_st, ls, s), (p_en, _, _), (p_sz, _, _) in zip(st.chunks(), en.chunks(), size.chunks()):
        ov = np.minimum(p_en[ls], hi)
        ov -= np.maximum(p_st[ls], lo)
        np.clip(ov, 0, None, out=ov)
        np.multiply(p_sz[ls], ov, out=area[s], dtype=np.float64)
        at_peak = p_st[ls] <= t_peak
        at_peak &= p_en[ls] > t_peak
        at_peak &= is_out[s]
        peak_out += int(p_sz[ls][at_peak].sum())
    del ov, at_peak
    area_all = area.sum()
    area_out = area[is_out].sum()
    del area
    ob = iv.per_block_any(is_out)
    sel = np.flatnonzero(is_out)
    sel = sel[_top_order(-(size.take(sel).astype(np.float64) * ati.take(sel)), top)]
    return {
        "ati_threshold_ns": ati_thr, "size_threshold_bytes": size_thr,
        "ati_quantile": ati_quantile, "size_quantile": size_quantile,
        "intervals": int(np.count_nonzero(is_out)), "blocks": int(ob.sum()),
        "bytes": int(iv.seg_size[ob].sum()),
        "swappable_intervals": None if hides is None else int(np.count_nonzero(is_out & hides)),
        "peak_bytes": peak_bytes, "peak_t": t_peak,
        "share_of_peak_bytes": _share(peak_out, peak_bytes),
        "pressure_window": {"name": wname, "start_t": lo, "end_t": hi},
        "share_of_pressure": _share(area_out, area_all),
        "top": [{"block_id": int(iv.bid.at(i)), "size": int(size.at(i)), "ati_ns": int(ati.at(i)),
                 "kind": INTERVAL_KINDS[iv.kcode[i]], "start_t": int(st.at(i)), "end_t": int(en.at(i))}
                for i in sel],
    }


def _graph_launches(trace: Trace, pid) -> int:
    """CUDA graph launches (replays; those of a graph captured in the trace are expanded by the reader)."""
    la = trace.launches
    if pid is not None and len(la):
        return int(la["graph"].to_numpy()[la["pid"].to_numpy() == pid].sum())
    return int(la["graph"].sum())


def _access_stability(trace: Trace, pid, iters, per_seg: dict | None,
                      long_trace: bool = False) -> dict[str, Any] | None:
    """:func:`stability` of the process's device blocks: the columns of :func:`~.lifetimes.classify`
    it reads (the step of each allocation is ``iters.iteration_of(seq_alloc)``) taken from the
    blocks table directly; through classify itself when block ids repeat (its own order then).
    ``per_seg``: ``{"ub", "n_int"}``, the block id and interval count of each run of one block id of
    the device rows; taken out of the dict (the caller keeps no reference: each array is let go as
    soon as it is read)."""

    if iters.count < 2:
        return None
    ub, n_int = per_seg.pop("ub"), per_seg.pop("n_int")
    b = trace.blocks

    def at(name, dtype, rows):
        """``b[name][rows]``; on a long trace the column's mapped pages given back once read (one
        blocks column resident at a time, not the five this step reads)."""
        x = b[name].to_numpy(dtype)[rows]
        if long_trace:
            pages.release(b[name])
        return x
    r = _block_rows(trace, pid)
    if long_trace:
        pages.release_all(b["pid"], b["block_id"])
    if len(r) > 1 and not (np.diff(at("block_id", np.int64, r)) > 0).all():
        c = classify(trace, iters, pid)
        keep = (c["iter_alloc"].to_numpy(np.int64) >= 0) & c["counts_device"].to_numpy(bool)
        cols = {k: c[col].to_numpy(np.int64)[keep]
                for k, col in (("cb", "block_id"), ("sa", "seq_alloc"), ("it", "iter_alloc"), ("size", "size"))}
        del c, keep
        return _stability_of(ub, n_int, lambda: np.repeat(ub, n_int), cols, iters.count)
    r = r[at("counts_device", bool, r)]
    ia = iters.iteration_of(at("seq_alloc", np.int64, r))
    keep = ia >= 0
    ia = ia[keep]
    acc = None
    if len(ub) == len(r) and np.array_equal(ub, at("block_id", np.int64, r)):
        acc = n_int[keep] - 1                          # one segment a block, in the same order
        if len(acc) and int(acc.max()) < 1 << 31:
            acc = acc.astype(np.int32)
        ub = n_int = None                              # read: let go before the join's arrays
    r = r[keep]
    del keep
    cols = {"cb": at("block_id", np.int64, r), "sa": at("seq_alloc", np.int64, r), "it": ia,
            "size": at("size", np.int64, r), "acc": acc}
    del r, ia, acc
    if long_trace:
        intervals.release_tables(trace)   # the blocks' columns read (copies taken)
    ib = None if ub is None else (lambda: np.repeat(ub, n_int))
    return _stability_of(ub, n_int, ib, cols, iters.count)
