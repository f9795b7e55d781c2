"""Every swap schedule played on a discrete-event model of the GPU (issue 21).

A schedule is planned on the recorded timeline; this module runs it and reports what would
happen, so that the peak after, the stall and the overhead of every strategy are the replay's
figures, never sums over an unshifted timeline.

The model (the loop is ``pi_swap_replay`` in ``native/swap/replay.c``):

* **Compute streams**: the process's launches and copies in recorded order (one stream per
  stream handle on the device clock; on the CPU clock the whole process is one stream).  Op
  ``i`` is released at its recorded start ``R[i]`` (device start, or the call's CPU time) and
  keeps its stream for ``dur[i]`` (the device duration, or on the CPU clock the gap to the
  next call).  It starts at ``R[i] + delay[i]``: late when the op before it on the stream ends
  late (idle time on the stream absorbs that), or when it waits for a transfer.
* **Copy engines**: one D2H and one H2D, each serving its transfers in planned order at the
  bandwidth and latency of the problem.  A transfer is issued at its planned start shifted by
  how late the timeline runs then: the delay of its anchor op (a swap-out's: the block's
  previous access, so never before that access ends; a swap-in's: the last op released by its
  planned start), less the idle time between that op's end and the planned start.  A swap-in
  starts no earlier than its own swap-out's end.
* **Memory**: a block swapped out is released when its swap-out ENDS and taken again when its
  swap-in STARTS.  The next access waits for the swap-in to end; in budget mode, where the
  schedule frees a block before its swap-out has ended (``free_t < out_end``: the program must
  pause there), the first op released at ``free_t`` waits for the swap-out to end.
* **Peak after**: the live-bytes curve with every allocation shifted by the delay of the first
  op released at or after it (it comes before that op in the program), every free by the delay
  of the last op released by it, none moving before the event before it (they keep the
  program's order), plus the swaps' releases and retakes at their replayed times.  So a
  replayed peak is never above the peak before swapping.
* **Slowdown**: how much later the last op ends.  ``stall_ns`` of a result is this number.

A schedule that makes no op wait replays with zero delay and exactly its planned times (then the
peak after is the planned one, computed without re-sorting).
"""
from __future__ import annotations

import mmap
import threading
from dataclasses import dataclass

import numpy as np
import pandas as pd

from ...errors import PyinterposeError
from ...trace import pages
from .ondisk import is_on_disk, kept, release
from .problem import _peak_after

TOL_NS = 1e-3    # as the C loop: shorter waits are rounding
OP_INDEX = np.int32   # the streams' op indices (neighbours, release order, positions): fewer than 2**31 ops


@dataclass
class Replay:
    out_start: np.ndarray      # float64 ns per swap (the schedule's order), replayed
    out_end: np.ndarray
    in_start: np.ndarray
    in_end: np.ndarray
    wait_ns: np.ndarray        # per swap: how long ops waited for its transfers
    slowdown_ns: float         # the run's end moved this much later
    peak_after: int
    delayed_ops: int           # ops that started late

    def as_frame(self) -> pd.DataFrame:
        return pd.DataFrame({"replay_out_start": self.out_start, "replay_out_end": self.out_end,
                             "replay_in_start": self.in_start, "replay_in_end": self.in_end,
                             "wait": self.wait_ns})


def streams(problem) -> dict:
    """The problem's compute streams as the replay reads them (once per problem): the ops in
    release order (``ord``, ``release_sorted``, ``pos`` of each op), each op's neighbours on its
    stream, and where the memory events fall among the releases."""
    m = problem.memo
    if "replay_streams" in m:
        return m["replay_streams"]
    with _STREAMS:          # made once when two runs replay at once (issue 30: ~0.6 GB at 100 M events)
        if "replay_streams" not in m:
            m["replay_streams"] = kept(problem, _streams(problem))
            # the ops' seq and stream columns are read only to make the streams (issue 30: 12 bytes
            # an op, ~0.18 GB at 100 M events, held through every run otherwise)
            for k in ("seq", "stream"):
                problem.ops.pop(k, None)
    return m["replay_streams"]


_STREAMS = threading.Lock()


