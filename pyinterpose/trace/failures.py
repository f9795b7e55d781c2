"""The failed calls' details: call site and the device's memory at an out-of-memory failure.

The shim writes after a failed allocation, in the same reservation (``native/shim/events.h``): its
``SITE`` (seq + 1, as for a block) and, for an out-of-memory result, a ``MEMINFO`` record (``aux`` =
the failure's seq; ``addr`` free bytes, ``size`` total bytes from cuMemGetInfo_v2; ``device`` from
cuCtxGetDevice).  :func:`attach` adds them to ``trace.failures`` (in place): ``owner``,
``stack_id``, ``free_bytes``, ``total_bytes`` (-1 when not recorded), and ``device`` from MEMINFO
where it is known (else the thread's last cudaSetDevice, as in every record).
"""
from __future__ import annotations

import numpy as np
import pandas as pd
from .stacks import attach_blocks


def attach(failures: pd.DataFrame, side_ev: np.ndarray, side_pid: np.ndarray, side_op: np.ndarray,
           meminfo_op: int | None, sites) -> None:
    n = len(failures)
    free_b = np.full(n, -1, np.int64)
    total_b = np.full(n, -1, np.int64)
    device = failures["device"].to_numpy(np.int16).copy() if n else np.zeros(0, np.int16)
    if n and meminfo_op is not None and len(side_ev):
        mi = np.flatnonzero(side_op == meminfo_op)
        if len(mi):
            key = side_pid[mi].astype(np.int64) << 40 | side_ev["aux"][mi].astype(np.int64)
            fkey = failures["pid"].to_numpy(np.int64) << 40 | failures["seq"].to_numpy(np.int64)
            order = np.argsort(key, kind="stable")
            pos = np.minimum(np.searchsorted(key[order], fkey), len(key) - 1)
            hit = key[order][pos] == fkey
            src = mi[order[pos[hit]]]
            free_b[hit] = side_ev["addr"][src].astype(np.int64)
            total_b[hit] = side_ev["size"][src].astype(np.int64)
            dev = side_ev["device"][src].astype(np.int16)
            device[np.flatnonzero(hit)[dev >= 0]] = dev[dev >= 0]
    tmp = pd.DataFrame({"pid": failures["pid"].to_numpy(), "seq_alloc": failures["seq"].to_numpy(np.int64)})

    attach_blocks(tmp, sites)
    failures["device"] = device
    failures["owner"] = tmp["owner"].to_numpy()
    failures["owner"] = failures["owner"].astype("category")
    failures["stack_id"] = tmp["stack_id"].to_numpy(np.int64)
    failures["free_bytes"] = free_b
    failures["total_bytes"] = total_b


RESULT_INTERRUPTED = -1000    # events.h PI_RESULT_INTERRUPTED: a call the process was killed inside


def interrupted_warnings(failures: pd.DataFrame) -> list[str]:
    """A line per process killed inside a recorded call (the shim held its record across the call:
    it is in ``failures`` with result RESULT_INTERRUPTED, its effect unknown)."""
    if len(failures) == 0:
        return []
    f = failures[failures["result"].to_numpy() == RESULT_INTERRUPTED]
    out = []
    for pid, g in f.groupby("pid", sort=True):
        apis = ", ".join(sorted({str(a) for a in g["api"]}))
        out.append(f"process {int(pid)} was killed inside {len(g)} call{'s' if len(g) != 1 else ''} ({apis}): "
                   f"recorded as interrupted (result {RESULT_INTERRUPTED}), their effect unknown")
    return out
