"""Chrome trace JSON for ui.perfetto.dev / chrome://tracing.

Layout (``{"traceEvents": [...], "displayTimeUnit": "ms"}``, ``ts`` in microseconds):

* one synthetic process per GPU, ``pid = GPU_PID_BASE + device``, named "GPU <d>",
  holding counter tracks (``"ph": "C"``): ``memory live_bytes`` (live device bytes
  of the trace's blocks) and ``memory nvml_used_bytes`` (NVML used memory, when
  sampled); in a reserved-view trace the live curve *is* the framework's reserve,
  so the series is called ``reserved_bytes`` instead of ``live_bytes``;
* on the same process, counters ``live bytes by class`` (one series per lifetime
  class, when the classifier ran) and ``live bytes by owner`` (one series per owner
  library: ``pyinterpose.analysis.owners.block_owners`` when present, else the
  ``owner`` column, else the API), and one thread track per CUDA stream
  (``tid = 1 + k``, named "stream 0x..."), holding an ``"i"`` instant per kernel
  launch, named after the kernel, whose ``args`` list the blocks it touches
  (``blocks``: block ids, ``bytes``: their total size) and the launch's pid/seq;
* per traced process (its real pid, named after its exe): ``"X"`` slices for the
  detected iterations and ``"i"`` instants for large allocations (size >=
  ``large``), with block id, size, api and kind in ``args``.

:func:`validate` checks a document against the trace-event format's rules
(phases, required fields per phase, numeric finite timestamps and counters,
metadata names), so a broken export fails a test rather than a UI.

Counters with more than ``max_points`` changes are reduced to the peak and the
last value of each time bin (peaks survive; see report.live_curve).
"""
from __future__ import annotations

import json
from typing import Any

import numpy as np

from ..trace.model import Trace
from .data import memory_timeline, memory_timelines, reserved_curves
from ..analysis.oom import oom_failures
from ..outfile import atomic_output
from ..trace.model import peak_live_bytes_of
from .timeline import _owners
from .owner_codes import owner_codes
from ..trace.pages import release, release_frame
from ..trace.chunking import chunk_rows, spans
from ..heap import give_back

GPU_PID_BASE = 10_000_000  # above Linux's pid_max (4194304): never collides with a real pid


def _us(ns) -> float:
    return round(float(ns) / 1000.0, 3)


