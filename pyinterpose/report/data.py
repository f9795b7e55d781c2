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

from ..trace.model import Trace
from .live_curve import device_curve
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


CLASS_ORDER = ["persistent", "leak", "cross_iteration", "per_iteration", "transient", "outside", "other"]


def _class_rank(name: str) -> int:
    return CLASS_ORDER.index(name) if name in CLASS_ORDER else len(CLASS_ORDER) - 1


def memory_timeline(trace: Trace, classes: pd.Series | None = None, max_points: int = 4000,
                    device: int | None = None) -> list[Timeline]:
    """One :class:`Timeline` per device (or only ``device``).

    ``classes`` maps block_id -> class name (e.g. persistent / per-iteration);
    blocks without a class are "other".  With no classes there is one series, "live".
    The per-class series add up to ``total`` at every point; ``peak`` is exact
    (computed before downsampling).  Each device's curve is made in one pass over its events in
    pieces (:func:`pyinterpose.report.live_curve.device_curve`): no array per event."""
    return memory_timelines(trace, [classes], max_points, device)[0]


def memory_timelines(trace: Trace, groupings: list, max_points: int = 4000,
                     device: int | None = None) -> list[list[Timeline]]:
    """:func:`memory_timeline` for each of ``groupings`` (classes, or None), from one pass over each
    device's events."""
    bl = trace.blocks
    on_device = bl["counts_device"].to_numpy(bool)
    dcol = bl["device"].to_numpy()
    devices = sorted(int(d) for d in pd.unique(dcol[on_device])) if device is None else [device]
    out: list[list[Timeline]] = [[] for _ in groupings]
    for dev in devices:
        rows = np.flatnonzero(on_device & (dcol == dev))
        curves = device_curve(trace, rows.astype(np.int32) if len(bl) < (1 << 31) else rows, groupings, max_points)
        del rows
        for g, (classes, c) in enumerate(zip(groupings, curves)):
            tl = Timeline(device=dev, t=c["t"], total=c["total"], peak=c["peak"], peak_t=c["peak_t"],
                          events=c["events"], reduced=c["reduced"])
            if classes is None:
                tl.series["live"] = c["total"]
            else:
                names = c["names"]
                # bottom of the stack first: long-lived classes, then short-lived ones
                for k in sorted(range(len(names)), key=lambda k: (_class_rank(str(names[k])), str(names[k]))):
                    tl.series[str(names[k])] = c["series"][str(names[k])]
            out[g].append(tl)
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
    size = _device_sizes(blocks)
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


def _device_sizes(blocks: pd.DataFrame) -> np.ndarray:
    """The sizes of the blocks counted on a device (only the size column is read: no copy of the table)."""
    size = blocks["size"].to_numpy(np.int64)
    return size[blocks["counts_device"].to_numpy(bool)] if "counts_device" in blocks else size


def largest_blocks(trace: Trace, n: int = 15, classes: pd.Series | None = None) -> pd.DataFrame:
    """The ``n`` largest device blocks (ties: earliest first) with lifetime and class."""
    bl = trace.blocks
    dev = bl["counts_device"].to_numpy(bool)
    if dev.sum() > 4 * n:
        # only the blocks at least as large as the n-th largest can make the list: take those rows
        # alone (not a copy of every device block first)
        size = bl["size"].to_numpy(np.int64)
        dsize = size[dev]
        kth = np.partition(dsize, len(dsize) - n)[len(dsize) - n]
        del dsize
        # those rows may be millions (one size repeated every iteration): their order is found on the
        # two sort keys alone (np.lexsort is stable: the stable sort below, ties in row order) and only
        # the first n rows are taken
        rows = np.flatnonzero(dev & (size >= kth))
        t_alloc = bl["t_alloc"].to_numpy(np.int64)[rows]
        first = rows[np.lexsort((t_alloc, -size[rows]))[:n]]
        del rows, t_alloc
        b = bl.iloc[np.sort(first)]
    else:
        b = bl[dev]
    if len(b) == 0:
        return pd.DataFrame(columns=["block_id", "pid", "device", "api", "kind", "size", "t_alloc",
                                     "lifetime_ns", "freed", "class"])
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
    s = _device_sizes(blocks)
    if len(s) == 0:
        return {**{f"p{int(q * 100)}": 0 for q in qs}, "max": 0, "mean": 0}
    out = {f"p{int(q * 100)}": int(np.quantile(s, q, method="lower")) for q in qs}
    out["max"] = int(s.max())
    out["mean"] = int(s.mean())
    return out


def peak_of(trace: Trace) -> int:
    """Peak live device bytes over all devices together (the pools' lower bound for one device)."""

    return peak_live_bytes(trace.blocks)
