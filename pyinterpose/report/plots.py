"""Matplotlib figures (no pyplot state) rendered to base64 SVG for inline HTML.

Each ``*_png`` function (the name is historical) takes plain arrays/tables and
returns the base64 text of an SVG image (vector: crisp at any width and on HiDPI
screens; text kept as text), so the HTML embeds
``<img src="data:image/svg+xml;base64,...">`` and needs no network or external file.
Every colour drawn has a legend entry.
"""
from __future__ import annotations

import base64
import io
from typing import Sequence

import numpy as np
import matplotlib
import pandas as pd
from matplotlib.backends.backend_svg import FigureCanvasSVG
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter

from .data import Timeline
from .text import fmt_bytes, fmt_ns

# one colour per well-known class; others cycle through the palette
CLASS_COLOURS = {
    "persistent": "#4C72B0", "weight": "#4C72B0", "per-iteration": "#DD8452", "per_iteration": "#DD8452",
    "iteration": "#DD8452", "activation": "#DD8452", "temporary": "#55A868", "workspace": "#55A868",
    "gradient": "#C44E52", "optimizer": "#8172B3", "warmup": "#937860", "other": "#8C8C8C", "live": "#4C72B0",
    "cross_iteration": "#8172B3", "transient": "#55A868", "outside": "#BBBBBB", "leak": "#C44E52",
}
PALETTE = ["#4C72B0", "#DD8452", "#55A868", "#C44E52", "#8172B3", "#937860", "#DA8BC3", "#8C8C8C",
           "#CCB974", "#64B5CD"]
DPI = 100
MIME = "image/svg+xml"


def _colour(name: str, i: int) -> str:
    return CLASS_COLOURS.get(name, PALETTE[i % len(PALETTE)])


def _png(fig: Figure, tight: bool = True) -> str:
    """The figure as base64 SVG; ``tight``: crop to what is drawn (one more draw: the
    report's own figures lay themselves out with :func:`_layout` and pass False)."""
    FigureCanvasSVG(fig)
    buf = io.BytesIO()
    with matplotlib.rc_context({"svg.fonttype": "none", "svg.hashsalt": "pyinterpose"}):
        fig.savefig(buf, format="svg", bbox_inches="tight" if tight else None, metadata={"Date": None})
    return base64.b64encode(buf.getvalue()).decode("ascii")


def _legend_width_in(ax) -> float:
    """Inches a legend drawn outside the axes on the right needs (estimated from its
    labels at font size 8: handle, padding and about 0.055 in per character)."""
    leg = ax.get_legend()
    if leg is None or leg.get_bbox_to_anchor() is None or not leg.get_texts():
        return 0.0
    anchor = getattr(leg, "_bbox_to_anchor", None)
    if anchor is None:
        return 0.0
    return 0.8 + 0.055 * max(len(t.get_text()) for t in leg.get_texts())


def _layout(fig: Figure, left: float = 0.8, right: float = 0.2, bottom: float = 0.6, top: float = 0.35,
            wspace: float = 0.0, hspace: float = 0.0, outside: Sequence = ()) -> None:
    """Fixed margins in inches instead of tight_layout and bbox_inches="tight" (each of
    which draws the whole figure once more: together they tripled the cost of a figure).
    ``outside``: axes whose legend sits right of them; the figure widens to hold it.
    ``wspace``/``hspace``: the gaps between panels, in inches."""
    w, h = fig.get_size_inches()
    leg = max([_legend_width_in(ax) for ax in outside] + [0.0])
    if leg:
        w += leg
        fig.set_size_inches(w, h)
    ncols = max([ax.get_subplotspec().get_gridspec().ncols for ax in fig.axes if ax.get_subplotspec()] + [1])
    nrows = max([ax.get_subplotspec().get_gridspec().nrows for ax in fig.axes if ax.get_subplotspec()] + [1])
    aw = (w - left - right - leg - wspace * (ncols - 1)) / ncols
    ah = (h - top - bottom - hspace * (nrows - 1)) / nrows
    fig.subplots_adjust(left=left / w, right=1 - (right + leg) / w, bottom=bottom / h, top=1 - top / h,
                        wspace=wspace / max(aw, 0.1), hspace=hspace / max(ah, 0.1))