def _streams(problem) -> dict:
    o = problem.ops
    n = len(o["seq"])
    if n >= 2 ** 31 - 1:
        raise PyinterposeError(f"too many compute ops for the swap replay ({n})")
    release = np.ascontiguousarray(o["start"], dtype=np.float64)
    dur = np.ascontiguousarray(o["dur"], dtype=np.float64)
    stream = np.asarray(o["stream"])              # its own integer type (int32): only compared
    # neighbours on the stream, in seq order (the ops are in seq order); the temporaries let go
    # as soon as read (issue 30: ~15 M ops at 100 M events)
    if not n or (stream == stream[0]).all():      # one stream (the CPU clock): no arrays needed
        sprev = snext = None
    else:
        by = np.argsort(stream, kind="stable")    # by stream, in seq order within each
        same = np.flatnonzero(stream[by[1:]] == stream[by[:-1]])
        a, b = by[:-1][same], by[1:][same]
        del by, same
        sprev = np.full(n, -1, OP_INDEX)          # int32 (issue 30: kept per problem, 15 M ops at 100 M events)
        sprev[b] = a
        snext = np.full(n, -1, OP_INDEX)
        snext[a] = b
        del a, b
    if n < 2 or (release[1:] >= release[:-1]).all():        # already in release order (the CPU clock)
        ord_ = pos = None
        release_sorted = release
    else:
        ord_ = np.lexsort((o["seq"], release)).astype(OP_INDEX)
        pos = np.empty(n, OP_INDEX)
        pos[ord_] = np.arange(n, dtype=OP_INDEX)
        release_sorted = release[ord_]
    return {"n": n, "release": release, "dur": dur, "sprev": sprev, "snext": snext, "ord": ord_, "pos": pos,
            "release_sorted": release_sorted}


def replay(problem, sched: pd.DataFrame, cand: np.ndarray) -> Replay:
    """Replay ``sched`` (:func:`~pyinterpose.analysis.swap.schedule_with_candidates`'s table and
    candidates) on the problem's compute streams; see the module docstring."""
    from ..._core import ffi, lib  # lazy: compiled cffi module, absent from an unbuilt tree

    n_sw = len(sched)
    if n_sw == 0:
        z = np.zeros(0)
        return Replay(z, z, z, z, z, 0.0, _peak_after(problem, sched), 0)
    st = streams(problem)
    n, ord_, rs = st["n"], st["ord"], st["release_sorted"]

    def op_at(k):                          # the op at release positions k (in range)
        return k if ord_ is None else ord_[k]
    c = problem.candidates
    cand = np.asarray(cand, np.int64)
    prev_op = c["prev_op"].to_numpy()[cand].astype(np.int64)     # the swaps' rows, as int64 (the
    next_op = c["next_op"].to_numpy()[cand].astype(np.int64)     # columns may be int32)
    out_start, out_end = sched["out_start"].to_numpy(np.float64), sched["out_end"].to_numpy(np.float64)
    in_start, in_end = sched["in_start"].to_numpy(np.float64), sched["in_end"].to_numpy(np.float64)
    free_t = sched["free_t"].to_numpy(np.float64)

    def last_released(t):                 # the last op released by t (-1 none)
        if not n:
            return np.full(len(t), -1)
        k = _search(rs, t, side="right") - 1   # the keys come in schedule order: searched sorted
        return np.where(k >= 0, op_at(np.maximum(k, 0)), -1)

    xfers = np.empty(n_sw, dtype=[("out_start", np.float64), ("in_start", np.float64), ("t_out", np.float64),
                               ("t_in", np.float64), ("out_anchor", np.int64), ("in_anchor", np.int64)])
    xfers["out_start"], xfers["in_start"] = out_start, in_start
    xfers["t_out"], xfers["t_in"] = out_end - out_start, in_end - in_start
    xfers["out_anchor"] = np.where(prev_op >= 0, prev_op, last_released(out_start))
    xfers["in_anchor"] = last_released(in_start)
    # transfers in planned order, each after the ops released by its planned start
    key = np.concatenate([out_start, in_start])
    x_dir = np.concatenate([np.zeros(n_sw, np.int8), np.ones(n_sw, np.int8)])
    x_sw = np.concatenate([np.arange(n_sw), np.arange(n_sw)]).astype(np.int64)
    xo = np.lexsort((x_dir, key))
    key, x_dir, x_sw = key[xo], x_dir[xo], x_sw[xo]
    x_pos = _search(rs, key, side="right")
    # waits: the next access for the swap-in; in budget mode the op where the program pauses
    # (the first released at the early free) for the swap-out
    gated = np.flatnonzero(out_end - free_t > TOL_NS)
    g_pos = _search(rs, free_t[gated], side="left")
    ok = g_pos < n
    has_q = np.flatnonzero(next_op >= 0)
    q_pos = next_op[has_q] if st["pos"] is None else st["pos"][next_op[has_q]]
    w_pos = np.concatenate([q_pos, g_pos[ok]]).astype(np.int64)
    w_sw = np.concatenate([has_q, gated[ok]]).astype(np.int64)
    w_dir = np.concatenate([np.ones(len(has_q), np.int8), np.zeros(int(ok.sum()), np.int8)])
    wo = np.argsort(w_pos, kind="stable")
    w_pos, w_sw, w_dir = w_pos[wo], w_sw[wo], w_dir[wo]

    release(problem)       # a problem on disk: what the schedule's passes read goes back before the loop's
    delay = _zeros(n)
    sw_t = np.empty(5 * n_sw, np.float64)

    def ptr(kind, a):
        return ffi.cast(kind, a.ctypes.data) if len(a) else ffi.NULL

    def opt(a):
        return ffi.NULL if a is None else ptr("int32_t *", a)

    args = ffi.new("pi_swap_replay_args *", {
        "n_ops": n, "release": ptr("double *", st["release"]), "dur": ptr("double *", st["dur"]),
        "stream_prev": opt(st["sprev"]), "stream_next": opt(st["snext"]), "release_order": opt(ord_),
        "n_swaps": n_sw, "swaps": ffi.cast("pi_swap_xfer *", xfers.ctypes.data),
        "n_transfers": len(key), "transfer_swap": ptr("int64_t *", x_sw), "transfer_dir": ptr("int8_t *", x_dir),
        "transfer_pos": ptr("int64_t *", x_pos),
        "n_waits": len(w_pos), "wait_swap": ptr("int64_t *", w_sw), "wait_dir": ptr("int8_t *", w_dir),
        "wait_pos": ptr("int64_t *", w_pos),
        "rec_end_known": "rec_end" in st, "rec_end": st.get("rec_end", 0.0),
        "delay": ptr("double *", delay), "swap_times": ffi.cast("double *", sw_t.ctypes.data)})
    rc = lib.pi_swap_replay(args)
    if rc < 0:
        raise MemoryError("swap replay: out of memory")
    st["rec_end"] = float(args.rec_end)     # the recorded end: every op read once per problem (issue 30)
    del xfers, key, x_dir, x_sw, x_pos, w_pos, w_sw, w_dir, xo, wo
    release(problem)       # a problem on disk: the streams read above, not resident through the peak's pass
    t = sw_t.reshape(n_sw, 5)
    got_out_start, got_out_end, got_in_start, got_in_end = (np.ascontiguousarray(t[:, k]) for k in range(4))
    late = int(args.delayed)                   # the ops with delay > 0 (only those were written)
    if not late and np.array_equal(got_out_end, out_end) and np.array_equal(got_in_start, in_start):
        peak = _peak_after(problem, sched)            # nothing moved: the planned peak
    else:
        peak = _replayed_peak(problem, st, delay, sched["size"].to_numpy(np.int64), got_out_end, got_in_start,
                              moved=late > 0)
    return Replay(got_out_start, got_out_end, got_in_start, got_in_end, np.ascontiguousarray(t[:, 4]),
                  float(args.slowdown), peak, late)


