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

import os
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pandas as pd

from ...errors import PyinterposeError
from ...heap import give_back
from ...trace.chunking import chunk_rows, spans
from ...trace.model import Trace, counted_bytes
from ...trace.pages import release, release_tables
from ...trace.piecewise import ascending, piece_rows, running_peak
from .allocators import ALLOCATORS, RequestArrays, pytorch_options, simulate
from .by_block import by_block
from .planners import PLANNERS, plan
from .problem import (InvalidPlanError, components, load, read_minimalloc_csv, validate_plan,
                      write_minimalloc_csv)

STRATEGIES = ALLOCATORS + PLANNERS
# Seconds for the exact planner in `pools`.  It stops as soon as its capacity is proven
# optimal (within 0.11 s on every shipped GPU trace and the simtrain traces); the limit only
# binds on hard steady steps, where it bounds the command: 3 s keeps `pools` within 10 s at
# 10 M events (load ~5 s, the rest ~2 s).  --time-limit searches longer.
DEFAULT_TIME_LIMIT = 3.0

__all__ = ["requests", "request_stream", "replay_stream", "resolve_pid", "steady_problem", "evaluate", "read_minimalloc_csv",
           "write_minimalloc_csv",
           "validate_plan", "load", "plan", "simulate", "reserved_curve", "STRATEGIES", "ALLOCATORS", "PLANNERS",
           "InvalidPlanError", "components"]


def resolve_pid(trace: Trace, pid: int | None) -> int | None:
    """``pid`` when the trace has it (else a one-line error); None: the main process."""
    if pid is not None:
        if pid not in trace.pids:
            raise PyinterposeError(f"no process {pid} in the trace")
        return pid
    return trace.main_pid


_BLOCK_COLUMNS = ("block_id", "size", "stream", "seq_alloc", "seq_free", "t_alloc", "t_free", "freed")
_REPLAY_COLUMNS = ("block_id", "size", "stream", "seq_alloc", "seq_free", "freed")   # no times: see evaluate


def _device_mask(trace: Trace, pid: int | None, allocator_only: bool = False,
                 allocator: np.ndarray | None = None) -> np.ndarray:
    """bool per row of ``trace.blocks``: the process's device blocks (the framework
    allocator's only, with ``allocator_only``; ``allocator``: that mask, when known)."""
    b = trace.blocks
    if allocator_only:
        if allocator is None:
            from ..owners import allocator_mask
            allocator = allocator_mask(trace)
        m = np.asarray(allocator, bool).copy()
    else:
        m = b["counts_device"].to_numpy(bool).copy()
    if pid is not None and len(b):
        pids = b["pid"].to_numpy()
        for lo, hi in spans(len(b)):
            m[lo:hi] &= pids[lo:hi] == pid
            release(pids, lo, hi)
    return m


def _device_blocks(trace: Trace, pid: int | None, allocator_only: bool = False) -> pd.DataFrame:
    return trace.blocks[_device_mask(trace, pid, allocator_only)]


def _block_columns(trace: Trace, mask: np.ndarray, columns=_BLOCK_COLUMNS) -> dict:
    """The columns of the masked blocks that the request stream and the steady problem
    read (``columns``: a subset of them), as numpy arrays (no DataFrame row selection; the columns
    themselves, not copies, when every block is selected).  A masked copy is made a piece of rows at
    a time, each piece's mapped pages given back (:func:`_masked`)."""
    b = trace.blocks
    every = bool(np.all(mask)) if len(mask) else False
    out = {}
    for c in columns:
        a = counted_bytes(b) if c == "size" else b[c].to_numpy()   # the live-bytes sizes (model.counted_bytes)
        out[c] = a if every or not len(a) else _masked(a, mask)
    return out


def _give_back(trace: Trace) -> None:
    """The heap's free pages handed back (``heap.give_back``) between the steps of :func:`evaluate`, on
    a long trace only (more than a piece of blocks): the CLI keeps freed memory for the next arrays,
    so at 100 M events the request stream's ~0.6 GB of temporaries stayed resident through the steady
    problem and the replays; a shorter trace keeps the page faults saved."""
    if len(trace.blocks) > chunk_rows():
        give_back()


