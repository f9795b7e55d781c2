"""Ranks of a multi-GPU job: each rank's memory side by side, and which rank runs out first.

A process's rank comes from the rank variables the shim recorded from its environment
(``trace.processes.context``, see pyinterpose.trace.context), first match wins:

==========  =================================================================================
rank        ``RANK`` (torchrun), ``JAX_PROCESS_ID``, ``TF_CONFIG`` task index (its position among
            every task of the cluster, in the order chief, master, worker, ps, evaluator),
            ``SLURM_PROCID``, ``OMPI_COMM_WORLD_RANK``, ``PMI_RANK``, ``PMIX_RANK``
world_size  ``WORLD_SIZE``, ``JAX_NUM_PROCESSES`` / ``JAX_PROCESS_COUNT``, the TF_CONFIG cluster's
            task count, ``SLURM_NTASKS``, ``OMPI_COMM_WORLD_SIZE``, ``PMI_SIZE``
local_rank  ``LOCAL_RANK``, ``SLURM_LOCALID``, ``OMPI_COMM_WORLD_LOCAL_RANK``
==========  =================================================================================

A rank's device is the ordinal its device memory was allocated on (most bytes), named by the UUID
the shim recorded for it (``trace.processes.devices``): the UUID is the physical GPU whatever
``CUDA_VISIBLE_DEVICES`` remapped.  Processes that share a rank (a DataLoader worker forked from
the rank inherits its environment) are folded into it: the rank is its process with the highest
peak, the others are listed in ``other_pids``.  A trace where no process has a rank variable has
one entry per process that allocated device memory, with ``rank`` None.

Everything here is a pure function of one Trace and returns small plain dicts (what travels back
from a worker when many traces are analysed on a cluster: pyinterpose.analysis.job).
"""
from __future__ import annotations

import re

import numpy as np
import pandas as pd

from ..trace.context import context_of, devices_of, rank_context
from ..trace.live import scan
from ..trace.model import Trace
from ..trace.chunking import spans
from ..trace.pages import release
from ..trace.piecewise import piece_rows
from .fanout import iterations_per_process

# the collective library: the calling object's name (block owner) -> library
COLLECTIVE_OWNERS = (("nccl", re.compile(r"^lib(sim)?nccl")), ("rccl", re.compile(r"^librccl")),
                     ("nvshmem", re.compile(r"^libnvshmem")))


def collective_library(owner: str) -> str:
    """"nccl" (or "rccl", "nvshmem") when the calling object is that library, else ""."""
    for name, pat in COLLECTIVE_OWNERS:
        if pat.search(owner or ""):
            return name
    return ""


def _peak_of(trace: Trace, mask: np.ndarray) -> tuple[int, int]:
    """(peak live device bytes of the blocks in ``mask``, the first time it was reached, -1 none), over
    the trace's live events (sorted once per trace: model.live_events)."""
    if not mask.any():
        return 0, -1
    peak, k, t = scan(trace, mask)          # one pass over the live events in pieces (trace.live)
    return (peak, t) if k >= 0 and peak > 0 else (0, -1)


def _collective_mask(b) -> np.ndarray:
    """Blocks allocated by the collective library (by owner; one test per distinct owner)."""
    if "owner" not in b or len(b) == 0:
        return np.zeros(len(b), bool)
    if hasattr(b["owner"], "cat"):      # the categorical's own codes (no int64 copy), when none is missing
        codes = b["owner"].cat.codes.to_numpy()
        if not (codes < 0).any():
            hit = np.array([bool(collective_library(str(n))) for n in b["owner"].cat.categories], bool)
            return hit[codes] if len(hit) else np.zeros(len(b), bool)
    codes, names = pd.factorize(b["owner"].astype(str) if not hasattr(b["owner"], "cat") else b["owner"])
    hit = np.array([bool(collective_library(str(n))) for n in names], bool)
    return hit[codes] if len(hit) else np.zeros(len(b), bool)


