"""The peak of a subset of the blocks' live bytes, overall and per time window, in pieces.

``lifetimes.summary`` needs, for one process's device blocks, the curve of their live bytes (the
running sum of their events' deltas, *their events only*, in the curve's order: :mod:`.live`) for
two things: its maximum with the time it is first reached, and its maximum inside each iteration
(``[boundaries_t[k], boundaries_t[k+1])``).  It once took them from the full-length curve
(``model.live_events``: 24 bytes an event of the whole trace, kept to the end); :func:`masked_peaks`
reads :func:`.live.live_order` a piece at a time instead, holding one piece and the per-window maxima.

Exact: the same events in the same order, the same running sums; a window's maximum is over the
events whose time lies in it, as ``np.searchsorted(t, boundaries_t, side="left")`` cuts them.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .chunking import spans
from .live import counted_bytes, live_order
from .pages import release
from .piecewise import piece_rows


@dataclass
class MaskedPeaks:
    events: int                      # events of the blocks in the mask
    peak: int                        # the curve's maximum (not clipped at 0; 0 without events)
    t: int                           # the time of the first event reaching it (-1 without events)
    per_window: np.ndarray | None    # int64 per window: the maximum inside it, 0 when it holds no event


def masked_peaks(trace, mask: np.ndarray, boundaries_t: np.ndarray | None = None) -> MaskedPeaks:
    """The curve of the live device bytes of the blocks in ``mask`` (bool per row of ``trace.blocks``),
    from their events only: its peak and when it is first reached, and (``boundaries_t``, non-decreasing)
    its maximum in each window between consecutive boundaries."""
    code = live_order(trace)
    b = trace.blocks
    mask = np.asarray(mask, bool)
    nw = max(len(boundaries_t) - 1, 0) if boundaries_t is not None else 0
    bt = np.asarray(boundaries_t, np.int64) if nw else None
    win = np.zeros(nw, np.int64)
    has = np.zeros(nw, bool)
    size = counted_bytes(b)
    ta, tf = b["t_alloc"].to_numpy(), b["t_free"].to_numpy()
    carry, best, t_best, n = 0, None, -1, 0
    # pieces of piece_rows() events (a piece holds ~10 arrays of its length: at chunk_rows() they were
    # ~0.6 GB at 100 M events, issue 30), the columns' pages before the piece's allocations given back
    for lo, hi in spans(len(code), piece_rows()):
        c = code[lo:hi]
        free = c < 0
        rows = np.where(free, ~c, c).astype(np.int64, copy=False)
        alloc = rows[~free]
        if len(alloc):      # blocks come in time order: rows before these are read again only by frees
            first = int(alloc.min())
            for x in (size, ta, tf):
                release(x, 0, first)
        del alloc
        keep = mask[rows]
        rows, free = rows[keep], free[keep]
        if not len(rows):
            continue
        d = size[rows]
        np.negative(d, out=d, where=free)
        t = np.where(free, tf[rows], ta[rows]).astype(np.int64, copy=False)
        cs = np.cumsum(d)
        cs += carry
        k = int(np.argmax(cs))
        if best is None or cs[k] > best:
            best, t_best = int(cs[k]), int(t[k])
        carry = int(cs[-1])
        n += len(cs)
        if nw:
            w = np.searchsorted(bt, t, side="right") - 1      # window of each event (times ascend)
            ok = (w >= 0) & (w < nw)
            wv, cv = w[ok], cs[ok]
            if len(wv):
                first = np.flatnonzero(np.concatenate(([True], wv[1:] != wv[:-1])))
                m = np.maximum.reduceat(cv, first)
                kk = wv[first]
                win[kk] = np.where(has[kk], np.maximum(win[kk], m), m)
                has[kk] = True
    for x in (size, ta, tf):
        release(x)
    return MaskedPeaks(events=n, peak=0 if best is None else best, t=t_best,
                       per_window=np.where(has, win, 0) if boundaries_t is not None else None)
