"""Pool strategies: the lower bound, simulated allocators and offline planners.

Public functions (used by the report and export commands):

* :func:`requests` — a process's request stream (device blocks' alloc/free events
  in sequence order); with ``allocator_only=True`` only the framework allocator's own
  requests (:func:`pyinterpose.analysis.owners.allocator_mask`), what the simulated
  allocators replay: allocations made outside the allocator (library workspaces, the
  runtime) are not the allocator's to place; :func:`evaluate` reports them on their own
  line (``outside_allocator``).
* :func:`steady_problem` — one steady iteration in MiniMalloc's form
  (``id, lower, upper, size`` with lifetimes in event index, half-open), plus
  ``block_id`` and ``crossing`` columns (see below).
* :func:`read_minimalloc_csv`, :func:`write_minimalloc_csv`.
* :func:`evaluate` — every strategy on a trace: the pools JSON.

Steady problem.  The window ``[seq_lo, seq_hi)`` (one steady step from
``find_iterations(...).steady_window()``, or given) is cut out of the process's
alloc/free events; event k inside the window is time k.  Every device block live
at some point of the window becomes one row:

* ``inner``   — allocated and freed inside: ``[alloc index, free index)``;
* ``in``      — allocated before the window, freed inside: ``[0, free index)``;
* ``out``     — allocated inside, freed after the window: ``[alloc index, E)``;
* ``kept``    — allocated inside, never freed: ``[alloc index, E)`` (not a cross-iteration
  variable: it just occupies space from then on);
* ``through`` — allocated before and freed after (weights, optimizer state, caches):
  ``[0, E)``.

``in`` and ``out`` rows are the two halves of cross-iteration variables (SINGA's
cross-iteration blocks); in a steady loop the ``in`` rows are the previous step's
``out`` rows.  SmartPool gives them its doubled region; the other planners plan the
window as it is (each row on its own), which is what one steady step needs.
``through`` rows conflict with every other row, so every planner simply stacks them;
they count in the bound too: the bound is what that step needs.

Bounds.  ``bound_bytes`` = LOAD of the steady problem (peak live bytes of the
steady step); ``bound_whole_run_bytes`` = peak live bytes of the framework
allocator's requests over the whole run of the process (what the simulators replay).
Planners are compared with the first (they plan the steady step); simulated allocators
replay the whole run, and their reserved memory never shrinks, so they are compared with
the second (each result says which in ``bound``).
"""
from __future__ import annotations

import time

import numpy as np
import pandas as pd

from ...errors import PyinterposeError
from ...trace.model import Trace
from .allocators import ALLOCATORS, pytorch_options, simulate
from .planners import PLANNERS, plan
from .problem import (InvalidPlanError, components, load, read_minimalloc_csv, validate_plan,
                      write_minimalloc_csv)

STRATEGIES = ALLOCATORS + PLANNERS
DEFAULT_TIME_LIMIT = 10.0

__all__ = ["requests", "steady_problem", "evaluate", "read_minimalloc_csv", "write_minimalloc_csv",
           "validate_plan", "load", "plan", "simulate", "STRATEGIES", "ALLOCATORS", "PLANNERS",
           "InvalidPlanError", "components"]


def _pid(trace: Trace, pid: int | None) -> int | None:
    if pid is not None:
        if pid not in trace.pids:
            raise PyinterposeError(f"no process {pid} in the trace")
        return pid
    return trace.main_pid


def _device_blocks(trace: Trace, pid: int | None, allocator_only: bool = False) -> pd.DataFrame:
    b = trace.blocks
    if allocator_only:
        from ..owners import allocator_mask
        b = b[allocator_mask(trace)]
    else:
        b = b[b["counts_device"]]
    if pid is not None:
        b = b[b["pid"] == pid]
    return b