def _bytes_per_device(b, sel: np.ndarray) -> tuple[np.ndarray, list[int]]:
    """(the devices of the blocks in ``sel``, ascending; the bytes allocated on each), read a piece of
    blocks at a time (no copy of the selected rows' columns)."""
    dcol, scol = b["device"].to_numpy(), b["size"].to_numpy()
    sums: dict[int, np.int64] = {}
    for lo, hi in spans(len(b), piece_rows()):
        m = sel[lo:hi]
        d, sz = dcol[lo:hi][m], np.asarray(scol[lo:hi], np.int64)[m]
        for u in np.unique(d).tolist():
            with np.errstate(over="ignore"):
                sums[u] = sums.get(u, np.int64(0)) + sz[d == u].sum(dtype=np.int64)
        release(scol, lo, hi)
        release(dcol, lo, hi)
    uniq = np.array(sorted(sums), dcol.dtype)
    return uniq, [sums[int(u)] for u in uniq]


def per_process(trace: Trace) -> list[dict]:
    """One dict per process: pid, host, rank context, device, device_uuid, peak_live_bytes,
    peak_t_ns (ns since the start of the trace when the peak was first reached, -1 none),
    peak_wall_s (the same on the wall clock: the trace's start_time + peak_t_ns; comparable between
    traces of one job written on different nodes), collective_peak_bytes (the peak of the
    collective library's own blocks), iterations (None: filled by :func:`per_rank`), allocs, devices (each
    device the process allocated on: device, device_uuid, its own peak_live_bytes)."""
    b = trace.blocks
    pid_col = b["pid"].to_numpy()
    coll = _collective_mask(b)
    start = trace.meta.get("start_time")
    host = trace.meta.get("host") or ""
    procs = {int(p): r for p, r in zip(trace.processes["pid"].tolist(), trace.processes.to_dict("records"))}
    out = []
    dev_col = b["counts_device"].to_numpy(bool)
    for pid in trace.pids:
        pr = procs.get(int(pid), {})
        ctx = context_of(pr.get("context"))
        devs = dict(devices_of(pr.get("devices")))
        mine = pid_col == pid
        peak, peak_t = _peak_of(trace, mine)
        coll_peak, _ = _peak_of(trace, mine & coll) if (coll & mine).any() else (0, -1)
        mine_dev = mine & dev_col
        n_dev = int(np.count_nonzero(mine_dev))
        device, per_device = None, []
        if n_dev:
            uniq, by_dev = _bytes_per_device(b, mine_dev)
            device = int(uniq[np.argmax(by_dev)])
            if len(uniq) == 1:
                per_device = [{"device": device, "device_uuid": devs.get(device, ""), "peak_live_bytes": peak}]
            else:   # one process on several GPUs (JAX's one process per host): each device's own peak
                dcol = b["device"].to_numpy()
                per_device = [{"device": int(u), "device_uuid": devs.get(int(u), ""),
                               "peak_live_bytes": _peak_of(trace, mine & (dcol == u))[0]} for u in uniq.tolist()]
        elif devs:
            device = min(devs)
        entry = {"pid": int(pid), "host": ctx.get("HOST") or host, **rank_context(ctx),
                 "device": device, "device_uuid": devs.get(device, "") if device is not None else "",
                 "cuda_visible_devices": ctx.get("CUDA_VISIBLE_DEVICES"),
                 "peak_live_bytes": peak, "peak_t_ns": peak_t,
                 "peak_wall_s": (float(start) + peak_t / 1e9) if (start is not None and peak_t >= 0) else None,
                 "collective_peak_bytes": coll_peak, "iterations": None, "allocs": n_dev,
                 "devices": per_device,
                 "trace": trace.path}
        out.append(entry)
    return out


def fold_ranks(procs: list[dict]) -> list[dict]:
    """Per-process entries -> one entry per rank (sorted by rank, then host and pid).  Processes
    sharing a rank fold into the one with the highest peak (``other_pids``: the rest); without any
    rank variable, every process that allocated device memory is an entry of its own (rank None)."""
    ranked = [p for p in procs if p["rank"] is not None]
    if not ranked:
        return [dict(p, other_pids=[]) for p in sorted(procs, key=lambda p: (p["host"], p["pid"]))
                if p["peak_live_bytes"] > 0]
    groups: dict = {}
    for p in ranked:
        groups.setdefault((p["rank"], p.get("world_size")), []).append(p)
    out = []
    for _, ps in groups.items():
        ps = sorted(ps, key=lambda p: (-p["peak_live_bytes"], p["host"], p["pid"]))
        out.append(dict(ps[0], other_pids=[p["pid"] for p in ps[1:]]))
    return sorted(out, key=lambda p: (p["rank"], p["host"], p["pid"]))


