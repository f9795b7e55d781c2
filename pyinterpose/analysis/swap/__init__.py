"""Host-swap evaluation (paper 2, part 2: SINGA's SwapGPU; paper 1's outliers).

Question answered: if some blocks were copied to host memory between two of their
accesses and copied back before the next one, how far would the peak of live
device bytes drop, and at what cost in stalls?

Pipeline (pure functions over tables):

1. **Candidates** — :func:`prepare`: the access->access intervals
   (``access_intervals`` kind ``between``) of the process's device blocks of at
   least ``min_size`` bytes (default 1 MiB, SINGA's ``smallest_block``), each
   labelled with its iteration; those that straddle the peak come first in
   every ordering.
2. **Scores** — :func:`order`: ``doa`` (duration of absence = ATI minus both
   transfer times; SINGA subtracted the swap-out time twice), ``aoa`` (DOA x
   size when DOA >= 0, else DOA / size), ``wdoa`` (time-integral of the overload
   ``max(0, live - budget)`` over the absence window, divided by the peak
   overload ``peak - budget``: seconds of absence weighted by how far memory
   stands above the budget; SINGA's version was dead code), ``vote`` (sum of the
   three ranks, lowest first), ``size`` (largest first), ``outlier`` (paper 1:
   ATI x size, largest first).
3. **Schedulers** — :func:`schedule`: one PCIe channel per direction, transfers
   in one direction serialised, each costing ``latency + size / bandwidth``; the
   timeline is the trace's own (ns).  ``no-overhead`` takes a swap only when both
   transfers hide inside the interval (swap-out after the previous access,
   swap-in done by the next); ``budget`` keeps the peak <= budget: first with
   swaps that hide and cover all the over-budget time in their interval, then
   with swaps that stall, counting the stalls: the program is assumed to pause
   (a) at the first over-budget moment until the swap-out has finished, (b) at
   the next access until the swap-in has finished.  Whenever the budget is at
   least the swap floor, budget mode meets it.  Both are greedy in score order and then drop swaps that turn out
   unnecessary for the peak reached.
4. **Validation** — :func:`validate_schedule` checks every schedule.

The greedy decisions use the live-bytes step function on the trace's alloc/free
times (a swap lowers a step only if its away window covers the whole step; this
never under-states the peak); the reported ``peak_after`` is then recomputed
exactly with the swap windows as extra free/alloc events.
"""
from __future__ import annotations

import itertools
import os
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from ...errors import PyinterposeError
from ..bandwidth import Bandwidth, resolve_bandwidth
from .validate import validate_schedule  # noqa: F401  (part of the public API)

STRATEGIES = ("doa", "aoa", "wdoa", "vote", "size", "outlier")
MODES = ("no-overhead", "budget")
MIN_SIZE = 1 << 20
SWAP_INTERVAL_KIND = "between"   # access -> access intervals of access_intervals()