def _zeros(n: int) -> np.ndarray:
    """``np.zeros(n)`` float64 in pages of its own, mapped private and anonymous: pages never written stay
    the kernel's shared zero page, not in this process's RSS (issue 30: a replay's delays, one per op,
    ~90 MB at 100 M events, of which only the late ops' pages are written).  ``np.zeros`` from the heap
    (heap.keep_freed_memory) would clear, so touch, every page of a reused chunk."""
    nbytes = 8 * n
    if nbytes < ZEROS_MAP_MIN:
        return np.zeros(n, np.float64)
    try:
        m = mmap.mmap(-1, nbytes, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    except (OSError, ValueError, AttributeError):
        return np.zeros(n, np.float64)
    return np.frombuffer(m, np.float64, count=n)


ZEROS_MAP_MIN = 1 << 20     # smaller: np.zeros (a map each is not worth it)


# below this many needles np.searchsorted is used as it is (sorting them costs more than it saves)
SEARCH_MIN = 1 << 12


def _search(a: np.ndarray, x: np.ndarray, side: str) -> np.ndarray:
    """``np.searchsorted(a, x, side=side)`` as int64, element for element (``a``: ascending float64,
    the ops' release times): the needles in ascending order (sorted first when they are not), each
    search galloping on from the answer before it, in C (``pi_swap_search_sorted``).  Issue 30: at
    100 M events a replay searched ~1.4 M times into 15 M release times, each a binary search
    from the top of the array that missed the cache at nearly every step (~0.3 s a replay)."""
    x = np.asarray(x)
    if len(x) < SEARCH_MIN or x.dtype != np.float64 or a.dtype != np.float64 or not np.isfinite(x).all():
        return np.searchsorted(a, x, side=side).astype(np.int64, copy=False)
    from ..._core import ffi, lib  # lazy: compiled cffi module, absent from an unbuilt tree

    a = np.ascontiguousarray(a)
    order = None if not (x[1:] < x[:-1]).any() else np.argsort(x, kind="stable")
    xs = np.ascontiguousarray(x if order is None else x[order])
    got = np.empty(len(xs), np.int64)
    lib.pi_swap_search_sorted(ffi.cast("double *", a.ctypes.data), len(a), ffi.cast("double *", xs.ctypes.data),
                              len(xs), 1 if side == "right" else 0, ffi.cast("int64_t *", got.ctypes.data))
    if order is None:
        return got
    out = np.empty(len(xs), np.int64)
    out[order] = got
    return out


def _replayed_peak(problem, st: dict, delay: np.ndarray, size: np.ndarray, free_t: np.ndarray,
                   realloc_t: np.ndarray, moved: bool | None = None, piece: int | None = None) -> int:
    """Peak of live bytes on the replayed timeline (module docstring, "Peak after").

    The running sum over the events sorted by (time, delta) peaks at the end of some instant
    (inside one, frees come first), so the peak is the largest value after an instant: at an
    instant tau, the sum of every delta at or before tau.  The memory events stay in time order
    once moved (each is moved by its anchor's delay, then none before the one before it) and the
    swaps' events are sorted once, so the instants are one merge of the two, in C
    (``pi_swap_replayed_peak``): each event's anchor found by a search that moves forward with the
    events, nothing of the events' length made (issue 30: at 100 M events this was ~1 s a replay
    in numpy pieces, and its anchors 88 MB kept).  ``moved``: whether some op is late (None: read
    from ``delay``).  On a problem on disk the merge runs ``piece`` events at a time (None:
    ``PEAK_PIECE``) and the pages of the events and ops it has passed go back between the pieces
    (issue 30: the whole pass over 22.6 M steps at 100 M events held ~0.5 GB of mapped pages)."""
    from ..._core import ffi, lib  # lazy: compiled cffi module, absent from an unbuilt tree

    ev_t = np.ascontiguousarray(problem.events_t, dtype=np.int64)
    # the deltas, or (none held: the events are the steps) the running sums they are read from in C
    held = problem.ev_d
    ev_d = None if held is None else np.ascontiguousarray(held, dtype=np.int64)
    ev_cum = None if held is not None else np.ascontiguousarray(problem.live, dtype=np.int64)
    sw_t = np.concatenate([free_t, realloc_t]).astype(np.float64, copy=False)
    sw_d = np.concatenate([-size, size]).astype(np.int64, copy=False)
    so = np.argsort(sw_t, kind="stable")
    sw_t, sw_d = np.ascontiguousarray(sw_t[so]), np.ascontiguousarray(sw_d[so])
    n_ops = int(st["n"])
    rs = np.ascontiguousarray(st["release_sorted"], dtype=np.float64)
    ord_ = None if st["ord"] is None else np.ascontiguousarray(st["ord"], dtype=OP_INDEX)
    delay = np.ascontiguousarray(delay, dtype=np.float64)

    def ptr(kind, x):
        return ffi.NULL if x is None or not len(x) else ffi.cast(kind, x.ctypes.data)
    if moved is None:
        moved = bool(len(delay) and delay.any())
    n_ev = len(ev_t)
    if piece is None:
        piece = PEAK_PIECE if is_on_disk(problem) else n_ev
    args = ffi.new("pi_swap_peak_args *", {
        "n_ev": n_ev, "ev_t": ptr("int64_t *", ev_t), "ev_d": ptr("int64_t *", ev_d),
        "n_ops": n_ops, "release_sorted": ptr("double *", rs), "release_order": ptr("int32_t *", ord_),
        "delay": ptr("double *", delay), "moved": bool(n_ops and len(delay) and moved),
        "n_sw": len(sw_t), "sw_t": ptr("double *", sw_t), "sw_d": ptr("int64_t *", sw_d),
        "ev_cum": ptr("int64_t *", ev_cum), "ev_stop": n_ev})
    while True:
        args.ev_stop = min(n_ev, int(args.i) + max(1, int(piece)))
        best = int(lib.pi_swap_replayed_peak(args))
        if args.done:
            return best
        # the events passed and the ops' release positions searched past are not read again (the
        # searches move forward): their pages go back (mapped arrays only; in memory nothing happens)
        i, k = int(args.i), min(int(args.k_lo), int(args.k_hi))
        pages.release(ev_t, 0, i)
        pages.release(ev_cum if ev_d is None else ev_d, 0, i)
        pages.release(rs, 0, k)
        if ord_ is not None:
            pages.release(ord_, 0, k)


PEAK_PIECE = 1 << 21        # events a piece of the replayed peak's merge on a problem on disk (16 MiB of times)