def _byte_unit(vmax: float) -> tuple[float, str]:
    """(divisor, unit) so that axis values read as plain numbers of that unit."""
    for div, name in ((1 << 40, "TiB"), (1 << 30, "GiB"), (1 << 20, "MiB"), (1 << 10, "KiB")):
        if vmax >= 2 * div:
            return float(div), name
    return 1.0, "B"


def _legend_outside(ax) -> None:
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, frameon=False)


def _time_axis(t_ns: np.ndarray) -> tuple[float, str]:
    span = float(t_ns.max() - t_ns.min()) if len(t_ns) else 0.0
    if span >= 5e9:
        return 1e9, "s"
    if span >= 5e6:
        return 1e6, "ms"
    return 1e3, "us"


def memory_over_time_png(timelines: Sequence[Timeline], reserved: dict[int, tuple[np.ndarray, np.ndarray]],
                         boundaries_t: np.ndarray | None = None, reserved_view: bool = False,
                         max_boundaries: int = 200) -> str:
    """Stacked live bytes by class per device; NVML used memory as a line; iteration
    boundaries as vertical lines (at most ``max_boundaries``, evenly thinned)."""
    devices = sorted({tl.device for tl in timelines} | set(reserved))
    n = max(1, len(devices))
    fig = Figure(figsize=(10, 3.2 * n))
    all_t = np.concatenate([tl.t for tl in timelines] + [r[0] for r in reserved.values()] + [np.zeros(1, np.int64)])
    scale, unit = _time_axis(all_t)
    axes = [fig.add_subplot(n, 1, i + 1) for i in range(n)]
    by_dev = {tl.device: tl for tl in timelines}
    ymax = max([float(tl.total.max()) for tl in timelines if len(tl.total)] +
               [float(r[1].max()) for r in reserved.values() if len(r[1])] + [1.0])
    div, bunit = _byte_unit(ymax)
    for ax, dev in zip(axes, devices):
        tl = by_dev.get(dev)
        if tl is not None and len(tl.t):
            x = tl.t / scale
            names = list(tl.series)
            ys = [tl.series[k] / div for k in names]
            label_suffix = " (framework reserve)" if reserved_view else ""
            ax.stackplot(x, ys, step="post", colors=[_colour(k, i) for i, k in enumerate(names)],
                         labels=[f"{k}{label_suffix}" for k in names], alpha=0.85, linewidth=0)
            ax.axhline(tl.peak / div, color="black", linestyle=":", linewidth=0.8,
                       label=f"peak live {fmt_bytes(tl.peak)}")
        if dev in reserved:
            rt, ru = reserved[dev]
            ax.step(rt / scale, ru / div, where="post", color="#222222", linewidth=1.2,
                    label="NVML used (reserved + context)")
        if boundaries_t is not None and len(boundaries_t):
            b = np.asarray(boundaries_t)
            if len(b) > max_boundaries:
                b = b[np.linspace(0, len(b) - 1, max_boundaries).astype(int)]
            for j, bt in enumerate(b):
                ax.axvline(bt / scale, color="#999999", linewidth=0.6, linestyle="--",
                           label="iteration boundary" if j == 0 else None)
        ax.set_title(f"GPU {dev}", loc="left", fontsize=10)
        ax.set_xlabel(f"time ({unit})")
        ax.set_ylabel(bunit)
        ax.margins(x=0)
        ax.set_ylim(bottom=0)
        _legend_outside(ax)
    _layout(fig, left=0.7, bottom=0.55, top=0.45, hspace=0.85, outside=axes)
    return _png(fig, tight=False)


def size_histogram_png(hist: pd.DataFrame) -> str:
    """Two panels over power-of-two size bins: number of blocks, and bytes."""
    return _png(size_histogram_figure(hist), tight=False)