def _masked(a: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """``a[mask]`` (1-d), copied a piece of rows at a time (``trace.chunking``), each piece's mapped
    pages of ``a`` given back once copied (issue 30: the whole columns' pages stayed resident)."""
    out = np.empty(int(np.count_nonzero(mask)), a.dtype)
    k = 0
    for lo, hi in spans(len(a)):
        part = a[lo:hi][np.asarray(mask[lo:hi], bool)]
        out[k:k + len(part)] = part
        k += len(part)
        release(a, lo, hi)
    return out


def _request_columns(cols: dict, times: bool = True, seq: bool = True, consume: bool = False) -> dict:
    """The request stream (one alloc per block, one free per freed block, in sequence
    order; a free first if it shares its seq with an alloc) as numpy columns: seq (unless not
    ``seq``: then ``n``, the number of requests), t (unless not ``times``), is_alloc (bool),
    block_id, size, stream.  ``consume``: each column of ``cols`` is removed from it once read for
    the last time (the caller's copies let go as the stream is made: issue 30).

    Each request's place is computed, not sorted for: the allocations and the frees each in
    seq order (stable), an allocation after the frees at or before its seq, a free after the
    allocations before its seq — ``np.lexsort((op, seq))`` of all requests, with no
    full-length order or concatenated copies."""
    freed = np.asarray(cols["freed"], bool)
    sa = cols["seq_alloc"].astype(np.int64, copy=False)
    fidx = np.flatnonzero(freed)
    sf = cols["seq_free"].astype(np.int64, copy=False)[fidx]
    n_a, n_f = len(sa), len(fidx)
    oa = None if ascending(sa) else np.argsort(sa, kind="stable")
    of = None if ascending(sf) else np.argsort(sf, kind="stable")
    sas = sa if oa is None else sa[oa]
    sfs = sf if of is None else sf[of]
    del sf
    pos_a = np.searchsorted(sfs, sas, side="right")
    pos_a += np.arange(n_a)
    pos_f = np.searchsorted(sas, sfs, side="left")
    pos_f += np.arange(n_f)
    n = n_a + n_f
    out = {}
    if seq:
        out["seq"] = np.empty(n, np.int64)
        out["seq"][pos_a] = sas
        out["seq"][pos_f] = sfs
    else:
        out["n"] = n
    del sas, sfs, sa, freed
    if consume:
        for c in ("seq_alloc", "seq_free", "freed"):
            cols.pop(c, None)
    is_alloc = np.zeros(n, bool)
    is_alloc[pos_a] = True
    out["is_alloc"] = is_alloc

    def both(c, dtype):
        out = np.empty(n, dtype)
        a = cols[c[0]].astype(dtype, copy=False)
        out[pos_a] = a if oa is None else a[oa]
        del a
        f = cols[c[1]].astype(dtype, copy=False)[fidx]
        out[pos_f] = f if of is None else f[of]
        if consume:
            for k in c:
                cols.pop(k, None)
        return out

    out["block_id"] = both(("block_id", "block_id"), np.int64)
    out["size"] = both(("size", "size"), np.int64)
    out["stream"] = both(("stream", "stream"), np.uint64)
    if times:
        out["t"] = both(("t_alloc", "t_free"), np.int64)
    return out


def _peak_of_requests(is_alloc: np.ndarray, size: np.ndarray) -> int:
    """``max(cumsum(where(is_alloc, size, -size)))`` (0 for none), in pieces."""
    def deltas():
        for lo, hi in spans(len(size)):
            d = size[lo:hi].copy()
            np.negative(d, out=d, where=~is_alloc[lo:hi])
            yield d
    return running_peak(deltas())


def _request_frame(r: dict) -> pd.DataFrame:
    return pd.DataFrame({
        "seq": r["seq"], "t": r["t"], "op": np.where(r["is_alloc"], "alloc", "free"),
        "block_id": r["block_id"], "size": r["size"], "stream": r["stream"],
    })


def requests(trace: Trace, pid: int | None = None, allocator_only: bool = False) -> pd.DataFrame:
    """The request stream of one process (default: the main one): one row per
    alloc and per free of a device block, ordered by the process's sequence number;
    ``allocator_only``: the framework allocator's requests only.

    Columns: seq, t, op ("alloc"|"free"), block_id, size, stream.  Blocks never freed
    have no free row."""
    cols = _block_columns(trace, _device_mask(trace, resolve_pid(trace, pid), allocator_only))
    return _request_frame(_request_columns(cols))


def no_allocations(trace: Trace, pid: int | None) -> str:
    """Why there is nothing to replay or plan: the trace (or the process) made no device allocation."""
    if not trace.blocks["counts_device"].to_numpy(bool).any():
        return "no allocations in this trace: nothing to replay or plan"
    return f"process {pid} made no device allocations: nothing to replay or plan (see --pid)"


def _steady_window(trace: Trace, pid: int | None) -> tuple[tuple[int, int], dict]:
    try:
        from ..iterations import find_iterations
    except ImportError:  # pragma: no cover - iterations module missing in this checkout
        find_iterations = None

    def whole() -> tuple[int, int]:
        m = _device_mask(trace, pid)
        if not m.any():
            raise PyinterposeError(no_allocations(trace, pid))
        sa = trace.blocks["seq_alloc"].to_numpy()[m]
        sf = trace.blocks["seq_free"].to_numpy()[m]
        return int(sa.min()), int(max(sa.max(), sf.max())) + 1

    if find_iterations is None:
        return whole(), {"source": "none", "reason": "iteration detection not available"}
    it = find_iterations(trace, pid)
    if it.count == 0:
        return whole(), {"source": it.source, "reason": getattr(it, "reason", "") or "no loop found"}
    lo, hi = it.steady_window()
    return (int(lo), int(hi)), {"source": it.source, "count": int(it.count),
                                "period_allocs": int(it.period_allocs)}


def steady_problem(trace: Trace, pid: int | None = None, window: tuple[int, int] | None = None,
                   allocator_only: bool = False, _cols: dict | None = None,
                   _allocator: np.ndarray | None = None) -> pd.DataFrame:
    """One steady iteration as a DSA problem (see the module docstring).

    Columns: id (= block_id), lower, upper, size, block_id, crossing.  ``df.attrs``
    holds ``window`` (seq_lo, seq_hi), ``events`` (E) and ``pid``, and
    ``iteration`` (how the window was chosen).  ``allocator_only``: the framework
    allocator's blocks only (what :func:`evaluate` plans)."""
    pid = resolve_pid(trace, pid)
    if window is None:
        window, info = _steady_window(trace, pid)
    else:
        info = {"source": "given"}
    lo, hi = int(window[0]), int(window[1])
    if hi <= lo:
        raise PyinterposeError(f"empty window [{lo}, {hi})")
    if _cols is None:       # the window's events and blocks, a piece of the table at a time
        ev, sa, sf, freed, bid, size = _window_rows(trace, _device_mask(trace, pid, allocator_only, _allocator),
                                                    lo, hi)
    else:
        cols = _cols
        sa = cols["seq_alloc"].astype(np.int64, copy=False)
        sf = cols["seq_free"].astype(np.int64, copy=False)
        freed = cols["freed"].astype(bool, copy=False)
        # the request stream's sequence numbers inside the window: event k is time k
        ev = np.sort(np.concatenate([sa[(sa >= lo) & (sa < hi)], sf[freed & (sf >= lo) & (sf < hi)]]))
        alive = (sa < hi) & (~freed | (sf >= lo))
        sa, sf, freed = sa[alive], sf[alive], freed[alive]
        bid, size = cols["block_id"][alive].astype(np.int64), cols["size"][alive].astype(np.int64)
    E = len(ev)
    before = sa < lo
    after = ~freed | (sf >= hi)
    lower = np.where(before, 0, np.searchsorted(ev, sa))
    upper = np.where(after, E, np.searchsorted(ev, sf))
    crossing = np.select([before & after, before, after & ~freed, after], ["through", "in", "kept", "out"],
                         "inner")
    df = pd.DataFrame({"id": bid, "lower": lower.astype(np.int64),
                       "upper": upper.astype(np.int64), "size": size,
                       "block_id": bid.copy(), "crossing": crossing})
    df = df[df["upper"] > df["lower"]].reset_index(drop=True)
    df.attrs.update(window=(lo, hi), events=E, pid=pid, iteration=info)
    return df


def _window_rows(trace: Trace, mask: np.ndarray, lo: int, hi: int):
    """:func:`steady_problem`'s inputs read a piece of the blocks at a time (no copy of the masked
    columns): the sorted seqs of the requests in ``[lo, hi)`` and, of the masked blocks alive in the
    window (allocated before ``hi``, not freed before ``lo``), in table order, seq_alloc, seq_free,
    freed, block_id and size (int64; the live-bytes sizes, model.counted_bytes)."""
    b = trace.blocks
    cols = {c: counted_bytes(b) if c == "size" else b[c].to_numpy()
            for c in ("seq_alloc", "seq_free", "freed", "block_id", "size")}
    evs, keep = [], {c: [] for c in cols}
    for a0, a1 in spans(len(b), piece_rows()):
        m = np.asarray(mask[a0:a1], bool)
        sa = cols["seq_alloc"][a0:a1][m].astype(np.int64, copy=False)
        sf = cols["seq_free"][a0:a1][m].astype(np.int64, copy=False)
        fr = cols["freed"][a0:a1][m].astype(bool, copy=False)
        evs.append(sa[(sa >= lo) & (sa < hi)])
        evs.append(sf[fr & (sf >= lo) & (sf < hi)])
        alive = (sa < hi) & (~fr | (sf >= lo))
        keep["seq_alloc"].append(sa[alive])
        keep["seq_free"].append(sf[alive])
        keep["freed"].append(fr[alive])
        for c in ("block_id", "size"):
            keep[c].append(cols[c][a0:a1][m][alive].astype(np.int64))
        for a in cols.values():
            release(a, a0, a1)
    ev = np.sort(np.concatenate(evs)) if evs else np.zeros(0, np.int64)

    def cat(c, dt):
        return np.concatenate(keep[c]).astype(dt, copy=False) if keep[c] else np.zeros(0, dt)
    return (ev, cat("seq_alloc", np.int64), cat("seq_free", np.int64), cat("freed", bool),
            cat("block_id", np.int64), cat("size", np.int64))


def _row(name: str, peak: int | None, bound: int, seconds: float, bound_name: str) -> dict:
    """A strategy's row; ``peak`` None: it produced no pool (nothing to plan, or it did not fit)."""
    return {"strategy": name, "peak_bytes": None if peak is None else int(peak),
            "ratio_to_bound": (peak / bound) if bound and peak is not None else None,
            "fragmentation": ((peak - bound) / peak) if peak else (0.0 if peak == 0 else None),
            "bound": bound_name, "seconds": round(seconds, 6)}


def _does_not_fit(row: dict, why: str) -> dict:
    """Mark ``row`` as not fitting the capacity: no ratio or fragmentation (a replay stopped by
    OOM has a smaller "peak" than the bound, which is no pool at all)."""
    row.update(fits=False, does_not_fit=why, ratio_to_bound=None, fragmentation=None)
    return row


def _planner_row(prob: pd.DataFrame, name: str, bound: int, time_limit: float, capacity: int | None) -> dict:
    """One planner on the steady problem; with ``capacity``, whether its pool fits (the optimal
    planner searches for a packing within the capacity when its best pool is larger)."""
    p = plan(prob, name, time_limit=time_limit)
    row = _row(name, p.peak_bytes, bound, p.seconds, "steady")
    if name == "optimal":
        row["optimal"] = bool(p.optimal)
    if p.details:
        row["details"] = p.details
    if capacity is None:
        return row
    row["fits"] = bool(p.peak_bytes <= capacity)
    if row["fits"]:
        return row
    if bound > capacity:
        return _does_not_fit(row, f"no pool fits: one steady step has {bound:,} B live at once, "
                                  f"more than the capacity {capacity:,} B")
    if name != "optimal":
        return _does_not_fit(row, f"its pool of {p.peak_bytes:,} B is over the capacity {capacity:,} B")
    if p.optimal:
        return _does_not_fit(row, f"proven: the smallest pool is {p.peak_bytes:,} B, over the capacity "
                                  f"{capacity:,} B")
    q = plan(prob, name, time_limit=time_limit, capacity=capacity)    # any packing within the capacity
    row["seconds"] = round(row["seconds"] + q.seconds, 6)
    status = (q.details or {}).get("status")
    if q.offsets is not None and q.peak_bytes <= capacity:
        row.update(peak_bytes=int(q.peak_bytes), ratio_to_bound=q.peak_bytes / bound if bound else None,
                   fragmentation=(q.peak_bytes - bound) / q.peak_bytes if q.peak_bytes else 0.0, fits=True,
                   optimal=bool(q.optimal), details={**(row.get("details") or {}), "within_capacity": status})
        return row
    why = (f"proven: no packing within the capacity {capacity:,} B" if status == "infeasible" else
           f"no packing within the capacity {capacity:,} B found in the time limit ({status})")
    return _does_not_fit(row, why)


def reserved_curve(trace: Trace, allocator: str, pid: int | None = None) -> dict:
    """The reserved curve of one simulated allocator on the framework allocator's request
    stream of ``pid`` (default: the main process), as :func:`evaluate` replays it (the
    same requests and options, no capacity): {"block_id", "is_alloc", "seq", "bytes"}, one entry
    per request (``seq``: the request's sequence number; ``bytes``: see ``simulate(..., series=True)``;
    its maximum is the allocator row's ``peak_bytes``).  Computed once per trace, allocator and
    process (``Trace.derived``: the report's timeline, ``fit`` and ``oom`` share it; read-only)."""
    if allocator not in ALLOCATORS:
        raise PyinterposeError(f"unknown allocator {allocator!r} (choose from {', '.join(ALLOCATORS)})")
    derived = getattr(trace, "derived", None)
    if derived is None:
        return _reserved_curve(trace, allocator, pid)
    return derived(("pools.reserved_curve", allocator, resolve_pid(trace, pid)),
                   lambda: _reserved_curve(trace, allocator, pid))


def request_stream(trace: Trace, pid: int | None = None, allocator: np.ndarray | None = None) -> dict:
    """The framework allocator's request stream of ``pid`` (default: the main process) as the simulators
    replay it (one alloc per block, one free per freed block, in sequence order): numpy columns seq,
    is_alloc, block_id, size, stream, and ``arrays`` (the :class:`RequestArrays` :func:`simulate` takes).
    ``allocator``: the allocator's mask over ``trace.blocks`` when the caller has it."""
    if allocator is None:
        from ..owners import allocator_mask
        allocator = allocator_mask(trace)
    cols = _block_columns(trace, _device_mask(trace, resolve_pid(trace, pid), True, allocator), _REPLAY_COLUMNS)
    rq = _request_columns(cols, times=False)
    rq["arrays"] = RequestArrays.of_columns(rq["is_alloc"], rq["block_id"], rq["size"], rq["stream"])
    return rq


def _replayed(trace: Trace, mask: np.ndarray) -> tuple[RequestArrays, int, int, int]:
    """What :func:`evaluate` replays, of the blocks selected by ``mask``: (arrays, requests, allocations,
    the peak of the live requested bytes over the run).  By block (:mod:`.by_block`: 4 bytes a request)
    when the blocks' ids are distinct, else the per-request columns (seq-less, consumed as read)."""
    rb = by_block(trace, mask)
    if rb is not None:
        return rb["arrays"], rb["n"], rb["allocs"], rb["peak"]
    cols = _block_columns(trace, mask, _REPLAY_COLUMNS)
    rq = _request_columns(cols, times=False, seq=False, consume=True)
    del cols
    whole = _peak_of_requests(rq["is_alloc"], rq["size"])
    n_allocs = int(np.count_nonzero(rq["is_alloc"]))
    return (RequestArrays.of_columns(rq["is_alloc"], rq["block_id"], rq["size"], rq["stream"]), rq["n"],
            n_allocs, whole)


def replay_stream(trace: Trace, pid: int | None = None, allocator: np.ndarray | None = None) -> dict:
    """What :func:`request_stream` gives a caller that only replays and reads each request's seq
    (``fit``): {"seq", "arrays"}, the arrays by block (:mod:`.by_block`, 4 bytes a request) when the
    blocks' ids are distinct, else :func:`request_stream`'s.  The same replays, request for request."""
    if allocator is None:
        from ..owners import allocator_mask
        allocator = allocator_mask(trace)
    rb = by_block(trace, _device_mask(trace, resolve_pid(trace, pid), True, allocator), seq=True)
    if rb is None:
        rq = request_stream(trace, pid, allocator)
        return {"seq": rq["seq"], "arrays": rq["arrays"]}
    return {"seq": rb["seq"], "arrays": rb["arrays"]}


class _Curve(dict):
    """:func:`reserved_curve`'s dict, replayed by block: "seq" and "bytes" held, "block_id" and "is_alloc"
    made when first read (only the report's exact timeline reads them; ``fit``, ``oom`` and ``compare``
    read seq and bytes: issue 30)."""

    def __init__(self, make, **columns):
        super().__init__(**columns)
        self._make = make

    def __missing__(self, key):
        if key not in ("block_id", "is_alloc"):
            raise KeyError(key)
        self["block_id"], self["is_alloc"] = self._make()
        return self[key]


def _reserved_curve(trace: Trace, allocator: str, pid: int | None) -> dict:
    opts = pytorch_options(trace.meta, None)[0] if allocator == "pytorch" else {}
    from ..owners import allocator_mask
    mask = _device_mask(trace, resolve_pid(trace, pid), True, allocator_mask(trace))
    rb = by_block(trace, mask, seq=True)
    if rb is None:
        rq = request_stream(trace, pid)
        r = simulate(rq["arrays"], allocator, series=True, **opts)
        return {"block_id": rq["block_id"], "is_alloc": rq["is_alloc"], "seq": rq["seq"],
                "bytes": r["reserved_after"]}
    r = simulate(rb["arrays"], allocator, series=True, **opts)
    req = rb["arrays"].req

    def make():
        ids = _masked(trace.blocks["block_id"].to_numpy(), mask).astype(np.int64, copy=False)
        return ids[np.where(req < 0, ~req, req)], req >= 0
    return _Curve(make, seq=rb["seq"], bytes=r["reserved_after"])


def peak_reserved(trace: Trace, allocator: str, pid: int | None = None) -> int:
    """The maximum of :func:`reserved_curve`'s bytes (0 without requests): the same replay of the same
    requests, without the curve (8 bytes a request) or the requests' seqs, and nothing kept on the
    trace (``diff``: issue 30).  ``simulate``'s ``peak_reserved_bytes`` is that curve's maximum."""
    if allocator not in ALLOCATORS:
        raise PyinterposeError(f"unknown allocator {allocator!r} (choose from {', '.join(ALLOCATORS)})")
    opts = pytorch_options(trace.meta, None)[0] if allocator == "pytorch" else {}
    from ..owners import allocator_mask
    mask = _device_mask(trace, resolve_pid(trace, pid), True, allocator_mask(trace))
    rb = by_block(trace, mask)
    del mask
    arrays, n = (rb["arrays"], rb["n"]) if rb is not None else (lambda rq: (rq["arrays"], len(rq["seq"])))(
        request_stream(trace, pid))
    del rb
    if not n:
        return 0
    return int(simulate(arrays, allocator, **opts)["peak_reserved_bytes"])


def evaluate(trace: Trace, strategies=None, time_limit: float = DEFAULT_TIME_LIMIT,
             pid: int | None = None, window: tuple[int, int] | None = None,
             capacity: int | None = None, allocator_options: dict | None = None) -> dict:
    """Every strategy on one process of ``trace``: the pools JSON.

    ``strategies``: names from STRATEGIES (default all); ``time_limit``: seconds for
    ``optimal``; ``capacity``: device memory limit (default none), a constraint on every
    strategy: a simulated allocator that runs out of memory, a planner whose pool is larger
    (the optimal planner first searches for a packing within it) gets ``fits: False`` and
    ``does_not_fit`` (why), and no ratio or fragmentation; without a capacity ``fits`` is absent.
    When the steady window holds none of the replayed blocks the planners are skipped
    (``nothing_to_plan``, each planner row ``skipped``: why); a process without device
    allocations is a PyinterposeError ("no allocations in this trace");
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
    pid = resolve_pid(trace, pid)
    from ..owners import allocator_info, allocator_mask
    amask = allocator_mask(trace)
    view = trace.process_view(pid)
    info = allocator_info(view, amask if view is trace else None)
    release_tables(trace)       # each step's pages of the cached columns: given back before the next
    # the steady problem first (issue 30): the iterations it runs peak on their own, not on top of
    # the request stream
    prob = steady_problem(trace, pid, window, allocator_only=True, _allocator=amask)
    release_tables(trace)
    _give_back(trace)           # and, on a long trace, the freed temporaries
    lower, upper, size = (prob[c].to_numpy(np.int64) for c in ("lower", "upper", "size"))
    bound = load(lower, upper, size)
    del lower, upper, size
    arrs, n_req, n_allocs, whole = _replayed(trace, _device_mask(trace, pid, True, amask))
    release_tables(trace)
    _give_back(trace)
    # the simulators run in C without the GIL: replay them side by side
    sims = {}
    names = [n for n in strategies if n in ALLOCATORS]
    if names:
        def sim(name):
            opts = pytorch_opts if name == "pytorch" else dict(allocator_options.get(name) or {})
            return simulate(arrs, name, capacity=capacity, **opts)
        if len(names) > 1 and (os.cpu_count() or 1) > 1:
            with ThreadPoolExecutor(min(len(names), os.cpu_count() or 1)) as ex:
                sims = dict(zip(names, ex.map(sim, names)))
        else:
            sims = {n: sim(n) for n in names}
    attrs = prob.attrs
    nothing = None
    if len(prob) == 0:      # the window holds none of the replayed blocks: no steady problem
        lo, hi = attrs["window"]
        nothing = (f"nothing to plan: the steady window [{lo}, {hi}) holds none of the "
                   + (f"{info['framework']} allocator's" if info["framework"] != "unknown" else "process's device")
                   + f" blocks ({n_allocs:,} in the run, none live in it)")
    out_rows = []
    for name in strategies:
        if name in ALLOCATORS:
            r = sims[name]
            row = _row(name, r["peak_reserved_bytes"], whole, r["seconds"], "whole_run")
            row["backing_allocations"] = r["backing_allocations"]
            row["peak_allocated_bytes"] = r["peak_allocated_bytes"]
            if capacity is not None:
                row["fits"] = r["oom_at"] is None
            if r["oom_at"] is not None:
                row["oom_at_request"] = int(r["oom_at"])
                _does_not_fit(row, f"out of memory at request {int(r['oom_at']):,} of {n_req:,}: the replay "
                                   f"needs more than the capacity {capacity:,} B")
            row["options"] = r["options"]
            if name == "pytorch":
                row["alloc_conf"] = pytorch_conf
            if r["details"]:
                row["details"] = r["details"]
        elif nothing is not None:
            row = _row(name, None, bound, 0.0, "steady")
            row["skipped"] = nothing
        else:
            row = _planner_row(prob, name, bound, time_limit, capacity)
        out_rows.append(row)
    from ..clock import clock_of

    return {
        "pid": pid,
        **clock_of(trace, pid).as_dict(),     # pools read the order of events only; named for every output
        "bound_bytes": int(bound),
        "bound_whole_run_bytes": whole,
        "iteration": {"window": list(attrs["window"]), "events": int(attrs["events"]),
                      "blocks": int(len(prob)),
                      "crossing": {k: int(v) for k, v in prob["crossing"].value_counts().items()},
                      **attrs["iteration"]},
        "requests": n_req,
        "capacity_bytes": None if capacity is None else int(capacity),
        "nothing_to_plan": nothing,
        "allocator": {k: v for k, v in info.items() if k != "outside"},
        "outside_allocator": info["outside"],
        "strategies": out_rows,
    }