def default_large_threshold(trace: Trace) -> int:
    """1% of the peak live bytes, at least 1 MiB."""

    return max(1 << 20, peak_live_bytes_of(trace) // 100)      # the trace's live order, read in pieces


def _nvml_curves(trace: Trace) -> dict[int, tuple[np.ndarray, np.ndarray]]:
    """NVML used bytes per device with no time before the start of capture: samples taken before it
    (the sampler starts first) are dropped but the last of them, which is placed at 0 (the state at
    the start)."""
    out = {}
    for dev, (t, used) in reserved_curves(trace).items():
        t = np.asarray(t, np.int64)
        neg = np.flatnonzero(t < 0)
        if len(neg):
            k = int(neg[-1])
            t, used = t[k:].copy(), np.asarray(used)[k:]
            t[0] = 0
        out[dev] = (t, used)
    return out


# the launches' columns the kernel tracks write
_KERNEL_COLUMNS = ("pid", "seq", "t", "device", "stream", "kernel_name")


def _kernel_rows(trace: Trace, max_kernels: int, notes: list[str]):
    """The launches the export writes (their :data:`_KERNEL_COLUMNS`): all of them in time order, or,
    above ``max_kernels``, that many spread evenly over the whole run (a note says so).  Only the time
    column is sorted (not at all when already in order, as one process's launches are); the rows
    written are then taken a column at a time, each column's mapped pages given back once taken: the
    rows spread over the whole table, so a take of every column at once held every page of it
    resident (issue 30: ~0.6 GB at 100 M events, the export's peak).  The same rows as
    ``sort_values("t", kind="stable").iloc[keep]``."""
    import pandas as pd

    launches = trace.launches
    n = len(launches)
    t = launches["t"].to_numpy()
    order = None if n < 2 or bool((t[1:] >= t[:-1]).all()) else np.argsort(t, kind="stable")
    release(launches["t"])
    if n > max_kernels:
        keep = np.unique(np.linspace(0, n - 1, max(1, max_kernels)).round().astype(np.int64))
        order = keep if order is None else order[keep]
        notes.append(f"kernel launches: {len(order):,} of {n:,} written (at most {max_kernels:,}: every "
                     f"{n / max(1, len(order)):.1f}th launch, spread over the whole run)")
    elif order is None:
        order = np.arange(n)
    cols = {}
    for c in _KERNEL_COLUMNS:
        if c in launches.columns:
            cols[c] = launches[c].take(order).reset_index(drop=True)
            release(launches[c])
    return pd.DataFrame(cols)


def _iteration_us(bt) -> tuple[list[int], list[int]]:
    """Iteration slices on whole microseconds: each starts where the one before ends (ts + dur equals
    the next ts exactly, in any reader's floating point)."""
    us = np.floor_divide(np.asarray(bt, np.int64), 1000)
    return us[:-1].tolist(), np.diff(us).tolist()


def _notes(trace: Trace, timelines: list, max_points: int, big_total: int, max_instants: int,
           notes: list[str]) -> list[str]:
    """Everything the export left out or cut short, for otherData, stderr and the tests."""
    out = []
    if not trace.meta.get("complete", True):
        out.append(f"INCOMPLETE TRACE: {trace.meta.get('incomplete_reason') or 'the capture did not record everything'}")
    red = sorted({tl.device for tl in timelines if tl.reduced})
    if red:
        out.append(f"memory counters of GPU {', '.join(map(str, red))}: more than {max_points:,} changes, reduced to "
                   "the peak and the last value of each time bin")
    if big_total > max_instants:
        out.append(f"large-allocation instants: the {max_instants:,} largest of {big_total:,} written")
    return out + notes


def _marker(trace: Trace, devices, notes: list[str]) -> dict[str, Any] | None:
    """A global instant at 0 that names an incomplete trace, where the timeline shows it."""
    if trace.meta.get("complete", True) or not notes:
        return None
    pid = GPU_PID_BASE + min(devices) if devices else int(trace.main_pid or 0)
    return {"name": notes[0], "cat": "pyinterpose", "ph": "i", "s": "g", "pid": pid, "tid": 0, "ts": 0}


def _other_data(trace: Trace, large: int, notes: list[str]) -> dict[str, Any]:
    meta = {k: trace.meta[k] for k in ("view", "framework", "command", "host") if k in trace.meta}
    complete = bool(trace.meta.get("complete", True))
    other = {"generator": "pyinterpose", "large_threshold_bytes": large, **{k: str(v) for k, v in meta.items()},
             "complete": complete}
    if not complete:
        other["incomplete_reason"] = str(trace.meta.get("incomplete_reason") or "")
    if notes:
        other["notes"] = list(notes)
    return other


def chrome_trace(trace: Trace, iterations=None, large: int | None = None,
                 max_points: int = 200_000, max_instants: int = 20_000, classes=None,
                 max_kernels: int = 200_000, notes: list[str] | None = None) -> dict[str, Any]:
    """Build the Chrome-trace dict.  ``iterations``: a find_iterations() result or None.  ``notes``: a
    list that gets what the export left out or cut short (also in ``otherData["notes"]``)."""
    events: list[dict[str, Any]] = []
    knotes: list[str] = []
    reserved_view = str(trace.meta.get("view", "")) == "reserved"
    series = "reserved_bytes" if reserved_view else "live_bytes"
    devices = set()
    tls = memory_timeline(trace, max_points=max_points)
    for tl in tls:
        pid = GPU_PID_BASE + tl.device
        devices.add(tl.device)
        events.extend({"name": "memory", "ph": "C", "pid": pid, "ts": _us(t), "args": {series: int(v)}}
                      for t, v in zip(tl.t.tolist(), tl.total.tolist()))
    for dev, (t, used) in _nvml_curves(trace).items():
        pid = GPU_PID_BASE + dev
        devices.add(dev)
        events.extend({"name": "memory", "ph": "C", "pid": pid, "ts": _us(tt), "args": {"nvml_used_bytes": int(u)}}
                      for tt, u in zip(t.tolist(), used.tolist()))
    events.extend(_grouped_counters(trace, "live bytes by class", classes, max_points))
    events.extend(_grouped_counters(trace, "live bytes by owner", _owner_series(trace), max_points))
    kev, kdev = _kernel_tracks(trace, max_kernels, knotes)
    events.extend(kev)
    devices |= kdev
    for dev in sorted(devices):
        events.append({"name": "process_name", "ph": "M", "pid": GPU_PID_BASE + dev, "args": {"name": f"GPU {dev}"}})
        events.append({"name": "process_sort_index", "ph": "M", "pid": GPU_PID_BASE + dev, "args": {"sort_index": dev}})

    exes = dict(zip(trace.processes["pid"].astype(int).tolist(), trace.processes["exe"].astype(str).tolist()))
    for pid in trace.pids:
        name = exes.get(pid) or "process"
        events.append({"name": "process_name", "ph": "M", "pid": pid, "args": {"name": f"{name} (pid {pid})"}})
        events.append({"name": "thread_name", "ph": "M", "pid": pid, "tid": 0, "args": {"name": "iterations"}})
        events.append({"name": "thread_name", "ph": "M", "pid": pid, "tid": 1, "args": {"name": "large allocations"}})

    if iterations is not None and getattr(iterations, "count", 0) > 0:
        ts, dur = _iteration_us(iterations.boundaries_t)
        ipid = int(iterations.pid) if iterations.pid is not None else (trace.main_pid or 0)
        for i in range(len(ts)):
            events.append({"name": f"iteration {i}", "cat": "iteration", "ph": "X", "pid": ipid, "tid": 0,
                           "ts": ts[i], "dur": dur[i], "args": {"index": i}})

    large = default_large_threshold(trace) if large is None else int(large)
    b = trace.device_blocks
    big = b[b["size"] >= large]
    big_total = len(big)
    big = big.sort_values(["size", "t_alloc"], ascending=[False, True]).head(max_instants)
    big = big.sort_values("t_alloc")
    for row in zip(big["block_id"].tolist(), big["pid"].tolist(), big["t_alloc"].tolist(),
                   big["size"].tolist(), big["api"].astype(str).tolist(), big["kind"].astype(str).tolist(),
                   big["device"].tolist()):
        bid, pid, t, size, api, kind, dev = row
        events.append({"name": f"{api} {_mib(size)}", "cat": "allocation", "ph": "i", "s": "t",
                       "pid": int(pid), "tid": 1, "ts": _us(t),
                       "args": {"block_id": int(bid), "size": int(size), "api": api, "kind": kind,
                                "device": int(dev)}})
    events.extend(_oom_instants(trace))
    allnotes = _notes(trace, tls, max_points, big_total, max_instants, knotes)
    mark = _marker(trace, devices, allnotes)
    if mark is not None:
        events.append(mark)
    if notes is not None:
        notes.extend(allnotes)
    return {"traceEvents": events, "displayTimeUnit": "ms", "otherData": _other_data(trace, large, allnotes)}


def _drop_pages(trace: Trace) -> None:
    """Give back the mapped cache pages a step read (blocks, launches, accesses): the next step maps
    what it reads again, so the pages of every column touched do not add up over the export.  The
    heap memory the step freed is given back too (``heap.give_back``: the CLI keeps it otherwise)."""
    for tab in (trace.blocks, trace.launches, trace.accesses):
        release_frame(tab)
    _give_back(trace)


def _give_back(trace: Trace) -> None:
    """The heap's free pages handed back (``heap.give_back``) on a long trace only (more than a piece
    of blocks): the CLI keeps freed memory for the next arrays, which saves a shorter trace's export
    the page faults (measured at 10 M events: +0.3 s of system time with it), while at 100 M events
    the live-curve pass alone leaves ~700 MB freed but resident through the steps after it."""
    if len(trace.blocks) > chunk_rows():
        give_back()


_LARGE_COLUMNS = ("block_id", "pid", "t_alloc", "size", "api", "kind", "device")


def _largest_rows(trace: Trace, large: int, keep: int) -> tuple[np.ndarray, int]:
    """The rows of ``trace.blocks`` that ``big.sort_values(["size", "t_alloc"], ascending=[False,
    True]).head(keep)`` holds, in that order, where ``big`` is ``trace.device_blocks[size >= large]``
    (pandas' sort on several keys is stable: ties in row order), and ``len(big)``.
    Read a piece of rows at a time, keeping the best ``keep`` so far (their pages given back)."""
    b = trace.blocks
    cd, size, ta = b["counts_device"].to_numpy(bool), b["size"].to_numpy(), b["t_alloc"].to_numpy()
    total = 0
    best_r = np.zeros(0, np.int64)
    best_s = np.zeros(0, np.int64)
    best_t = np.zeros(0, np.int64)
    for s, e in spans(len(b), max(1, chunk_rows() // 4)):
        sz = size[s:e]
        r = np.flatnonzero(cd[s:e] & (sz >= large))
        total += len(r)
        if len(r):
            rs = np.concatenate([best_r, r + s])
            ss = np.concatenate([best_s, sz[r].astype(np.int64)])
            ts = np.concatenate([best_t, ta[s:e][r].astype(np.int64)])
            o = np.lexsort((rs, ts, -ss))
            if keep >= 0:
                o = o[:keep]
            best_r, best_s, best_t = rs[o], ss[o], ts[o]
        for col in (cd, size, ta):
            release(col, s, e)
    return best_r[:keep], total


def _large_instant_rows(trace: Trace, large: int, max_instants: int):
    """``(big, big_total)``: the table of the large-allocation instants: ``big`` (the device blocks of
    at least ``large`` bytes) sorted by size (largest first, then earliest), its first ``max_instants`` rows, then
    sorted by ``t_alloc`` (the same rows in the same order before that last sort, so the same
    result), and ``len(big)``.  Only the instants' columns are read at the
    kept rows (not every column of every large block)."""
    import pandas as pd

    rows, total = _largest_rows(trace, large, max_instants)
    b = trace.blocks
    cols = {}
    for c in _LARGE_COLUMNS:
        col = b[c]
        cols[c] = col.take(rows).reset_index(drop=True)
        release(col)
    return pd.DataFrame(cols).sort_values("t_alloc"), total


def _oom_instants(trace: Trace) -> list[dict]:
    """An instant on the process's "large allocations" track per allocation that failed for lack of
    memory (pyinterpose.analysis.oom: near = a retry succeeded)."""

    f = oom_failures(trace)
    return [{"name": f"OOM ({outcome}) {api} {_mib(size)}", "cat": "oom", "ph": "i", "s": "t", "pid": int(pid),
             "tid": 1, "ts": _us(t), "args": {"size": int(size), "api": api, "outcome": outcome,
                                              "attempt": int(att), "free_bytes": int(fb)}}
            for pid, t, size, api, outcome, att, fb in zip(
                f["pid"].tolist(), f["t"].tolist(), f["size"].tolist(), f["api"].astype(str).tolist(),
                f["outcome"].tolist(), f["attempt"].tolist(), f["free_bytes"].tolist())]


def _owner_series(trace: Trace):
    """block_id -> owner library for the device blocks (see report.timeline._owners), from the
    owner and api columns of the device blocks only (not a copy of every column)."""
    import pandas as pd

    bl = trace.blocks
    rows = np.flatnonzero(bl["counts_device"].to_numpy(bool))
    if len(rows) == 0:
        return None
    b = bl[[c for c in ("owner", "api") if c in bl.columns]].iloc[rows]
    return pd.Series(_owners(trace, b).to_numpy(), index=bl["block_id"].to_numpy()[rows])


def _grouped_counters(trace: Trace, name: str, groups, max_points: int) -> list[dict[str, Any]]:
    """One counter track per group (class or owner) on each GPU's process."""
    if groups is None:
        return []
    out = []
    for tl in memory_timeline(trace, classes=groups, max_points=max_points):
        pid = GPU_PID_BASE + tl.device
        keys = list(tl.series)
        cols = [tl.series[k].tolist() for k in keys]
        for j, t in enumerate(tl.t.tolist()):
            out.append({"name": name, "ph": "C", "pid": pid, "ts": _us(t),
                        "args": {k: int(c[j]) for k, c in zip(keys, cols)}})
    return out


def _launch_blocks(trace: Trace, la) -> tuple[list[list[int]], list[int]]:
    """Per launch row of ``la`` (unique (pid, seq)), the block ids its accesses name (in the
    accesses' order) and their total size (0 for an id not in the blocks table).  The accesses are
    read a piece at a time (``trace.chunking``): only those of ``la``'s launches are kept."""
    import pandas as pd

    n = len(la)
    acc = trace.accesses
    if n == 0 or len(acc) == 0:
        return [[] for _ in range(n)], [0] * n
    keys = pd.DataFrame({"pid": la["pid"].to_numpy(), "seq": la["seq"].to_numpy(), "li": np.arange(n)})
    op = acc["op"]
    pid_c, seq_c, bid_c = (acc[c].to_numpy() for c in ("pid", "seq", "block_id"))
    if isinstance(op.dtype, pd.CategoricalDtype):
        cats = list(op.cat.categories)
        op_codes = op.cat.codes.to_numpy()
        code = cats.index("launch") if "launch" in cats else None

        def launch_rows(s, e):
            return np.zeros(e - s, bool) if code is None else op_codes[s:e] == code
    else:
        def launch_rows(s, e):
            return (op.iloc[s:e].astype(str) == "launch").to_numpy(bool)
    li_parts, bid_parts = [], []
    for s, e in spans(len(acc), max(1, chunk_rows() // 8)):
        m = launch_rows(s, e)
        a = pd.DataFrame({"pid": pid_c[s:e][m], "seq": seq_c[s:e][m], "block_id": bid_c[s:e][m]})
        a = a.merge(keys, on=["pid", "seq"], how="inner")     # keeps the accesses' order
        li_parts.append(a["li"].to_numpy(np.int64))
        bid_parts.append(a["block_id"].to_numpy(np.int64))
        for col in (pid_c, seq_c, bid_c, op_codes if isinstance(op.dtype, pd.CategoricalDtype) else None):
            if col is not None:
                release(col, s, e)
    li = np.concatenate(li_parts)
    o = np.argsort(li, kind="stable")
    bid = np.concatenate(bid_parts)[o]
    bounds = np.concatenate([[0], np.cumsum(np.bincount(li, minlength=n))])
    bsz = _block_sizes(trace.blocks, bid)
    csum = np.concatenate([[0], np.cumsum(bsz)])
    total = (csum[bounds[1:]] - csum[bounds[:-1]]).tolist()
    bl = bid.tolist()
    bo = bounds.tolist()
    return [bl[bo[i]:bo[i + 1]] for i in range(n)], total


def _block_sizes(blocks, bid: np.ndarray) -> np.ndarray:
    """The size of each block id of ``bid`` (0 for an id not in the table): by binary search on the
    ids (sorted by id first when the table is not in id order)."""
    ids = blocks["block_id"].to_numpy(np.int64)
    sz = blocks["size"].to_numpy(np.int64)
    if len(ids) == 0:
        return np.zeros(len(bid), np.int64)
    if len(ids) > 1 and not bool((ids[1:] >= ids[:-1]).all()):
        srt = np.argsort(ids, kind="stable")
        ids, sz = ids[srt], sz[srt]
    pos = np.clip(np.searchsorted(ids, bid), 0, len(ids) - 1)
    out = np.where(ids[pos] == bid, sz[pos], 0)
    release(ids)
    release(sz)
    return out


def _kernel_tracks(trace: Trace, max_kernels: int, notes: list[str]) -> tuple[list[dict[str, Any]], set[int]]:
    """A thread track per (device, stream) with an instant per kernel launch and the
    blocks it touches in args (from the accesses joined on pid and seq)."""
    if len(trace.launches) == 0:
        return [], set()
    la = _kernel_rows(trace, max_kernels, notes)
    touched, nbytes = _launch_blocks(trace, la)
    names = la["kernel_name"].astype(str).tolist() if "kernel_name" in la else ["kernel"] * len(la)
    out: list[dict[str, Any]] = []
    tracks: dict[tuple[int, int], int] = {}
    for j, ((pid, seq, t, dev, stream), name) in enumerate(zip(
            zip(*(la[c].tolist() for c in ("pid", "seq", "t", "device", "stream"))), names)):
        dev = int(dev)
        if dev < 0:
            continue
        key = (dev, int(stream))
        if key not in tracks:
            tracks[key] = 1 + sum(1 for d, _ in tracks if d == dev)
            label = "default stream" if int(stream) == 0 else f"stream {int(stream):#x}"
            out.append({"name": "thread_name", "ph": "M", "pid": GPU_PID_BASE + dev, "tid": tracks[key],
                        "args": {"name": f"{label} (kernel launches)"}})
        out.append({"name": name or "kernel", "cat": "kernel", "ph": "i", "s": "t", "pid": GPU_PID_BASE + dev,
                    "tid": tracks[key], "ts": _us(t),
                    "args": {"blocks": touched[j], "bytes": nbytes[j], "pid": int(pid), "seq": int(seq)}})
    return out, {d for d, _ in tracks}


_PHASES = {"B", "E", "X", "i", "I", "C", "M", "s", "t", "f", "b", "e", "n", "N", "O", "D", "P", "R"}
_META = {"process_name", "process_labels", "process_sort_index", "thread_name", "thread_sort_index"}


def validate(doc: dict[str, Any]) -> list[str]:
    """Problems with ``doc`` as a trace-event JSON document (empty list: valid).

    Rules (the Trace Event Format spec, as Perfetto's JSON importer applies it):
    ``traceEvents`` is a list of objects; every event has a known ``ph``, an int
    ``pid``, a ``name`` string; all but metadata have a finite ``ts`` >= 0 (the importer takes any int64
    time, but nothing of ours happens before the start of capture); ``X``
    has a finite ``dur`` >= 0, and two ``X`` slices of one track either nest or do not overlap (as floats,
    the way a viewer adds ``ts + dur``: a slice that ends past the next one's start draws a staircase); ``i``/``I`` scope ``s`` is g, p or t; ``C`` args are
    finite numbers; ``M`` names one of the metadata records with ``args.name`` or
    ``args.sort_index``; flow events (``s``/``t``/``f``) have an ``id``; ``tid``,
    when present, is an int; ``displayTimeUnit`` is ms or ns."""
    import math

    errs: list[str] = []
    if not isinstance(doc, dict) or not isinstance(doc.get("traceEvents"), list):
        return ["document is not an object with a traceEvents list"]
    if doc.get("displayTimeUnit", "ms") not in ("ms", "ns"):
        errs.append(f"displayTimeUnit {doc.get('displayTimeUnit')!r} is not ms or ns")

    def num(v) -> bool:
        return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)

    slices: dict[tuple, list[tuple[float, float, int]]] = {}
    for i, e in enumerate(doc["traceEvents"]):
        where = f"event {i}"
        if not isinstance(e, dict):
            errs.append(f"{where}: not an object")
            continue
        ph = e.get("ph")
        if ph not in _PHASES:
            errs.append(f"{where}: unknown ph {ph!r}")
            continue
        if not isinstance(e.get("pid"), int) or isinstance(e.get("pid"), bool):
            errs.append(f"{where}: pid is not an int")
        if "tid" in e and (not isinstance(e["tid"], int) or isinstance(e["tid"], bool)):
            errs.append(f"{where}: tid is not an int")
        if not isinstance(e.get("name"), str):
            errs.append(f"{where}: name is not a string")
        if ph == "M":
            if e.get("name") not in _META:
                errs.append(f"{where}: unknown metadata {e.get('name')!r}")
            args = e.get("args") or {}
            if not ("name" in args or "sort_index" in args or "labels" in args):
                errs.append(f"{where}: metadata without args.name/sort_index")
            continue
        if not num(e.get("ts")):
            errs.append(f"{where}: ts {e.get('ts')!r} is not a finite number")
        elif e["ts"] < 0:
            errs.append(f"{where}: ts {e['ts']!r} is before the start of capture")
        if ph == "X" and (not num(e.get("dur")) or e["dur"] < 0):
            errs.append(f"{where}: X without a finite dur >= 0")
        elif ph == "X" and num(e.get("ts")):
            slices.setdefault((e.get("pid"), e.get("tid")), []).append(
                (float(e["ts"]), float(e["ts"]) + float(e["dur"]), i))
        if ph in ("i", "I") and e.get("s", "t") not in ("g", "p", "t"):
            errs.append(f"{where}: instant scope {e.get('s')!r}")
        if ph == "C":
            args = e.get("args")
            if not isinstance(args, dict) or not args or not all(num(v) for v in args.values()):
                errs.append(f"{where}: counter args must be finite numbers")
        if ph in ("s", "t", "f") and "id" not in e:
            errs.append(f"{where}: flow event without id")
    for track in slices.values():
        open_: list[float] = []                     # ends of the enclosing slices
        for start, end, i in sorted(track, key=lambda s: (s[0], -s[1])):
            while open_ and open_[-1] <= start:
                open_.pop()
            if open_ and end > open_[-1]:
                errs.append(f"event {i}: X slice overlaps the one before it without nesting "
                            f"(it starts at {start!r}, before {open_[-1]!r})")
            open_.append(end)
    return errs


def _mib(n: int) -> str:
    return f"{n / (1 << 20):.1f} MiB"


# ---- the same document as JSON text, written from the columns ------------------------------------
# chrome_trace() builds the document as Python objects (tests, validate()); the export writes its
# json.dumps(..., separators=(",", ":")) text directly: every event is one %-formatted string from
# column values (no per-event dict, no encoder), byte for byte what json.dumps gives for the dict.

_FRAC = [("%03d" % r).rstrip("0") or "0" for r in range(1000)]


def _us_text(ns: int) -> str:
    """``repr(_us(ns))``: for |ns| < 10**15, us = ns / 1000 has at most 15 significant digits, so the
    double nearest it is exactly what round(.., 3) returns and its shortest repr is that decimal."""
    if -10 ** 15 < ns < 10 ** 15:
        q, r = divmod(abs(ns), 1000)
        return ("-" if ns < 0 else "") + f"{q}.{_FRAC[r]}"
    return repr(_us(ns))


def _js(x) -> str:
    return json.dumps(x)


def _key(k) -> str:
    """A dict key as json.dumps writes it (non-str keys converted as json does)."""
    return json.dumps({k: 0}, separators=(",", ":"))[1:-3]


class _Doc:
    """The events' JSON texts in document order, handed to ``write`` as they are made (each call
    one piece of text, commas between the events included), and the count per phase."""

    def __init__(self, write):
        self.write = write
        self.events = 0
        self.counts: dict[str, int] = {}

    def extend(self, texts: list[str]) -> None:
        if texts:
            self.write(("," if self.events else "") + ",".join(texts))
            self.events += len(texts)

    def add(self, ph: str, texts: list[str]) -> None:
        if texts:
            self.extend(texts)
            self.counts[ph] = self.counts.get(ph, 0) + len(texts)


def _us_texts(t: np.ndarray) -> list[str]:
    """[_us_text(x) for x in t], the common case (every |x| < 10**15) with whole-array divmod."""
    t = np.asarray(t, np.int64)
    if len(t) == 0 or int(np.abs(t).max()) >= 10 ** 15:
        return [_us_text(x) for x in t.tolist()]
    q, r = np.divmod(np.abs(t), 1000)
    frac = _FRAC
    if (t >= 0).all():
        return [f"{a}.{frac[b]}" for a, b in zip(q.tolist(), r.tolist())]
    return [f"{s}{a}.{frac[b]}" for s, a, b in zip(np.where(t < 0, "-", "").tolist(), q.tolist(), r.tolist())]


def _counter_texts(name: str, pid: int, t: np.ndarray, series: dict) -> list[str]:
    head = '{"name":%s,"ph":"C","pid":%d,"ts":' % (_js(name), pid)
    keys = [_key(k) for k in series]
    cols = [np.asarray(v).tolist() for v in series.values()]
    ts = _us_texts(t)
    if len(keys) == 1:
        fmt = head + '%s,"args":{' + keys[0] + ':%d}}'
        return [fmt % tv for tv in zip(ts, cols[0])]
    fmt = head + '%s,"args":{' + ",".join(k + ":%d" for k in keys) + "}}"
    return [fmt % row for row in zip(ts, *cols)]


def chrome_trace_json(trace: Trace, iterations=None, large: int | None = None,
                      max_points: int = 200_000, max_instants: int = 20_000, classes=None,
                      max_kernels: int = 200_000, notes: list[str] | None = None) -> tuple[str, dict[str, int]]:
    """``json.dumps(chrome_trace(...), separators=(",", ":"))`` built from the columns, and the
    number of events per phase (the text :func:`write_chrome_trace` writes, held whole)."""
    parts: list[str] = []
    counts = _write_json(parts.append, trace, iterations=iterations, large=large, max_points=max_points,
                         max_instants=max_instants, classes=classes, max_kernels=max_kernels, notes=notes)
    return "".join(parts), counts


def _write_json(write, trace: Trace, iterations=None, large: int | None = None,
                max_points: int = 200_000, max_instants: int = 20_000, classes=None,
                max_kernels: int = 200_000, notes: list[str] | None = None, progress=None) -> dict[str, int]:
    """The text of :func:`chrome_trace_json`, handed to ``write`` a piece at a time (an event list at
    a time: the document is never held whole); returns the number of events per phase.
    ``progress``: called with the fraction done, at each step."""
    step = progress or (lambda fraction: None)
    _give_back(trace)                   # what the caller's analyses (iterations, classes) freed
    write('{"traceEvents":[')
    doc = _Doc(write)
    knotes: list[str] = []
    reserved_view = str(trace.meta.get("view", "")) == "reserved"
    series = "reserved_bytes" if reserved_view else "live_bytes"
    devices = set()
    # the owners as a code per block (report.owner_codes: the same names as _owner_series)
    grouped = [(name, g) for name, g in (("live bytes by class", classes), ("live bytes by owner", owner_codes(trace)))
               if g is not None]
    step(0.1)
    # the live curve and its split by class and by owner: one pass over each device's events
    tls, *by_group = memory_timelines(trace, [None] + [g for _, g in grouped], max_points=max_points)
    _give_back(trace)                   # the pass's freed arrays, before the counters' texts
    for tl in tls:
        devices.add(tl.device)
        doc.add("C", _counter_texts("memory", GPU_PID_BASE + tl.device, tl.t, {series: tl.total}))
    for dev, (t, used) in _nvml_curves(trace).items():
        devices.add(dev)
        doc.add("C", _counter_texts("memory", GPU_PID_BASE + dev, t, {"nvml_used_bytes": used}))
    for (name, _), group_tls in zip(grouped, by_group):
        for tl in group_tls:
            doc.add("C", _counter_texts(name, GPU_PID_BASE + tl.device, tl.t, tl.series))
    _drop_pages(trace)
    step(0.6)
    kdev = _kernel_texts(trace, max_kernels, doc, knotes)
    devices |= kdev
    _drop_pages(trace)
    step(0.85)
    for dev in sorted(devices):
        pid = GPU_PID_BASE + dev
        doc.add("M", ['{"name":"process_name","ph":"M","pid":%d,"args":{"name":%s}}' % (pid, _js(f"GPU {dev}")),
                      '{"name":"process_sort_index","ph":"M","pid":%d,"args":{"sort_index":%d}}' % (pid, dev)])
    exes = dict(zip(trace.processes["pid"].astype(int).tolist(), trace.processes["exe"].astype(str).tolist()))
    for pid in trace.pids:
        name = exes.get(pid) or "process"
        pid = int(pid)
        doc.add("M", ['{"name":"process_name","ph":"M","pid":%d,"args":{"name":%s}}' % (pid, _js(f"{name} (pid {pid})")),
                      '{"name":"thread_name","ph":"M","pid":%d,"tid":0,"args":{"name":"iterations"}}' % pid,
                      '{"name":"thread_name","ph":"M","pid":%d,"tid":1,"args":{"name":"large allocations"}}' % pid])
    if iterations is not None and getattr(iterations, "count", 0) > 0:
        ts, dur = _iteration_us(iterations.boundaries_t)
        ipid = int(iterations.pid) if iterations.pid is not None else int(trace.main_pid or 0)
        doc.add("X", ['{"name":"iteration %d","cat":"iteration","ph":"X","pid":%d,"tid":0,"ts":%d,"dur":%d,'
                      '"args":{"index":%d}}' % (i, ipid, ts[i], dur[i], i)
                      for i in range(len(ts))])
    large = default_large_threshold(trace) if large is None else int(large)
    big, big_total = _large_instant_rows(trace, large, max_instants)
    doc.add("i", ['{"name":%s,"cat":"allocation","ph":"i","s":"t","pid":%d,"tid":1,"ts":%s,'
                  '"args":{"block_id":%d,"size":%d,"api":%s,"kind":%s,"device":%d}}'
                  % (_js(f"{api} {_mib(size)}"), pid, _us_text(t), bid, size, _js(api), _js(kind), dev)
                  for bid, pid, t, size, api, kind, dev in zip(
                      big["block_id"].tolist(), big["pid"].tolist(), big["t_alloc"].tolist(), big["size"].tolist(),
                      big["api"].astype(str).tolist(), big["kind"].astype(str).tolist(), big["device"].tolist())])
    oom = _oom_instants(trace)
    if oom:
        doc.add("i", [json.dumps(e, separators=(",", ":")) for e in oom])
    allnotes = _notes(trace, tls, max_points, big_total, max_instants, knotes)
    mark = _marker(trace, devices, allnotes)
    if mark is not None:
        doc.add("i", [json.dumps(mark, separators=(",", ":"))])
    if notes is not None:
        notes.extend(allnotes)
    other = _other_data(trace, large, allnotes)
    write('],"displayTimeUnit":"ms","otherData":' + json.dumps(other, separators=(",", ":"), allow_nan=False) + "}")
    step(1.0)
    return doc.counts


def _kernel_texts(trace: Trace, max_kernels: int, doc: _Doc, notes: list[str]) -> set[int]:
    """The texts of _kernel_tracks (its track metadata counted as M, its instants as i)."""
    if len(trace.launches) == 0:
        return set()
    la = _kernel_rows(trace, max_kernels, notes)
    touched, nbytes = _launch_blocks(trace, la)
    names = la["kernel_name"].astype(str).tolist() if "kernel_name" in la else ["kernel"] * len(la)
    name_text: dict[str, str] = {}
    out: list[str] = []
    nmeta = 0
    tracks: dict[tuple[int, int], int] = {}
    fmt = ('{"name":%s,"cat":"kernel","ph":"i","s":"t","pid":%d,"tid":%d,"ts":%s,'
           '"args":{"blocks":[%s],"bytes":%d,"pid":%d,"seq":%d}}')
    ts_text = _us_texts(la["t"].to_numpy(np.int64))
    for j, ((pid, seq, t, dev, stream), name) in enumerate(zip(
            zip(*(la[c].tolist() for c in ("pid", "seq", "t", "device", "stream"))), names)):
        if dev < 0:
            continue
        key = (dev, stream)
        tid = tracks.get(key)
        if tid is None:
            tid = tracks[key] = 1 + sum(1 for d, _ in tracks if d == dev)
            label = "default stream" if int(stream) == 0 else f"stream {int(stream):#x}"
            out.append('{"name":"thread_name","ph":"M","pid":%d,"tid":%d,"args":{"name":%s}}'
                       % (GPU_PID_BASE + dev, tid, _js(f"{label} (kernel launches)")))
            nmeta += 1
        nt = name_text.get(name)
        if nt is None:
            nt = name_text[name] = _js(name or "kernel")
        out.append(fmt % (nt, GPU_PID_BASE + dev, tid, ts_text[j], ",".join(map(str, touched[j])), nbytes[j], pid, seq))
    doc.extend(out)
    if nmeta:
        doc.counts["M"] = doc.counts.get("M", 0) + nmeta
    if len(out) > nmeta:
        doc.counts["i"] = doc.counts.get("i", 0) + len(out) - nmeta
    return {d for d, _ in tracks}


def write_chrome_trace(trace: Trace, path: str, iterations=None, progress=None, **kw) -> dict[str, int]:
    """Write the Chrome-trace JSON to ``path``, a piece at a time; returns counts of events by phase
    (``notes=[]``: gets what was left out or cut short, as otherData says).  ``progress``: called with
    the fraction done."""

    with atomic_output(path, "w") as f:
        return _write_json(f.write, trace, iterations=iterations, progress=progress, **kw)
