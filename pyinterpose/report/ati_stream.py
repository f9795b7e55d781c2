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
from . import plots

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
            u, c = np.unique(np.asarray(size, np.int64), return_counts=True)
            parts.append((u, c))
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
            counts += np.histogram(a[a > 0], bins=self.bins)[0]
        self.counts = counts

    def thresholds(self, bw) -> tuple[np.ndarray, np.ndarray]:
        """(swap cost, intervals) of each distinct size of the intervals, finite and positive only."""
        th = swap_cost_ns(self.sizes, bw)
        keep = np.isfinite(th) & (th > 0)
        return th[keep], self.size_counts[keep]


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
    return plots.ati_binned_png(summary.bins, summary.counts, marks), "ATI distribution"
