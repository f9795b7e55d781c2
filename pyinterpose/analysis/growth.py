"""The whole run's growth, from the per-step history of a windowed or flight-recorder trace
(pyinterpose/trace/window.py): bytes per step with its fit, and the call sites that grew.

``growth(trace)`` (``summary --json``'s ``growth``): per process, a least-squares line through the live
bytes at each history row's end against the step there (``bytes_per_step``, ``intercept_bytes``, ``r2``),
the growth over the run, and the call sites whose live bytes at step boundaries grew, by bytes, each with
its own bytes per step.  A site is a **leak** when its live bytes at step boundaries never went down over
the run and went up at least ``LEAK_MIN_RISES`` times: blocks allocated step after step and never freed.

``window_summary(trace)`` (``summary --json``'s ``window``): the steps the events cover, the steps in the
run, and the bytes live at the window's start.
"""
from __future__ import annotations

import numpy as np

from ..trace import stacks
from ..trace.window import history, site_history, values_at_rows, window_info

LEAK_MIN_RISES = 3


def _fit(x: np.ndarray, y: np.ndarray) -> dict:
    if len(x) < 2 or np.ptp(x) == 0:
        return {"bytes_per_step": 0.0, "intercept_bytes": float(y[0]) if len(y) else 0.0, "r2": None,
                "points": int(len(x))}
    xf, yf = x.astype(np.float64), y.astype(np.float64)
    slope, icpt = np.polyfit(xf, yf, 1)
    resid = yf - (slope * xf + icpt)
    ss = float(((yf - yf.mean()) ** 2).sum())
    r2 = 1.0 - float((resid ** 2).sum()) / ss if ss > 0 else None
    return {"bytes_per_step": float(slope), "intercept_bytes": float(icpt), "r2": r2, "points": int(len(x))}


def _site_name(trace, pid: int, seq: int, owner: str, site: int) -> tuple[str, int]:
    """(call site text, stack id) of a site, through the trace's block of its latest allocation."""
    b = trace.blocks
    m = (b["pid"].to_numpy() == pid) & (b["seq_alloc"].to_numpy() == seq)
    if m.any():
        sid = int(b["stack_id"].to_numpy()[m][0])
        text = stacks.call_site(trace, sid) if sid >= 0 else ""
        if text:
            return text, sid
    return f"{owner or '?'} (site {site}: its latest allocation is outside the trace's window)", -1


def growth(trace, top: int = 10) -> dict | None:
    """The run's growth (None for a trace without a per-step history: a full capture)."""
    h = history(trace)
    if len(h) == 0:
        return None
    sites, changes = site_history(trace)
    procs = []
    for pid, hp in h.groupby("pid", sort=True):
        hp = hp.reset_index(drop=True)
        x = (hp["step"] + hp["steps"]).to_numpy(np.int64)     # the step boundary at each row's end
        y = hp["live_end"].to_numpy(np.int64)
        fit = _fit(x, y)
        grew = []
        cp = changes[changes["pid"] == pid]
        for site, cs in cp.groupby("site", sort=False):
            v = values_at_rows(cs, len(hp))
            delta = int(v[-1] - v[0])
            if delta <= 0:
                continue
            d = np.diff(v)
            rises = int((d > 0).sum())
            leak = bool((d >= 0).all() and rises >= LEAK_MIN_RISES)
            srow = sites[(sites["pid"] == pid) & (sites["site"] == site)].iloc[0]
            name, sid = _site_name(trace, int(pid), int(srow["last_seq"]), str(srow["owner"]), int(site))
            grew.append({"call_site": name, "stack_id": sid, "owner": str(srow["owner"]), "grew_bytes": delta,
                         "bytes_per_step": _fit(x, v)["bytes_per_step"], "live_bytes_at_end": int(v[-1]),
                         "rises": rises, "leak": leak})
        grew.sort(key=lambda g: -g["grew_bytes"])
        procs.append({"pid": int(pid), "steps": int(x[-1] - hp["step"].iloc[0]), "span": int(hp["steps"].max()),
                      "first_step": int(hp["step"].iloc[0]), "last_step": int(x[-1] - 1),
                      "live_bytes_first": int(hp["live_start"].iloc[0]), "live_bytes_last": int(y[-1]),
                      "grew_bytes": int(y[-1] - hp["live_start"].iloc[0]), "peak_bytes": int(hp["peak"].max()),
                      **fit, "call_sites": grew[:top], "leaks": [g for g in grew if g["leak"]]})
    return {"bytes_per_step": float(sum(p["bytes_per_step"] for p in procs)), "processes": procs,
            "leaks": [dict(g, pid=p["pid"]) for p in procs for g in p["leaks"]]}


def leak_stacks(trace) -> set[tuple[int, int]]:
    """(pid, stack id) of the call sites the history names as leaks (blocks allocated step after step and
    never freed)."""
    g = trace.derived(("growth.growth",), lambda: growth(trace))
    if not g:
        return set()
    return {(p["pid"], c["stack_id"]) for p in g["processes"] for c in p["leaks"] if c["stack_id"] >= 0}


def window_summary(trace) -> dict | None:
    """What part of the run the events cover (None for a full capture)."""
    w = window_info(trace)
    if w is None:
        return None
    procs = []
    for p in w.get("processes", []):
        wins = [x for x in p.get("windows") or [] if x.get("start_ns") is not None]
        first = wins[0] if wins else None
        last = wins[-1] if wins else None
        procs.append({"pid": p["pid"], "steps_in_run": p.get("steps_in_run"),
                      "steps_source": p.get("steps_source"),
                      "first_step": first["start_step"] if first else None,
                      "last_step": last.get("last_step", last.get("end_step")) if last else None,
                      "live_bytes_at_start": first["live_at_start"] if first else None,
                      "snapshot_blocks": first["snapshot_blocks"] if first else None,
                      "windows": len(wins), "peak_bytes_in_run": p.get("peak_bytes")})
    out = {k: v for k, v in w.items() if k != "processes"}
    out["processes"] = procs
    if len(procs) == 1:
        out.update({k: procs[0][k] for k in ("first_step", "last_step", "steps_in_run", "live_bytes_at_start")})
    return out
