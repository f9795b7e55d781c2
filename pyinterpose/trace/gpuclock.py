"""Device-clock records (native/shim/cupti.c) to tables: ``gpu_activity``, the device start/end of
launches and copies, and each process's clock (see :mod:`pyinterpose.trace.model`).

A GPU record is one CUPTI activity (kernel, memcpy, memset) with its device start and end already on
the trace's clock and the seq of the LAUNCH / GRAPH_LAUNCH / COPY / MEMSET event it belongs to (the
external correlation id the shim pushed around the call).  A CLOCK record states a process's clock:
CUPTI on (with the alignment's error bound, the records CUPTI dropped so far) or the CPU clock and why.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from .model import GPU_ACTIVITY_COLUMNS, conform, empty_table
from .pages import release

GPU_KINDS = ["none", "kernel", "memcpy", "memset"]   # enum pi_gpu_kind
CLOCK_CUPTI = 1                                     # enum pi_clock_state
# a process without CLOCK records (no kernel, copy or memset; or a trace from before the device clock)
NO_RECORD = {"clock": "cpu", "clock_note": "", "clock_error_ns": -1, "gpu_dropped": 0}
_PID_SHIFT = 40                                     # key = pid << 40 | seq
PIECE = 1 << 20                                     # GPU records made into rows at a time


def _key(pid: np.ndarray, seq: np.ndarray) -> np.ndarray:
    return (np.asarray(pid).astype(np.int64) << _PID_SHIFT) | np.asarray(seq).astype(np.int64)


def _find(keys: np.ndarray, q: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(position in the sorted keys, found) of each q."""
    if len(keys) == 0:
        return np.zeros(len(q), np.int64), np.zeros(len(q), bool)
    pos = np.minimum(np.searchsorted(keys, q), len(keys) - 1)
    return pos, keys[pos] == q


def _order(keys: np.ndarray) -> np.ndarray | None:
    """A stable sorting order of keys, or None when they are already in order (the usual case: the
    reader's tables are in (pid, seq) order, device records mostly in the order of their calls)."""
    if len(keys) < 2 or bool(np.all(keys[1:] >= keys[:-1])):
        return None
    return np.argsort(keys, kind="stable")


def activity_table(G: np.ndarray, g_pid: np.ndarray, t0: int, strings: dict, kernels: list,
                   launch_pid: np.ndarray, launch_seq: np.ndarray, launch_kernel: np.ndarray,
                   copy_pid: np.ndarray, copy_seq: np.ndarray) -> pd.DataFrame:
    """``gpu_activity`` from the GPU records ``G`` (pi_event rows) of processes ``g_pid``.

    ``seq`` is the owning event's when that event is in the trace (else -1); a kernel's ``kernel`` is
    its launch's, or (graph replays, unmatched kernels) the name CUPTI gave, added to ``kernels``."""
    if len(G) == 0:
        return empty_table(GPU_ACTIVITY_COLUMNS)
    # the owning event: a launch (its kernel comes along) or a copy
    lkey = _key(launch_pid, launch_seq)
    lkern = np.asarray(launch_kernel, np.int32)
    lo = _order(lkey)
    if lo is not None:
        lkey, lkern = lkey[lo], lkern[lo]
    ckey = _key(copy_pid, copy_seq)
    co = _order(ckey)
    if co is not None:
        ckey = ckey[co]
    n = len(G)
    cols = {c: np.empty(n, GPU_ACTIVITY_COLUMNS[c] if c != "kind" else np.int8)
            for c in ("pid", "seq", "kind", "start", "end", "device", "stream", "graph_node", "kernel", "bytes")}
    named, named_res = [], []
    for a in range(0, n, PIECE):        # a piece of records at a time: 12 M at 100 M events
        b = min(n, a + PIECE)
        P, p_pid = G[a:b], g_pid[a:b]
        raw_start = P["t_ns"].view(np.int64)
        raw_end = P["addr"].view(np.int64)
        valid = (raw_start > 0) & (raw_end > 0)
        cols["start"][a:b] = np.where(valid, raw_start - t0, -1)
        cols["end"][a:b] = np.where(valid, raw_end - t0, -1)
        del raw_start, raw_end, valid
        ext = P["aux"].view(np.int64)
        kind = P["flags"]                  # uint16 (a view)
        q = _key(p_pid, ext)
        pos, in_launch = _find(lkey, q)
        cols["kernel"][a:b] = np.where(in_launch, lkern[pos] if len(lkern) else -1, -1)
        _, in_copy = _find(ckey, q)
        cols["seq"][a:b] = np.where((ext > 0) & (in_launch | in_copy), ext, -1)
        del q, pos, in_launch, in_copy
        res = P["result"]                  # int32 (a view)
        k = np.flatnonzero((kind == 1) & (res > 0))    # kernels CUPTI named (graph replays, unmatched)
        if len(k):
            named.append(k + a)
            named_res.append(res[k].astype(np.int64))
        cols["kind"][a:b] = np.clip(kind, 0, len(GPU_KINDS) - 1)
        cols["bytes"][a:b] = np.where(kind == 1, 0, P["size"].view(np.int64))
        cols["pid"][a:b] = p_pid
        cols["device"][a:b] = P["device"]
        cols["stream"][a:b] = P["tid"]
        cols["graph_node"][a:b] = P["stream"]
        release(G, a, b)                   # a spilled table's pages (trace/reader.py), once read
    kernel = cols["kernel"]
    # the kernels CUPTI named join the trace's kernel list
    if named:
        named = np.concatenate(named)
        res = np.concatenate(named_res)
        n_pid = np.asarray(g_pid)[named].astype(np.int64)
        index = {k: i for i, k in enumerate(kernels)}
        pairs = np.unique(np.stack([n_pid, res], axis=1), axis=0)
        code = {}
        for p, sid in pairs.tolist():
            name = strings.get(p, {}).get(sid)
            if name is None:
                continue
            if name not in index:
                index[name] = len(kernels)
                kernels.append(name)
            code[(p, sid)] = index[name]
        kernel[named] = [code.get((int(p), int(s)), int(k))
                         for p, s, k in zip(n_pid.tolist(), res.tolist(), kernel[named].tolist())]
    cols["kind"] = pd.Categorical.from_codes(cols["kind"], GPU_KINDS)
    return conform(pd.DataFrame(cols, copy=False), GPU_ACTIVITY_COLUMNS)