def who(r: dict) -> str:
    """A rank entry as a reader names it: "rank R", or "pid P" for a process without a rank variable."""
    return f"rank {r['rank']}" if r.get("rank") is not None else f"pid {r['pid']}"


def job_view(ranks: list[dict]) -> dict:
    """The side-by-side figures: imbalance (max peak over the median peak; 1.0 = balanced, None
    without ranks), the rank with the highest peak, the rank that reached its peak first (on the
    wall clock when every rank has one, else on the trace clock), per-device totals."""
    if not ranks:
        return {"ranks": 0, "imbalance": None, "max_rank": None, "first_to_peak": None, "per_device": []}
    peaks = np.array([r["peak_live_bytes"] for r in ranks], dtype=np.float64)
    med = float(np.median(peaks))
    imb = float(peaks.max() / med) if med > 0 else None
    top = ranks[int(np.argmax(peaks))]
    wall = all(r.get("peak_wall_s") is not None for r in ranks)
    key = (lambda r: r["peak_wall_s"]) if wall else (lambda r: r["peak_t_ns"] if r["peak_t_ns"] >= 0 else np.inf)
    first = min(ranks, key=lambda r: (key(r), r["rank"] if r["rank"] is not None else -1))
    per_dev: dict = {}
    for r in ranks:
        for dv in r.get("devices") or [{"device": r["device"], "device_uuid": r["device_uuid"],
                                        "peak_live_bytes": r["peak_live_bytes"]}]:
            k = (r["host"], dv["device_uuid"] or f"device {dv['device']}")
            e = per_dev.setdefault(k, {"host": k[0], "device_uuid": dv["device_uuid"], "ranks": [],
                                       "sum_of_peaks": 0})
            e["ranks"].append(r["rank"])
            e["sum_of_peaks"] += int(dv["peak_live_bytes"])
    return {"ranks": len(ranks), "imbalance": imb, "max_rank": top["rank"], "max_pid": top["pid"],
            "max_label": who(top), "first_to_peak_label": who(first),
            "ranked": any(r["rank"] is not None for r in ranks), "max_peak_bytes": int(peaks.max()),
            "median_peak_bytes": med, "first_to_peak": first["rank"], "first_to_peak_pid": first["pid"],
            "first_to_peak_clock": "wall" if wall else "trace",
            "per_device": sorted(per_dev.values(), key=lambda e: (e["host"], e["device_uuid"]))}


PER_RANK_KEYS = ("rank", "local_rank", "world_size", "local_world_size", "rank_source", "pid", "other_pids", "host",
                 "device", "device_uuid", "devices", "cuda_visible_devices", "peak_live_bytes", "peak_t_ns", "peak_wall_s",
                 "collective_peak_bytes", "iterations", "allocs", "trace")


def per_rank(trace: Trace, iterations: bool | None = None) -> list[dict]:
    """``summary --json``'s ``per_rank``: one entry per rank of this trace (keys PER_RANK_KEYS).
    ``iterations``: find each rank's training iterations (regular steps, 0 when none were found);
    default: when the trace has ranks (a trace without rank variables leaves them None: the
    ``iterations`` command finds them for any process)."""
    ranks = fold_ranks(per_process(trace))
    if iterations is None:
        iterations = any(r["rank"] is not None for r in ranks)
    if iterations:   # one task per rank on the executor of analysis.fanout.using(), else here in turn

        for r, n in zip(ranks, iterations_per_process(trace, [int(r["pid"]) for r in ranks])):
            r["iterations"] = n
    return [{k: r.get(k) for k in PER_RANK_KEYS} for r in ranks]
