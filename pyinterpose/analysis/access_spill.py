"""The access analysis of a long trace with its per-interval columns in files (issue 30).

``access.analyze`` keeps, for every device interval, its ATI, start and kind (17 bytes a row: ~0.9 GB
at 100 M events) and made from them a bool or a float per row at each step (the bandwidth filter's
``hides``, the outliers' ``is_out`` and ``area``) and a full copy of the ATIs for the exact quantiles.
Above :func:`spill_rows` rows (a long trace) the pass over the intervals' pieces writes those columns
instead to files of this process's own (:class:`Rows`, :mod:`.spillfiles`: in ``TMPDIR``, mapped back and
unlinked at once, so they go with the process), and every later step reads them a chunk at a time, giving back each
chunk's mapped pages once read (:mod:`..trace.pages`); what stays in memory is per block (segments).
Every figure is the in-memory one exactly:

* the ATI quantiles (overall and per kind): min and max; the mean as numpy's ``x.mean()`` sums
  (:class:`.exactsum.IntMean`); ``np.quantile`` from the exact order statistics
  (:func:`..trace.piecewise.quantiles`, a few counting passes);
* the bandwidth filter and outliers: integer counts and per-block "any" made a chunk at a time;
* the pressure shares: numpy's pairwise sum of the area of every row and of the outliers' rows
  (:class:`.exactsum.PairwiseSum`, whose tree needs the count first: a second pass);
* the top outliers: each chunk's first ``top`` by (key, row), merged in row order, then the first
  ``top`` of those (the stable sort's order).

``tests/integration/test_access_spill.py`` runs the analysis both ways on the demo, the samples and
synthetic traces and compares every figure.
"""
from __future__ import annotations

import numpy as np

from ..trace import chunking, pages
from .exactsum import IntMean, PairwiseSum
from ..trace.piecewise import piece_rows, quantiles_many  # noqa: F401  (quantiles_many: the tests read it here too)
from .access_common import _repeat_rows, _share, _step, _top_order, swap_cost_ns
from .intervals import INTERVAL_KINDS
from .search import position
from .spillfiles import Files

SPILL_ROWS: int | None = None     # tests: 0 spills every trace, a huge value none (None: spill_rows())


def spill_rows() -> int:
    """Device intervals above which their columns go to files: :data:`SPILL_ROWS`, else twice
    ``chunk_rows()`` (8 Mi rows by default: ~0.3 GB of per-row arrays in memory at most)."""
    return SPILL_ROWS if SPILL_ROWS is not None else 2 * chunking.chunk_rows()


class Rows(Files):
    """The per-row columns of the pass (ATI, start, kind; the sizes when kept per row), appended a
    piece at a time to files (:class:`.spillfiles.Files`)."""

    COLUMNS = (("ati", np.int64), ("start", np.int64), ("kcode", np.int8))

    def __init__(self):
        super().__init__("pyinterpose-access-")
        for c, t in self.COLUMNS:
            self.add_column(c, t)

    @classmethod
    def wanted(cls, n: int) -> "Rows | None":
        """A writer when ``n`` rows are a long trace's (None otherwise, or when the files cannot be made)."""
        if n <= spill_rows():
            return None
        try:
            return cls()
        except OSError:
            return None


class Segments(Files):
    """The pass's per-segment columns (first row, block id, size: one segment a block, ~11 M at 100 M
    events, 16 bytes each) appended a piece at a time to files (:class:`.spillfiles.Files`) instead of
    arrays made once for every block: not held on the heap beside the touches while the pass runs.
    Only with block ids unique among the process's blocks (then a segment is one block and its rows
    have one size: the per-row sizes are never needed)."""

    def __init__(self, seg_dtype, ub_dtype):
        super().__init__("pyinterpose-accseg-")
        for c, t in (("seg", seg_dtype), ("ub", ub_dtype), ("size", np.int64)):
            self.add_column(c, t)

    @classmethod
    def wanted(cls, rows: "Rows | None", bid: np.ndarray, seg_dtype, ub_dtype) -> "Segments | None":
        """A writer when the rows go to files (``rows``) and the ids ``bid`` (ascending) are unique."""
        if rows is None or (len(bid) > 1 and not bool((bid[1:] > bid[:-1]).all())):
            return None
        try:
            return cls(seg_dtype, ub_dtype)
        except OSError:
            return None


def release_segments(iv) -> None:
    """Give back the resident pages of the per-segment columns when they are files (:class:`Segments`)."""
    for c in (iv.seg, iv.bid.vals, iv.seg_size_i):
        pages.release(c)


# ---- reading the columns a chunk at a time ----------------------------------------------------

def _spans(n: int):
    return chunking.spans(n, _step())


def _release(s: slice, *cols) -> None:
    for c in cols:
        pages.release(c, s.start, s.stop)


def _sizes(iv, s: slice) -> np.ndarray:
    """The rows' block sizes (int64) for the rows of ``s``."""
    if iv.row_size is not None:
        return np.asarray(iv.row_size[s], np.int64)
    return _repeat_rows(iv.seg_size_i, iv.seg, s)