def size_histogram_figure(hist: pd.DataFrame) -> Figure:
    """The figure of :func:`size_histogram_png`; each panel's legend is its title, above the axes, so it
    never covers a bar."""
    fig = Figure(figsize=(10, 3.2))
    labels = [fmt_bytes(v, 0) for v in hist["lo"]]
    x = np.arange(len(hist))
    for i, (col, title) in enumerate([("count", "number of blocks"),
                                            ("bytes", "bytes allocated (sum of sizes)")]):
        ax = fig.add_subplot(1, 2, i + 1)
        vals = hist[col].to_numpy().astype(np.float64)
        div, bunit = _byte_unit(vals.max() if len(vals) else 0.0) if col == "bytes" else (1.0, "")
        ax.bar(x, vals / div, color=PALETTE[i], width=0.8, label=title + (f" ({bunit})" if bunit else ""))
        # the legend is the panel's title: above the axes, so no bar can be under it
        ax.legend(loc="lower left", bbox_to_anchor=(0.0, 1.0), fontsize=9, frameon=False, borderaxespad=0.2,
                  handlelength=1.2)
        ax.set_ylabel("blocks" if not bunit else bunit, fontsize=8)
        ax.set_xticks(x)
        ax.set_xticklabels(labels, rotation=60, ha="right", fontsize=7)
        ax.set_xlabel("block size (bin lower bound, bins are [2^k, 2^(k+1)))")
    _layout(fig, left=0.75, bottom=0.95, top=0.4, wspace=0.85)
    return fig


def ati_png(ati_ns: np.ndarray, weights: np.ndarray | None, threshold_ns: float | np.ndarray | None,
            threshold_label: str = "") -> str:
    """ATI distribution (log-spaced bins), weighted by bytes when ``weights`` given;
    the bandwidth-filter threshold as a vertical line (or a band for a per-size range)."""
    fig = Figure(figsize=(10, 3.2))
    ax = fig.add_subplot(1, 1, 1)
    a = np.asarray(ati_ns, dtype=np.float64)
    pos = a > 0
    a = a[pos]
    w = None if weights is None else np.asarray(weights, dtype=np.float64)[pos]
    div, bunit = (1.0, "intervals")
    if w is not None and len(w):
        div, bunit = _byte_unit(float(w.sum()))
        w = w / div
    if len(a):
        lo, hi = np.log10(max(a.min(), 1.0)), np.log10(max(a.max(), 10.0))
        bins = np.logspace(lo, hi + 1e-9, 50)
        ax.hist(a, bins=bins, weights=w, color=PALETTE[0], alpha=0.85,
                label="intervals" + (" (weighted by block bytes)" if w is not None else ""))
        ax.set_xscale("log")
    marks = None
    if threshold_ns is not None:
        th = np.atleast_1d(np.asarray(threshold_ns, dtype=np.float64))
        th = th[np.isfinite(th) & (th > 0)]
        if len(th) == 1 or (len(th) and th.min() == th.max()):
            marks = ("line", th[0])
        elif len(th):
            marks = ("band", np.quantile(th, 0.05), np.quantile(th, 0.95), np.median(th))
    return _ati_finish(fig, ax, marks, threshold_label, bunit)


def ati_binned_png(bins: np.ndarray | None, counts: np.ndarray, marks, threshold_label: str = "") -> str:
    """:func:`ati_png` (unweighted) drawn from its histogram: the bin edges (None: no positive ATI) and
    the intervals in each bin; ``marks``: the threshold as ("line", x) or ("band", p5, p95, median)."""
    fig = Figure(figsize=(10, 3.2))
    ax = fig.add_subplot(1, 1, 1)
    if bins is not None:
        # one point at each bin's left edge weighted by its count: the same bars as the ATIs themselves
        ax.hist(bins[:-1], bins=bins, weights=np.asarray(counts, np.float64), color=PALETTE[0], alpha=0.85,
                label="intervals")
        ax.set_xscale("log")
    return _ati_finish(fig, ax, marks, threshold_label, "intervals")


