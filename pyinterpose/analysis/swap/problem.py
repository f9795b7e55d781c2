"""The swap problem: the live-bytes step function, the candidate intervals and the compute streams
they are replayed on (one process of a trace, or bare tables)."""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from ...errors import PyinterposeError
from ...heap import give_back
from ...trace import pages
from ...trace.piecewise import ascending
from ...trace.model import counted_bytes
from ..bandwidth import Bandwidth
from ..search import merge_places, searchsorted
from . import ondisk


# access/iterations/clock are imported in the functions that use them: the cli reads STRATEGIES and
# MIN_SIZE from analysis.swap at `pyinterpose --help`, and those analyses add ~90 ms (trace.stacks, cffi) there.
STRATEGIES = ("doa", "aoa", "wdoa", "vote", "size", "outlier")
MODES = ("no-overhead", "budget")
MIN_SIZE = 1 << 20
SWAP_INTERVAL_KIND = "between"   # access -> access intervals of access_intervals()

BLOCK_COLUMNS = ["block_id", "size", "t_alloc", "t_free", "freed", "counts_device", "device_bytes"]   # what prepare reads
REPLAY_COLUMNS = ["replay_out_start", "replay_out_end", "replay_in_start", "replay_in_end", "wait"]
SCHEDULE_COLUMNS = ["block_id", "size", "iteration", "prev_access", "out_start", "out_end", "free_t",
                    "realloc_t", "in_start", "in_end", "next_access", "stall"]


# ---- the problem: live-bytes step function + candidate intervals ------------------------