def chunks(iv, *names):
    """``(slice, {name: column[slice]})`` over every row; the pages of the chunk given back after it.
    Names: ``ati``, ``start``, ``kcode`` and ``size``."""
    cols = {"ati": iv.ati_col, "start": iv.start, "kcode": iv.kcode}
    for lo, hi in _spans(iv.n):
        s = slice(lo, hi)
        out = {k: (_sizes(iv, s) if k == "size" else cols[k][s]) for k in names}
        yield s, out
        _release(s, *(cols[k] for k in names if k != "size"))
        if "size" in names and iv.row_size is not None:
            _release(s, iv.row_size)


def or_segments(out: np.ndarray, seg: np.ndarray, s: slice, mask: np.ndarray) -> None:
    """``out[j] |= mask over the rows of segment j`` for the segments meeting the rows of ``s``
    (``seg``: the segment starts; ``mask``: a bool per row of ``s``)."""
    if s.stop <= s.start:
        return
    j0 = position(seg, s.start, side="right") - 1
    j1 = position(seg, s.stop, side="left")
    b = seg[j0:j1] - s.start
    b[0] = 0
    out[j0:j1] |= np.logical_or.reduceat(mask, b)


def per_block_any(iv, rows_mask) -> np.ndarray:
    """``np.logical_or.reduceat(mask, seg)``: ``rows_mask(slice, chunk)`` gives the mask of a chunk."""
    out = np.zeros(len(iv.seg), bool)
    for s, c in chunks(iv, "ati", "kcode"):
        or_segments(out, iv.seg, s, rows_mask(s, c))
    return out


# ---- the ATI quantiles ------------------------------------------------------------------------

def quantile_summaries(iv, extra: tuple[float, ...]) -> tuple:
    """``(_quantile_summary(ati, extra), {kind code: _quantile_summary(ati[kind])[0]})`` of the rows."""
    from .lifetimes import QUANTILES

    k = len(INTERVAL_KINDS)
    lo, hi = [None] * (k + 1), [None] * (k + 1)
    means = [IntMean() for _ in range(k + 1)]
    for _, c in chunks(iv, "ati", "kcode"):
        a, kc = c["ati"], c["kcode"]
        parts = [(k, a)] + [(i, a[kc == i]) for i in range(k) if iv.n_kind[i]]
        for i, x in parts:
            if not len(x):
                continue
            means[i].feed(x)
            mn, mx = int(x.min()), int(x.max())
            lo[i] = mn if lo[i] is None or mn < lo[i] else lo[i]
            hi[i] = mx if hi[i] is None or mx > hi[i] else hi[i]

    # the quantiles of every set (all rows, each kind's) from shared passes over the rows
    sets = [i for i in [k] + list(range(k)) if (iv.n if i == k else iv.n_kind[i])]
    qs = {i: tuple(QUANTILES) + (tuple(extra) if i == k else ()) for i in sets}

    def pieces(active):
        for _, c in chunks(iv, "ati", "kcode"):
            a, kc = c["ati"], c["kcode"]
            yield {i: a if i == k else a[kc == i] for i in active}
    q = quantiles_many(pieces, {i: (qs[i], (iv.n if i == k else iv.n_kind[i], lo[i], hi[i])) for i in sets})

    def summary(i):
        if i not in q:
            return None, []
        d = {f"p{int(p * 100)}": float(v) for p, v in zip(QUANTILES, q[i])}
        d.update(min=float(lo[i]), max=float(hi[i]), mean=means[i].result())
        return d, [float(v) for v in q[i][len(QUANTILES):]]

    whole = summary(k)
    return whole, {i: summary(i)[0] for i in range(k) if iv.n_kind[i]}


# ---- the bandwidth filter and the outliers -----------------------------------------------------

def bandwidth_filter(out: dict, iv, bw, block_bytes: float):
    """``access._bandwidth_filter`` of the rows in files: the same keys into ``out``; returns a function
    ``(slice, ati, size) -> hides`` for a chunk (the bool per row, made again where needed)."""

    n, n_blocks, seg = iv.n, iv.n_blocks, iv.seg
    cost = swap_cost_ns(iv.seg_size_i, bw)

    def hides(s, a, sz):
        return np.greater_equal(a, _repeat_rows(cost, seg, s) if iv.uniform else swap_cost_ns(sz, bw))

    k = len(INTERVAL_KINDS)
    by_kind = np.zeros(k, np.int64)
    sw = np.zeros(len(seg), bool)
    n_hides = 0
    for s, c in chunks(iv, "ati", "kcode", *(() if iv.uniform else ("size",))):   # sizes: only per row
        h = hides(s, c["ati"], c.get("size"))
        n_hides += int(np.count_nonzero(h))
        by_kind += np.bincount(c["kcode"][h], minlength=k)[:k]
        or_segments(sw, seg, s, h)
    sw_bytes = float(iv.seg_size[sw].sum())
    out["filtered_fraction"] = {
        "intervals": _share(n - n_hides, n),
        "blocks": _share(n_blocks - int(sw.sum()), n_blocks),
        "bytes": _share(block_bytes - sw_bytes, block_bytes),
    }
    out["filtered_by_kind"] = {name: _share(iv.n_kind[i] - int(by_kind[i]), iv.n_kind[i]) for i, name in iv.kinds}
    out["swappable"] = {"intervals": n_hides, "blocks": int(sw.sum()), "bytes": int(sw_bytes)}
    return hides


