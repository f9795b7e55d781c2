"""Compare several traces side by side: frameworks, views (blocks vs reserved) or ranks.

:func:`compare` returns ``{"traces": [row, ...]}``, one row per trace (the
``pyinterpose compare --json`` object); each row holds plain JSON values:

* identity: label, path, framework, view, processes, devices;
* memory: ``peak_live_bytes`` (peak of live device bytes of the blocks: what the
  program asked for in a blocks view, what the framework reserved in a reserved
  view), ``reserved_bytes`` = what the framework's allocator reserved, with
  ``reserved_source``: "reserved view" (the peak of the allocator's own blocks:
  PyTorch's ``max_memory_reserved``, XLA's region), "simulated: NAME" (a blocks view:
  the framework's allocator replayed by the ``NAME`` pool simulator on its own
  requests) or None (unknown); ``reserved_over_live`` (the allocator's reserve over its own
  peak of live bytes, in a blocks view; None in a reserved view, where the live bytes inside the
  segments are not seen);
  ``nvml_used_bytes`` (NVML used memory of the whole GPU: CUDA context, libraries and
  the allocator's reserve — never the reserve itself); ``duration_ns``;
* owners: ``by_owner`` (rows of :func:`pyinterpose.analysis.owners.bytes_by_owner`),
  ``allocator_peak_bytes`` (peak live bytes of the framework allocator's blocks) and
  ``outside_allocator_bytes`` (peak live bytes of the rest);
* iterations: ``iterations``, ``allocs_per_iteration``, ``bytes_per_iteration``
  (sum of sizes allocated in one regular step, averaged over the steps);
* sizes: ``blocks``, ``size`` quantiles, ``small_fraction`` (blocks < 1 MiB);
* ``fragmentation``: {strategy: pool size / lower bound} from the pools analysis;
* ``ati``: ATI quantiles and the share of intervals the bandwidth filter removes;
* ``swap``: peak before/after the best no-overhead swap plan and the floor (only the
  ``no-overhead`` schedules run, all six strategies: what a side-by-side needs is how far
  each trace's peak drops *for free*; the budget mode's stall trade-off is the single-trace
  ``swap`` command's and the report's Pareto curve);
* ``call_sites``: the top 5 call sites by bytes live at the peak and by allocation
  count (``pyinterpose.trace.stacks.top_call_sites_json``; empty lists without stacks);
* ``notes``: why a part is missing ("not available: ...").

Each analysis is called through the same guarded adapter the report uses, so a
missing analysis leaves ``None`` and a note instead of failing the comparison.

:func:`compare_files` is the ``pyinterpose compare`` path: it loads one trace at a time
and lets it go once its row is made (a row is plain JSON values), so memory holds one
trace, not all of them; a file named twice is loaded and analysed once.
"""
from __future__ import annotations

import os
from typing import Any, Sequence

import numpy as np
import pandas as pd

from ..trace import pages, reader
from ..trace.model import Trace, peak_live_bytes_of
from . import guarded, intervals
from ..errors import PyinterposeError
from ..heap import give_back
from ..trace.stacks import top_call_sites_json
from .clock import clock_of, launch_lag
from .owners import allocator_info, bytes_by_owner, framework
from .ranks import per_rank
from .swap.problem import MIN_SIZE, SIDE_BY_SIDE_BLOCKS

SMALL = 1 << 20


def framework_of(trace: Trace) -> str:
    """The framework that ran: :func:`pyinterpose.analysis.owners.framework` (the one decision
    every command shows)."""

    return framework(trace)


def _quantiles(x: np.ndarray) -> dict[str, int] | None:
    if len(x) == 0:
        return None
    q = np.quantile(x, [0.5, 0.9, 0.99], method="lower")
    return {"p50": int(q[0]), "p90": int(q[1]), "p99": int(q[2]), "max": int(x.max())}


