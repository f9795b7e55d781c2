"""What a plan served in a ``run --apply`` trace (the shim's PI_OP_APPLY records, ``trace.applied``).

:func:`summary` — per process: the arena (base, capacity, when it was reserved), the requests the plan
served and those that fell through to the real allocator by reason, per iteration and in all; the
blocks served (their address lies in the arena: the arena is one real allocation, so no block from the
real allocator can lie there while it lives); and the real device peak: the arena's capacity from its
reservation on, plus the device blocks that fell through, at their highest.  ``None`` for a trace
without a plan.

Reasons a request fell through: ``no_key`` (the plan has no such request at this point of the
iteration), ``occupied`` (its slot still held a block), ``bigger`` (larger than its slot), ``capture``
(its stream was being captured into a CUDA graph), ``overlap`` (the slot would have overlapped a live
block of the arena), ``off`` (the plan had been refused), ``other`` (no arena, or a stream wait failed).
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from ..trace.model import APPLY_COUNTS, Trace

FELL = tuple(c for c in APPLY_COUNTS if c != "served")


def served_mask(trace: Trace) -> np.ndarray:
    """bool per row of ``trace.blocks``: the block was served from a plan's arena."""
    b = trace.blocks
    out = np.zeros(len(b), bool)
    a = trace.applied
    if not len(a) or not len(b):
        return out
    arenas = a[(a["record"] == "arena") & (a["arena"] != 0)]
    addr = b["address"].to_numpy(np.uint64)
    pid = b["pid"].to_numpy()
    for _, r in arenas.iterrows():
        lo = np.uint64(r["arena"])
        out |= (pid == r["pid"]) & (addr >= lo) & (addr < lo + np.uint64(r["capacity"]))
    return out


def _real_peak(trace: Trace, pid: int, served: np.ndarray, arena_seq: int | None, capacity: int) -> int:
    """Peak of (capacity once the arena is reserved) + live device bytes that did not come from it."""
    b = trace.blocks
    m = (b["pid"].to_numpy() == pid) & b["counts_device"].to_numpy(bool) & ~served
    sa = b["seq_alloc"].to_numpy(np.int64)[m]
    sf = np.where(b["freed"].to_numpy(bool)[m], b["seq_free"].to_numpy(np.int64)[m], np.iinfo(np.int64).max)
    size = b["size"].to_numpy(np.int64)[m]
    t = np.concatenate([sa, sf] + ([np.array([arena_seq], np.int64)] if arena_seq is not None else []))
    d = np.concatenate([size, -size] + ([np.array([capacity], np.int64)] if arena_seq is not None else []))
    if not len(t):
        return 0
    o = np.lexsort((d, t))  # frees first at equal seq
    return int(max(np.cumsum(d[o]).max(), 0))


def summary(trace: Trace) -> dict | None:
    a = trace.applied
    plan = (trace.meta or {}).get("apply")
    if not len(a) and not plan:
        return None
    served = served_mask(trace)
    procs = []
    for pid in sorted(set(a["pid"].tolist())):
        r = a[a["pid"] == pid]
        arena = r[r["record"] == "arena"]
        base = int(arena["arena"].iloc[0]) if len(arena) else 0
        cap = int(arena["capacity"].iloc[0]) if len(arena) else int((plan or {}).get("capacity") or 0)
        reserved = bool(len(arena)) and base != 0
        it = r[r["record"].isin(["iteration", "last"])]
        per = [{"iteration": int(x["iteration"]), **{c: int(x[c]) for c in APPLY_COUNTS}}
               for _, x in it.iterrows()]
        tot = {c: int(it[c].sum()) for c in APPLY_COUNTS}
        refused = r[r["record"] == "refused"]
        notes = [n["note"] for n in (trace.meta.get("capture_notes") or []) if n.get("pid") == pid
                 and str(n.get("note", "")).startswith("apply:")]
        in_pid = trace.blocks["pid"].to_numpy() == pid
        procs.append({
            "pid": int(pid), "arena_capacity": cap, "arena_reserved": reserved,
            "arena_result": int(arena["result"].iloc[0]) if len(arena) else None,
            "requests": tot["served"] + sum(tot[c] for c in FELL), "served": tot["served"],
            "fell_through": sum(tot[c] for c in FELL), "by_reason": {c: tot[c] for c in FELL},
            "served_blocks": int((served & in_pid).sum()),
            "served_bytes": int(trace.blocks["size"].to_numpy()[served & in_pid].sum()),
            "refused": bool(len(refused)), "refused_at_iteration": int(refused["iteration"].iloc[0])
            if len(refused) else None, "notes": notes,
            "real_peak_bytes": _real_peak(trace, pid, served, int(arena["seq"].iloc[0]) if reserved else None,
                                          cap),
            "iterations": per,
            **_swaps(trace, pid),
        })
    return {"plan": plan, "processes": procs}


def _swaps(trace: Trace, pid: int) -> dict:
    """The swap engine's counts of the process (``swapped``: per iteration; ``swap_totals``), or nothing."""
    sw = getattr(trace, "swapped", None)
    if sw is None or not len(sw):
        return {}
    r = sw[sw["pid"].to_numpy() == pid]
    if not len(r):
        return {}
    cols = ["swaps_out", "swaps_in", "late", "unforeseen", "waits", "managed", "real"]
    per = [{"iteration": int(x["iteration"]), **{c: int(x[c]) for c in cols}} for _, x in r.iterrows()]
    return {"swapped": per, "swap_totals": {c: int(r[c].sum()) for c in cols}}


def iterations_frame(s: dict) -> pd.DataFrame:
    """One row per (pid, iteration) of :func:`summary`."""
    rows = [{"pid": p["pid"], **x} for p in s["processes"] for x in p["iterations"]]
    return pd.DataFrame(rows, columns=["pid", "iteration", *APPLY_COUNTS])
