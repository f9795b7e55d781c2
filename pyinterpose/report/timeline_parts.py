"""Parts of the timeline's payload shared by the exact one (:mod:`pyinterpose.report.timeline`) and the
summary of a long run (:mod:`pyinterpose.report.timeline_summary`): which iterations to mark on a
device, and the reserved curve as a step line on the event axis."""
from __future__ import annotations

import numpy as np
import pandas as pd

from ..analysis.iterations import find_iterations
from ..errors import PyinterposeError
from ..trace.model import Trace


def _own_iterations(trace: Trace, b: pd.DataFrame, iterations):
    """The iterations to mark on this device: ``iterations`` when they are of a process with blocks here,
    else those of the process holding most of this device's blocks (a rank's GPU shows that rank's steps,
    not another rank's boundaries placed on its events)."""
    pids = b["pid"].to_numpy()
    if not len(pids):
        return iterations
    if iterations is not None and getattr(iterations, "pid", None) is not None and \
            (pids == int(iterations.pid)).any():
        return iterations
    vals, counts = np.unique(pids, return_counts=True)

    try:
        return find_iterations(trace, pid=int(vals[np.argmax(counts)]))
    except PyinterposeError:
        return None


def _reserved_steps(block_id: np.ndarray, a_ev: np.ndarray, f_ev: np.ndarray, reserved: dict) -> dict | None:
    """The reserved curve as a step line on the event axis: each request's value from the
    event of its block's allocation or free on; only the points where it changes."""
    v = np.asarray(reserved["bytes"], np.int64)
    if not len(v):
        return None
    keep = np.ones(len(v), bool)
    keep[1:] = v[1:] != v[:-1]
    idx = np.flatnonzero(keep)
    pos = pd.Index(block_id).get_indexer(np.asarray(reserved["block_id"], np.int64)[idx])
    ok = pos >= 0
    idx, pos = idx[ok], pos[ok]
    ev = np.where(np.asarray(reserved["is_alloc"], bool)[idx], a_ev[pos], f_ev[pos])
    ok = ev >= 0
    idx, ev = idx[ok], ev[ok]
    if not len(ev):
        return None
    o = np.argsort(ev, kind="stable")
    ev, val = ev[o], v[idx[o]]
    last = np.ones(len(ev), bool)      # at one event, the last request's value
    last[:-1] = ev[1:] != ev[:-1]
    return {"x": ev[last].tolist(), "ys": val[last].tolist()}