def _bytes_per_iteration(trace: Trace, it) -> int | None:
    if it is None or not getattr(it, "count", 0):
        return None
    b = _device_columns(trace, "pid", "seq_alloc", "size")
    lo, hi = int(it.boundaries[0]), int(it.boundaries[-1])
    inside = (b["seq_alloc"] >= lo) & (b["seq_alloc"] < hi)
    if it.pid is not None:
        inside &= b["pid"] == it.pid
    return int(b["size"][inside].sum() // it.count)


def _device_columns(trace: Trace, *names: str) -> dict:
    """Columns of ``trace.device_blocks`` (the device-counted blocks) as arrays, without a copy of the
    whole table (issue 30: at 100 M events every column of 11 M blocks, ~2 GB)."""
    tb = trace.blocks
    dev = tb["counts_device"].to_numpy(bool)
    return {n: tb[n].to_numpy()[dev] for n in names}


def _fragmentation(value: Any) -> dict[str, float] | None:
    """{strategy: ratio} from whatever pools.evaluate returns (DataFrame, list or dict)."""
    import pandas as pd

    table = value
    if isinstance(value, dict):
        for k in ("results", "strategies", "table"):
            if k in value:
                table = value[k]
                break
    if isinstance(table, list):
        table = pd.DataFrame(table)
    if isinstance(table, pd.DataFrame) and len(table):
        name = next((c for c in ("strategy", "name") if c in table), None)
        ratio = next((c for c in ("ratio", "ratio_to_bound") if c in table), None)
        if name and ratio:
            return {str(n): (None if pd.isna(r) else float(r)) for n, r in zip(table[name], table[ratio])}
    if isinstance(table, dict) and all(isinstance(v, (int, float)) for v in table.values()):
        return {str(k): float(v) for k, v in table.items()}
    return None


def _memory_facts(trace: Trace, pools: bool, time_limit: float) -> dict[str, Any]:
    """What a row reads from the blocks alone (peak, owners, the pools analysis, call sites):
    :func:`trace_row` computes it on a side thread beside the access and swap analyses (which make
    the access intervals a piece at a time, each for itself: nothing row-sized is shared)."""

    out: dict[str, Any] = {"peak": peak_live_bytes_of(trace),   # over the live events, shared with access
                           "info": allocator_info(trace), "by_owner": bytes_by_owner(trace).to_dict("records")}
    out["pools"] = guarded.pools(trace, time_limit=time_limit) if pools else None
    out["call_sites"] = top_call_sites_json(trace, n=5)
    return out


def _clock_keys(trace: Trace) -> dict[str, Any]:
    """The main process's clock (:mod:`.clock`): ``clock``, ``clock_note`` and the launch lag."""

    c = clock_of(trace)
    return {**c.as_dict(), "launch_lag": launch_lag(trace)}


def _ranks_of(trace: Trace) -> list[int]:
    """The ranks the trace's processes name (pyinterpose.analysis.ranks; [] for none)."""

    return [r["rank"] for r in per_rank(trace, iterations=False) if r["rank"] is not None]


def trace_row(trace: Trace, label: str | None = None, bandwidth: float | None = None,
              time_limit: float = 2.0, pools: bool = True, swap: bool = True) -> dict[str, Any]:
    """One comparison row for ``trace`` (see the module docstring)."""
    from concurrent.futures import ThreadPoolExecutor


    notes: list[str] = []
    clock_keys = _clock_keys(trace)        # before swap, which lets the clock go on a long trace

    def analyses():
        it = guarded.iterations(trace)
        with intervals.shared(trace):          # access and swap make the touches once
            acc = guarded.access(trace, bandwidth=bandwidth, iters=it.value)
            ev = guarded.swap(trace, bandwidth=bandwidth, modes=("no-overhead",)) if swap else None
        return it, acc, ev

    if len(trace.blocks) > SIDE_BY_SIDE_BLOCKS:
        # a long trace (issue 30): one after the other, so that the row's peak is the largest
        # analysis' (swap's), not the sum of the pools' and swap's; each step's kept tables, mapped
        # pages and freed heap given back before the next; access and swap each make the touches
        # (not kept from one to the other: ~0.5 GB at 100 M events).  The same figures.
        def between_steps(*modules):
            for m in modules:
                trace.forget(m)
            pages.release_tables(trace)
            give_back()

        facts = _memory_facts(trace, pools, time_limit)
        between_steps("pools")
        it = guarded.iterations(trace)
        # the access pass writes the rows swap's problem reads (one pass over the intervals, not two)
        with intervals.for_swap(trace, trace.main_pid, MIN_SIZE):
            acc = guarded.access(trace, bandwidth=bandwidth, iters=it.value)
            between_steps("access.intervals", "access.touches")
            ev = guarded.swap(trace, bandwidth=bandwidth, modes=("no-overhead",)) if swap else None
        between_steps()
    else:
        # the blocks-only figures on a side thread while this one finds the iterations, the access
        # intervals and the swap plans (numpy and the C passes release the GIL; Trace.derived
        # computes what both ask for once)
        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="pyinterpose-compare") as ex:
            side = ex.submit(_memory_facts, trace, pools, time_limit)
            it, acc, ev = analyses()
            facts = side.result()
    b = _device_columns(trace, "size", "device")
    view = str(trace.meta.get("view", "unknown"))
    peak = facts["peak"]
    nv = trace.nvml
    info = facts["info"]
    fw = info["framework"]
    sim = "pytorch" if fw == "pytorch" else ("bfc" if fw in ("jax", "tensorflow") else None)
    if view == "reserved":
        reserved, source = info["peak_live_bytes"], "reserved view"
    else:
        reserved, source = None, None
    sizes = np.asarray(b["size"], np.int64)
    row: dict[str, Any] = {
        "label": label or (os.path.basename(trace.path) if trace.path else "trace"),
        "path": trace.path,
        "framework": framework_of(trace),
        "view": view,
        **clock_keys,
        "processes": len(trace.pids),
        "ranks": _ranks_of(trace),
        "devices": sorted(int(d) for d in pd.unique(b["device"])),
        "blocks": int(len(sizes)),
        "peak_live_bytes": int(peak),
        "reserved_bytes": None if reserved is None else int(reserved),
        "reserved_source": source,
        "reserved_over_live": None,
        "nvml_used_bytes": int(nv.groupby("t")["used_bytes"].sum().max()) if len(nv) else None,
        "duration_ns": int(trace.duration_ns),
        "by_owner": facts["by_owner"],
        "allocator_peak_bytes": int(info["peak_live_bytes"]),
        "outside_allocator_bytes": int(info["outside"]["peak_live_bytes"]),
        "size": _quantiles(sizes),
        "small_fraction": float((sizes < SMALL).mean()) if len(sizes) else None,
        "iterations": None, "allocs_per_iteration": None, "bytes_per_iteration": None,
        "fragmentation": None, "ati": None, "swap": None,
    }
    if it.ok:
        v = it.value
        row["iterations"] = int(v.count)
        row["allocs_per_iteration"] = int(v.period_allocs) if v.count else None
        row["bytes_per_iteration"] = _bytes_per_iteration(trace, v)
        if not v.count:
            notes.append("iterations: no training loop found")
    else:
        notes.append(f"iterations: {it.note}")
    if pools:
        pl = facts["pools"]
        if pl.ok:
            row["fragmentation"] = _fragmentation(pl.value)
            sim_peak = next((r.get("peak_bytes") for r in (pl.value or {}).get("strategies", [])
                             if isinstance(pl.value, dict) and r.get("strategy") == sim), None)
            if row["reserved_bytes"] is None and sim_peak is not None:
                row["reserved_bytes"], row["reserved_source"] = int(sim_peak), f"simulated: {sim}"
                apeak = int(info["peak_live_bytes"])
                row["reserved_over_live"] = float(sim_peak) / apeak if apeak else None
            if row["fragmentation"] is None:
                notes.append(f"fragmentation: unrecognised pools result {type(pl.value).__name__}")
        else:
            notes.append(f"fragmentation: {pl.note}")
    if acc.ok:
        d = acc.value
        ff = d.get("filtered_fraction") or {}
        row["ati"] = {"quantiles_ns": d.get("ati_quantiles"), "intervals": d.get("intervals"),
                      "filtered_intervals": ff.get("intervals"),
                      "swappable_bytes": (d.get("swappable") or {}).get("bytes")}
    else:
        notes.append(f"ati: {acc.note}")
    if ev is not None:
        if ev.ok:
            d = ev.value
            no = [r for r in d.get("strategies", []) if r.get("mode") == "no-overhead"]
            best = min(no, key=lambda r: r["peak_after"]) if no else None
            row["swap"] = {"peak_before": d.get("peak_before"), "floor": d.get("floor"),
                           "best_no_overhead_peak": None if best is None else best["peak_after"],
                           "best_no_overhead_strategy": None if best is None else best["strategy"],
                           "reduction": None if best is None else best.get("reduction")}
        else:
            notes.append(f"swap: {ev.note}")
    row["call_sites"] = facts["call_sites"]
    row["notes"] = notes
    return row


