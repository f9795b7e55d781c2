"""Chrome trace JSON for ui.perfetto.dev / chrome://tracing.

Layout (``{"traceEvents": [...], "displayTimeUnit": "ms"}``, ``ts`` in microseconds):

* one synthetic process per GPU, ``pid = GPU_PID_BASE + device``, named "GPU <d>",
  holding counter tracks (``"ph": "C"``): ``memory live_bytes`` (live device bytes
  of the trace's blocks) and ``memory nvml_used_bytes`` (NVML used memory, when
  sampled); in a reserved-view trace the live curve *is* the framework's reserve,
  so the series is called ``reserved_bytes`` instead of ``live_bytes``;
* per traced process (its real pid, named after its exe): ``"X"`` slices for the
  detected iterations and ``"i"`` instants for large allocations (size >=
  ``large``), with block id, size, api and kind in ``args``.

Counters with more than ``max_points`` changes are reduced to the peak and the
last value of each time bin (peaks survive; see report.data._keep_indices).
"""
from __future__ import annotations

import json
from typing import Any

import numpy as np

from ..trace.model import Trace
from .data import memory_timeline, reserved_curves

GPU_PID_BASE = 10_000_000  # above Linux's pid_max (4194304): never collides with a real pid


def _us(ns) -> float:
    return round(float(ns) / 1000.0, 3)


def default_large_threshold(trace: Trace) -> int:
    """1% of the peak live bytes, at least 1 MiB."""
    from ..trace.model import peak_live_bytes

    return max(1 << 20, peak_live_bytes(trace.blocks) // 100)


def chrome_trace(trace: Trace, iterations=None, large: int | None = None,
                 max_points: int = 200_000, max_instants: int = 20_000) -> dict[str, Any]:
    """Build the Chrome-trace dict.  ``iterations``: a find_iterations() result or None."""
    events: list[dict[str, Any]] = []
    reserved_view = str(trace.meta.get("view", "")) == "reserved"
    series = "reserved_bytes" if reserved_view else "live_bytes"
    devices = set()
    for tl in memory_timeline(trace, max_points=max_points):
        pid = GPU_PID_BASE + tl.device
        devices.add(tl.device)
        events.extend({"name": "memory", "ph": "C", "pid": pid, "ts": _us(t), "args": {series: int(v)}}
                      for t, v in zip(tl.t.tolist(), tl.total.tolist()))
    for dev, (t, used) in reserved_curves(trace).items():
        pid = GPU_PID_BASE + dev
        devices.add(dev)
        events.extend({"name": "memory", "ph": "C", "pid": pid, "ts": _us(tt), "args": {"nvml_used_bytes": int(u)}}
                      for tt, u in zip(t.tolist(), used.tolist()))
    for dev in sorted(devices):
        events.append({"name": "process_name", "ph": "M", "pid": GPU_PID_BASE + dev, "args": {"name": f"GPU {dev}"}})
        events.append({"name": "process_sort_index", "ph": "M", "pid": GPU_PID_BASE + dev, "args": {"sort_index": dev}})

    exes = dict(zip(trace.processes["pid"].astype(int).tolist(), trace.processes["exe"].astype(str).tolist()))
    for pid in trace.pids:
        name = exes.get(pid) or "process"
        events.append({"name": "process_name", "ph": "M", "pid": pid, "args": {"name": f"{name} (pid {pid})"}})
        events.append({"name": "thread_name", "ph": "M", "pid": pid, "tid": 0, "args": {"name": "iterations"}})
        events.append({"name": "thread_name", "ph": "M", "pid": pid, "tid": 1, "args": {"name": "large allocations"}})

    if iterations is not None and getattr(iterations, "count", 0) > 0:
        bt = np.asarray(iterations.boundaries_t, dtype=np.int64)
        ipid = int(iterations.pid) if iterations.pid is not None else (trace.main_pid or 0)
        for i in range(len(bt) - 1):
            events.append({"name": f"iteration {i}", "cat": "iteration", "ph": "X", "pid": ipid, "tid": 0,
                           "ts": _us(bt[i]), "dur": _us(bt[i + 1] - bt[i]), "args": {"index": i}})

    large = default_large_threshold(trace) if large is None else int(large)
    b = trace.device_blocks
    big = b[b["size"] >= large].sort_values(["size", "t_alloc"], ascending=[False, True]).head(max_instants)
    big = big.sort_values("t_alloc")
    for row in zip(big["block_id"].tolist(), big["pid"].tolist(), big["t_alloc"].tolist(),
                   big["size"].tolist(), big["api"].astype(str).tolist(), big["kind"].astype(str).tolist(),
                   big["device"].tolist()):
        bid, pid, t, size, api, kind, dev = row
        events.append({"name": f"{api} {_mib(size)}", "cat": "allocation", "ph": "i", "s": "t",
                       "pid": int(pid), "tid": 1, "ts": _us(t),
                       "args": {"block_id": int(bid), "size": int(size), "api": api, "kind": kind,
                                "device": int(dev)}})
    meta = {k: trace.meta[k] for k in ("view", "framework", "command", "host") if k in trace.meta}
    return {"traceEvents": events, "displayTimeUnit": "ms",
            "otherData": {"generator": "pyinterpose", "large_threshold_bytes": large, **{k: str(v) for k, v in meta.items()}}}


def _mib(n: int) -> str:
    return f"{n / (1 << 20):.1f} MiB"


def write_chrome_trace(trace: Trace, path: str, iterations=None, **kw) -> dict[str, int]:
    """Write the Chrome-trace JSON to ``path``; returns counts of events by phase."""
    doc = chrome_trace(trace, iterations=iterations, **kw)
    with open(path, "w") as f:
        json.dump(doc, f, separators=(",", ":"))
    counts: dict[str, int] = {}
    for e in doc["traceEvents"]:
        counts[e["ph"]] = counts.get(e["ph"], 0) + 1
    return counts