@dataclass
class SwapProblem:
    """Everything the schedulers need.  Times in ns (float64 where fractional)."""

    bandwidth: Bandwidth
    steps_t: np.ndarray        # int64, step k = [steps_t[k], steps_t[k+1]); len = n_steps + 1
    live: np.ndarray           # int64 live device bytes on each step (len n_steps)
    events_t: np.ndarray       # int64 alloc/free times of the blocks (exact peak)
    ev_d: np.ndarray | None    # int64 +size / -size; None: every event at an instant of its own, so the
                               # events are the steps and their deltas are live's (see events_d)
    candidates: pd.DataFrame   # one row per candidate interval, see prepare()
    peak_before: int
    floor: int                 # lowest peak if every candidate were away for its whole interval
    span_ns: int               # length of the analysed run
    pid: int | None = None
    notes: list = field(default_factory=list)
    lo_iv: np.ndarray | None = None   # int64 steps [lo_iv, hi_iv) lying inside each candidate's interval
    hi_iv: np.ndarray | None = None
    memo: dict = field(default_factory=dict, repr=False, compare=False)   # derived arrays (scores, orders)
    ops: dict | None = field(default=None, repr=False)    # the compute streams of the replay (.replay)
    clock: dict | None = None                             # the clock's JSON keys ({"clock": ...})

    @property
    def events_d(self) -> np.ndarray:
        """The events' deltas (int64 +size / -size), made from ``live`` when not held (``ev_d`` None:
        the events are the steps, so live is their running sum; issue 30: 8 bytes an event)."""
        if self.ev_d is not None:
            return self.ev_d
        return np.diff(self.live, prepend=np.int64(0))

    @property
    def default_budget(self) -> int:
        """Half-way between the swap floor and the peak (used when no budget is given)."""
        return int(self.floor + (self.peak_before - self.floor) // 2)


DERIVED = ("ati_ns", "t_out_ns", "t_in_ns", "doa_ns")   # candidate columns made from size and times
CANDIDATE_COLUMNS = ["block_id", "size", "start_t", "end_t", "iteration", "prev_op", "next_op", *DERIVED,
                     "straddles_peak"]
COLUMN_PIECE = 1 << 20      # candidates at a time when a derived column is made for every one


def column(problem: SwapProblem, name: str, rows: np.ndarray | None = None) -> np.ndarray:
    """The candidates' column ``name`` (of the rows ``rows``; every row: None).  The derived
    columns (``DERIVED``), when the table does not hold them, are made from the size and the
    times by the same operations as the stored ones were: ``ati_ns`` = end - start (int64),
    ``t_out_ns`` / ``t_in_ns`` = the transfer times of the size as float64 in ns, ``doa_ns`` =
    ati - t_out - t_in (float64); for every row a piece of ``COLUMN_PIECE`` rows at a time (no
    temporaries of the candidates' length but the answer)."""
    c = problem.candidates
    if name in c or name not in DERIVED:
        x = c[name].to_numpy()
        return x if rows is None else x[rows]
    if rows is not None:
        return _derived(problem.bandwidth, name, c["size"].to_numpy()[rows],
                        c["start_t"].to_numpy()[rows] if name in ("ati_ns", "doa_ns") else None,
                        c["end_t"].to_numpy()[rows] if name in ("ati_ns", "doa_ns") else None)
    size, start, end = c["size"].to_numpy(), c["start_t"].to_numpy(), c["end_t"].to_numpy()
    n = len(size)
    out = np.empty(n, np.int64 if name == "ati_ns" else np.float64)
    for lo in range(0, n, COLUMN_PIECE):
        hi = min(lo + COLUMN_PIECE, n)
        out[lo:hi] = _derived(problem.bandwidth, name, size[lo:hi], start[lo:hi], end[lo:hi])
    return out


def _derived(bandwidth: Bandwidth, name: str, size: np.ndarray, start, end) -> np.ndarray:
    """One derived column (see :func:`column`) of these rows."""
    if name == "ati_ns":
        return end - start
    f = size.astype(np.float64)
    if name == "t_out_ns":
        return bandwidth.d2h_seconds(f) * 1e9
    if name == "t_in_ns":
        return bandwidth.h2d_seconds(f) * 1e9
    # as the stored column was: the int64 ATI minus the float64 transfer times, in that order
    return (end - start) - bandwidth.d2h_seconds(f) * 1e9 - bandwidth.h2d_seconds(f) * 1e9


def with_derived(problem: SwapProblem) -> pd.DataFrame:
    """A copy of the candidates with every column, the derived ones included, in
    ``CANDIDATE_COLUMNS``' order (the public table: :func:`.strategies.candidate_table`)."""
    c = problem.candidates
    return pd.DataFrame({k: column(problem, k) for k in CANDIDATE_COLUMNS if k in c or k in DERIVED} |
                        {k: c[k].to_numpy() for k in c if k not in CANDIDATE_COLUMNS}, index=c.index)


def _steps_inside(steps_t: np.ndarray, a, b, dtype=np.int64) -> tuple[np.ndarray, np.ndarray]:
    """Index range [lo, hi) of the steps lying entirely inside [a, b) (vectorised), as ``dtype``
    (a narrower one only where every index fits); a piece of ``COLUMN_PIECE`` intervals at a time
    (issue 30: no int64 temporaries of every candidate, ~0.3 GB at 100 M events)."""
    n = len(steps_t) - 1
    m = len(a)
    lo_o, hi_o = np.empty(m, dtype), np.empty(m, dtype)
    for p in range(0, m, COLUMN_PIECE):
        q = min(p + COLUMN_PIECE, m)
        lo = searchsorted(steps_t, a[p:q], side="left")       # the needles sorted first: issue 30
        hi = searchsorted(steps_t, b[p:q], side="right") - 1
        np.minimum(lo, n, out=lo)
        lo_o[p:q] = lo
        hi_o[p:q] = np.clip(hi, lo, n)
    return lo_o, hi_o


def _live_steps(blocks: pd.DataFrame, t_end: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(steps_t, live, events_t, events_d) of the blocks' live device bytes; the events in time order.

    The events are the frees of the freed blocks, then the allocation of every block, in that order,
    sorted stably by time (the value after an instant does not depend on the order inside it).  They
    are made as a merge of the two sorted streams, not by a sort of their concatenation: the frees
    sorted by time (their rows kept, int32), the allocations (already in time order: the blocks are
    in allocation order; sorted when not), and each event's place in the merge is its place in its
    own stream plus the number of the other stream's events before it (a free goes before the
    allocations at its instant, as the concatenation's stable sort puts it).  The same arrays; the
    temporaries are the frees' (issue 30: the sort of every event with its buffers was ~0.35 GB
    more at the build's peak at 100 M events)."""
    freed = blocks["freed"].to_numpy(bool)
    size = counted_bytes(blocks)        # the live-bytes sizes (a double-mapped window counts once)
    ta = blocks["t_alloc"].to_numpy(np.int64)
    tf_all = blocks["t_free"].to_numpy(np.int64)
    na = len(ta)
    frows = np.flatnonzero(freed)
    del freed
    nf = len(frows)
    n = nf + na
    if n == 0:
        return np.array([0, max(t_end, 0)], np.int64), np.zeros(1, np.int64), np.zeros(0, np.int64), np.zeros(0, np.int64)
    rows_t = np.int32 if na < 2 ** 31 - 1 else np.int64
    fo = np.argsort(tf_all[frows], kind="stable")
    frows = frows[fo].astype(rows_t, copy=False)          # the freed blocks' rows, in the frees' order
    del fo
    tf = tf_all[frows]                                    # the frees' times, ascending
    arows = None if ascending(ta) else np.argsort(ta, kind="stable").astype(rows_t, copy=False)
    if arows is not None:
        ta = ta[arows]
    steps_t = np.empty(n + 1, np.int64)
    d = np.empty(n, np.int64)
    for which, lo, at in merge_places(tf, ta, COLUMN_PIECE):
        hi = lo + len(at)
        if which == 0:                      # frees
            steps_t[at] = tf[lo:hi]
            d[at] = -size[frows[lo:hi]]
        else:                               # allocations
            steps_t[at] = ta[lo:hi]
            d[at] = size[lo:hi] if arows is None else size[arows[lo:hi]]
    del frows, tf, ta, arows, size
    ts = steps_t[:-1]
    last = np.ones(n, dtype=bool)
    last[:-1] = ts[1:] != ts[:-1]          # value after the last event at each instant
    end = max(int(t_end), int(ts[-1]))
    if last.all():
        # every event at an instant of its own (the usual case): the steps' starts are the events'
        # times, so the events' times are a view of the steps' (issue 30: 8 bytes an event less), and
        # the deltas are live's (SwapProblem.events_d): not held (issue 30)
        steps_t[-1] = end
        ev_t = ts
        ev_t.flags.writeable = False
        return steps_t, np.cumsum(d, out=d), ev_t, None
    t = ts.copy()
    del ts
    cum = np.cumsum(d)
    ut, live = t[last], cum[last]
    steps_t = np.append(ut, end)
    return steps_t, live, t, d


EXACT_T = float(1 << 53)   # times below this convert to float64 exactly


def _exact_peak(events_t, events_d, sched: pd.DataFrame | None = None) -> int:
    """Peak of live bytes with the swap windows [free_t, realloc_t) taken out (frees first at ties)."""
    t = events_t.astype(np.float64)
    d = events_d
    if sched is not None and len(sched):
        size = sched["size"].to_numpy(np.int64)
        t = np.concatenate([t, sched["free_t"].to_numpy(np.float64), sched["realloc_t"].to_numpy(np.float64)])
        d = np.concatenate([d, -size, size])
    if len(t) == 0:
        return 0
    order = np.lexsort((d, t))
    return int(max(0, np.cumsum(d[order]).max()))


def _live_max(problem) -> int:
    """``int(problem.live.max())``, read once per problem (issue 30: every run asked for it two or three
    times, each a pass over every step's live bytes, 172 MiB of mapped pages at 100 M events)."""
    m = problem.memo
    if "live_max" not in m:
        m["live_max"] = int(problem.live.max())
    return m["live_max"]


def _peak_after(problem: SwapProblem, sched: pd.DataFrame) -> int:
    """:func:`_exact_peak` of the problem's events with ``sched``'s away windows, from the step
    function instead of a sort of every event.

    The running sum over events sorted by (time, delta) peaks at the end of some instant: inside
    one instant the frees come first, so the sum falls and then rises to its value after the
    instant.  So the exact peak is max(0, value after each instant), the instants being the
    steps' starts and the away windows' ends, merged by float64 time as the sort did."""
    live = problem.live
    if len(problem.events_t) == 0 or not len(live) or float(problem.steps_t[-1]) >= EXACT_T:
        return _exact_peak(problem.events_t, problem.events_d, sched)
    if sched is None or len(sched) == 0:
        return int(max(0, _live_max(problem)))
    size = sched["size"].to_numpy(np.int64)
    ts = np.concatenate([sched["free_t"].to_numpy(np.float64), sched["realloc_t"].to_numpy(np.float64)])
    ds = np.concatenate([-size, size])
    o = np.argsort(ts, kind="stable")
    ts, cs = ts[o], np.cumsum(ds[o])
    n = len(live)
    # after each step's instant: its live bytes + the windows' deltas up to it (a window end
    # counts from the first step starting at or after it)
    delta = np.zeros(n + 1, np.int64)
    np.add.at(delta, search_steps(problem, ts, "left", drop_last=True), ds[o])
    at_steps = delta[:-1]                 # in place: one array of the steps' length (issue 30)
    np.cumsum(at_steps, out=at_steps)
    at_steps += live
    # after each window end's instant: the live bytes of the last step starting by it + the deltas up to it
    kb = search_steps(problem, ts, "right", drop_last=True) - 1
    at_sched = np.where(kb >= 0, live[np.maximum(kb, 0)], 0) + cs[np.searchsorted(ts, ts, side="right") - 1]
    return int(max(0, int(at_steps.max()), int(at_sched.max())))


def _exact_steps(problem: SwapProblem) -> bool:
    """Whether every step time converts to float64 exactly (|t| < 2**53: the usual case)."""
    st = problem.steps_t
    return not len(st) or float(max(abs(int(st[0])), abs(int(st[-1])))) < EXACT_T


def step_f(problem: SwapProblem, k, offset: int = 0):
    """``_steps_f(problem)[offset:][k]`` (``k``: indices, a slice or one index): the step times on the
    scheduler's float64 clock, converted where read when they convert exactly (issue 30: no float64
    copy of every step held, 8 bytes a step)."""
    if _exact_steps(problem):
        x = problem.steps_t[offset:][k]
        return x.astype(np.float64) if isinstance(x, np.ndarray) else np.float64(x)
    return _steps_f(problem)[offset:][k]


SEARCH_EXACT = 2.0 ** 62     # needles below this in size are searched as integers (search_steps)


def search_steps(problem: SwapProblem, x: np.ndarray, side: str, drop_last: bool = False) -> np.ndarray:
    """``searchsorted(_steps_f(problem)[:-1 if drop_last else None], x, side)`` for float64 needles,
    searched among the int64 steps when they convert exactly: a step t (an integer) is >= x when
    t >= ceil(x), and > x when t > floor(x), so the answers are the same, index for index."""
    x = np.asarray(x, np.float64)
    st = problem.steps_t[:-1] if drop_last else problem.steps_t
    if _exact_steps(problem) and (not len(x) or (np.isfinite(x).all() and float(np.abs(x).max()) < SEARCH_EXACT)):
        key = (np.ceil(x) if side == "left" else np.floor(x)).astype(np.int64)
        return searchsorted(st, key, side=side)
    sf = _steps_f(problem)
    return searchsorted(sf[:-1] if drop_last else sf, x, side=side)


def _steps_f(problem: SwapProblem) -> np.ndarray:
    """The step times as float64 (the scheduler's clock), computed once per problem."""
    m = problem.memo
    if "steps_f" not in m:
        m["steps_f"] = np.ascontiguousarray(problem.steps_t, dtype=np.float64)
    return m["steps_f"]


def _iteration_labels(trace, pid, start_t: np.ndarray) -> tuple[np.ndarray, str]:
    try:
        from ..iterations import find_iterations  # lazy: see the note above STRATEGIES
        it = find_iterations(trace, pid=pid)
    except PyinterposeError as e:
        return np.full(len(start_t), -1, np.int64), f"iterations not available ({e})"
    b = np.asarray(getattr(it, "boundaries_t", np.zeros(0)), dtype=np.int64)
    if getattr(it, "count", 0) < 1 or len(b) < 2:
        return np.full(len(start_t), -1, np.int64), "no regular iterations found"
    lab = np.searchsorted(b, start_t, side="right") - 1
    lab[(lab < 0) | (lab >= len(b) - 1)] = -1
    return lab.astype(np.int64), f"{it.count} iterations ({it.source})"


def _kind_is(kind: pd.Series, name: str) -> np.ndarray:
    """kind == name, without turning a categorical column into strings first."""
    if isinstance(kind.dtype, pd.CategoricalDtype):
        return (kind == name).to_numpy(bool)
    return (kind.astype(str) == name).to_numpy(bool)


def prepare_tables(blocks: pd.DataFrame, intervals: pd.DataFrame, bandwidth: Bandwidth,
                   min_size: int = MIN_SIZE, t_end: int | None = None,
                   iteration: np.ndarray | None = None, ops: dict | None = None,
                   clock: dict | None = None) -> SwapProblem:
    """Build a :class:`SwapProblem` from a block table and an interval table.

    ``blocks``: the process's blocks (Trace.blocks columns; only ``counts_device``
    rows count).  ``intervals``: access_intervals() rows (block_id, size, start_t,
    end_t, kind, and start_seq/end_seq with ``ops``); only kind ``between`` of device blocks
    with size >= min_size and a positive ATI become candidates.  ``iteration``: optional
    label per interval row.  ``ops``: the compute streams the schedules are replayed on
    (:meth:`.clock.Clock.replay_ops`); None: one op at every interval end, one stream.
    ``clock``: the clock's JSON keys (default CPU)."""
    # the problem's own dict of the caller's arrays: the replay lets some of its columns go once read
    # (replay.streams), the caller's stay
    return _problem_of({"blocks": blocks, "intervals": intervals, "iteration": iteration}, bandwidth,
                       min_size=min_size, t_end=t_end, ops=None if ops is None else dict(ops), clock=clock)


def _narrow(x: np.ndarray) -> np.ndarray:
    """``x`` (int64 indices or labels, -1 for none) as int32 when every value fits (exact)."""
    if x.dtype == np.int32 or (len(x) and (int(x.max()) >= 2 ** 31 or int(x.min()) < -2 ** 31)):
        return x
    return x.astype(np.int32)


def _problem_of(parts: dict, bandwidth: Bandwidth, min_size: int = MIN_SIZE, t_end: int | None = None,
                ops: dict | None = None, clock: dict | None = None, on_disk: bool | None = None) -> SwapProblem:
    """:func:`prepare_tables` with its tables handed over in ``parts`` (blocks, intervals, iteration):
    each is let go once read, so that the problem is built in about the memory it keeps (issue 30)
    when the caller holds them nowhere else (:func:`prepare`)."""
    if min_size < 0:
        raise PyinterposeError(f"--min-size must be >= 0 (got {min_size})")
    blocks = parts.pop("blocks")
    if "counts_device" in blocks:
        dev = blocks["counts_device"].to_numpy(bool)
        if not dev.all():
            blocks = blocks[dev]
        del dev
    iv = parts.pop("intervals")
    ends = [int(t_end)] if t_end is not None else []
    if len(blocks):
        ends += [int(blocks["t_alloc"].max()), int(blocks["t_free"].max())]
    if len(iv):
        ends.append(int(iv["end_t"].max()))
    t_stop = max(ends) if ends else 0
    bids = blocks["block_id"].to_numpy(np.int64)

    # the candidates' rows and columns first, and the interval table let go (its seq columns, the rows
    # not kept, the caller's int64 labels), then the step function (issue 30: its sort's temporaries,
    # ~0.7 GB at 100 M events, are the build's peak)
    iv_size = iv["size"].to_numpy(np.int64)
    iv_start = iv["start_t"].to_numpy(np.int64)
    iv_end = iv["end_t"].to_numpy(np.int64)
    iv_bid = iv["block_id"].to_numpy(np.int64)
    keep = (iv_size >= max(1, min_size)) & (iv_end > iv_start)
    if "kind" in iv:
        keep &= _kind_is(iv["kind"], SWAP_INTERVAL_KIND)
    keep &= np.isin(iv_bid, bids)
    del bids
    every = bool(keep.all())

    def kept(x):                 # the kept rows (no copy when every row is kept)
        return x if every else x[keep]

    iteration = parts.pop("iteration", None)
    lab = np.full(int(keep.sum()), -1, np.int32) if iteration is None else _narrow(kept(np.asarray(iteration, np.int64)))
    del iteration
    synthetic = ops is None or not len(ops["seq"]) or "start_seq" not in iv
    if not synthetic:
        prev_op, next_op = _ops_of_intervals(ops, iv, keep)
        prev_op, next_op = _narrow(prev_op), _narrow(next_op)
    cols = {"block_id": kept(iv_bid), "size": kept(iv_size), "start_t": kept(iv_start), "end_t": kept(iv_end)}
    del iv, iv_size, iv_start, iv_end, iv_bid, keep
    if ondisk.wanted(len(cols["size"]), on_disk):
        # a long trace's candidates in files before the step function's sort (.ondisk: issue 30), and
        # what was read of them given back
        cols = {k: ondisk.to_file(v) for k, v in cols.items()}
        lab = ondisk.to_file(lab)
        if not synthetic:
            prev_op, next_op = ondisk.to_file(prev_op), ondisk.to_file(next_op)
        pages.release_all(*cols.values(), lab, *(() if synthetic else (prev_op, next_op)))
        give_back()
    steps_t, live, ev_t, ev_d = _live_steps(blocks, t_stop)
    del blocks
    if synthetic:
        ops, prev_op, next_op = _synthetic_ops(pd.DataFrame({k: cols[k] for k in ("start_t", "end_t")}, copy=False),
                                               ev_t)
    c = pd.DataFrame({**cols, "iteration": lab, "prev_op": _narrow(prev_op), "next_op": _narrow(next_op)}, copy=False)
    del cols, lab, prev_op, next_op
    # ati_ns, t_out_ns, t_in_ns and doa_ns are functions of the size and the times: made where read
    # (column(); issue 30: 32 bytes a candidate, ~0.3 GB at 100 M events, not held through the runs)
    start, end, size_i = c["start_t"].to_numpy(), c["end_t"].to_numpy(), c["size"].to_numpy()

    peak = int(live.max()) if len(live) else 0
    narrow = np.int32 if len(live) < 2 ** 31 - 1 else np.int64      # the ranges' type (as lo_iv, hi_iv are kept)
    lo, hi = _steps_inside(steps_t, start, end, narrow)
    if len(steps_t) and float(max(abs(int(steps_t[0])), abs(int(steps_t[-1])))) < EXACT_T:
        lo_f, hi_f = lo, hi     # int64 times convert to float64 exactly: the scheduler's ranges are these
    else:
        lo_f, hi_f = _steps_inside(steps_t.astype(np.float64), start.astype(np.float64), end.astype(np.float64),
                                   narrow)
    if ondisk.wanted(len(c), on_disk):
        # a long trace's steps in their file now, not resident beside the floor's running sum below (issue
        # 30: 8 bytes a step, ~0.17 GB at 100 M events; put_on_disk keeps them there)
        view = ev_t is not None and np.shares_memory(ev_t, steps_t)
        steps_t = ondisk.to_file(steps_t)
        if view:
            ev_t = steps_t[:-1]
            ev_t.flags.writeable = False
        pages.release_all(steps_t)
        give_back()
    # straddles: a step at the peak lies in [lo, hi)
    at_peak = np.flatnonzero(live == peak) if len(live) else np.zeros(0, np.int64)
    strad = np.empty(len(lo), bool)
    for p in range(0, len(lo), COLUMN_PIECE):
        q = p + COLUMN_PIECE
        np.less(np.searchsorted(at_peak, lo[p:q]), np.searchsorted(at_peak, hi[p:q]), out=strad[p:q])
    c["straddles_peak"] = strad
    del at_peak, strad
    floor = 0
    if len(live):
        cover = np.zeros(len(live) + 1, np.int64)
        np.add.at(cover, lo, size_i)
        np.add.at(cover, hi, -size_i)
        under = cover[:-1]
        np.cumsum(under, out=under)
        np.subtract(live, under, out=under)          # the live bytes with every candidate away
        floor = int(max(0, under.max()))
        del cover, under
    span = int(steps_t[-1] - steps_t[0]) if len(steps_t) else 0
    if lo_f is not lo:
        del lo, hi

    p = SwapProblem(bandwidth=bandwidth, steps_t=steps_t, live=live, events_t=ev_t, ev_d=ev_d,
                    candidates=c, peak_before=peak, floor=floor, span_ns=span,
                    lo_iv=lo_f, hi_iv=hi_f, ops=ops, clock=clock)
    if ondisk.wanted(len(c), on_disk):       # a long trace's problem in files, mapped (issue 30)
        ondisk.put_on_disk(p)
    return p


def _ops_of_intervals(ops: dict, iv: pd.DataFrame, keep: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each kept interval's previous access op (the last op at or before its start seq) and next
    access op (the first at or after its end seq; -1 none), as indices into ``ops`` (int32 where
    every index fits); a piece of ``COLUMN_PIECE`` intervals at a time (issue 30: no int64
    temporaries of every interval, ~0.4 GB at 100 M events)."""
    seq = ops["seq"]
    n = len(seq)
    dt = np.int32 if n < 2 ** 31 - 1 else np.int64
    m = int(np.count_nonzero(keep))
    prev, nxt = np.empty(m, dt), np.empty(m, dt)
    start_seq, end_seq = iv["start_seq"].to_numpy(), iv["end_seq"].to_numpy()
    w = 0
    for lo in range(0, len(keep), COLUMN_PIECE):
        rows = np.flatnonzero(keep[lo:lo + COLUMN_PIECE])
        rows += lo
        k = len(rows)
        prev[w:w + k] = searchsorted(seq, start_seq[rows].astype(np.int64, copy=False), side="right") - 1
        a = searchsorted(seq, end_seq[rows].astype(np.int64, copy=False), side="left")
        nxt[w:w + k] = np.where(a < n, a, -1)
        w += k
    return prev, nxt


def _synthetic_ops(iv: pd.DataFrame, events_t: np.ndarray) -> tuple[dict, np.ndarray, np.ndarray]:
    """The compute stream of a problem built from bare tables (no trace): one op at every
    interval end and every allocation or free, one stream, each keeping it until the next
    (the CPU clock's reading: the program is the stream)."""
    start = iv["start_t"].to_numpy(np.int64)
    end = iv["end_t"].to_numpy(np.int64)
    times = np.unique(np.concatenate([start, end, np.asarray(events_t, np.int64)]))
    n = len(times)
    dur = np.zeros(n, np.float64)
    if n > 1:
        dur[:-1] = np.diff(times).astype(np.float64)
    ops = {"seq": np.arange(n, dtype=np.int64), "start": times.astype(np.float64), "dur": dur,
           "stream": np.zeros(n, np.int32)}
    return ops, np.searchsorted(times, start).astype(np.int64), np.searchsorted(times, end).astype(np.int64)


def _between_intervals(trace, pid: int, min_size: int, to_files: bool = False) -> pd.DataFrame:
    """The rows of ``access_intervals(trace, pid)`` that :func:`prepare_tables` can keep (kind
    ``between``, size >= ``min_size``), the columns it reads, made a piece of blocks at a time
    (:func:`..intervals.pieces`: the whole table is never held).  ``to_files``: each piece's rows
    written to files as made and the columns mapped back (a long trace's: issue 30, the rows of every
    piece were ~0.45 GB resident at 100 M events while the pass went on, twice that as they were joined);
    in memory where the files cannot be made."""
    from ..intervals import INTERVAL_KINDS, pieces, swap_rows  # lazy: see the note above STRATEGIES
    from ..spillfiles import Files  # lazy: see the note above STRATEGIES

    written = swap_rows(trace, pid, min_size)      # by the access pass just before (intervals.for_swap)
    if written is not None:
        return written
    cols = ("block_id", "size", "start_t", "end_t", "start_seq", "end_seq")
    code = INTERVAL_KINDS.index(SWAP_INTERVAL_KIND)
    out = None
    if to_files:
        try:
            out = Files("pyinterpose-swaprows-")
            for k in cols:
                out.add_column(k, np.int64)
        except OSError:
            out = None
    parts = {k: [] for k in cols}
    try:
        for p in pieces(trace, pid, columns=cols + ("kind",)):
            keep = p["kind"] == code
            keep &= p["size"] >= max(1, min_size)
            for k in cols:
                if out is not None:
                    out.append(k, p[k][keep].astype(np.int64, copy=False))
                else:
                    parts[k].append(p[k][keep])
            del p, keep
        if out is not None:
            rows = out.finish()
            return pd.DataFrame({k: np.asarray(rows[k]) for k in cols}, copy=False)
    except OSError:
        # TMPDIR full: the pass again, in memory (the same rows)
        out.abort()
        return _between_intervals(trace, pid, min_size)
    except BaseException:
        if out is not None:
            out.abort()
        raise
    # each column joined and its pieces let go before the next (not every piece beside every column)
    joined = {}
    for k in cols:
        v = parts.pop(k)
        joined[k] = np.concatenate(v) if v else np.zeros(0, np.int64)
        del v
    return pd.DataFrame(joined, copy=False)


# Above this many blocks in the trace, prepare finds the iterations and the access intervals one
# after the other instead of side by side: each pass's peak is then the process's, not their sum
# (issue 30: at 100 M events each is ~2 GB).  The answers are the same either way.
SIDE_BY_SIDE_BLOCKS = 4_000_000


def prepare(trace, bandwidth: Bandwidth, min_size: int = MIN_SIZE, pid: int | None = None,
            on_disk: bool | None = None) -> SwapProblem:
    """:func:`prepare_tables` for one process of a trace (default: the main process).  ``on_disk``: the
    problem in files (:mod:`.ondisk`; None: when it is long, False: in memory)."""
    pid = trace.main_pid if pid is None else int(pid)
    if pid is None:
        raise PyinterposeError("the trace has no allocations: nothing to swap")
    from ..clock import clock_of  # lazy: see the note above STRATEGIES
    from ..iterations import find_iterations  # lazy: see the note above STRATEGIES

    tb = trace.blocks
    mine = tb["pid"].to_numpy() == pid
    if not mine.any():
        raise PyinterposeError(f"process {pid} has no allocations in this trace")
    # the iterations (for the candidates' labels) on a side thread while the access intervals
    # are found: neither needs the other, and numpy and the C pass release the GIL. Both are
    # kept by Trace.derived: where an analysis found them already, that part returns at once.
    # On a long trace one after the other (SIDE_BY_SIDE_BLOCKS).
    long = len(tb) > SIDE_BY_SIDE_BLOCKS
    disk = False
    if not long:
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="pyinterpose-swap") as ex:
            found = ex.submit(find_iterations, trace, pid=pid)
            iv = _between_intervals(trace, pid, min_size)
            try:
                found.result()
            except PyinterposeError:
                pass                      # _iteration_labels says why, in the problem's notes
    else:
        try:
            find_iterations(trace, pid=pid)
        except PyinterposeError:
            pass
        pages.release_tables(trace)
        give_back()                     # the iterations' peak not kept resident through the intervals
        iv = _between_intervals(trace, pid, min_size,
                                to_files=ondisk.PREPARE_TO_FILES and ondisk.wanted(len(tb), on_disk))
        # on disk (.ondisk) the intervals' columns, the labels and the blocks' columns below go to files as
        # they are made: read once by the build, not resident beside each other (issue 30: the build's peak
        # 1802 -> 1484 MiB at 100 M events; without it the swap command peaked at 2029-2059 MiB against
        # 1930-1965, in the same time within the machine's spread)
        disk = ondisk.PREPARE_TO_FILES and ondisk.wanted(len(iv), on_disk)
        if disk:
            iv = pd.DataFrame({k: ondisk.to_file(iv[k].to_numpy()) for k in iv.columns}, copy=False)
        give_back()
    trace.forget("access.touches")      # kept inside intervals.shared(): nothing after this reads them
    lab, note = _iteration_labels(trace, pid, iv["start_t"].to_numpy(np.int64))
    if long and disk:
        lab = ondisk.to_file(lab)
        pages.release_frame(iv)
    clock = clock_of(trace, pid)
    # the rows prepare_tables keeps (device-counted blocks of the process), only the columns it reads
    rows = np.flatnonzero(mine & tb["counts_device"].to_numpy(bool)) if "counts_device" in tb else np.flatnonzero(mine)
    del mine
    to_file = ondisk.to_file if long and disk else (lambda x: x)
    cols = {k: to_file(tb[k].to_numpy()[rows]) for k in BLOCK_COLUMNS if k in tb and k != "counts_device"}
    t_end = trace.end_ns
    if clock.device:         # the blocks' allocations and frees where the GPU reached them
        for t, sq in (("t_alloc", "seq_alloc"), ("t_free", "seq_free")):
            cols[t] = to_file(clock.host_times(tb[sq].to_numpy()[rows], cols[t]))
        t_end = max(t_end, int(clock.ops.frontier[-1]) if len(clock.ops.frontier) else 0)
    blocks = pd.DataFrame(cols, copy=False)
    del cols
    del rows
    if long:
        pages.release_tables(trace)     # the blocks' mapped columns read above, not resident through the ops
    ops, clock_keys, clock_note = clock.replay_ops(), clock.as_dict(), clock.note
    if long:
        # the replay's ops in files (.ondisk), not resident through the build (issue 30: ~0.33 GB at 100 M events)
        ops = {k: ondisk.to_file(v) for k, v in ops.items()}
        # the problem holds what the runs read of the clock (its replay ops): the clock's own ops go
        # now, not after the problem is built (issue 30: ~0.45 GB at 100 M events, resident through
        # the build's peak otherwise; every caller let it go right after; asked again, made again)
        del clock
        trace.forget("clock")
        give_back()
        pages.release_tables(trace)
    parts = {"blocks": blocks, "intervals": iv, "iteration": lab}
    del blocks, iv, lab                 # held by parts only: let go as the problem is built
    p = _problem_of(parts, bandwidth, min_size=min_size, t_end=t_end, ops=ops, clock=clock_keys, on_disk=on_disk)
    del ops
    p.pid = pid
    p.span_ns = max(int(p.span_ns), int(trace.duration_ns))    # overhead = stall / the run's duration
    if long:                            # the duration read every table's times: not resident through the runs
        pages.release_tables(trace)
    p.notes.append(note)
    if clock_note:
        p.notes.append(clock_note)
    if len(trace.accesses) == 0:
        p.notes.append("the trace has no access events (captured with --no-access?): no candidates")
    return p
