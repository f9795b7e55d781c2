"""Pure computations behind the report figures and tables (numpy/pandas only).

* :func:`memory_timeline` — live device bytes over time, split by block class,
  downsampled to a plotting budget while keeping every bin's peak;
* :func:`size_histogram` — block sizes in power-of-two bins (count and bytes);
* :func:`largest_blocks` — the biggest device blocks with their lifetimes;
* :func:`reserved_curves` — NVML used memory per device (what the GPU reports as
  taken: the framework's reserve plus the CUDA context).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from ..trace.model import Trace, counted_bytes
from ..analysis.clock import block_times
from ..trace.model import peak_live_bytes


@dataclass
class Timeline:
    """Live bytes after events, per class: ``t`` (ns) and ``series[class]`` (bytes)."""
    device: int
    t: np.ndarray
    total: np.ndarray
    series: dict[str, np.ndarray] = field(default_factory=dict)
    peak: int = 0
    peak_t: int = 0
    events: int = 0
    reduced: bool = False          # more distinct instants than points: each bin keeps its peak and last


def _events(b: pd.DataFrame, times=None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(t, delta, block row index) for allocs and frees, sorted like live_bytes_curve.
    ``times``: (t_alloc, t_free) to use instead of the table's (another clock)."""
    freed = b["freed"].to_numpy(bool)
    rows = np.arange(len(b))
    t_alloc, t_free = times if times is not None else (b["t_alloc"].to_numpy(np.int64), b["t_free"].to_numpy(np.int64))
    t = np.concatenate([t_free[freed], t_alloc])
    size = counted_bytes(b)         # physical bytes count once (a double-mapped window's overlap: 0)
    d = np.concatenate([-size[freed], size])
    r = np.concatenate([rows[freed], rows])
    # at equal t, frees first (same rule as live_bytes_curve); one int64 key sorts faster than lexsort
    if len(t) and int(t.max()) < (1 << 61) and int(t.min()) >= 0:
        order = np.argsort(t * 2 + (d > 0), kind="stable")
    else:
        order = np.lexsort((d > 0, t))
    return t[order], d[order], r[order]


