"""The side tables of a windowed or flight-recorder trace (chunks WINDOW and HISTORY, written by
pyinterpose/capture/window.py; docs/trace-format.md) as tables: what part of the run the events cover,
and the per-step history of the whole run."""
from __future__ import annotations

import numpy as np
import pandas as pd

HISTORY_COLUMNS = ["pid", "step", "steps", "t_start", "t_end", "live_start", "live_end", "reserved_end", "peak",
                   "allocs", "alloc_bytes", "frees"]


def window_info(trace) -> dict | None:
    """The WINDOW chunk (mode, and per process: steps in the run, its windows with their snapshots), or
    None for a full capture."""
    w = trace.meta.get("window") or []
    return w[-1] if w else None


def history(trace) -> pd.DataFrame:
    """One row per step (or per ``steps`` merged steps) of every process: the step it begins with, the
    times and live bytes at its start and end, reserved bytes at its end, its peak, its allocations and
    frees.  Times are ns since the trace's t0 (as every table of the trace)."""
    t0 = int(trace.meta.get("t0_ns", 0))
    frames = []
    for h in trace.meta.get("history") or []:
        rows = h.get("rows") or []
        if not rows:
            continue
        df = pd.DataFrame(rows, columns=h["columns"])
        df.insert(0, "pid", int(h["pid"]))
        frames.append(df)
    if not frames:
        return pd.DataFrame({c: pd.Series(dtype="int64") for c in HISTORY_COLUMNS})
    out = pd.concat(frames, ignore_index=True)[HISTORY_COLUMNS].astype("int64")
    out["t_start"] -= t0
    out["t_end"] -= t0
    return out


def site_history(trace) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(sites, changes): the call sites each process allocated from (pid, site, owner, its Python and
    native stack ids and caller PC as the shim numbered them, and the sequence number of the site's latest
    allocation), and the live bytes of a site at the end of a history row, wherever it changed
    (pid, row, site, bytes)."""
    srows, crows = [], []
    for h in trace.meta.get("history") or []:
        pid = int(h["pid"])
        for i, s in enumerate(h.get("sites") or []):
            srows.append((pid, i, s.get("owner", ""), int(s.get("py_stack", 0)), int(s.get("native_stack", 0)),
                          int(s.get("pc", 0)), int(s.get("last_seq", -1))))
        for r, s, b in h.get("site_bytes") or []:
            crows.append((pid, int(r), int(s), int(b)))
    sites = pd.DataFrame(srows, columns=["pid", "site", "owner", "py_stack", "native_stack", "pc", "last_seq"])
    changes = pd.DataFrame(crows, columns=["pid", "row", "site", "bytes"])
    return sites, changes


def owner_history(trace) -> pd.DataFrame:
    """Live bytes per owner (the calling library) at the end of history rows, where they changed:
    (pid, row, owner, bytes)."""
    rows = []
    for h in trace.meta.get("history") or []:
        names = h.get("owners") or {}
        for r, o, b in h.get("owner_bytes") or []:
            rows.append((int(h["pid"]), int(r), names.get(str(o), ""), int(b)))
    return pd.DataFrame(rows, columns=["pid", "row", "owner", "bytes"])


def values_at_rows(changes: pd.DataFrame, n_rows: int) -> np.ndarray:
    """A key's value at the end of each of ``n_rows`` rows from its change records (row, bytes): the last
    change at or before the row (0 before the first)."""
    out = np.zeros(n_rows, np.int64)
    if len(changes) == 0 or n_rows == 0:
        return out
    r = changes["row"].to_numpy(np.int64)
    b = changes["bytes"].to_numpy(np.int64)
    order = np.argsort(r, kind="stable")
    r, b = r[order], b[order]
    pos = np.searchsorted(r, np.arange(n_rows), side="right") - 1
    ok = pos >= 0
    out[ok] = b[pos[ok]]
    return out


def step_offset(trace, pid: int) -> int:
    """The run's step number of the first marker of ``pid`` in this trace, less 0: what to add to a marker's
    index in the trace to get its step in the run (0 for a full capture, or when the history cannot say)."""
    h = history(trace)
    m = trace.markers
    if len(h) == 0 or len(m) == 0:
        return 0
    t = m.loc[m["pid"] == pid, "t"]
    if len(t) == 0:
        return 0
    hp = h[h["pid"] == pid]
    hit = hp.loc[hp["t_start"] == int(t.min()), "step"]
    return int(hit.iloc[0]) if len(hit) else 0