def event_spans(gpu: pd.DataFrame) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(key, first start, last end) of each event (pid, seq) that has device activities, keys sorted: one
    activity for a kernel or copy, every replayed node for a graph launch."""
    start, seq = gpu["start"].to_numpy(np.int64), gpu["seq"].to_numpy(np.int64)
    ok = (seq >= 0) & (start >= 0)
    s = start[ok]
    release(start)          # a mapped table's pages (the reader's, at 100 M events), once read
    pid = gpu["pid"].to_numpy()
    k = _key(pid[ok], seq[ok])
    release(pid)
    release(seq)
    end = gpu["end"].to_numpy(np.int64)
    e = end[ok]
    release(end)
    del start, seq, pid, end
    if len(k) == 0:
        return k, s, e
    o = _order(k)
    if o is not None:
        k, s, e = k[o], s[o], e[o]
    first = np.flatnonzero(np.r_[True, k[1:] != k[:-1]])
    return k[first], np.minimum.reduceat(s, first), np.maximum.reduceat(e, first)


def event_times(spans, pid: np.ndarray, seq: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(dev_start, dev_end) of the events (pid, seq) from :func:`event_spans`; -1 without activity."""
    uk, smin, emax = spans
    if len(uk) == 0 or len(pid) == 0:
        return np.full(len(pid), -1, np.int64), np.full(len(pid), -1, np.int64)
    pos, hit = _find(uk, _key(pid, seq))
    return np.where(hit, smin[pos], -1).astype(np.int64), np.where(hit, emax[pos], -1).astype(np.int64)


def process_clocks(side: np.ndarray, side_pid: np.ndarray, side_op: np.ndarray, clock_op: int,
                   strings: dict) -> dict[int, dict]:
    """pid -> {clock, clock_note, clock_error_ns, gpu_dropped} from the process's CLOCK records."""
    out: dict[int, dict] = {}
    idx = np.flatnonzero(side_op == clock_op)
    for i in idx.tolist():
        p = int(side_pid[i])
        r = side[i]
        st = out.setdefault(p, {"clock": "cpu", "clock_note": "", "clock_error_ns": -1, "gpu_dropped": 0})
        if int(r["flags"]) == CLOCK_CUPTI:
            st["clock"] = "cupti"
            st["clock_error_ns"] = max(st["clock_error_ns"], int(r["size"]))
        note = strings.get(p, {}).get(int(r["aux"]), "") if int(r["aux"]) else ""
        if note:
            st["clock_note"] = note
        st["gpu_dropped"] = max(st["gpu_dropped"], int(r["stream"]))
    return out