def _keep_indices(t: np.ndarray, total: np.ndarray, max_points: int) -> np.ndarray:
    """Indices of events to plot: the last event at each instant; when more than
    ``max_points`` remain, the peak event of each of ``max_points`` time bins plus
    the last event of each bin (so the curve both keeps peaks and follows steps)."""
    if len(t) == 0:
        return np.zeros(0, dtype=np.int64)
    last_at_t = np.flatnonzero(np.r_[t[1:] != t[:-1], True])
    if len(last_at_t) <= max_points:
        return last_at_t
    tt, vv = t[last_at_t], total[last_at_t]
    nbins = max(1, max_points // 2)
    edges = np.linspace(tt[0], tt[-1] + 1, nbins + 1)
    bin_ = np.clip(np.searchsorted(edges, tt, side="right") - 1, 0, nbins - 1)
    # bins are contiguous runs (tt is sorted): peak of each run by reduceat, first index reaching it
    starts = np.flatnonzero(np.r_[True, bin_[1:] != bin_[:-1]])
    run_max = np.maximum.reduceat(vv, starts)
    run_of = np.repeat(np.arange(len(starts)), np.diff(np.r_[starts, len(vv)]))
    hit = np.flatnonzero(vv == run_max[run_of])
    peaks = hit[np.r_[True, run_of[hit][1:] != run_of[hit][:-1]]]
    ends = np.r_[starts[1:] - 1, len(vv) - 1]
    keep = np.unique(np.concatenate([peaks, ends]))
    return last_at_t[keep]


CLASS_ORDER = ["persistent", "leak", "cross_iteration", "per_iteration", "transient", "outside", "other"]


def _class_rank(name: str) -> int:
    return CLASS_ORDER.index(name) if name in CLASS_ORDER else len(CLASS_ORDER) - 1


def _class_codes(classes: pd.Series, block_ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``np.unique(names_of_blocks, return_inverse=True)`` where a block's name is ``str`` of its
    class, "other" without one; the distinct values are found by hashing, only they are sorted."""
    codes0, uniq = pd.factorize(classes.reindex(block_ids), use_na_sentinel=True)
    labels = np.array([str(u) for u in pd.Series(uniq, dtype=object)] + ["other"], dtype=object)
    codes0 = np.where(codes0 < 0, len(labels) - 1, codes0)
    used = np.zeros(len(labels), bool)
    used[codes0] = True                      # "other" only when some block has no class
    names, inv = np.unique(labels[used], return_inverse=True)
    remap = np.full(len(labels), -1, np.int64)
    remap[np.flatnonzero(used)] = inv.reshape(-1)
    return names, remap[codes0]


_TIMELINE_COLUMNS = ("block_id", "pid", "device", "size", "device_bytes", "freed", "t_alloc", "t_free",
                     "seq_alloc", "seq_free")


def memory_timeline(trace: Trace, classes: pd.Series | None = None, max_points: int = 4000,
                    device: int | None = None) -> list[Timeline]:
    """One :class:`Timeline` per device (or only ``device``).

    ``classes`` maps block_id -> class name (e.g. persistent / per-iteration);
    blocks without a class are "other".  With no classes there is one series, "live".
    The per-class series add up to ``total`` at every point; ``peak`` is exact
    (computed before downsampling)."""
    bl = trace.blocks
    on_device = bl["counts_device"].to_numpy(bool)
    dcol = bl["device"].to_numpy()
    devices = sorted(int(d) for d in pd.unique(dcol[on_device])) if device is None else [device]
    cols = [c for c in _TIMELINE_COLUMNS if c in bl.columns]
    out = []
    for dev in devices:
        # the device's blocks, only the columns the curve reads (not a copy of every column)
        bd = bl[cols].iloc[np.flatnonzero(on_device & (dcol == dev))]

        t, d, r = _events(bd, block_times(trace, bd))     # on the process's clock
        total = np.cumsum(d)
        if len(total):
            i = int(np.argmax(total))
            peak, peak_t = int(total[i]), int(t[i])
        else:
            peak, peak_t = 0, 0
        keep = _keep_indices(t, total, max_points)
        instants = int(np.count_nonzero(t[1:] != t[:-1])) + 1 if len(t) else 0
        tl = Timeline(device=dev, t=t[keep], total=total[keep], peak=peak, peak_t=peak_t,
                      events=len(t), reduced=len(keep) < instants)
        if classes is None:
            tl.series["live"] = total[keep]
        else:
            names, codes = _class_codes(classes, bd["block_id"].to_numpy())
            ev_code = codes[r]
            # bottom of the stack first: long-lived classes, then short-lived ones
            for k in sorted(range(len(names)), key=lambda k: (_class_rank(str(names[k])), str(names[k]))):
                tl.series[str(names[k])] = np.cumsum(np.where(ev_code == k, d, 0))[keep]
        out.append(tl)
    return out


def reserved_curves(trace: Trace) -> dict[int, tuple[np.ndarray, np.ndarray]]:
    """NVML used bytes per device: {device: (t_ns, used_bytes)} (empty without samples)."""
    nv = trace.nvml
    out = {}
    for dev, g in nv.groupby("device", sort=True):
        g = g.sort_values("t")
        out[int(dev)] = (g["t"].to_numpy(np.int64), g["used_bytes"].to_numpy(np.int64))
    return out


def size_histogram(blocks: pd.DataFrame) -> pd.DataFrame:
    """Power-of-two size bins of device blocks: columns lo, hi (bytes, hi exclusive),
    count, bytes.  Bin k holds sizes in [2**k, 2**(k+1)); size 0 goes to bin 0."""
    b = blocks[blocks["counts_device"]] if "counts_device" in blocks else blocks
    size = b["size"].to_numpy(np.int64)
    if len(size) == 0:
        return pd.DataFrame({"lo": [], "hi": [], "count": [], "bytes": []}, dtype=np.int64)
    # floor(log2(size)) exactly: frexp gives size = m * 2**e with m in [0.5, 1)
    k = np.frexp(np.maximum(size, 1).astype(np.float64))[1].astype(np.int64) - 1
    lo_k, hi_k = int(k.min()), int(k.max())
    ks = np.arange(lo_k, hi_k + 1)
    count = np.bincount(k - lo_k, minlength=len(ks))
    nbytes = np.bincount(k - lo_k, weights=size.astype(np.float64), minlength=len(ks))
    return pd.DataFrame({"lo": np.left_shift(1, ks), "hi": np.left_shift(1, ks + 1),
                         "count": count.astype(np.int64), "bytes": nbytes.astype(np.int64)})


def largest_blocks(trace: Trace, n: int = 15, classes: pd.Series | None = None) -> pd.DataFrame:
    """The ``n`` largest device blocks (ties: earliest first) with lifetime and class."""
    b = trace.device_blocks
    if len(b) == 0:
        return pd.DataFrame(columns=["block_id", "pid", "device", "api", "kind", "size", "t_alloc",
                                     "lifetime_ns", "freed", "class"])
    if len(b) > 4 * n:
        # only the blocks at least as large as the n-th largest can make the list: sort those
        size = b["size"].to_numpy(np.int64)
        kth = np.partition(size, len(size) - n)[len(size) - n]
        b = b[size >= kth]
    top = b.sort_values(["size", "t_alloc"], ascending=[False, True], kind="stable").head(n)
    out = top[["block_id", "pid", "device", "api", "kind", "size", "t_alloc", "freed"]].copy()
    out["api"] = out["api"].astype(str)
    out["kind"] = out["kind"].astype(str)
    out["lifetime_ns"] = (top["t_free"] - top["t_alloc"]).to_numpy(np.int64)
    if classes is not None:
        out["class"] = classes.reindex(out["block_id"].to_numpy()).astype(object).fillna("other").to_numpy()
    else:
        out["class"] = ""
    return out.reset_index(drop=True)


def size_quantiles(blocks: pd.DataFrame, qs=(0.5, 0.9, 0.99)) -> dict[str, int]:
    b = blocks[blocks["counts_device"]] if "counts_device" in blocks else blocks
    s = b["size"].to_numpy(np.int64)
    if len(s) == 0:
        return {**{f"p{int(q * 100)}": 0 for q in qs}, "max": 0, "mean": 0}
    out = {f"p{int(q * 100)}": int(np.quantile(s, q, method="lower")) for q in qs}
    out["max"] = int(s.max())
    out["mean"] = int(s.mean())
    return out


def peak_of(trace: Trace) -> int:
    """Peak live device bytes over all devices together (the pools' lower bound for one device)."""

    return peak_live_bytes(trace.blocks)
