"""The schedulers (the greedy loop runs in C, native/swap/swap.c) and one strategy's run: order,
schedule, validate, replay."""
from __future__ import annotations

from contextlib import nullcontext
from dataclasses import dataclass

import numpy as np
import pandas as pd

from ...errors import PyinterposeError
from ..bandwidth import Bandwidth
from .problem import (COLUMN_PIECE, MODES, SCHEDULE_COLUMNS, SwapProblem, _live_max, _steps_f, _steps_inside,
                       column, search_steps, step_f)
from ...trace import pages
from .ondisk import is_on_disk, kept, release
from .strategies import _order
from .validate import validate_schedule
from .replay import replay


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
    fallback: str | None = None       # "no-overhead": budget mode offers that schedule (.fallback)

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
            "fallback": self.fallback,
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
    """The candidates' columns as the scheduler reads them, once per problem: the sizes (the column
    itself) and ``hides``.  Their times as float64 and their transfer times are made for the rows a
    step reads (:func:`_times`, :func:`.problem.column`; issue 30: not kept for every candidate)."""
    m = problem.memo
    if "cand_arrays" not in m:
        c = problem.candidates
        a = {"size": c["size"].to_numpy(np.int64)}
        n = len(a["size"])
        hides = np.empty(n, bool)
        for lo in range(0, n, COLUMN_PIECE):        # a piece at a time: no temporaries of every candidate
            rows = np.arange(lo, min(lo + COLUMN_PIECE, n))
            start, end = _times(problem, rows)
            t_out = column(problem, "t_out_ns", rows).astype(np.float64, copy=False)
            t_in = column(problem, "t_in_ns", rows).astype(np.float64, copy=False)
            hides[lo:lo + len(rows)] = start <= end - t_in - t_out   # the C loop's own test, same expression
        a["hides"] = hides
        m["cand_arrays"] = kept(problem, a)
    return m["cand_arrays"]


