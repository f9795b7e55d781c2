"""The access section's ATI figure, made from the access analysis' own intervals a chunk at a time.

The figure is a histogram of the positive ATIs of a process's access-to-access intervals (the device
blocks' intervals of kind ``between``) on 50 log-spaced bins from the smallest to the largest, with the
bandwidth filter drawn over it: a line when every interval's swap cost is the same, else the 5-95 %
band and the median of the per-interval costs.  It once read the whole intervals table
(``access_intervals``: at 100 M events ~50 M rows, 3.4 GB); everything it needs is a few sums:

* the smallest and the largest positive ATI (the bins), then the count of ATIs in each bin
  (``np.histogram`` on the same bins, a chunk at a time: the counts add up);
* the sizes of the intervals' blocks with how many intervals each (a swap cost is a function of the
  size alone, so the costs' quantiles are those of the sizes' costs repeated that many times).

:class:`BetweenSummary` is called by :func:`pyinterpose.analysis.access.analyze` (its ``between``
hook) while the analysis holds its intervals; :func:`figure` draws the same figure as
:func:`pyinterpose.report.plots.ati_png` on the whole arrays would.
"""
from __future__ import annotations

import numpy as np

from ..analysis.access import swap_cost_ns

N_EDGES = 50      # ati_png's bins: 50 log-spaced edges


class BetweenSummary:
    """The sums the ATI figure needs, read from ``rows()`` (chunks of (ATI, size) arrays)."""

    def __init__(self) -> None:
        self.called = False
        self.n = 0                                   # intervals of kind between
        self.bins: np.ndarray | None = None          # None: no positive ATI
        self.counts = np.zeros(0, np.int64)          # per bin
        self.sizes = np.zeros(0, np.int64)           # distinct sizes, ascending
        self.size_counts = np.zeros(0, np.int64)     # intervals of each size

    def __call__(self, rows) -> None:
        self.called = True
        n, lo, hi, parts = 0, None, None, []
        for ati, size in rows():
            n += len(ati)
            a = ati[ati > 0]
            if len(a):
                mn, mx = a.min(), a.max()
                lo = mn if lo is None or mn < lo else lo
                hi = mx if hi is None or mx > hi else hi
            parts.append(_value_counts(np.asarray(size, np.int64)))
        self.n = n
        if parts:
            u = np.concatenate([p[0] for p in parts])
            c = np.concatenate([p[1] for p in parts])
            self.sizes, inv = np.unique(u, return_inverse=True)
            self.size_counts = np.bincount(inv, weights=c, minlength=len(self.sizes)).astype(np.int64)
        if lo is None:
            return
        # ati_png: the bins of the float64 ATIs (the conversion keeps the order: min and max convert alike)
        lo_f, hi_f = np.float64(lo), np.float64(hi)
        self.bins = np.logspace(np.log10(max(lo_f, 1.0)), np.log10(max(hi_f, 10.0)) + 1e-9, N_EDGES)
        counts = np.zeros(N_EDGES - 1, np.int64)
        for ati, _ in rows():
            a = np.asarray(ati, np.float64)
            counts += bin_counts(a[a > 0], self.bins)
        self.counts = counts

    def thresholds(self, bw) -> tuple[np.ndarray, np.ndarray]:
        """(swap cost, intervals) of each distinct size of the intervals, finite and positive only."""
        th = swap_cost_ns(self.sizes, bw)
        keep = np.isfinite(th) & (th > 0)
        return th[keep], self.size_counts[keep]


def _value_counts(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(distinct values, how many of each) of ``x``, its runs of one value counted first (the sizes of
    one block's intervals are one run: the sort is over the runs, not the rows)."""
    if not len(x):
        return x[:0], np.zeros(0, np.int64)
    start = np.flatnonzero(np.concatenate(([True], x[1:] != x[:-1])))
    run_len = np.diff(np.append(start, len(x)))
    u, inv = np.unique(x[start], return_inverse=True)
    return u, np.bincount(inv, weights=run_len, minlength=len(u)).astype(np.int64)


def bin_counts(a: np.ndarray, edges: np.ndarray) -> np.ndarray:
    """``np.histogram(a, bins=edges)[0]`` without its sort: each value's bin by one search among the
    edges; a bin holds [edge, next edge), the last one its right edge too; values outside are left out."""
    nb = len(edges) - 1
    k = np.searchsorted(edges, a, side="right") - 1
    k[(k == nb) & (a == edges[-1])] = nb - 1
    k = k[(k >= 0) & (k < nb)]
    return np.bincount(k, minlength=nb).astype(np.int64)


def threshold_marks(th: np.ndarray, counts: np.ndarray):
    """What ati_png draws for the per-interval costs ``np.repeat(th, counts)``: ("line", x), ("band",
    p5, p95, median), or None."""
    total = int(counts.sum())
    if total == 0:
        return None
    if total == 1 or th.min() == th.max():
        return ("line", float(th[0]))
    full = np.repeat(th, counts)          # the costs' multiset: its quantiles are the per-interval ones
    q05 = np.quantile(full, 0.05, overwrite_input=True)
    q95 = np.quantile(full, 0.95, overwrite_input=True)
    med = np.median(full, overwrite_input=True)
    return ("band", q05, q95, med)


def figure(summary: BetweenSummary, bw) -> tuple[str, str] | bool:
    """The access section's figure (False: no access-to-access interval)."""
    if summary.n == 0:
        return False
    marks = threshold_marks(*summary.thresholds(bw)) if bw is not None else None
    from . import plots         # matplotlib on use (html.analyse imports it beside the analyses)

    return plots.ati_binned_png(summary.bins, summary.counts, marks), "ATI distribution"