def outliers(iv, block_size, ati_thr, ati_quantile: float, size_quantile: float, peak, iters, hides,
             top: int) -> dict:
    """``access._outliers`` of the rows in files (see the module docstring)."""

    seg, n = iv.seg, iv.n
    size_thr = float(np.quantile(block_size, size_quantile))
    big = iv.seg_size_i >= size_thr
    t_peak, peak_bytes = peak

    def is_out(s, a, sz):
        o = np.greater_equal(a, ati_thr)
        o &= _repeat_rows(big, seg, s) if iv.uniform else sz >= size_thr
        return o

    n_out = n_out_hides = peak_out = 0
    ob = np.zeros(len(seg), bool)
    st_min = en_max = None
    cand_key, cand_row = np.zeros(0, np.float64), np.zeros(0, np.int64)
    for s, c in chunks(iv, "ati", "start", "size"):
        a, st, sz = c["ati"], c["start"], c["size"]
        o = is_out(s, a, sz)
        n_out += int(np.count_nonzero(o))
        or_segments(ob, seg, s, o)
        if hides is not None:
            n_out_hides += int(np.count_nonzero(o & hides(s, a, sz)))
        en = st + a
        at_peak = st <= t_peak
        at_peak &= en > t_peak
        at_peak &= o
        peak_out += int(sz[at_peak].sum())
        if len(st):
            lo_, hi_ = int(st.min()), int(en.max())
            st_min = lo_ if st_min is None else min(st_min, lo_)
            en_max = hi_ if en_max is None else max(en_max, hi_)
        sel = np.flatnonzero(o)
        key = -(sz[sel].astype(np.float64) * a[sel])
        if top >= 0:
            keep = _top_order(key, top)
            keep.sort()                               # in row order again (ties: the earlier row first)
            sel, key = sel[keep], key[keep]
        cand_key = np.concatenate([cand_key, key])
        cand_row = np.concatenate([cand_row, sel + s.start])
        if top >= 0 and len(cand_key) > 4 * top + 64:
            keep = _top_order(cand_key, top)
            keep.sort()
            cand_key, cand_row = cand_key[keep], cand_row[keep]
    if iters.count and iters.boundaries_t[0] <= t_peak < iters.boundaries_t[-1]:
        j = int(np.searchsorted(iters.boundaries_t, t_peak, side="right") - 1)
        lo, hi, wname = int(iters.boundaries_t[j]), int(iters.boundaries_t[j + 1]), f"iteration {j}"
    else:
        lo, hi, wname = st_min, en_max, "whole trace"
    area_all, area_out = PairwiseSum(n), PairwiseSum(n_out)
    for s, c in chunks(iv, "ati", "start", "size"):
        a, st, sz = c["ati"], c["start"], c["size"]
        en = st + a
        ov = np.minimum(en, hi)
        ov -= np.maximum(st, lo)
        np.clip(ov, 0, None, out=ov)
        area = np.multiply(sz, ov, dtype=np.float64)
        area_all.feed(area)
        area_out.feed(area[is_out(s, a, sz)])
    rows = cand_row[_top_order(cand_key, top)]
    return {
        "ati_threshold_ns": ati_thr, "size_threshold_bytes": size_thr,
        "ati_quantile": ati_quantile, "size_quantile": size_quantile,
        "intervals": n_out, "blocks": int(ob.sum()),
        "bytes": int(iv.seg_size[ob].sum()),
        "swappable_intervals": None if hides is None else n_out_hides,
        "peak_bytes": peak_bytes, "peak_t": t_peak,
        "share_of_peak_bytes": _share(peak_out, peak_bytes),
        "pressure_window": {"name": wname, "start_t": lo, "end_t": hi},
        "share_of_pressure": _share(area_out.result(), area_all.result()),
        "top": [_top_row(iv, int(i)) for i in rows],
    }


def _top_row(iv, i: int) -> dict:
    size = int(iv.row_size[i]) if iv.row_size is not None else int(iv.seg_size_i[_segment(iv, i)])
    ati, st = int(iv.ati_col[i]), int(iv.start[i])
    return {"block_id": int(iv.bid.at(i)), "size": size, "ati_ns": ati, "kind": INTERVAL_KINDS[iv.kcode[i]],
            "start_t": st, "end_t": int(np.int64(st) + np.int64(ati))}


def _segment(iv, i: int) -> int:
    return position(iv.seg, i, side="right") - 1


def between_rows(iv):
    """(ATI, size) of the rows of kind ``between``, a chunk at a time, in table order."""
    k = INTERVAL_KINDS.index("between")
    for _, c in chunks(iv, "ati", "kcode", "size"):
        sel = c["kcode"] == k
        yield np.array(c["ati"][sel]), c["size"][sel]
