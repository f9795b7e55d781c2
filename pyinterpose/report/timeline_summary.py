"""The timeline's payload for a long run: the memory curve as min/max per bucket at several zoom levels
(:mod:`pyinterpose.report.curve_levels`) instead of every block and event.

Past :data:`EXACT_MAX_EVENTS` allocations and frees on one device, the exact payload
(:func:`pyinterpose.report.timeline.payload`: every block, its class, owner and call site) grows past
what a page decodes in 2 s (2.3 M events: 6.4 MB, ~1-1.7 s; 22.7 M events would be ~64 MB and
10-17 s).  This payload holds, per device: the curve's levels (level 0 inline, decoded for the first
view; the finer ones in their own script elements, decoded tile by tile as the view needs them), the
exact peak and end, the iteration boundaries (delta-coded), NVML used memory and the reserved line
(their change points, or per finest bucket their peak when there are more of those than buckets).
The page says what was summarised.
"""
from __future__ import annotations

import os
from typing import Any

import numpy as np
import pandas as pd

from ..analysis.clock import block_times, clock_of
from ..analysis.search import merge_places
from ..trace.pages import release
from ..trace.piecewise import ascending
from ..trace.model import Trace, counted_bytes
from . import curve_levels
from .timeline_parts import _own_iterations, _reserved_steps

EXACT_MAX_EVENTS = 3_000_000      # more allocations and frees than this on one device: the summary
LINE_MAX_POINTS = 100_000         # a step line (NVML, reserved) with more change points: its peak per bucket
EXACT_AROUND_PEAK = 2048          # events each side of the peak stored one by one
EXACT_WINDOW_MAX = 200_000        # the steady iteration is stored event by event when shorter than this


class MaskedRows:
    """The rows ``mask`` of a long table (``trace.blocks``), read a column at a time: ``rows[name]`` is that
    column's rows (a Series, copied when read and let go with it; the mapped column's pages given back after
    the copy), ``len(rows)`` their number, ``name in rows`` whether the column is there.  What the summary
    payload reads of a device's blocks, instead of ``table.loc[mask, names]``, a copy of every column held
    through the payload (issue 30: at 100 M events one pinned host block, not counted on the device, made
    that copy of nine columns of 11.3 M rows, 0.65 GB, the report's peak)."""

    def __init__(self, table: pd.DataFrame, mask: np.ndarray, names=None):
        self._table, self._mask = table, np.asarray(mask, bool)
        self.columns = pd.Index([c for c in (table.columns if names is None else names) if c in table.columns])
        self._n = int(self._mask.sum())

    def __len__(self) -> int:
        return self._n

    def __contains__(self, name) -> bool:
        return name in self.columns

    def __getitem__(self, name) -> pd.Series:
        if name not in self.columns:
            raise KeyError(name)
        col = self._table[name].to_numpy()
        out = col[self._mask]
        release(col)
        return pd.Series(out, name=name, copy=False)


def exact_max_events() -> int:
    """:data:`EXACT_MAX_EVENTS`, or ``PYINTERPOSE_TIMELINE_EXACT_MAX`` when set (an integer)."""
    v = os.environ.get("PYINTERPOSE_TIMELINE_EXACT_MAX")
    try:
        return int(v) if v else EXACT_MAX_EVENTS
    except ValueError:
        return EXACT_MAX_EVENTS


def _sorted_stable(a: np.ndarray) -> np.ndarray | None:
    """None when ``a`` is already non-decreasing, else its stable argsort."""
    if len(a) < 2 or bool((a[1:] >= a[:-1]).all()):
        return None
    return np.argsort(a, kind="stable")