def _times(problem: SwapProblem, rows: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(start, end) of the candidates ``rows`` (every one: None) on the scheduler's float64 clock."""
    c = problem.candidates
    start, end = c["start_t"].to_numpy(), c["end_t"].to_numpy()
    if rows is not None:
        start, end = start[rows], end[rows]
    return start.astype(np.float64), end.astype(np.float64)


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
            n = len(live)
            start, end = _times(problem, h)
            h = np.flatnonzero(h)
            lo = np.minimum(search_steps(problem, start + column(problem, "t_out_ns", h).astype(np.float64, copy=False),
                                         "left"), n)
            hi = np.clip(search_steps(problem, end - column(problem, "t_in_ns", h).astype(np.float64, copy=False),
                                      "right") - 1, lo, n)
            cover = np.zeros(n + 1, np.int64)
            np.add.at(cover, lo, a["size"][h])
            np.add.at(cover, hi, -a["size"][h])
            del lo, hi, h, start, end
            under = cover[:-1]                      # in place (issue 30: two arrays of every step less)
            np.cumsum(under, out=under)
            np.subtract(live, under, out=under)
            m["hiding_floor"] = int(under.max())
            del cover, under
    return m["hiding_floor"]


def _pack(problem: SwapProblem, target: int) -> dict:
    """What the scheduler reads at ``target``: the hot steps (live bytes > target: start, end,
    value) and every candidate with a hot step in its interval as a ``pi_swap_cand`` record (its
    interval's hot steps [lo, hi)), with ``has_hot`` (lo < hi) and ``at`` (each candidate's
    record).  :func:`_run_all` keeps it in ``problem.memo`` while several runs share a target."""
    live = problem.live
    hot = live > target
    # hot steps before each step: int32 (the scheduler takes fewer than 2**31 steps; issue 30: half
    # the bytes of this array and of each candidate's lo and hi below)
    idx_t = np.int32 if len(live) < 2 ** 31 - 1 else np.int64
    hot_before = np.zeros(len(live) + 1, idx_t)
    np.cumsum(hot, dtype=idx_t, out=hot_before[1:])
    release(problem)        # a problem on disk (issue 30): the live bytes read, not resident through the rest
    lo_iv, hi_iv = _iv_steps(problem)
    a = _cand_arrays(problem)
    lo = np.take(hot_before, lo_iv)
    hi = np.take(hot_before, hi_iv)
    del hot_before
    has_hot = hi > lo
    # records of the candidates with a hot step only (the others are never visited), and where
    # each candidate's record is (-1: none): issue 30, 48 bytes for those only.  Each field is
    # filled from one temporary at a time, and the hot steps are listed once the candidates' ranges
    # are let go (issue 30: at 100 M events ~0.3 GB less at the pack's peak)
    keep = np.flatnonzero(has_hot)
    rec = np.empty(len(keep), dtype=CAND_DTYPE)
    c = problem.candidates
    for k, col in (("start", "start_t"), ("end", "end_t")):
        rec[k] = c[col].to_numpy()[keep]        # as _times: the column's values as float64
    rec["t_out"] = column(problem, "t_out_ns", keep)
    rec["t_in"] = column(problem, "t_in_ns", keep)
    rec["size"] = a["size"][keep]
    rec["lo"] = lo[keep]
    del lo
    rec["hi"] = hi[keep]
    del hi
    release(problem)        # ... nor the candidates' columns and steps the records are made from
    at = np.full(len(has_hot), -1, np.int32 if len(keep) < 2 ** 31 - 1 else np.int64)
    at[keep] = np.arange(len(keep), dtype=at.dtype)
    del keep
    hot_k = np.flatnonzero(hot)
    del hot
    return {"rec": rec, "at": at, "has_hot": has_hot, "hot_t": step_f(problem, hot_k),
            "hot_end": step_f(problem, hot_k, offset=1), "hot_live": np.ascontiguousarray(np.take(live, hot_k), np.int64)}


def _loops(problem: SwapProblem, mode: str, target: int) -> bool:
    """Whether :func:`schedule` runs its loop at ``target`` (else it knows the schedule is empty)."""
    live = problem.live
    if not len(live) or not len(problem.candidates):
        return False
    top = _live_max(problem)
    if target >= top:
        return False
    return not (mode == "no-overhead" and hiding_floor(problem) >= top)


def _repeats(idx: np.ndarray, n: int) -> bool:
    """Whether a candidate comes more than once in ``idx`` (indices in [0, n)): one byte a candidate."""
    seen = np.zeros(n, bool)
    seen[idx] = True
    return int(np.count_nonzero(seen)) < len(idx)


def _schedule_frame(problem: SwapProblem, i: np.ndarray, t: np.ndarray) -> pd.DataFrame:
    c = problem.candidates
    a = _cand_arrays(problem)
    start, end = _times(problem, i)
    return pd.DataFrame({     # the swaps' rows only, as int64 (the columns may be narrower)
        "block_id": c["block_id"].to_numpy()[i].astype(np.int64), "size": a["size"][i],
        "iteration": c["iteration"].to_numpy()[i].astype(np.int64), "prev_access": start,
        "out_start": t[:, 0], "out_end": t[:, 1], "free_t": t[:, 2], "realloc_t": t[:, 3],
        "in_start": t[:, 4], "in_end": t[:, 5], "next_access": end, "stall": t[:, 6],
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
    from ..._core import ffi, lib  # lazy: compiled cffi module, absent from an unbuilt tree

    target = 0 if budget is None else int(budget)
    c = problem.candidates
    n = len(c)
    idx = np.asarray(idx_order)
    if idx.dtype not in (np.int32, np.int64):      # the kept orders are int32 (issue 30): used as they are
        idx = idx.astype(np.int64)
    if len(idx) and (idx.min() < 0 or idx.max() >= n):
        raise PyinterposeError("swap order refers to a candidate that does not exist")
    if len(idx) and _repeats(idx, n):               # a candidate is visited once, at its first place
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
    # each candidate's record (every one has one: has_hot), read in place by the scheduler (issue 30:
    # no copy of the records per run)
    cand_at = np.take(pk["at"], sel)
    hide_pos = None
    if mode == "budget":
        hide_pos = np.flatnonzero(hides[sel]).astype(np.int64)
        n_hide = len(hide_pos)
        if not n_hide:
            hide_pos = np.zeros(1, np.int64)     # a valid pointer; none of it is read
    hot_t, hot_end, hot_live = pk["hot_t"], pk["hot_end"], pk["hot_live"]
    m = len(sel)
    # room for every candidate; only the first ``kept`` rows are written and read (np.empty: the
    # pages of the rest are never touched)
    out_pos = np.empty(max(m, 1), np.int64)
    out_t = np.empty((max(m, 1), 7), np.float64)

    def ptr(kind, arr):
        return ffi.cast(kind, arr.ctypes.data)

    if cand_at.dtype == np.int32:
        cand, at_arg = pk["rec"], ptr("int32_t *", np.ascontiguousarray(cand_at))
    else:                                   # more than 2**31 records: a copy in visiting order
        cand, at_arg = np.take(pk["rec"], cand_at), ffi.NULL
    if not len(cand):
        cand = np.zeros(1, CAND_DTYPE)      # a valid pointer; none of it is read
    # a problem on disk (issue 30): what the loop does not read goes back before it (the order, where
    # each record is, which candidates have hot steps or hide: read above), and the hot steps' live bytes
    # once the loop's curve has its copy (in C: drop_hot_live); the other run's reads map them again
    drop = _release_before_loop(problem, (idx, pk["at"], pk["has_hot"], hides), hot_live)
    kept = lib.pi_swap_schedule_at(len(hot_t), ptr("double *", hot_t), ptr("double *", hot_end),
                                   ptr("int64_t *", hot_live), m, ptr("pi_swap_cand *", cand), at_arg,
                                   0 if hide_pos is None else n_hide,
                                   ffi.NULL if hide_pos is None else ptr("int64_t *", hide_pos),
                                   1 if mode == "budget" else 0, target, ptr("int64_t *", out_pos),
                                   ptr("double *", out_t), 1 if drop else 0)
    if kept < 0:
        raise MemoryError("swap scheduler: out of memory")
    return _schedule_frame(problem, sel[out_pos[:kept]], out_t[:kept]), sel[out_pos[:kept]]


def _release_before_loop(problem: SwapProblem, done: tuple, hot_live: np.ndarray) -> bool:
    """On a problem on disk: give back the pages of ``done`` (arrays read before the scheduler's loop, not
    in it) and say whether the loop may give back ``hot_live``'s pages (whole pages of a file map, every
    resident one clean: :mod:`...trace.pages`).  False, nothing done, for a problem in memory."""
    if not is_on_disk(problem):
        return False
    pages.release_all(*done)
    return len(hot_live) > 0 and pages._file_map(hot_live) is not None and pages.release(hot_live) > 0


def run_strategy(problem: SwapProblem, strategy: str, mode: str, budget: int | None = None,
                 slot=None) -> SwapResult:
    """Order by ``strategy``, schedule in ``mode``, validate, replay on the GPU model
    (:mod:`.replay`): the peak after and the stall are the replay's.  ``slot``: a lock held while
    the run schedules (the scheduler's packed input, its curve and links: the largest part of a
    run), so that of the runs sharing it one schedules at a time while the others make their
    orders, validate and replay (issue 30: a long trace's runs two at a time in little more memory
    than one)."""

    score_budget = problem.default_budget if budget is None else int(budget)
    target = budget if mode == "no-overhead" else score_budget
    # a run whose schedule is known to be empty (schedule_with_candidates would return at once, for any
    # order) needs no order: at 100 M events six orders and the votes' shared sorts, ~9 CPU-s of compare
    idx = _order(problem, strategy, score_budget) if _loops(problem, mode, 0 if target is None else int(target)) \
        else np.zeros(0, np.int64)
    with slot if slot is not None else nullcontext():
        sched, cand = schedule_with_candidates(problem, idx, mode, target)
    release(problem)        # a problem on disk: the scheduler's reads (the packed input, the order) go back
    problems = validate_schedule(sched, mode, problem.bandwidth)
    if problems:
        raise RuntimeError(f"invalid {strategy}/{mode} swap schedule: " + "; ".join(problems[:5]))
    rp = replay(problem, sched, cand)
    release(problem)        # a problem on disk: what this run read of it goes back (.ondisk)
    return SwapResult(strategy=strategy, mode=mode,
                      budget=score_budget if mode == "budget" else budget,
                      peak_before=problem.peak_before,
                      peak_after=rp.peak_after,
                      stall_ns=rp.slowdown_ns,
                      span_ns=problem.span_ns, schedule=sched,
                      planned_stall_ns=float(sched["stall"].sum()) if len(sched) else 0.0, replay=rp)
