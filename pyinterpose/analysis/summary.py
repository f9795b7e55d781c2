"""What a trace holds, in one dict: counts, processes, peak live bytes, loss."""
from __future__ import annotations

import numpy as np

from ..heap import give_back
from ..trace.chunking import chunk_rows
from ..trace.model import Trace, peak_live_bytes_of
from ..trace.pages import release_tables
from ..trace.piecewise import total
from .graphs import graph_summary
from .machine import machine
from .owners import allocator_info, bytes_by_owner
from .ranks import job_view, per_rank
from ..trace.stacks import top_call_sites_json
from .applied import summary
from .clock import clock_of, launch_lag
from .growth import growth, window_summary
from .oom import explain


def summarize(trace: Trace) -> dict:
    b = trace.blocks
    b_pid = b["pid"].to_numpy()
    l_pid = trace.launches["pid"].to_numpy()
    tr = trace.meta.get("trailer") or {}
    lost = int(trace.processes["lost"].clip(lower=0).sum()) if len(trace.processes) else 0
    per_pid = []
    dev = b["counts_device"].to_numpy(bool)
    host = _is_kind(b["kind"], "host")
    for pid in trace.pids:
        in_pid = b_pid == pid
        on_device = in_pid & dev
        row = trace.processes[trace.processes["pid"] == pid]
        per_pid.append({
            "pid": int(pid),
            "ppid": int(row["ppid"].iloc[0]) if len(row) else None,
            "exe": str(row["exe"].iloc[0]) if len(row) else "",
            "forked": bool(row["forked"].iloc[0]) if len(row) else False,
            "allocs": int(np.count_nonzero(on_device)),          # device blocks
            "host_allocs": int(np.count_nonzero(in_pid & host)),   # pinned host (cudaMallocHost, cudaHostAlloc)
            "launches": int(np.count_nonzero(l_pid == pid)),
            "peak_live_bytes": peak_live_bytes_of(trace, in_pid),
            "lost_events": int(row["lost"].clip(lower=0).sum()) if len(row) else 0,
        })
    release_tables(trace)       # each step's pages of the cached columns: given back before the next
    if len(b) > chunk_rows():
        give_back()             # a long trace: the live orders' transient arrays, which the heap keeps
    counts = {k: v for k, v in trace.counts.items() if k != "by_api"}
    kinds = {str(k): int(v) for k, v in b["kind"].value_counts().items() if v}
    info = allocator_info(trace)
    release_tables(trace)
    graph_launches = int(trace.launches["graph"].sum()) if len(trace.launches) else 0

    for row in per_pid:
        row.update(clock_of(trace, row["pid"]).as_dict())
    release_tables(trace)
    ranks = per_rank(trace)
    release_tables(trace)
    by_owner = bytes_by_owner(trace).to_dict("records")
    release_tables(trace)
    sites = top_call_sites_json(trace)
    release_tables(trace)
    lag = launch_lag(trace)
    bytes_allocated = total(b["size"].to_numpy())
    duration_s = trace.duration_ns / 1e9
    graphs = graph_summary(trace)
    release_tables(trace)
    return {
        **clock_of(trace).as_dict(),
        "launch_lag": lag,
        "trace": trace.path,
        "command": trace.meta.get("command"),
        "view": trace.meta.get("view"),
        "knobs": trace.meta.get("knobs", {}),
        "simulated_gpu": trace.meta.get("simulated_gpu", False),
        "machine": machine(trace),
        "exit_status": tr.get("exit_status"),
        "duration_s": duration_s,
        "complete": bool(trace.meta.get("complete", bool(tr))),
        "incomplete_reason": trace.meta.get("incomplete_reason", "" if tr else "no trailer"),
        "unrecorded_processes": list(tr.get("unrecorded") or []),
        "lost_events": lost,
        "producer_waits": int(trace.processes["waits"].sum()) if len(trace.processes) else 0,
        "unscanned_launches": int(trace.processes["unscanned_launches"].sum()) if len(trace.processes) else 0,
        "processes": len(trace.pids),
        "per_process": per_pid,
        "counts": counts,
        "by_api": dict(sorted(trace.counts.get("by_api", {}).items())),
        "kinds": kinds,
        "bytes_allocated": bytes_allocated,
        "peak_live_bytes": peak_live_bytes_of(trace),
        "framework": info["framework"],
        "allocator": {k: v for k, v in info.items() if k not in ("outside", "framework")},
        "outside_allocator": info["outside"],
        "by_owner": by_owner,
        "reservations": int(len(trace.reservations)),
        "applied": _applied(trace),
        "graph_launches": graph_launches,
        "cuda_graphs": graphs,
        "kernels": len(trace.kernels),
        "warnings": list(trace.warnings),
        "call_sites": sites,
        **_oom(trace),
        **_window(trace),
        "per_rank": ranks,
        "ranks": job_view(ranks),
    }


def _is_kind(col, kind: str) -> np.ndarray:
    """bool per row: ``col.astype(str) == kind``, tested once per category (no string per row)."""
    if hasattr(col, "cat"):
        cats = np.array([str(c) == kind for c in col.cat.categories] + [kind == "nan"], bool)
        codes = col.cat.codes.to_numpy()
        return cats[np.where(codes < 0, len(cats) - 1, codes)]
    return col.astype(str).to_numpy() == kind


def _applied(trace: Trace) -> dict | None:
    """What a plan served (``run --apply``); None without one."""

    return summary(trace)


def _oom(trace: Trace) -> dict:
    """``oom``: one entry per failed out-of-memory allocation (pyinterpose.analysis.oom)."""

    ex = explain(trace)
    return {"oom": ex["entries"], "oom_summary": {k: v for k, v in ex.items() if k != "entries"}}


def _window(trace: Trace) -> dict:
    """``window`` (the steps the events cover) and ``growth`` (the whole run's bytes per step, the call
    sites that grew, leaks) of a windowed or flight-recorder trace; both None for a full capture
    (pyinterpose.analysis.growth)."""

    return {"window": window_summary(trace), "growth": trace.derived(("growth.growth",), lambda: growth(trace))}