def compare(traces: Sequence[Trace], labels: Sequence[str] | None = None, bandwidth: float | None = None,
            time_limit: float = 2.0, pools: bool = True, swap: bool = True, progress=None) -> dict[str, Any]:
    """``{"traces": [trace_row(...), ...]}`` in the order given."""
    labels = list(labels) if labels else [None] * len(traces)
    if len(labels) != len(traces):
        raise PyinterposeError(f"{len(labels)} labels for {len(traces)} traces")
    rows = []
    for i, (t, lab) in enumerate(zip(traces, labels)):
        if progress is not None:
            progress.update(i / max(len(traces), 1), f"analysing {lab or t.path or i}")
        rows.append(trace_row(t, lab, bandwidth=bandwidth, time_limit=time_limit, pools=pools, swap=swap))
    _dedupe_labels(rows)
    return {"traces": rows}


def _file_key(path: str):
    """Identity of a trace file: the same file under two names is one file."""
    try:
        st = os.stat(path)
    except OSError:
        return ("path", os.path.abspath(path))
    return ("file", st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)


def compare_files(paths: Sequence[str], labels: Sequence[str] | None = None, bandwidth: float | None = None,
                  time_limit: float = 2.0, pools: bool = True, swap: bool = True, progress=None,
                  load=None) -> tuple[dict[str, Any], list]:
    """:func:`compare` of trace files, one loaded at a time: ``(result, sources)``.

    ``load(path)``: the loader (default :func:`pyinterpose.load`).  Each trace is released once
    its row is made; a file named twice (same device and inode) gets a copy of its row.
    ``sources``: per distinct file, an object with the trace's ``path`` and ``meta`` (for the
    completeness fields of ``--json``)."""
    import copy
    from types import SimpleNamespace

    if load is None:
        load = reader.load
    labels = list(labels) if labels else [None] * len(paths)
    if len(labels) != len(paths):
        raise PyinterposeError(f"{len(labels)} labels for {len(paths)} traces")
    rows, done, sources = [], {}, []
    for i, (path, lab) in enumerate(zip(paths, labels)):
        key = _file_key(path)
        if key in done:
            row = copy.deepcopy(done[key])
            row["label"] = lab or row["label"]
        else:
            if progress is not None:
                progress.update(i / max(len(paths), 1), f"analysing {lab or path}")
            trace = load(path)
            row = trace_row(trace, lab, bandwidth=bandwidth, time_limit=time_limit, pools=pools, swap=swap)
            sources.append(SimpleNamespace(path=trace.path, meta=dict(trace.meta)))
            del trace            # its tables go before the next trace is loaded
            done[key] = row
        rows.append(row)
    _dedupe_labels(rows)
    return {"traces": rows}, sources


def _dedupe_labels(rows: list[dict]) -> None:
    seen: dict[str, int] = {}
    for r in rows:
        n = seen.get(r["label"], 0)
        seen[r["label"]] = n + 1
        if n:
            r["label"] = f"{r['label']} ({n + 1})"