def device_curve(trace: Trace, b: pd.DataFrame, with_events: bool = False):
    """(t, total[, a_ev, f_ev]): the device's allocations and frees in the timeline's order (by time on the
    process's clock, frees before allocations at the same instant, then in block order) with their
    times and the live bytes after each; ``a_ev``/``f_ev`` the event index of each block's allocation
    and free (-1: never freed), as the exact payload numbers them.

    The order is that of one stable sort of (time, allocation after free) over the frees then the
    allocations, found without sorting both together: the allocations (in block order, usually sorted
    already) and the frees are each put in (time, block order), then merged (a free goes before the
    allocations at its instant): half the sort and none of its 2n-long keys and permutation."""
    freed = b["freed"].to_numpy(bool)
    nb = len(b)
    t_alloc, t_free = block_times(trace, b)
    rows_t = np.int32 if nb < 2 ** 31 - 1 else np.int64
    ia = None if ascending(t_alloc) else np.argsort(t_alloc, kind="stable").astype(rows_t, copy=False)
    ta = t_alloc if ia is None else t_alloc[ia]
    del t_alloc
    frows = np.flatnonzero(freed).astype(rows_t, copy=False)
    tf = t_free[frows]
    of = _sorted_stable(tf)
    if of is not None:
        frows = frows[of]
        del of
        tf = t_free[frows]
    del t_free
    n = len(tf) + nb
    size = counted_bytes(b)
    t = np.empty(n, np.int64)
    d = np.empty(n, np.int64)
    a_ev = np.empty(nb, np.int64) if with_events else None
    f_ev = np.full(nb, -1, np.int64) if with_events else None
    # each event's place in the merge, a piece at a time (analysis.search.merge_places; issue 30: no
    # int64 places of every event held, ~0.2 GB at 100 M events)
    for which, lo, at in merge_places(tf, ta):
        hi = lo + len(at)
        if which == 0:                              # frees
            t[at] = tf[lo:hi]
            d[at] = -size[frows[lo:hi]]
            if with_events:
                f_ev[frows[lo:hi]] = at
        else:                                       # allocations
            t[at] = ta[lo:hi]
            d[at] = size[lo:hi] if ia is None else size[ia[lo:hi]]
            if with_events:
                if ia is None:
                    a_ev[lo:hi] = at
                else:
                    a_ev[ia[lo:hi]] = at
    del tf, ta
    total = np.cumsum(d, out=d)
    if not with_events:
        return t, total
    bad = freed & (f_ev < a_ev)
    f_ev[bad] = a_ev[bad]
    return t, total, a_ev, f_ev


def _line(x: np.ndarray, y: np.ndarray, n: int) -> dict[str, list]:
    """A step line on the event axis (``x`` sorted, ``y`` its value from there on): as is when short,
    else per bucket of the finest level the line's greatest value over the bucket (from its first x on)."""
    if len(x) <= LINE_MAX_POINTS or n <= 0:
        return {"x": [round(float(v), 2) for v in x], "y": np.asarray(y, np.int64).tolist()}
    sizes = curve_levels.level_sizes(n)
    edges = curve_levels.bucket_edges(n, sizes[-1]).astype(np.float64)
    edges[0] = -0.5
    j = np.clip(np.searchsorted(edges, x, side="right") - 1, 0, len(edges) - 2)
    starts = np.flatnonzero(np.r_[True, j[1:] != j[:-1]])
    top = np.maximum.reduceat(np.asarray(y, np.int64), starts)
    # the value carried into each bucket counts too: a bucket's first point keeps the greater of both
    top[1:] = np.maximum(top[1:], np.asarray(y, np.int64)[starts[1:] - 1])
    xs = edges[j[starts]]
    xs[0] = max(xs[0], float(x[0]))
    return {"x": [round(float(v), 2) for v in xs], "y": top.tolist()}