def _ati_finish(fig: Figure, ax, marks, threshold_label: str, bunit: str) -> str:
    """The ATI figure's threshold marks, axes and layout (see :func:`ati_png`)."""
    if marks is not None and marks[0] == "line":
        ax.axvline(marks[1], color="#C44E52", linewidth=1.5,
                   label=threshold_label or f"bandwidth filter {fmt_ns(marks[1])}")
    elif marks is not None:
        _, q05, q95, med = marks
        ax.axvspan(q05, q95, color="#C44E52", alpha=0.15,
                   label=threshold_label or "bandwidth filter (5-95% of blocks)")
        ax.axvline(med, color="#C44E52", linewidth=1.5, label="bandwidth filter, median block")
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: fmt_ns(v)))
    ax.set_xlabel("access time interval (log scale)")
    ax.set_ylabel(bunit)
    _legend_outside(ax)
    _layout(fig, left=0.8, bottom=0.6, top=0.15, outside=[ax])
    return _png(fig, tight=False)


def pools_png(names: Sequence[str], ratios: Sequence[float], bound_label: str,
              bounds: Sequence[str] | None = None, bound_bytes: dict[str, int] | None = None) -> str:
    """Pool size per strategy as a ratio to its lower bound (1.0 = no fragmentation).

    ``bounds`` says which bound each strategy is measured against ("whole_run" for the
    simulated allocators, "steady" for the planners): each bound gets its own panel and
    axis, so bars against different bounds never share a scale."""
    bounds = list(bounds) if bounds is not None else ["whole_run"] * len(names)
    groups = [(k, t) for k, t in (("whole_run", "allocators replaying the whole run, against its peak live bytes"),
                                  ("steady", "planners packing one steady step, against its LOAD"))
              if k in bounds]
    rows = [sum(1 for b in bounds if b == k) for k, _ in groups]
    fig = Figure(figsize=(10, 0.32 * sum(rows) + 1.1 * len(groups) + 0.6))
    gs = fig.add_gridspec(len(groups), 1, height_ratios=[max(r, 1) + 2 for r in rows])
    r_all = np.asarray(ratios, dtype=np.float64)
    finite = r_all[np.isfinite(r_all)]
    xmax = max(1.1, float(finite.max()) * 1.15 if len(finite) else 1.1)
    for gi, (key, title) in enumerate(groups):
        ax = fig.add_subplot(gs[gi, 0])
        idx = [i for i, b in enumerate(bounds) if b == key]
        y = np.arange(len(idx))
        r = r_all[idx]
        good = r <= 1.05
        if good.any():
            ax.barh(y[good], np.nan_to_num(r[good], nan=0.0), color=PALETTE[2], label="within 5 % of the bound")
        if (~good).any():
            ax.barh(y[~good], np.nan_to_num(r[~good], nan=0.0), color=PALETTE[1],
                    label="more than 5 % above the bound")
        ax.axvline(1.0, color="black", linewidth=1.2, label="lower bound (1.0)")
        for yi, v in zip(y, r):
            if np.isfinite(v):
                ax.text(v, yi, f" {v:.3f}", va="center", fontsize=8)
        ax.set_yticks(y)
        ax.set_yticklabels([str(names[i]).split(" (")[0] for i in idx], fontsize=8)
        ax.invert_yaxis()
        bb = (bound_bytes or {}).get(key)
        ax.set_title(title + (f" ({fmt_bytes(bb)})" if bb else ""), loc="left", fontsize=9)
        ax.set_xlim(0, xmax)
        ax.set_xlabel("pool size / lower bound", fontsize=8)
        _legend_outside(ax)
    _layout(fig, left=1.5, bottom=0.5, top=0.3, hspace=0.8, outside=fig.axes)
    return _png(fig, tight=False)