def requests(trace: Trace, pid: int | None = None, allocator_only: bool = False) -> pd.DataFrame:
    """The request stream of one process (default: the main one): one row per
    alloc and per free of a device block, ordered by the process's sequence number;
    ``allocator_only``: the framework allocator's requests only.

    Columns: seq, t, op ("alloc"|"free"), block_id, size, stream.  Blocks never freed
    have no free row."""
    b = _device_blocks(trace, _pid(trace, pid), allocator_only)
    freed = b[b["freed"]]
    seq = np.concatenate([b["seq_alloc"].to_numpy(np.int64), freed["seq_free"].to_numpy(np.int64)])
    t = np.concatenate([b["t_alloc"].to_numpy(np.int64), freed["t_free"].to_numpy(np.int64)])
    op = np.concatenate([np.ones(len(b), np.int8), np.zeros(len(freed), np.int8)])
    bid = np.concatenate([b["block_id"].to_numpy(np.int64), freed["block_id"].to_numpy(np.int64)])
    size = np.concatenate([b["size"].to_numpy(np.int64), freed["size"].to_numpy(np.int64)])
    stream = np.concatenate([b["stream"].to_numpy(np.uint64), freed["stream"].to_numpy(np.uint64)])
    order = np.lexsort((op, seq))  # a free and an alloc never share a seq; frees first if they do
    return pd.DataFrame({
        "seq": seq[order], "t": t[order],
        "op": np.where(op[order] == 1, "alloc", "free"),
        "block_id": bid[order], "size": size[order], "stream": stream[order],
    })


def _steady_window(trace: Trace, pid: int | None) -> tuple[tuple[int, int], dict]:
    try:
        from ..iterations import find_iterations
    except ImportError:  # pragma: no cover - iterations module missing in this checkout
        find_iterations = None
    b = _device_blocks(trace, pid)
    whole = (int(b["seq_alloc"].min()) if len(b) else 0,
             int(max(b["seq_alloc"].max(), b["seq_free"].max())) + 1 if len(b) else 0)
    if find_iterations is None:
        return whole, {"source": "none", "reason": "iteration detection not available"}
    it = find_iterations(trace, pid)
    if it.count == 0:
        return whole, {"source": it.source, "reason": getattr(it, "reason", "") or "no loop found"}
    lo, hi = it.steady_window()
    return (int(lo), int(hi)), {"source": it.source, "count": int(it.count),
                                "period_allocs": int(it.period_allocs)}


def steady_problem(trace: Trace, pid: int | None = None, window: tuple[int, int] | None = None,
                   allocator_only: bool = False) -> pd.DataFrame:
    """One steady iteration as a DSA problem (see the module docstring).

    Columns: id (= block_id), lower, upper, size, block_id, crossing.  ``df.attrs``
    holds ``window`` (seq_lo, seq_hi), ``events`` (E) and ``pid``, and
    ``iteration`` (how the window was chosen).  ``allocator_only``: the framework
    allocator's blocks only (what :func:`evaluate` plans)."""
    pid = _pid(trace, pid)
    if window is None:
        window, info = _steady_window(trace, pid)
    else:
        info = {"source": "given"}
    lo, hi = int(window[0]), int(window[1])
    if hi <= lo:
        raise PyinterposeError(f"empty window [{lo}, {hi})")
    b = _device_blocks(trace, pid, allocator_only)
    req = requests(trace, pid, allocator_only)
    ev = req["seq"].to_numpy(np.int64)
    ev = ev[(ev >= lo) & (ev < hi)]
    E = len(ev)
    sa = b["seq_alloc"].to_numpy(np.int64)
    sf = b["seq_free"].to_numpy(np.int64)
    freed = b["freed"].to_numpy(bool)
    alive = (sa < hi) & (~freed | (sf >= lo))
    b, sa, sf, freed = b[alive], sa[alive], sf[alive], freed[alive]
    before = sa < lo
    after = ~freed | (sf >= hi)
    lower = np.where(before, 0, np.searchsorted(ev, sa))
    upper = np.where(after, E, np.searchsorted(ev, sf))
    crossing = np.select([before & after, before, after & ~freed, after], ["through", "in", "kept", "out"],
                         "inner")
    df = pd.DataFrame({"id": b["block_id"].to_numpy(np.int64), "lower": lower.astype(np.int64),
                       "upper": upper.astype(np.int64), "size": b["size"].to_numpy(np.int64),
                       "block_id": b["block_id"].to_numpy(np.int64), "crossing": crossing})
    df = df[df["upper"] > df["lower"]].reset_index(drop=True)
    df.attrs.update(window=(lo, hi), events=E, pid=pid, iteration=info)
    return df


def _row(name: str, peak: int, bound: int, seconds: float, bound_name: str) -> dict:
    return {"strategy": name, "peak_bytes": int(peak),
            "ratio_to_bound": (peak / bound) if bound else None,
            "fragmentation": ((peak - bound) / peak) if peak else 0.0,
            "bound": bound_name, "seconds": round(seconds, 6)}