GRAPH_CAPTURE_BEGIN, GRAPH_CAPTURE_END, GRAPH_INSTANTIATE = 1, 2, 3   # enum pi_graph_def


def captured_calls(side: np.ndarray, side_pid: np.ndarray, side_op: np.ndarray, graph_def_op: int,
                   calls: pd.DataFrame, graph_launches: pd.DataFrame) -> dict[tuple[int, int], np.ndarray]:
    """(pid, seq of a GRAPH_LAUNCH) -> the seqs, in order, of the calls captured into the graph it ran.

    From the GRAPH_DEF records: a capture's calls are those on its stream between its begin and end
    (``calls``: pid, seq, stream of every launch, copy and memset); an executable graph is the graph
    last instantiated into that handle before the launch; a graph handle, the last capture ending in it
    before that instantiation (handles are reused after a destroy)."""
    out: dict[tuple[int, int], np.ndarray] = {}
    idx = np.flatnonzero(side_op == graph_def_op)
    if len(idx) == 0 or len(graph_launches) == 0:
        return out
    by_pid: dict[int, list[int]] = {}
    for i in idx.tolist():
        by_pid.setdefault(int(side_pid[i]), []).append(i)
    for p, rows in by_pid.items():
        mine = calls[calls["pid"] == p]
        c_seq, c_stream = mine["seq"].to_numpy(np.int64), mine["stream"].to_numpy(np.uint64)
        o = np.argsort(c_seq, kind="stable")
        c_seq, c_stream = c_seq[o], c_stream[o]
        open_at: dict[int, int] = {}
        ends: dict[int, list] = {}        # graph -> [(seq of the end, captured seqs)]
        insts: dict[int, list] = {}       # exec -> [(seq of the instantiation, graph)]
        for i in sorted(rows, key=lambda i: int(side["seq"][i])):
            r = side[i]
            kind, seq, ok = int(r["flags"]), int(r["seq"]), int(r["result"]) == 0
            if kind == GRAPH_CAPTURE_BEGIN and ok:
                open_at[int(r["stream"])] = seq
            elif kind == GRAPH_CAPTURE_END:
                begin = open_at.pop(int(r["stream"]), None)
                if ok and begin is not None and int(r["aux"]):
                    lo, hi = np.searchsorted(c_seq, [begin, seq])
                    sel = c_seq[lo:hi][c_stream[lo:hi] == np.uint64(int(r["stream"]))]
                    ends.setdefault(int(r["aux"]), []).append((seq, sel))
            elif kind == GRAPH_INSTANTIATE and ok and int(r["addr"]):
                insts.setdefault(int(r["addr"]), []).append((seq, int(r["aux"])))
        gl = graph_launches[graph_launches["pid"] == p]
        for seq, ex in zip(gl["seq"].tolist(), gl["exec"].tolist()):
            inst = [g for s, g in insts.get(int(ex), []) if s < seq]
            if not inst:
                continue
            inst_seq = max(s for s, _ in insts[int(ex)] if s < seq)
            cap = [c for s, c in ends.get(inst[-1], []) if s < inst_seq]
            if cap:
                out[(p, int(seq))] = cap[-1]
    return out


def join_captured(gpu: pd.DataFrame, captured: dict[tuple[int, int], np.ndarray]) -> np.ndarray:
    """``gpu_activity.captured_seq``: the k-th replayed node of a graph launch (graph node id order) is the
    k-th call captured into its graph, when the numbers agree; -1 otherwise."""
    out = np.full(len(gpu), -1, np.int64)
    if not captured or len(gpu) == 0:
        return out
    node = gpu["graph_node"].to_numpy(np.uint64)
    seq = gpu["seq"].to_numpy(np.int64)
    pid = gpu["pid"].to_numpy(np.int64)
    rows = np.flatnonzero((node != 0) & (seq >= 0))
    if len(rows) == 0:
        return out
    rows = rows[np.lexsort((node[rows], seq[rows], pid[rows]))]
    k = _key(pid[rows], seq[rows])
    first = np.flatnonzero(np.r_[True, k[1:] != k[:-1]])
    sizes = np.diff(np.r_[first, len(rows)])
    for f, n in zip(first.tolist(), sizes.tolist()):
        cap = captured.get((int(pid[rows[f]]), int(seq[rows[f]])))
        if cap is not None and len(cap) == n:
            out[rows[f:f + n]] = cap
    return out