BLOCK_COLUMNS = ["block_id", "size", "t_alloc", "t_free", "freed", "counts_device"]   # what prepare reads
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
    events_d: np.ndarray       # int64 +size / -size
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
    def default_budget(self) -> int:
        """Half-way between the swap floor and the peak (used when no budget is given)."""
        return int(self.floor + (self.peak_before - self.floor) // 2)


def _steps_inside(steps_t: np.ndarray, a, b) -> tuple[np.ndarray, np.ndarray]:
    """Index range [lo, hi) of the steps lying entirely inside [a, b) (vectorised)."""
    n = len(steps_t) - 1
    lo = np.searchsorted(steps_t, a, side="left")
    hi = np.searchsorted(steps_t, b, side="right") - 1
    lo = np.minimum(lo, n)
    hi = np.clip(hi, lo, n)
    return lo.astype(np.int64), hi.astype(np.int64)


def _live_steps(blocks: pd.DataFrame, t_end: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(steps_t, live, events_t, events_d) of the blocks' live device bytes; the events in time order."""
    freed = blocks["freed"].to_numpy(bool)
    size = blocks["size"].to_numpy(np.int64)
    t = np.concatenate([blocks["t_free"].to_numpy(np.int64)[freed], blocks["t_alloc"].to_numpy(np.int64)])
    d = np.concatenate([-size[freed], size])
    if len(t) == 0:
        return np.array([0, max(t_end, 0)], np.int64), np.zeros(1, np.int64), t, d
    order = np.argsort(t, kind="stable")     # the value after an instant does not depend on the order inside it
    t, d = t[order], d[order]
    cum = np.cumsum(d)
    last = np.ones(len(t), dtype=bool)
    last[:-1] = t[1:] != t[:-1]          # value after the last event at each instant
    ut, live = t[last], cum[last]
    steps_t = np.append(ut, max(int(t_end), int(ut[-1])))
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
        return int(max(0, int(live.max())))
    size = sched["size"].to_numpy(np.int64)
    ts = np.concatenate([sched["free_t"].to_numpy(np.float64), sched["realloc_t"].to_numpy(np.float64)])
    ds = np.concatenate([-size, size])
    o = np.argsort(ts, kind="stable")
    ts, cs = ts[o], np.cumsum(ds[o])
    ut = _steps_f(problem)[:-1]
    # after each step's instant: its live bytes + the windows' deltas up to it (a window end
    # counts from the first step starting at or after it)
    delta = np.zeros(len(ut) + 1, np.int64)
    np.add.at(delta, np.searchsorted(ut, ts, side="left"), ds[o])
    at_steps = live + np.cumsum(delta[:-1])
    # after each window end's instant: the live bytes of the last step starting by it + the deltas up to it
    kb = np.searchsorted(ut, ts, side="right") - 1
    at_sched = np.where(kb >= 0, live[np.maximum(kb, 0)], 0) + cs[np.searchsorted(ts, ts, side="right") - 1]
    return int(max(0, int(at_steps.max()), int(at_sched.max())))


def _steps_f(problem: SwapProblem) -> np.ndarray:
    """The step times as float64 (the scheduler's clock), computed once per problem."""
    m = problem.memo
    if "steps_f" not in m:
        m["steps_f"] = np.ascontiguousarray(problem.steps_t, dtype=np.float64)
    return m["steps_f"]


def _iteration_labels(trace, pid, start_t: np.ndarray) -> tuple[np.ndarray, str]:
    try:
        from ..iterations import find_iterations
        it = find_iterations(trace, pid=pid)
    except (ImportError, PyinterposeError) as e:
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
    if min_size < 0:
        raise PyinterposeError(f"--min-size must be >= 0 (got {min_size})")
    if "counts_device" in blocks:
        blocks = blocks[blocks["counts_device"].to_numpy(bool)]
    ends = [int(t_end)] if t_end is not None else []
    if len(blocks):
        ends += [int(blocks["t_alloc"].max()), int(blocks["t_free"].max())]
    if len(intervals):
        ends.append(int(intervals["end_t"].max()))
    t_stop = max(ends) if ends else 0
    steps_t, live, ev_t, ev_d = _live_steps(blocks, t_stop)

    iv = intervals
    iv_size = iv["size"].to_numpy(np.int64)
    iv_start = iv["start_t"].to_numpy(np.int64)
    iv_end = iv["end_t"].to_numpy(np.int64)
    iv_bid = iv["block_id"].to_numpy(np.int64)
    keep = (iv_size >= max(1, min_size)) & (iv_end > iv_start)
    if "kind" in iv:
        keep &= _kind_is(iv["kind"], SWAP_INTERVAL_KIND)
    keep &= np.isin(iv_bid, blocks["block_id"].to_numpy(np.int64))
    lab = np.full(len(iv), -1, np.int64) if iteration is None else np.asarray(iteration, np.int64)
    if ops is None or not len(ops["seq"]) or "start_seq" not in iv:
        ops, prev_op, next_op = _synthetic_ops(iv[keep], ev_t)
    else:
        prev_op, next_op = _ops_of_intervals(ops, iv, keep)
    c = pd.DataFrame({
        "block_id": iv_bid[keep],
        "size": iv_size[keep],
        "start_t": iv_start[keep],
        "end_t": iv_end[keep],
        "iteration": lab[keep],
        "prev_op": prev_op,
        "next_op": next_op,
    }, copy=False)
    start, end, size_i = c["start_t"].to_numpy(), c["end_t"].to_numpy(), c["size"].to_numpy()
    c["ati_ns"] = end - start
    size = size_i.astype(np.float64)
    c["t_out_ns"] = bandwidth.d2h_seconds(size) * 1e9
    c["t_in_ns"] = bandwidth.h2d_seconds(size) * 1e9
    c["doa_ns"] = c["ati_ns"].to_numpy() - c["t_out_ns"].to_numpy() - c["t_in_ns"].to_numpy()

    peak = int(live.max()) if len(live) else 0
    lo, hi = _steps_inside(steps_t, start, end)
    if len(steps_t) and float(max(abs(int(steps_t[0])), abs(int(steps_t[-1])))) < EXACT_T:
        lo_f, hi_f = lo, hi     # int64 times convert to float64 exactly: the scheduler's ranges are these
    else:
        lo_f, hi_f = _steps_inside(steps_t.astype(np.float64), start.astype(np.float64), end.astype(np.float64))
    is_peak = np.concatenate([[0], np.cumsum(live == peak)]) if len(live) else np.zeros(1, np.int64)
    c["straddles_peak"] = (is_peak[hi] - is_peak[lo]) > 0
    cover = np.zeros(len(live) + 1, np.int64)
    np.add.at(cover, lo, size_i)
    np.add.at(cover, hi, -size_i)
    floor = int(max(0, (live - np.cumsum(cover)[:-1]).max())) if len(live) else 0
    span = int(steps_t[-1] - steps_t[0]) if len(steps_t) else 0
    return SwapProblem(bandwidth=bandwidth, steps_t=steps_t, live=live, events_t=ev_t, events_d=ev_d,
                       candidates=c, peak_before=peak, floor=floor, span_ns=span,
                       lo_iv=lo_f, hi_iv=hi_f, ops=ops, clock=clock)


def _ops_of_intervals(ops: dict, iv: pd.DataFrame, keep: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each kept interval's previous access op (the last op at or before its start seq) and next
    access op (the first at or after its end seq; -1 none), as indices into ``ops``."""
    seq = ops["seq"]
    n = len(seq)
    prev = np.searchsorted(seq, iv["start_seq"].to_numpy(np.int64)[keep], side="right") - 1
    nxt = np.searchsorted(seq, iv["end_seq"].to_numpy(np.int64)[keep], side="left")
    return prev.astype(np.int64), np.where(nxt < n, nxt, -1).astype(np.int64)


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
           "acc": np.zeros(n, np.float64), "stream": np.zeros(n, np.int32)}
    return ops, np.searchsorted(times, start).astype(np.int64), np.searchsorted(times, end).astype(np.int64)


def prepare(trace, bandwidth: Bandwidth, min_size: int = MIN_SIZE, pid: int | None = None) -> SwapProblem:
    """:func:`prepare_tables` for one process of a trace (default: the main process)."""
    from ..access import access_intervals

    pid = trace.main_pid if pid is None else int(pid)
    if pid is None:
        raise PyinterposeError("the trace has no allocations: nothing to swap")
    tb = trace.blocks
    mine = tb["pid"].to_numpy() == pid
    # only the columns prepare_tables reads, selected without copying the whole table
    blocks = pd.DataFrame({k: tb[k].to_numpy()[mine] for k in BLOCK_COLUMNS if k in tb}, copy=False)
    if len(blocks) == 0:
        raise PyinterposeError(f"process {pid} has no allocations in this trace")
    # the iterations (for the candidates' labels) on a side thread while the access intervals
    # are found: neither needs the other, and numpy and the C pass release the GIL. Both are
    # kept by Trace.derived: where an analysis found them already, that part returns at once.
    from concurrent.futures import ThreadPoolExecutor

    from ..iterations import find_iterations

    from ..clock import clock_of

    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="pyinterpose-swap") as ex:
        found = ex.submit(find_iterations, trace, pid=pid)
        iv = access_intervals(trace, pid=pid)
        between = _kind_is(iv["kind"], SWAP_INTERVAL_KIND)
        between = between & (iv["size"].to_numpy(np.int64) >= max(1, min_size))     # what prepare_tables keeps
        iv = pd.DataFrame({k: iv[k].to_numpy()[between]
                           for k in ("block_id", "size", "start_t", "end_t", "start_seq", "end_seq")}, copy=False)
        try:
            found.result()
        except PyinterposeError:
            pass                      # _iteration_labels says why, in the problem's notes
    lab, note = _iteration_labels(trace, pid, iv["start_t"].to_numpy(np.int64))
    clock = clock_of(trace, pid)
    t_end = trace.end_ns
    if clock.device:         # the blocks' allocations and frees where the GPU reached them
        blocks = blocks.copy()
        for t, sq in (("t_alloc", "seq_alloc"), ("t_free", "seq_free")):
            blocks[t] = clock.host_times(tb[sq].to_numpy()[mine], blocks[t].to_numpy())
        t_end = max(t_end, int(clock.ops.frontier[-1]) if len(clock.ops.frontier) else 0)
    p = prepare_tables(blocks, iv, bandwidth, min_size=min_size, t_end=t_end, iteration=lab,
                       ops=clock.replay_ops(), clock=clock.as_dict())
    p.pid = pid
    p.notes.append(note)
    if clock.note:
        p.notes.append(clock.note)
    if len(trace.accesses) == 0:
        p.notes.append("the trace has no access events (captured with --no-access?): no candidates")
    return p


def problem_for(trace, bandwidth: Bandwidth | float | None = None, min_size: int = MIN_SIZE, pid: int | None = None,
            latency_us: float | None = None) -> SwapProblem:
    """:func:`prepare` with the bandwidth resolved as :func:`analyse` does, prepared once per trace
    (kept by ``Trace.derived`` when the trace has it): pass it as ``problem=`` to :func:`evaluate`,
    :func:`analyse` and :func:`pareto` to share it."""
    bw = _bandwidth_arg(trace, bandwidth, latency_us)
    derived = getattr(trace, "derived", None)
    if derived is None:
        return prepare(trace, bw, min_size=min_size, pid=pid)
    return derived(("swap.prepare", bw, int(min_size), None if pid is None else int(pid)),
                   lambda: prepare(trace, bw, min_size=min_size, pid=pid))


# ---- scores ----------------------------------------------------------------------------

def wdoa(problem: SwapProblem, budget: int) -> np.ndarray:
    """WDOA (ns) per candidate: integral over the absence window [start + t_out, end - t_in]
    of max(0, live - budget), divided by (peak - budget).  Candidates with DOA < 0 get
    their (negative) DOA; when budget >= peak every value is 0."""
    c = problem.candidates
    doa = c["doa_ns"].to_numpy(np.float64)
    over_peak = problem.peak_before - budget
    if over_peak <= 0 or len(c) == 0:
        return np.where(doa < 0, doa, 0.0)
    hides, pa, pb = _wdoa_points(problem)
    w = doa.copy()
    w[hides] = _absence_overload(problem, budget, pa, pb)
    return w


def _absence_overload(problem: SwapProblem, budget: int, pa, pb) -> np.ndarray:
    """WDOA's value from the window ends' points ``pa``, ``pb`` (of :func:`_wdoa_points`, or a
    subset of them): integral of max(0, live - budget) over [a, b] / (peak - budget), for
    budget < peak.  Never negative (the integral only grows along the steps)."""
    st = _steps_f(problem)
    g = np.maximum(problem.live - budget, 0).astype(np.float64)          # overload per step
    cum = np.concatenate([[0.0], np.cumsum(g * np.diff(st))])           # integral up to st[k]

    def integral(pt):
        k, dx, before, after = pt
        val = cum[k] + g[k] * dx
        return np.where(before, 0.0, np.where(after, cum[-1], val))

    return (integral(pb) - integral(pa)) / (problem.peak_before - budget)


def _wdoa_points(problem: SwapProblem):
    """(indices of the candidates that can hide, (points of their windows' starts), (of their
    ends)): where each absence window's ends fall on the steps, per end x (step k holding x,
    x - start of step k, x before the first step, x after the last); budget-independent, kept
    per problem. Only those that can hide (DOA >= 0): the others' WDOA is their own DOA."""
    m = problem.memo
    if "wdoa_points" not in m:
        c = problem.candidates
        st = _steps_f(problem)
        n = len(problem.live)
        hides = np.flatnonzero(c["doa_ns"].to_numpy(np.float64) >= 0)
        a = c["start_t"].to_numpy(np.float64)[hides] + c["t_out_ns"].to_numpy(np.float64)[hides]
        b = c["end_t"].to_numpy(np.float64)[hides] - c["t_in_ns"].to_numpy(np.float64)[hides]

        def points(x):
            k = np.clip(np.searchsorted(st, x, side="right") - 1, 0, n - 1)
            return k, np.minimum(x, st[-1]) - st[k], x < st[0], x >= st[-1]

        m["wdoa_points"] = (hides, points(np.minimum(a, b)), points(b))
    return m["wdoa_points"]


def scores(problem: SwapProblem, strategy: str, budget: int) -> np.ndarray:
    """Score per candidate (higher = swap first)."""
    c = problem.candidates
    doa = c["doa_ns"].to_numpy(np.float64)
    size = c["size"].to_numpy(np.float64)
    if strategy == "doa":
        return doa
    if strategy == "aoa":
        return np.where(doa >= 0, doa * size, doa / np.maximum(size, 1))
    if strategy == "wdoa":
        return wdoa(problem, budget)
    if strategy == "vote":
        ranks = [_rank(problem, s, budget) for s in ("doa", "aoa", "wdoa")]
        return -np.sum(ranks, axis=0)
    if strategy == "size":
        return size
    if strategy == "outlier":
        return c["ati_ns"].to_numpy(np.float64) * size
    raise PyinterposeError(f"unknown swap strategy {strategy!r} (choose from {', '.join(STRATEGIES)})")


def _rank_desc_min(x: np.ndarray) -> np.ndarray:
    """``pd.Series(x).rank(ascending=False, method="min")`` (float64 ranks, 1 = largest; ties take
    the lowest rank) by one sort."""
    x = np.asarray(x, dtype=np.float64)
    n = len(x)
    if n == 0 or np.isnan(x).any():
        return pd.Series(x).rank(ascending=False, method="min").to_numpy()
    o = np.argsort(-x)          # ties share their group's first rank whatever their order
    v = x[o]
    first = np.ones(n, dtype=bool)
    first[1:] = v[1:] != v[:-1]
    group_start = np.maximum.accumulate(np.where(first, np.arange(n), 0))
    r = np.empty(n, np.float64)
    r[o] = group_start + 1
    return r


def _rank(problem: SwapProblem, strategy: str, budget: int) -> np.ndarray:
    """:func:`_rank_desc_min` of a strategy's scores, kept per problem for the budget-independent ones."""
    if strategy == "wdoa":
        return _rank_desc_min(_scores(problem, strategy, budget))
    key = ("rank", strategy)
    m = problem.memo
    if key not in m:
        r = _rank_desc_min(_scores(problem, strategy, budget))
        r.flags.writeable = False
        m[key] = r
    return m[key]


def _scores(problem: SwapProblem, strategy: str, budget: int) -> np.ndarray:
    """:func:`scores`, kept per problem (read-only; WDOA and vote per budget)."""
    key = ("scores", strategy, int(budget) if strategy in ("wdoa", "vote") else None)
    m = problem.memo
    if key not in m:
        v = np.asarray(scores(problem, strategy, budget))
        v.flags.writeable = False
        m[key] = v
    return m[key]


def order(problem: SwapProblem, strategy: str, budget: int) -> np.ndarray:
    """Candidate indices in swap order: peak-straddling first, then by score, then DOA
    (then block, then start: ``np.lexsort((start_t, block_id, -doa_ns, -score, ~straddles_peak))``).

    The tie-breaking order (DOA, block, start) is the same for every strategy and is sorted once
    per problem; each strategy then needs one stable sort of its score over it."""
    c = problem.candidates
    if strategy not in STRATEGIES:
        raise PyinterposeError(f"unknown swap strategy {strategy!r} (choose from {', '.join(STRATEGIES)})")
    if strategy == "vote":
        fast = _vote_order(problem, budget)
        if fast is not None:
            return fast
    s = _scores(problem, strategy, budget)
    base = _tie_order(problem)
    neg = -s[base]
    n = len(base)
    if n and np.isfinite(neg).all():
        lo, hi = float(neg.min()), float(neg.max())
        span = hi - lo + 1.0
        if 2.0 * span * n < 2.0 ** 62 and (neg == np.rint(neg)).all():
            # whole-number scores in a small range (the vote's rank sums): (not straddling, score,
            # place in the tie order) packed into one distinct int64 key, and one unstable sort
            # (faster than the stable float sort) gives the same order
            strad = c["straddles_peak"].to_numpy(bool)[base]
            key = (neg - lo).astype(np.int64)
            key += (~strad).astype(np.int64) * int(span)
            key *= n
            key += np.arange(n, dtype=np.int64)
            return base[np.argsort(key)]
    by_score = base[np.argsort(neg, kind="stable")]
    strad = c["straddles_peak"].to_numpy(bool)[by_score]
    return np.concatenate([by_score[strad], by_score[~strad]])


def _tie_order(problem: SwapProblem) -> np.ndarray:
    """The candidates by -DOA, then block, then start (every strategy's tie-breaking), once per problem."""
    m = problem.memo
    if "tie_order" not in m:
        c = problem.candidates
        m["tie_order"] = np.lexsort((c["start_t"].to_numpy(), c["block_id"].to_numpy(), -c["doa_ns"].to_numpy()))
    return m["tie_order"]


def _vote_fixed(problem: SwapProblem) -> dict | None:
    """What the vote order shares across budgets (once per problem; None: use the general path).

    The vote's score is the sum of three ranks (DOA, AOA, WDOA at the budget). Only WDOA
    depends on the budget, and only for the candidates that can hide (DOA >= 0): the others
    score their own negative DOA, below every hideable one's WDOA (>= 0). So a candidate that
    cannot hide has a rank sum of its DOA and AOA ranks + its DOA rank again (where its WDOA
    ranks), the same at every budget, and its place among the others
    like it is fixed: they are sorted once here, by one distinct int64 key per candidate
    (not straddling the peak, rank sum, place in the tie order) that orders exactly as
    :func:`order`'s sort. At 10 M events that is 1.03 M of 1.08 M candidates."""
    m = problem.memo
    if "vote_fixed" in m:
        return m["vote_fixed"]
    c = problem.candidates
    n = len(c)
    doa = c["doa_ns"].to_numpy(np.float64)
    big = 3 * n + 1                     # above every rank sum (each rank <= n)
    if n == 0 or np.isnan(doa).any() or 2.0 * big * n + n >= 2.0 ** 62:
        m["vote_fixed"] = None
        return None
    base = _tie_order(problem)
    place = np.empty(n, np.int64)
    place[base] = np.arange(n, dtype=np.int64)
    ranks = _rank(problem, "doa", 0) + _rank(problem, "aoa", 0)           # budget-independent
    vi, pa, pb = _wdoa_points(problem)          # the hideable ones (DOA >= 0) and their windows
    fi = np.flatnonzero(~(doa >= 0))
    not_strad = (~c["straddles_peak"].to_numpy(bool)).astype(np.int64)

    def key(idx, rank_sum):
        k = not_strad[idx] * big
        k += rank_sum.astype(np.int64)
        k *= n
        k += place[idx]
        return k

    # their WDOA rank: every hideable candidate's DOA (>= 0) is above theirs, so their WDOA (=
    # DOA) ranks where their DOA ranks among all
    kf = key(fi, ranks[fi] + _rank(problem, "doa", 0)[fi])
    o = np.argsort(kf)
    m["vote_fixed"] = fixed = {"idx": fi[o], "key": kf[o], "var": vi, "var_ranks": ranks[vi],
                               "points": (pa, pb), "key_of": key}
    return fixed


def _vote_order(problem: SwapProblem, budget: int) -> np.ndarray | None:
    """:func:`order` for the vote at ``budget`` from :func:`_vote_fixed`: WDOA and its rank for
    the candidates that can hide only, their keys sorted, merged into the fixed ones."""
    fixed = _vote_fixed(problem)
    if fixed is None:
        return None
    vi = fixed["var"]
    if problem.peak_before - budget > 0 and len(vi):
        w = _absence_overload(problem, budget, *fixed["points"])
        if not (w >= 0).all():          # NaN or a negative value: the general path decides
            return None
    else:
        w = np.zeros(len(vi))
    kv = fixed["key_of"](vi, fixed["var_ranks"] + _rank_desc_min(w))
    o = np.argsort(kv)
    # every key is distinct (it holds the place in the tie order): insert each hideable
    # candidate before the first fixed one with a larger key
    return np.insert(fixed["idx"], np.searchsorted(fixed["key"], kv[o]), vi[o])


def _order(problem: SwapProblem, strategy: str, budget: int) -> np.ndarray:
    """:func:`order`, kept per problem (read-only): both modes of a strategy share it."""
    key = ("order", strategy, int(budget))
    m = problem.memo
    if key not in m:
        o = order(problem, strategy, budget)
        o.flags.writeable = False
        m[key] = o
    return m[key]


def candidate_table(problem: SwapProblem, budget: int | None = None) -> pd.DataFrame:
    """The candidates with every strategy's score (``score_<strategy>``; WDOA at ``budget``,
    default half-way between floor and peak), best vote first."""
    b = problem.default_budget if budget is None else int(budget)
    c = problem.candidates.copy()
    for s in STRATEGIES:
        c[f"score_{s}"] = scores(problem, s, b)
    return c.iloc[order(problem, "vote", b)].reset_index(drop=True)


def candidates(trace, bandwidth: Bandwidth | float | None = None, budget: int | None = None,
               min_size: int = MIN_SIZE, pid: int | None = None, latency_us: float | None = None) -> pd.DataFrame:
    """Swap candidates of one process of ``trace`` (see :func:`candidate_table`)."""
    bw = _bandwidth_arg(trace, bandwidth, latency_us)
    return candidate_table(prepare(trace, bw, min_size=min_size, pid=pid), budget)


# ---- schedulers ------------------------------------------------------------------------

@dataclass
class SwapResult:
    strategy: str
    mode: str
    budget: int | None
    peak_before: int
    peak_after: int
    stall_ns: float
    span_ns: int
    schedule: pd.DataFrame
    planned_stall_ns: float = 0.0     # the planner's own pauses, summed on the unshifted timeline
    replay: object | None = None      # .replay.Replay: where peak_after and stall_ns come from

    def as_dict(self) -> dict:
        s = self.schedule
        return {
            "strategy": self.strategy, "mode": self.mode, "budget": self.budget,
            "peak_before": int(self.peak_before), "peak_after": int(self.peak_after),
            "reduction": (1 - self.peak_after / self.peak_before) if self.peak_before else 0.0,
            "stall_seconds": self.stall_ns * 1e-9,
            "overhead_fraction": self.stall_ns / self.span_ns if self.span_ns else 0.0,
            "planned_stall_seconds": self.planned_stall_ns * 1e-9,
            "delayed_ops": 0 if self.replay is None else int(self.replay.delayed_ops),
            "swaps": int(len(s)), "bytes_moved": int(2 * s["size"].sum()) if len(s) else 0,
            "budget_met": None if self.budget is None else bool(self.peak_after <= self.budget),
        }


CAND_DTYPE = np.dtype([("start", np.float64), ("end", np.float64), ("t_out", np.float64), ("t_in", np.float64),
                       ("size", np.int64), ("lo", np.int32), ("hi", np.int32)])   # = pi_swap_cand


def _iv_steps(problem: SwapProblem) -> tuple[np.ndarray, np.ndarray]:
    """Steps [lo, hi) lying inside each candidate's interval, on the scheduler's float64 clock."""
    if problem.lo_iv is None or problem.hi_iv is None:
        c = problem.candidates
        problem.lo_iv, problem.hi_iv = _steps_inside(_steps_f(problem), c["start_t"].to_numpy(np.float64),
                                                     c["end_t"].to_numpy(np.float64))
    return problem.lo_iv, problem.hi_iv


def _cand_arrays(problem: SwapProblem) -> dict:
    """The candidates' columns as the scheduler reads them (float64 times), once per problem."""
    m = problem.memo
    if "cand_arrays" not in m:
        c = problem.candidates
        a = {"start": c["start_t"].to_numpy(np.float64), "end": c["end_t"].to_numpy(np.float64),
             "t_out": c["t_out_ns"].to_numpy(np.float64), "t_in": c["t_in_ns"].to_numpy(np.float64),
             "size": c["size"].to_numpy(np.int64)}
        a["hides"] = a["start"] <= a["end"] - a["t_in"] - a["t_out"]   # the C loop's own test, same expression
        m["cand_arrays"] = a
    return m["cand_arrays"]


def hiding_floor(problem: SwapProblem) -> int:
    """A lower bound on the peak any ``no-overhead`` schedule reaches: the live bytes minus, on
    each step, every candidate that can hide and whose latest possible away window
    [start + t_out, end - t_in] covers the step (the greedy takes a subset of those swaps, each
    away for at most that window)."""
    m = problem.memo
    if "hiding_floor" not in m:
        a = _cand_arrays(problem)
        live = problem.live
        if not len(live):
            m["hiding_floor"] = 0
        else:
            h = a["hides"]
            st = _steps_f(problem)
            n = len(live)
            lo = np.minimum(np.searchsorted(st, a["start"][h] + a["t_out"][h], side="left"), n)
            hi = np.clip(np.searchsorted(st, a["end"][h] - a["t_in"][h], side="right") - 1, lo, n)
            cover = np.zeros(n + 1, np.int64)
            np.add.at(cover, lo, a["size"][h])
            np.add.at(cover, hi, -a["size"][h])
            m["hiding_floor"] = int((live - np.cumsum(cover)[:-1]).max())
    return m["hiding_floor"]


def _pack(problem: SwapProblem, target: int) -> dict:
    """What the scheduler reads at ``target``: the hot steps (live bytes > target: start, end,
    value) and every candidate as a ``pi_swap_cand`` record (its interval's hot steps [lo, hi)),
    with ``has_hot`` (lo < hi).  :func:`_run_all` keeps it in ``problem.memo`` while several runs
    share a target."""
    live = problem.live
    hot = live > target
    hot_k = np.flatnonzero(hot)
    hot_before = np.zeros(len(live) + 1, np.int64)
    np.cumsum(hot, out=hot_before[1:])
    lo_iv, hi_iv = _iv_steps(problem)
    a = _cand_arrays(problem)
    rec = np.empty(len(lo_iv), dtype=CAND_DTYPE)
    for k in ("start", "end", "t_out", "t_in", "size"):
        rec[k] = a[k]
    rec["lo"] = np.take(hot_before, lo_iv)
    rec["hi"] = np.take(hot_before, hi_iv)
    st = _steps_f(problem)
    return {"rec": rec, "has_hot": rec["hi"] > rec["lo"], "hot_t": np.take(st, hot_k),
            "hot_end": np.take(st, hot_k + 1), "hot_live": np.ascontiguousarray(np.take(live, hot_k), np.int64)}


def _loops(problem: SwapProblem, mode: str, target: int) -> bool:
    """Whether :func:`schedule` runs its loop at ``target`` (else it knows the schedule is empty)."""
    live = problem.live
    if not len(live) or target >= int(live.max()) or not len(problem.candidates):
        return False
    return not (mode == "no-overhead" and hiding_floor(problem) >= int(live.max()))


def _schedule_frame(problem: SwapProblem, i: np.ndarray, t: np.ndarray) -> pd.DataFrame:
    c = problem.candidates
    a = _cand_arrays(problem)
    return pd.DataFrame({
        "block_id": c["block_id"].to_numpy(np.int64)[i], "size": a["size"][i],
        "iteration": c["iteration"].to_numpy(np.int64)[i], "prev_access": a["start"][i],
        "out_start": t[:, 0], "out_end": t[:, 1], "free_t": t[:, 2], "realloc_t": t[:, 3],
        "in_start": t[:, 4], "in_end": t[:, 5], "next_access": a["end"][i], "stall": t[:, 6],
    }, columns=SCHEDULE_COLUMNS)


def schedule(problem: SwapProblem, idx_order: np.ndarray, mode: str, budget: int | None = None) -> pd.DataFrame:
    """Greedy schedule in ``idx_order``; returns the schedule table (ns, SCHEDULE_COLUMNS)
    (:func:`schedule_with_candidates` also gives each swap's candidate)."""
    return schedule_with_candidates(problem, idx_order, mode, budget)[0]


def schedule_with_candidates(problem: SwapProblem, idx_order: np.ndarray, mode: str,
                             budget: int | None = None) -> tuple[pd.DataFrame, np.ndarray]:
    """(:func:`schedule`'s table, the candidate of each of its swaps).

    ``no-overhead``: target = budget, or as low as timing allows when None.
    ``budget``: keep the peak <= budget (required), counting stalls.

    For each candidate in order (skipping those whose interval never stands above
    the target): the swap-out takes the D2H link's earliest free slot from the
    previous access, the swap-in the H2D link's latest free slot that ends by the
    next access (no-overhead: both must hide; budget, second pass: pause at the
    first over-budget moment and at the next access, counting the stalls — with transfers
    that can run: the swap-out ends by the next access and, when the program waits for it,
    starts before the first over-budget moment; the swap-in starts before the next access);
    the swap is taken when its away window lowers a step above the target.  Then the
    swaps the reached peak does not need are dropped, lowest priority first.

    The loop runs in C (``native/swap/swap.c``): a 64-ary tree over the steps (range
    add, range max, first/last step above the target; a few contiguous blocks of 64
    values per query) and, per link direction, the busy runs in sorted blocks with the
    widest gap per block (bisect, then walk runs, stepping over blocks no gap of which fits).

    What the loop would only skip is removed before it (the schedule is the same):

    * steps whose live bytes are at most the target: swaps only lower the curve, so such a
      step never stands above the target and every decision ("max over a range > target",
      "first/last step above the target") reads only the others (the "hot" steps);
    * candidates with no hot step inside their interval: every away window lies inside the
      interval, so they never lower a hot step;
    * in ``no-overhead``, candidates that cannot hide (start > end - t_in - t_out), and the
      whole loop when :func:`hiding_floor` is the peak: the swaps taken cannot lower some peak
      step, the peak reached is the peak, and the last pass drops every swap."""
    if mode not in MODES:
        raise PyinterposeError(f"unknown swap mode {mode!r} (choose from {', '.join(MODES)})")
    if mode == "budget" and budget is None:
        raise PyinterposeError("budget mode needs a budget")
    from ..._core import ffi, lib

    target = 0 if budget is None else int(budget)
    c = problem.candidates
    n = len(c)
    idx = np.asarray(idx_order, dtype=np.int64)
    if len(idx) and (idx.min() < 0 or idx.max() >= n):
        raise PyinterposeError("swap order refers to a candidate that does not exist")
    if len(idx) and np.bincount(idx, minlength=n).max() > 1:    # a candidate is visited once, at its first place
        _, first = np.unique(idx, return_index=True)
        idx = idx[np.sort(first)]
    live = problem.live
    if not len(idx) or not _loops(problem, mode, target):
        return _schedule_frame(problem, np.zeros(0, np.int64), np.zeros((0, 7))), np.zeros(0, np.int64)
    if len(live) >= 2 ** 31 - 1:
        raise PyinterposeError(f"too many steps for the swap scheduler ({len(live)})")
    pk = problem.memo.get(("packed", target)) or _pack(problem, target)
    hides = _cand_arrays(problem)["hides"]
    sel = idx[pk["has_hot"][idx]]
    if mode == "no-overhead":
        sel = sel[hides[sel]]
    cand = np.take(pk["rec"], sel)
    hide_pos = None
    if mode == "budget":
        hide_pos = np.flatnonzero(hides[sel]).astype(np.int64)
        n_hide = len(hide_pos)
        if not n_hide:
            hide_pos = np.zeros(1, np.int64)     # a valid pointer; none of it is read
    hot_t, hot_end, hot_live = pk["hot_t"], pk["hot_end"], pk["hot_live"]
    m = len(sel)
    out_pos = np.zeros(max(m, 1), np.int64)
    out_t = np.zeros((max(m, 1), 7), np.float64)

    def ptr(kind, arr):
        return ffi.cast(kind, arr.ctypes.data)

    kept = lib.pi_swap_schedule(len(hot_t), ptr("double *", hot_t), ptr("double *", hot_end),
                                ptr("int64_t *", hot_live), m, ptr("pi_swap_cand *", cand),
                                0 if hide_pos is None else n_hide,
                                ffi.NULL if hide_pos is None else ptr("int64_t *", hide_pos),
                                1 if mode == "budget" else 0, target, ptr("int64_t *", out_pos),
                                ptr("double *", out_t))
    if kept < 0:
        raise MemoryError("swap scheduler: out of memory")
    return _schedule_frame(problem, sel[out_pos[:kept]], out_t[:kept]), sel[out_pos[:kept]]


def run_strategy(problem: SwapProblem, strategy: str, mode: str, budget: int | None = None) -> SwapResult:
    """Order by ``strategy``, schedule in ``mode``, validate, replay on the GPU model
    (:mod:`.replay`): the peak after and the stall are the replay's."""
    from .replay import replay

    score_budget = problem.default_budget if budget is None else int(budget)
    sched, cand = schedule_with_candidates(problem, _order(problem, strategy, score_budget), mode,
                                           budget if mode == "no-overhead" else score_budget)
    problems = validate_schedule(sched, mode, problem.bandwidth)
    if problems:
        raise RuntimeError(f"invalid {strategy}/{mode} swap schedule: " + "; ".join(problems[:5]))
    rp = replay(problem, sched, cand)
    return SwapResult(strategy=strategy, mode=mode,
                      budget=score_budget if mode == "budget" else budget,
                      peak_before=problem.peak_before,
                      peak_after=rp.peak_after,
                      stall_ns=rp.slowdown_ns,
                      span_ns=problem.span_ns, schedule=sched,
                      planned_stall_ns=float(sched["stall"].sum()) if len(sched) else 0.0, replay=rp)


# ---- entry points ----------------------------------------------------------------------

@dataclass
class SwapEvaluation:
    problem: SwapProblem
    budget: int
    budget_source: str
    results: list[SwapResult]

    def as_dict(self) -> dict:
        p = self.problem
        c = p.candidates
        return {
            **(p.clock or {"clock": "cpu"}),
            "bandwidth": p.bandwidth.as_dict(),
            "pid": p.pid,
            "peak_before": int(p.peak_before),
            "floor": int(p.floor),
            "budget": int(self.budget),
            "budget_source": self.budget_source,
            "candidates": int(len(c)),
            "candidates_straddling_peak": int(c["straddles_peak"].sum()) if len(c) else 0,
            "candidates_hideable": int((c["doa_ns"] >= 0).sum()) if len(c) else 0,
            "notes": list(p.notes),
            "strategies": [r.as_dict() for r in self.results],
        }

    def schedule_table(self) -> pd.DataFrame:
        """All schedules, one row per swap, times in seconds on the trace's clock."""
        frames = []
        for r in self.results:
            s = r.schedule.copy()
            s = s.rename(columns={"stall": "planned_stall"})
            if r.replay is not None and len(s):
                rf = r.replay.as_frame()
                for col in rf.columns:
                    s[col] = rf[col].to_numpy()
            else:
                for col in REPLAY_COLUMNS:
                    s[col] = s[col[len("replay_"):]] if col.startswith("replay_") else 0.0
            s = s.rename(columns={"wait": "stall"})
            for col in ("prev_access", "out_start", "out_end", "free_t", "realloc_t", "in_start", "in_end",
                        "next_access", "stall", "planned_stall", *[c for c in REPLAY_COLUMNS if c != "wait"]):
                s[col] = s[col] * 1e-9
            s.insert(0, "mode", r.mode)
            s.insert(0, "strategy", r.strategy)
            frames.append(s)
        cols = ["strategy", "mode", "block_id", "out_start", "out_end", "in_start", "in_end", "next_access",
                "prev_access", "free_t", "realloc_t", "size", "iteration", "stall", "planned_stall",
                "replay_out_start", "replay_out_end", "replay_in_start", "replay_in_end"]
        ren = {"stall": "stall_s", "planned_stall": "planned_stall_s"}
        if not frames:
            return pd.DataFrame(columns=[ren.get(c, c) for c in cols])
        out = pd.concat(frames, ignore_index=True)
        return out[cols].rename(columns=ren)


def _bandwidth_arg(trace, bandwidth, latency_us) -> Bandwidth:
    if isinstance(bandwidth, Bandwidth):
        return bandwidth
    return resolve_bandwidth(trace, gbps=bandwidth, latency_us=latency_us)


def analyse(trace, bandwidth: Bandwidth | float | None = None, budget: int | None = None,
            strategies=None, modes=MODES, min_size: int = MIN_SIZE, pid: int | None = None,
            latency_us: float | None = None, problem: SwapProblem | None = None,
            schedules: bool = True) -> SwapEvaluation:
    """Every strategy in every mode on one process of ``trace``.  ``bandwidth``: a
    :class:`Bandwidth`, GB/s, or None (resolved: cached measurement, then NVML).
    ``modes``: the modes to run (default both), each for every strategy.
    ``problem``: a prepared problem (:func:`problem_for`) to use instead of preparing one
    (``bandwidth``, ``min_size``, ``pid`` and ``latency_us`` are then those it was prepared with).
    ``schedules=False``: each result keeps only its swaps' sizes (what ``as_dict`` reads), not
    the whole schedule (at 10 M events ~20 MB a run)."""
    strategies = list(strategies or STRATEGIES)
    for m in modes:
        if m not in MODES:
            raise PyinterposeError(f"unknown swap mode {m!r} (choose from {', '.join(MODES)})")
    for s in strategies:
        if s not in STRATEGIES:
            raise PyinterposeError(f"unknown swap strategy {s!r} (choose from {', '.join(STRATEGIES)})")
    if budget is not None and budget < 0:
        raise PyinterposeError(f"--budget must be >= 0 bytes (got {budget})")
    if problem is None:
        problem = problem_for(trace, bandwidth, min_size=min_size, pid=pid, latency_us=latency_us)
    if budget is None:
        b, src = problem.default_budget, "default: half-way between the swap floor and the peak"
    else:
        b, src = int(budget), "given"
    runs = [(s, m, b if (m == "budget" or budget is not None) else None) for s in strategies for m in modes]
    results = _run_all(problem, runs, schedules=schedules)
    return SwapEvaluation(problem, b, src, results)


def _run_all(problem: SwapProblem, runs: list[tuple], schedules: bool = True) -> list[SwapResult]:
    """run_strategy for each (strategy, mode, budget), in order.  The runs are independent
    and the C scheduler releases the GIL, so they share the machine's cores (two threads at
    most: each holds its own copy of the curve and the links).  What the runs share is made
    first: the orders (one per strategy and scoring budget, for both modes) and the
    scheduler's packed view of a target that several runs schedule at."""
    keys = list(dict.fromkeys((s, problem.default_budget if b is None else int(b)) for s, _, b in runs))
    targets = [(m, problem.default_budget if m == "budget" and b is None else (0 if b is None else int(b)))
               for _, m, b in runs]
    looping = [t for m, t in targets if _loops(problem, m, t)]
    shared = [t for t in dict.fromkeys(looping) if looping.count(t) > 1]
    workers = min(2, os.cpu_count() or 1, len(runs))

    def run(r: tuple) -> SwapResult:
        res = run_strategy(problem, *r)
        if not schedules:
            res.schedule = res.schedule[["size"]]
        return res

    if any(k[0] == "vote" for k in keys):
        _prime_votes(problem)
    try:
        if workers <= 1:
            for k in keys:
                _order(problem, *k)
            for t in shared:
                problem.memo[("packed", t)] = _pack(problem, t)
            return [run(r) for r in runs]
        with ThreadPoolExecutor(max_workers=workers) as ex:
            list(ex.map(lambda k: _order(problem, *k), keys))
            for t, pk in zip(shared, ex.map(lambda t: _pack(problem, t), shared)):
                problem.memo[("packed", t)] = pk
            return list(ex.map(run, runs))
    finally:
        for t in shared:
            problem.memo.pop(("packed", t), None)


def _prime_votes(problem: SwapProblem) -> None:
    """What every budget's vote order shares, computed once before threads ask for it: the
    three sorts it starts from side by side (numpy's sorts release the GIL), then the rest."""
    parts = [lambda: _rank(problem, "doa", 0), lambda: _rank(problem, "aoa", 0), lambda: _tie_order(problem)]
    if (os.cpu_count() or 1) > 1 and len(problem.candidates) >= 100_000:
        with ThreadPoolExecutor(max_workers=2, thread_name_prefix="pyinterpose-swap") as ex:
            list(ex.map(lambda f: f(), parts))
    else:
        for f in parts:
            f()
    _wdoa_points(problem)
    _vote_fixed(problem)


def evaluate(trace, bandwidth: Bandwidth | float | None = None, budget: int | None = None,
             strategies=None, min_size: int = MIN_SIZE, pid: int | None = None,
             latency_us: float | None = None, problem: SwapProblem | None = None, modes=MODES) -> dict:
    """The ``pyinterpose swap --json`` object for ``trace`` (``problem``, ``modes``: see :func:`analyse`)."""
    return analyse(trace, bandwidth=bandwidth, budget=budget, strategies=strategies, modes=modes,
                   min_size=min_size, pid=pid, latency_us=latency_us, problem=problem,
                   schedules=False).as_dict()


def pareto(trace, bandwidth: Bandwidth | float | None = None, strategy: str = "vote",
           budgets=None, n: int = 8, min_size: int = MIN_SIZE, pid: int | None = None,
           latency_us: float | None = None, problem: SwapProblem | None = None) -> list[dict]:
    """Budget sweep (budget mode): peak reached vs stall overhead, one point per budget.

    ``budgets`` default: ``n`` budgets evenly from the swap floor to the peak.
    ``problem``: a prepared problem (see :func:`analyse`)."""
    if problem is None:
        problem = problem_for(trace, bandwidth, min_size=min_size, pid=pid, latency_us=latency_us)
    budgets = _pareto_budgets(problem, budgets, n)
    if strategy not in STRATEGIES:
        raise PyinterposeError(f"unknown swap strategy {strategy!r} (choose from {', '.join(STRATEGIES)})")
    if strategy == "vote":
        _prime_votes(problem)
    workers = min(2, os.cpu_count() or 1, len(budgets))
    if workers <= 1:
        return [_pareto_point(problem, strategy, b) for b in budgets]
    with ThreadPoolExecutor(max_workers=workers) as ex:      # the C scheduler releases the GIL
        return list(ex.map(lambda b: _pareto_point(problem, strategy, b), budgets))


def _pareto_budgets(problem: SwapProblem, budgets, n: int) -> list[int]:
    if budgets is None:
        budgets = np.unique(np.linspace(problem.floor, problem.peak_before, n).astype(np.int64))
    return [int(b) for b in budgets]


def _pareto_point(problem: SwapProblem, strategy: str, b: int) -> dict:
    """One point of :func:`pareto`.  The budget's order, scores and schedule are let go once the
    point is made (at 10 M events ~50 MB a budget), except the default budget's, which the
    other runs share."""
    d = run_strategy(problem, strategy, "budget", b).as_dict()
    if b != problem.default_budget:
        _forget_budget(problem, b)
    return {"budget": b, "peak_after": d["peak_after"], "stall_seconds": d["stall_seconds"],
            "planned_stall_seconds": d["planned_stall_seconds"],
            "overhead_fraction": d["overhead_fraction"], "swaps": d["swaps"], "strategy": strategy}


class SwapWork:
    """:func:`evaluate` (every strategy, both modes, at the default budget) and :func:`pareto`
    (``strategy`` at ``n`` budgets) on one prepared problem, as one list of tasks that any
    number of threads work through by calling :meth:`work` — the caller's own thread
    included, once it has nothing else to do, so the machine's cores stay busy without more
    threads than cores.  :meth:`results` gives what ``evaluate`` and ``pareto`` return (the
    same values: every run is deterministic)."""

    def __init__(self, problem: SwapProblem, strategy: str = "vote", budgets=None, n: int = 8):
        if strategy not in STRATEGIES:
            raise PyinterposeError(f"unknown swap strategy {strategy!r} (choose from {', '.join(STRATEGIES)})")
        self.problem, self.strategy = problem, strategy
        self.budgets = _pareto_budgets(problem, budgets, n)
        b = problem.default_budget
        # a task per strategy (its order, then both modes: the order is made once) and per
        # budget of the sweep, the heavier (lower) budgets first
        self._tasks = [("evaluate", s) for s in STRATEGIES] + \
            [("pareto", k) for k in np.argsort(self.budgets, kind="stable").tolist()]
        self._eval: dict[str, list[SwapResult]] = {}
        self._points: list[dict | None] = [None] * len(self.budgets)
        self._next = itertools.count()          # next(count) is atomic: each task is taken once
        self._done = threading.Semaphore(0)
        self._errors: list[BaseException] = []
        self._primed = threading.Lock()
        self._is_primed = False
        self._budget = b

    def _prime(self) -> None:
        with self._primed:       # what every vote order and the default target's runs share, once
            if not self._is_primed:
                _prime_votes(self.problem)
                for mode, t in (("budget", self._budget), ("no-overhead", 0)):   # each shared by six runs
                    if _loops(self.problem, mode, t):
                        self.problem.memo[("packed", t)] = _pack(self.problem, t)
                self._is_primed = True

    def work(self) -> None:
        """Run tasks until none is left (returns at once when every task is taken)."""
        p = self.problem
        while True:
            i = next(self._next)
            if i >= len(self._tasks):
                return
            kind, arg = self._tasks[i]
            try:
                self._prime()
                if kind == "evaluate":
                    self._eval[arg] = [self._slim(run_strategy(p, arg, m, self._budget if m == "budget" else None))
                                       for m in MODES]
                else:
                    self._points[arg] = _pareto_point(p, self.strategy, self.budgets[arg])
            except BaseException as e:  # noqa: BLE001 - given back by results()
                self._errors.append(e)
            finally:
                self._done.release()

    @staticmethod
    def _slim(r: SwapResult) -> SwapResult:
        r.schedule = r.schedule[["size"]]
        return r

    def results(self) -> tuple[dict, list[dict]]:
        """(``evaluate``'s object, ``pareto``'s points), once every task has run; the first
        error of any task is raised here."""
        self.work()
        for _ in self._tasks:
            self._done.acquire()
        for t in (self._budget, 0):
            self.problem.memo.pop(("packed", t), None)
        if self._errors:
            raise self._errors[0]
        res = [r for s in STRATEGIES for r in self._eval[s]]
        ev = SwapEvaluation(self.problem, self._budget, "default: half-way between the swap floor and the peak", res)
        return ev.as_dict(), list(self._points)


def _forget_budget(problem: SwapProblem, budget: int) -> None:
    """Drop what ``problem.memo`` keeps for one scoring budget (its orders and WDOA/vote scores)."""
    m = problem.memo
    # list(m) copies the keys at once (the other worker thread may add its own meanwhile)
    for key in [k for k in list(m) if isinstance(k, tuple) and len(k) == 3 and k[0] in ("order", "scores")
                and k[2] == budget]:
        m.pop(key, None)