def payload(trace: Trace, device: int, b: pd.DataFrame, iterations=None, reserved_view: bool = False,
            reserved: dict | None = None) -> dict[str, Any]:
    """The summary payload of one device's blocks ``b`` (rows of ``trace.blocks`` counted on it)."""
    if reserved is not None:
        t, total, a_ev, f_ev = device_curve(trace, b, with_events=True)
    else:
        t, total = device_curve(trace, b)
        a_ev = f_ev = None
    n = len(t)
    ipk = int(np.argmax(total)) if n else 0
    stats = {"peak_bytes": int(total[ipk]) if n else 0, "peak_t_ns": int(t[ipk]) if n else 0,
             "peak_event": ipk, "end_bytes": int(total[-1]) if n else 0}
    t0 = int(t[0]) if n else 0
    lv = curve_levels.levels(total, t - t0)
    tiles = [curve_levels.pack_level(level) for level in lv]
    sizes = [len(level["lo"]) for level in lv]
    del lv

    iters_ev = np.zeros(0, np.int64)
    it = _own_iterations(trace, b, iterations)
    if it is not None and getattr(it, "count", 0):
        iters_ev = np.searchsorted(t, np.asarray(it.boundaries_t, dtype=np.int64), side="left").astype(np.int64)
    steady = None
    if len(iters_ev) >= 2:            # the "one steady iteration" button: as in the exact timeline
        k = (len(iters_ev) - 1) // 2
        lo, hi = int(iters_ev[k]), int(iters_ev[k + 1])
        pad = max(1, (hi - lo) // 20)
        steady = [max(0, lo - pad), min(n - 1, hi + pad)]
    # stretches of the curve stored event by event: the steady iteration and the peak's surroundings
    spans = ([steady] if steady and steady[1] - steady[0] < EXACT_WINDOW_MAX else []) + \
        ([[max(0, ipk - EXACT_AROUND_PEAK), min(n - 1, ipk + EXACT_AROUND_PEAK)]] if n else [])
    windows = [{"e0": int(a), "e1": int(z), "v": curve_levels.pack_deltas(total[a:z + 1]),
                "t": curve_levels.pack_deltas(t[a:z + 1] - t0)} for a, z in spans]
    del total
    nvml = {"x": [], "y": []}
    nv = trace.nvml
    if len(nv):
        g = nv[nv["device"] == device].sort_values("t")
        if len(g):
            j = np.searchsorted(t, g["t"].to_numpy(np.int64), side="right")
            nvml = _line(np.clip(j - 0.5, -0.5, n - 0.5), g["used_bytes"].to_numpy(np.int64), n)
    del t
    extra: dict[str, Any] = {}
    if reserved is not None:
        rl = _reserved_steps(b["block_id"].to_numpy(np.int64), a_ev, f_ev, reserved)
        if rl is not None:
            extra["reserved_line"] = {**_line(np.asarray(rl["x"], np.float64), np.asarray(rl["ys"], np.int64), n)}
            extra["reserved_line"]["ys"] = extra["reserved_line"].pop("y")
    start_epoch = trace.meta.get("start_time")
    extra.update(clock_of(trace).as_dict())
    return {**extra,
            "device": int(device), "events": int(n), "blocks": int(len(b)),
            "t0_ns": t0, "start_epoch_s": float(start_epoch) if isinstance(start_epoch, (int, float)) else None,
            "reserved_view": bool(reserved_view),
            "summary": {"tile": curve_levels.TILE, "factor": curve_levels.FACTOR, "buckets": sizes, "levels": tiles,
                        "exact": windows},
            "iters": [], "iters_packed": curve_levels.pack_deltas(iters_ev) if len(iters_ev) else None,
            "iters_count": int(len(iters_ev)),
            "nvml": nvml, "initial": [-0.5, max(0, n - 1) + 0.5], "steady": steady, "stats": stats}


def summary_text(p: dict[str, Any]) -> str:
    """What the page says was summarised, e.g. "memory curve of GPU 0: 22,654,686 points (one per
    allocation and free) shown as min/max per bucket, 4 levels of 2,048, 16,384, 131,072, 1,048,576
    buckets ..."."""
    s = p["summary"]
    b = s["buckets"]
    fine = p["events"] / b[-1] if b else 0
    ex = s.get("exact") or []
    exact = ("; every event is drawn in " + " and ".join(
        f"events {w['e0']:,}\u2013{w['e1']:,}" + (" (one steady iteration)" if p.get("steady") and
                                                  [w["e0"], w["e1"]] == p["steady"] else " (around the peak)")
        for w in ex)) if ex else ""
    return (f"memory curve of GPU {p['device']}: {p['events']:,} points (one per allocation and free) shown as "
            f"min/max per bucket, {len(b)} level{'s' if len(b) != 1 else ''} of {', '.join(f'{x:,}' for x in b)} "
            f"buckets ({s['tile']:,} per tile, decoded as the view needs them); the finest bucket holds "
            f"{fine:,.1f} events on average{exact}; zoom for detail. Above {exact_max_events():,} events per device the"
            f" timeline is summarised: the stack by lifetime class or owner and the per-block readout are drawn"
            f" for shorter traces only."
            + (" The dashed reserved line is drawn flat at the simulated allocator's peak (its curve along the run"
               " is not replayed for a summarised run)." if p.get("reserved_line") and "x" not in p["reserved_line"]
               else ""))