def evaluate(trace: Trace, strategies=None, time_limit: float = DEFAULT_TIME_LIMIT,
             pid: int | None = None, window: tuple[int, int] | None = None,
             capacity: int | None = None, allocator_options: dict | None = None) -> dict:
    """Every strategy on one process of ``trace``: the pools JSON.

    ``strategies``: names from STRATEGIES (default all); ``time_limit``: seconds for
    ``optimal``; ``capacity``: device limit for the simulated allocators (default none);
    ``allocator_options``: {allocator: options} for the simulated allocators, where the
    ``pytorch`` entry may also be a config string in PYTORCH_ALLOC_CONF syntax (e.g.
    ``"expandable_segments:True"``).  Without a ``pytorch`` entry, the user's own
    PYTORCH_ALLOC_CONF / PYTORCH_CUDA_ALLOC_CONF recorded in the trace
    (``meta["user_env"]``) is used.  Each allocator row reports the ``options`` used; the
    pytorch row also ``alloc_conf`` (source, config string, keys not simulated)."""
    if strategies is None:
        strategies = list(STRATEGIES)
    elif isinstance(strategies, str):
        strategies = [s.strip() for s in strategies.split(",") if s.strip()]
    bad = [s for s in strategies if s not in STRATEGIES]
    if bad:
        raise PyinterposeError(f"unknown strategy {bad[0]!r} (choose from {', '.join(STRATEGIES)})")
    if time_limit <= 0:
        raise PyinterposeError(f"--time-limit must be > 0 (got {time_limit})")
    allocator_options = dict(allocator_options or {})
    bad = [a for a in allocator_options if a not in ALLOCATORS]
    if bad:
        raise PyinterposeError(f"options for unknown allocator {bad[0]!r} (choose from {', '.join(ALLOCATORS)})")
    pytorch_opts, pytorch_conf = pytorch_options(trace.meta, allocator_options.get("pytorch"))
    pid = _pid(trace, pid)
    from ..owners import allocator_info
    req = requests(trace, pid, allocator_only=True)
    sizes = np.where(req["op"].to_numpy() == "alloc", 1, -1) * req["size"].to_numpy(np.int64)
    whole = int(np.cumsum(sizes).max()) if len(sizes) else 0
    info = allocator_info(_pid_view(trace, pid))
    prob = steady_problem(trace, pid, window, allocator_only=True)
    lower, upper, size = (prob[c].to_numpy(np.int64) for c in ("lower", "upper", "size"))
    bound = load(lower, upper, size)
    out_rows = []
    for name in strategies:
        if name in ALLOCATORS:
            opts = pytorch_opts if name == "pytorch" else dict(allocator_options.get(name) or {})
            r = simulate(req, name, capacity=capacity, **opts)
            row = _row(name, r["peak_reserved_bytes"], whole, r["seconds"], "whole_run")
            row["backing_allocations"] = r["backing_allocations"]
            row["peak_allocated_bytes"] = r["peak_allocated_bytes"]
            if r["oom_at"] is not None:
                row["oom_at_request"] = int(r["oom_at"])
            row["options"] = r["options"]
            if name == "pytorch":
                row["alloc_conf"] = pytorch_conf
            if r["details"]:
                row["details"] = r["details"]
        else:
            p = plan(prob, name, time_limit=time_limit)
            row = _row(name, p.peak_bytes, bound, p.seconds, "steady")
            if name == "optimal":
                row["optimal"] = bool(p.optimal)
            if p.details:
                row["details"] = p.details
        out_rows.append(row)
    attrs = prob.attrs
    return {
        "pid": pid,
        "bound_bytes": int(bound),
        "bound_whole_run_bytes": whole,
        "iteration": {"window": list(attrs["window"]), "events": int(attrs["events"]),
                      "blocks": int(len(prob)),
                      "crossing": {k: int(v) for k, v in prob["crossing"].value_counts().items()},
                      **attrs["iteration"]},
        "requests": int(len(req)),
        "allocator": {k: v for k, v in info.items() if k != "outside"},
        "outside_allocator": info["outside"],
        "strategies": out_rows,
    }


def _pid_view(trace: Trace, pid: int | None) -> Trace:
    """``trace`` restricted to one process's blocks (for per-process allocator figures)."""
    if pid is None or (trace.blocks["pid"] == pid).all():
        return trace
    import copy
    t = copy.copy(trace)
    t.blocks = trace.blocks[trace.blocks["pid"] == pid]
    return t
