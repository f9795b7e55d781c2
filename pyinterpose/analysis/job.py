"""Many traces as one job: the traces of a multi-node run (one per node or per rank, ``run -o
trace-{host}-{rank}.pit``), analysed side by side.

* :func:`expand_paths` — files, folders (their ``*.pit``) and globs, in a stable order;
* :func:`analyse_trace` — one trace -> a small plain dict (its headline figures and its ``per_rank``
  entries: pyinterpose.analysis.ranks).  It is the unit of work: only these dicts travel back from a
  worker, never tables of events;
* :func:`analyse_job` — every trace on an executor, then the job view over all ranks
  (imbalance, highest rank, first to peak, per device).

Executors (:func:`executor`, in pyinterpose.analysis.executor): a local process pool by default (``max_workers``: the machine's
cores, at most one per trace; one trace is analysed in this process), or a Dask distributed
cluster when a scheduler address is given (``--scheduler tcp://HOST:PORT`` or the environment
variable ``PYINTERPOSE_SCHEDULER``); Dask is imported only then.  The work is the same pure
function either way, so the results are identical; on a cluster the trace paths must be readable
by the workers (a shared file system).  Work fans out per trace: the ranks inside one trace (the
processes of one node's ``torchrun``) are analysed by the task that loaded it, as loading dominates.
"""
from __future__ import annotations

import contextlib
import glob
import os

from ..errors import PyinterposeError
from ..heap import keep_freed_memory
from ..trace.model import peak_live_bytes_of
from ..trace.reader import load
from .executor import SCHEDULER_ENV, executor, scheduler_address  # noqa: F401 - job's public names
from .ranks import per_rank
from .ranks import job_view

TRACE_SUFFIX = ".pit"


def expand_paths(items: list[str]) -> list[str]:
    """Trace files named by ``items``: a file as is, a folder's ``*.pit`` files (sorted), a glob's
    matches (sorted); duplicates dropped, order kept.  A name that matches nothing is an error."""
    out: list[str] = []
    for item in items:
        if os.path.isdir(item):
            found = sorted(os.path.join(item, f) for f in os.listdir(item)
                           if f.endswith(TRACE_SUFFIX) and os.path.isfile(os.path.join(item, f)))
            if not found:
                raise PyinterposeError(f"{item}: a folder with no trace files (*{TRACE_SUFFIX}) in it")
        elif os.path.exists(item):
            found = [item]
        elif glob.has_magic(item):
            found = sorted(p for p in glob.glob(item) if os.path.isfile(p))
            if not found:
                raise PyinterposeError(f"{item}: no trace file matches")
        else:
            raise PyinterposeError(f"no such trace file: {item}")
        out.extend(found)
    seen: set = set()
    return [p for p in out if not (os.path.abspath(p) in seen or seen.add(os.path.abspath(p)))]


def is_many(items: list[str]) -> bool:
    """Do ``items`` name more than one trace, or a folder/glob (a job rather than one trace)?"""
    return len(items) > 1 or any(os.path.isdir(i) or (not os.path.exists(i) and glob.has_magic(i)) for i in items)


def analyse_trace(path: str) -> dict:
    """One trace's part of the job (a small dict of plain values; the same on any executor)."""
    trace = load(path)
    tr = trace.meta.get("trailer") or {}
    procs = trace.processes
    return {
        "trace": path,
        "fingerprint": fingerprint(path),
        "host": trace.meta.get("host") or "",
        "command": trace.meta.get("command"),
        "start_time": trace.meta.get("start_time"),
        "duration_s": trace.duration_ns / 1e9,
        "complete": bool(trace.meta.get("complete", bool(tr))),
        "warnings": list(trace.warnings),
        "processes": len(trace.pids),
        "events": int(trace.counts.get("events", 0)),
        "lost_events": int(procs["lost"].clip(lower=0).sum()) if len(procs) else 0,
        "peak_live_bytes": peak_live_bytes_of(trace),
        "per_rank": per_rank(trace, iterations=True),
    }


def fingerprint(path: str, edge: int = 1 << 16) -> str:
    """What tells a copy of a trace file from another trace: its size and a hash of its first and last
    ``edge`` bytes (a capture's header holds its start time and pids: two captures never share them)."""
    import hashlib

    h = hashlib.sha256()
    with open(path, "rb") as f:
        f.seek(0, 2)
        size = f.tell()
        f.seek(0)
        h.update(f.read(edge))
        if size > edge:
            f.seek(max(edge, size - edge))
            h.update(f.read(edge))
    return f"{size}:{h.hexdigest()}"


def dedupe(parts: list[dict]) -> tuple[list[dict], list[dict]]:
    """(the parts with each copy of an earlier trace left out, [{"trace", "copy_of"}] of those left out)."""
    seen: dict = {}
    kept, dup = [], []
    for p in parts:
        fp = p.get("fingerprint")
        if fp is not None and fp in seen:
            dup.append({"trace": p["trace"], "copy_of": seen[fp]})
        else:
            seen.setdefault(fp, p["trace"])
            kept.append(p)
    return kept, dup


def worker_task(path: str) -> dict:
    """:func:`analyse_trace` as a worker runs it: first the glibc settings every command runs with
    (pyinterpose.heap.keep_freed_memory: freed arrays stay in the heap for the next ones).  A Dask
    worker needs them most: its nanny starts it with MALLOC_TRIM_THRESHOLD_=65536, so each of the
    analysis's large temporary arrays would be handed back to the kernel and faulted in again
    (32 traces of 1 M events: 2.5x the local pool's time before this)."""
    keep_freed_memory()
    return analyse_trace(path)


def combine(parts: list[dict]) -> dict:
    """The job: every trace's headline, all ranks (sorted by rank, host, pid), the job view."""

    parts, duplicates = dedupe(parts)
    ranks = [r for p in parts for r in p["per_rank"]]
    ranks.sort(key=lambda r: (r["rank"] is None, r["rank"] if r["rank"] is not None else 0, r["host"], r["pid"]))
    traces = [{k: v for k, v in p.items() if k != "per_rank"} for p in parts]
    return {"traces": traces, "per_rank": ranks, "ranks": job_view(ranks),
            "duplicates": duplicates,
            "complete": all(t["complete"] for t in traces),
            "lost_events": sum(t["lost_events"] for t in traces)}


def analyse_job(paths: list[str], scheduler: str | None = None, max_workers: int | None = None) -> dict:
    """Every trace of ``paths`` (already expanded) analysed on the executor, combined."""
    with executor(scheduler, max_workers, len(paths)) as ex:
        parts = ex.map(worker_task, paths)
    return combine(parts)