def swap_pareto_png(points: pd.DataFrame, peak_before: int | None, floor: int | None,
                    budget: int | None = None, run_ns: float | None = None) -> str:
    """Swap Pareto curve: stall time added (x) against the peak reached (y), one point per
    budget; the chosen ``budget`` marked; the x axis ends at the run's duration ``run_ns``
    (budgets whose stall exceeds the run are listed in the legend, not stretched onto the axis)."""
    fig = Figure(figsize=(10, 3.6))
    ax = fig.add_subplot(1, 1, 1)
    ymax = max([float(points["peak_after"].max()) if len(points) else 0.0, float(peak_before or 0)])
    div, bunit = _byte_unit(ymax)
    g = points.sort_values("stall_ns")
    xmax_all = float(g["stall_ns"].max()) if len(g) else 0.0
    limit = float(run_ns) if run_ns and run_ns > 0 and xmax_all > run_ns else None
    shown = g if limit is None else g[g["stall_ns"] <= limit]
    off = g.iloc[0:0] if limit is None else g[g["stall_ns"] > limit]
    label = f"budget sweep ({g['strategy'].iloc[0]} order)" if "strategy" in g and len(g) else "budget sweep"
    ax.plot(shown["stall_ns"], shown["peak_after"] / div, marker="o", markersize=4, color=PALETTE[0], label=label)
    if len(off):
        lo_s, hi_s = fmt_ns(off["stall_ns"].min()), fmt_ns(off["stall_ns"].max())
        ax.plot([], [], " ", label=f"{len(off)} budget(s) off the axis: stall "
                                   f"{lo_s if lo_s == hi_s else lo_s + ' to ' + hi_s}, longer than the run")
    if peak_before:
        ax.axhline(peak_before / div, color="black", linestyle=":", linewidth=1,
                   label=f"peak without swapping {fmt_bytes(peak_before)}")
    if floor is not None:
        ax.axhline(floor / div, color=PALETTE[3], linestyle="--", linewidth=1,
                   label=f"floor (every candidate swapped) {fmt_bytes(floor)}")
    if budget is not None and len(g):
        near = g.iloc[int(np.argmin(np.abs(g["budget"].to_numpy(np.float64) - float(budget))))] \
            if "budget" in g else None
        ax.axhline(budget / div, color=PALETTE[4], linestyle="-.", linewidth=1,
                   label=f"chosen budget {fmt_bytes(budget)}")
        if near is not None and (limit is None or near["stall_ns"] <= limit):
            ax.plot([near["stall_ns"]], [near["peak_after"] / div], marker="*", markersize=14, color=PALETTE[4],
                    linestyle="none", label=f"nearest swept budget: peak {fmt_bytes(near['peak_after'])}, "
                                            f"stall {fmt_ns(near['stall_ns'])}")
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: fmt_ns(max(v, 0.0))))
    xmax = limit if limit is not None else xmax_all
    ax.set_xlim(left=-0.02 * max(xmax, 1000.0), right=max(xmax * 1.05, 1000.0))
    ax.set_xlabel("stall time added" + (f" (axis ends at the run's duration, {fmt_ns(limit)})" if limit else ""))
    ax.set_ylabel(f"peak live ({bunit})")
    ax.set_ylim(bottom=0)
    _legend_outside(ax)
    _layout(fig, left=0.8, bottom=0.6, top=0.15, outside=[ax])
    return _png(fig, tight=False)


def ranks_png(labels: Sequence[str], peaks: Sequence[int], highlight: int | None, median: float | None) -> str:
    """Each rank's peak of live device bytes side by side: ``highlight`` (the index of the highest rank)
    in its own colour, the median peak as a line (the imbalance is the highest over it)."""
    peaks = np.asarray(peaks, dtype=np.float64)
    div, unit = _byte_unit(float(peaks.max()) if len(peaks) else 0.0)
    fig = Figure(figsize=(min(12.0, max(5.0, 1.5 + 0.45 * len(peaks))), 3.2))
    ax = fig.add_subplot(1, 1, 1)
    x = np.arange(len(peaks))
    top = np.zeros(len(peaks), bool)
    if highlight is not None and 0 <= highlight < len(peaks):
        top[highlight] = True
    if (~top).any():
        ax.bar(x[~top], peaks[~top] / div, color=PALETTE[0], label="peak of a rank")
    if top.any():
        ax.bar(x[top], peaks[top] / div, color=PALETTE[3], label="the highest peak")
    if median:
        ax.axhline(median / div, color="black", linewidth=1.0, linestyle="--", label="median peak")
    ax.set_xticks(x)
    ax.set_xticklabels(list(labels), fontsize=8, rotation=0 if len(peaks) <= 16 else 90)
    ax.set_xlabel("rank", fontsize=8)
    ax.set_ylabel(f"peak live device memory ({unit})", fontsize=8)
    _legend_outside(ax)
    _layout(fig, left=0.8, bottom=0.6, top=0.2, outside=[ax])
    return _png(fig, tight=False)
