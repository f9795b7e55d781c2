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
3. **Schedulers** — :func:`schedule` (``schedule.py``, the loop in ``native/swap/swap.c``): one
   PCIe channel per direction, transfers in one direction serialised, each costing
   ``latency + size / bandwidth``; planned on the process's clock (``analysis/clock.py``).
   ``no-overhead`` takes a swap only when both transfers hide inside the interval (swap-out
   after the previous access, swap-in done by the next); ``budget`` aims at peak <= budget:
   first with swaps that hide and cover all the over-budget time in their interval, then with
   swaps that make the program pause (a) at the first over-budget moment until the swap-out has
   ended, (b) at the next access until the swap-in has ended — only with transfers that can run:
   the swap-out ends by the next access and starts before (a); the swap-in starts before the
   next access.  Both are greedy in score order and then drop swaps that turn out unnecessary
   for the peak reached.
4. **Validation** — :func:`validate_schedule` (``validate.py``) checks every schedule.
5. **Replay** — ``replay.py``: every schedule is played on a discrete-event model of the GPU
   (compute streams in recorded order, FIFO copy engines, delays propagating); the reported
   ``peak_after``, ``stall_seconds`` (the run's slowdown) and ``overhead_fraction`` are the
   replay's.  A budget is met only when the replayed peak is within it.

Modules: ``problem.py`` (the step function, candidates, compute streams), ``strategies.py``
(scores, orders), ``schedule.py``, ``validate.py``, ``replay.py``; this file holds the entry
points (:func:`analyse`, :func:`evaluate`, :func:`pareto`, :class:`SwapWork`).

The greedy decisions use the live-bytes step function on the blocks' alloc/free times (a
swap lowers a step only if its away window covers the whole step; this never under-states the
peak).
"""
from __future__ import annotations

import dataclasses
import itertools
import os
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from ...errors import PyinterposeError
from ...heap import give_back
from ..bandwidth import Bandwidth, resolve_bandwidth

from .problem import (  # noqa: F401  (the public API, and names the tests read)
    BLOCK_COLUMNS,
    EXACT_T,
    MIN_SIZE,
    MODES,
    REPLAY_COLUMNS,
    SIDE_BY_SIDE_BLOCKS,
    SCHEDULE_COLUMNS,
    STRATEGIES,
    SWAP_INTERVAL_KIND,
    SwapProblem,
    _exact_peak,
    _iteration_labels,
    _kind_is,
    _live_steps,
    _ops_of_intervals,
    _peak_after,
    _steps_f,
    _steps_inside,
    _synthetic_ops,
    CANDIDATE_COLUMNS,
    COLUMN_PIECE,
    DERIVED,
    column,
    with_derived,
    prepare,
    prepare_tables,
)

from .strategies import (  # noqa: F401  (the public API, and names the tests read)
    _absence_overload,
    _order,
    _rank,
    _rank_desc_min,
    _scores,
    _tie_order,
    _vote_fixed,
    _vote_order,
    _wdoa_points,
    candidate_table,
    order,
    scores,
    wdoa,
)

from .schedule import (  # noqa: F401  (the public API, and names the tests read)
    CAND_DTYPE,
    SwapResult,
    _cand_arrays,
    _iv_steps,
    _loops,
    _pack,
    _schedule_frame,
    hiding_floor,
    run_strategy,
    schedule,
    schedule_with_candidates,
)

from .validate import validate_schedule  # noqa: F401,E402
from .ondisk import kept, release  # noqa: E402
from .fallback import no_worse  # noqa: E402


def problem_for(trace, bandwidth: Bandwidth | float | None = None, min_size: int = MIN_SIZE, pid: int | None = None,
            latency_us: float | None = None, on_disk: bool | None = None) -> SwapProblem:
    """:func:`prepare` with the bandwidth resolved as :func:`analyse` does, prepared once per trace
    (kept by ``Trace.derived`` when the trace has it): pass it as ``problem=`` to :func:`evaluate`,
    :func:`analyse` and :func:`pareto` to share it.  ``on_disk``: see :func:`.problem.prepare`."""
    bw = _bandwidth_arg(trace, bandwidth, latency_us)
    derived = getattr(trace, "derived", None)
    if derived is None:
        return prepare(trace, bw, min_size=min_size, pid=pid, on_disk=on_disk)
    return derived(("swap.prepare", bw, int(min_size), None if pid is None else int(pid), on_disk),
                   lambda: prepare(trace, bw, min_size=min_size, pid=pid, on_disk=on_disk))


def candidates(trace, bandwidth: Bandwidth | float | None = None, budget: int | None = None,
               min_size: int = MIN_SIZE, pid: int | None = None, latency_us: float | None = None) -> pd.DataFrame:
    """Swap candidates of one process of ``trace`` (see :func:`candidate_table`)."""
    bw = _bandwidth_arg(trace, bandwidth, latency_us)
    return candidate_table(prepare(trace, bw, min_size=min_size, pid=pid), budget)


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
            "candidates_hideable": int((column(p, "doa_ns") >= 0).sum()) if len(c) else 0,
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
            schedules: bool = True, long_workers: int | None = None) -> SwapEvaluation:
    """Every strategy in every mode on one process of ``trace``.  ``bandwidth``: a
    :class:`Bandwidth`, GB/s, or None (resolved: cached measurement, then NVML).
    ``modes``: the modes to run (default both), each for every strategy.
    ``problem``: a prepared problem (:func:`problem_for`) to use instead of preparing one
    (``bandwidth``, ``min_size``, ``pid`` and ``latency_us`` are then those it was prepared with).
    ``schedules=False``: each result keeps only its swaps' sizes (what ``as_dict`` reads), not
    the whole schedule (at 10 M events ~20 MB a run).
    ``long_workers``: how many runs at a time on a long trace (None: ``LONG_WORKERS``)."""
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
        if len(trace.blocks) > SIDE_BY_SIDE_BLOCKS:
            # a long trace (issue 30): the problem holds what the runs read of the clock (its
            # replay ops); the clock's own ops go (asked again, it is computed again)
            trace.forget("clock")
            give_back()                 # the preparation's freed heap, not kept resident through the runs
    if budget is None:
        b, src = problem.default_budget, "default: half-way between the swap floor and the peak"
    else:
        b, src = int(budget), "given"
    runs = [(s, m, b if (m == "budget" or budget is not None) else None) for s in strategies for m in modes]
    # budget mode is compared with no-overhead (never stalls): run that too when not asked for
    extra = [(s, "no-overhead", None) for s in strategies] if "budget" in modes and "no-overhead" not in modes else []
    done = _run_all(problem, runs + extra, schedules=schedules, long_workers=long_workers)
    results = done[:len(runs)]
    free_of = {r.strategy: r for r in done if r.mode == "no-overhead"}
    return SwapEvaluation(problem, b, src, no_worse(results, free_of))


def _run_all(problem: SwapProblem, runs: list[tuple], schedules: bool = True,
             long_workers: int | None = None) -> list[SwapResult]:
    """run_strategy for each (strategy, mode, budget), in order.  The runs are independent
    and the C scheduler releases the GIL, so they share the machine's cores (two threads at
    most: each holds its own copy of the curve and the links).  What the runs share is made
    first: the orders (one per strategy and scoring budget, for both modes) and the
    scheduler's packed view of a target that several runs schedule at."""
    keys = list(dict.fromkeys(_order_key(problem, r) for r in runs))
    targets = [(m, problem.default_budget if m == "budget" and b is None else (0 if b is None else int(b)))
               for _, m, b in runs]
    loops = [_loops(problem, m, t) for m, t in targets]
    looping = [t for (_, t), lp in zip(targets, loops) if lp]
    shared = [t for t in dict.fromkeys(looping) if looping.count(t) > 1]
    # the orders the runs that loop read (run_strategy makes none for a run whose schedule is known empty)
    needed = {_order_key(problem, r) for r, lp in zip(runs, loops) if lp}
    workers = min(2, os.cpu_count() or 1, len(runs))

    def run(r: tuple) -> SwapResult:
        res = run_strategy(problem, *r)
        return res if schedules else _slim(res)

    if any(k[0] == "vote" for k in needed):
        _prime_votes(problem)
    if len(problem.candidates) > LONG_CANDIDATES:
        return _run_long(problem, runs, keys, shared,
                         min(workers, LONG_WORKERS if long_workers is None else long_workers), run, needed)
    keys = [k for k in keys if k in needed]
    try:
        if workers <= 1:
            for k in keys:
                _order(problem, *k)
            for t in shared:
                _keep_pack(problem, t)
            return [run(r) for r in runs]
        with ThreadPoolExecutor(max_workers=workers) as ex:
            list(ex.map(lambda k: _order(problem, *k), keys))
            for t, pk in zip(shared, ex.map(lambda t: _pack(problem, t), shared)):
                problem.memo[("packed", t)] = pk
            return list(ex.map(run, runs))
    finally:
        for t in shared:
            problem.memo.pop(("packed", t), None)


# Above this many candidates (a long trace, issue 30), _run_all makes every order the runs read before
# the runs (_make_orders; kept in files when the problem is on disk), lets go of what only the orders are
# made from once they are made, and lets each order go after its last run: at 100 M events (9.5 M
# candidates) an order is 38 MB, the vote's fixed part and the tie order ~150 MB.  The same runs, in the
# same order, with the same orders.
LONG_CANDIDATES = 2_000_000
ORDER_INPUTS = ("tie_order", "vote_fixed", "wdoa_points", "wdoa_steps")
# ... and runs them on this many threads: two (the C scheduler releases the GIL; the budget-mode runs share
# the default budget's packed input, made before the threads, so a second run adds its order, the scheduler's
# curve and links and its replay).  Before swap32 made the problem smaller this peaked the swap command at
# 3938-4112 MiB at 100 M events; after it at 3106 MiB (51.3 s, load 2.2) and 3435 MiB (92.9 s, load 3.0,
# main's code beside it 91.1 s), against 2916 MiB one at a time (80.0 s, load 1.8): within 4 GiB and
# under 60 s where a core is free (issue 30).  1: memory first (~0.2-0.5 GB less, one core's time).
LONG_WORKERS = 2
# ... and the sweep's budgets on this many threads (pareto): two, one of them scheduling at a time (the slot
# in pareto).  Each budget makes its own packed input (its hot steps and their candidates' records, ~0.7 GB
# at 100 M events): two at a time the report peaked at 4393 MiB at 100 M events before swap32, and at
# 3556 MiB after it (the report's other sections: 3402), for a sweep of about half the time.
SWEEP_WORKERS = 2


def _order_key(problem: SwapProblem, run: tuple) -> tuple:
    """The order a run (strategy, mode, budget) reads: its strategy's at its scoring budget."""
    s, _, b = run
    return (s, problem.default_budget if b is None else int(b))


def _run_long(problem: SwapProblem, runs: list[tuple], keys: list, shared: list, workers: int, run,
              needed: set) -> list:
    """:func:`_run_all`'s runs on a long trace (see LONG_CANDIDATES); ``needed``: the orders that
    looping runs read (the others are never made).  Every order is made first (:func:`_make_orders`),
    then the runs: a run's memory is then its schedule's and its replay's only (issue 30: an order
    made beside the other worker's scheduler, the vote's above all, held both working sets at once,
    ~1.65 GiB at 100 M events; the orders are kept in files, not resident between the runs)."""
    def key_of(r):
        return _order_key(problem, r)

    left = {k: sum(1 for r in runs if key_of(r) == k) for k in keys}
    guard = threading.Lock()

    def one(r):
        res = run(r)
        k = key_of(r)
        with guard:
            left[k] -= 1
            if not left[k]:
                problem.memo.pop(("order", *k), None)
        return res

    try:
        for t in shared:
            _keep_pack(problem, t)
        _make_orders(problem, [k for k in keys if k in needed], workers)
        for name in ORDER_INPUTS:           # every order made: what they are made from goes
            problem.memo.pop(name, None)
        release(problem)
        if workers <= 1:
            return [one(r) for r in runs]
        _cand_arrays(problem)   # what every run reads, made once before the threads
        with ThreadPoolExecutor(max_workers=workers) as ex:
            return list(ex.map(one, runs))
    finally:
        for t in shared:
            problem.memo.pop(("packed", t), None)


def _make_orders(problem: SwapProblem, keys: list, workers: int) -> None:
    """The orders ``keys`` (strategy, scoring budget), made before the runs, each kept by ``_order`` and
    what its making read of the problem given back (:func:`.ondisk.release`): one at a time, the vote's
    first (it reads the most).  ``workers``: unused (the runs' threads come after)."""
    def make(k):
        _order(problem, *k)
        release(problem)

    # one at a time: two side by side peaked the swap command at 1351 MiB at 100 M events in one run of
    # three (1081-1136 in the others), against ~1.1 GB for the runs after them, for ~1 s (issue 30)
    for k in [k for k in keys if k[0] == "vote"] + [k for k in keys if k[0] != "vote"]:
        make(k)


def _slim(r: SwapResult) -> SwapResult:
    """``r`` as ``as_dict`` reads it: its schedule's sizes only, its replay's figures without the swaps'
    replayed times (issue 30: each a float64 per swap, five of them; at 100 M events the runs' results
    held ~0.3 GB of them by the last run)."""
    r.schedule = r.schedule[["size"]]
    if r.replay is not None:
        z = np.zeros(0)
        r.replay = dataclasses.replace(r.replay, out_start=z, out_end=z, in_start=z, in_end=z, wait_ns=z)
    return r


def _keep_pack(problem: SwapProblem, t: int) -> None:
    """The scheduler's packed input at target ``t``, kept for the runs that share it (in files when
    the problem is on disk: :mod:`.ondisk`)."""
    pk = _pack(problem, t)
    release(problem)            # what the pack read goes back before it is written to files (issue 30)
    problem.memo[("packed", t)] = kept(problem, pk)
    del pk
    release(problem)


def _prime_votes(problem: SwapProblem) -> None:
    """What every budget's vote order shares, computed once before threads ask for it: the tie
    order and :func:`_vote_fixed` (its ranks made one after another, a few arrays of the candidates'
    length at a time: issue 30), or, where the vote takes the general path (``_vote_fixed`` None), the
    two sorts it starts from side by side (numpy's sorts release the GIL) — the tie order, whose
    first key is DOA (so DOA's rank is read from it), and AOA's rank — then the rest."""
    if all(k in problem.memo for k in ORDER_INPUTS):
        return                  # made already (the report's sweep before its evaluation: issue 30)
    release(problem)            # what the passes before left resident (the runs' loops: hiding_floor)
    if _vote_fixed(problem) is not None:
        # every vote order is made from what _vote_fixed keeps: DOA and AOA ranks of every candidate,
        # if something asked for them before, go (16 bytes a candidate; asked again, made again)
        for k in (("rank", "doa"), ("rank", "aoa")):
            problem.memo.pop(k, None)
    else:
        parts = [lambda: (_tie_order(problem), _rank(problem, "doa", 0)), lambda: _rank(problem, "aoa", 0)]
        if (os.cpu_count() or 1) > 1 and len(problem.candidates) >= 100_000:
            with ThreadPoolExecutor(max_workers=2, thread_name_prefix="pyinterpose-swap") as ex:
                list(ex.map(lambda f: f(), parts))
        else:
            for f in parts:
                f()
        _wdoa_points(problem)
    release(problem)


def evaluate(trace, bandwidth: Bandwidth | float | None = None, budget: int | None = None,
             strategies=None, min_size: int = MIN_SIZE, pid: int | None = None,
             latency_us: float | None = None, problem: SwapProblem | None = None, modes=MODES,
             long_workers: int | None = None) -> dict:
    """The ``pyinterpose swap --json`` object for ``trace`` (``problem``, ``modes``, ``long_workers``: see
    :func:`analyse`)."""
    return analyse(trace, bandwidth=bandwidth, budget=budget, strategies=strategies, modes=modes,
                   min_size=min_size, pid=pid, latency_us=latency_us, problem=problem,
                   schedules=False, long_workers=long_workers).as_dict()


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
    long = len(problem.candidates) > LONG_CANDIDATES
    if long:
        # a long trace: SWEEP_WORKERS budgets at a time
        workers = min(workers, SWEEP_WORKERS)
    if workers <= 1:
        return [_pareto_point(problem, strategy, b) for b in budgets]
    _cand_arrays(problem)       # what every run reads, made once before the threads
    # the lowest budget (the most steps above it: the largest scheduler input) is run beside the
    # highest, the next lowest beside the next highest...: the two runs held at once are a large
    # and a small one (issue 30: on a long trace two at a time, the peak is the pair's)
    paired = _paired(len(budgets))
    slot = threading.Lock() if long else None       # a long trace: one run schedules at a time (run_strategy)
    with ThreadPoolExecutor(max_workers=workers) as ex:      # the C scheduler releases the GIL
        points = list(ex.map(lambda k: _pareto_point(problem, strategy, budgets[k], slot), paired))
    out = [None] * len(budgets)
    for k, pt in zip(paired, points):
        out[k] = pt
    return out


def _paired(n: int) -> list[int]:
    """0, n-1, 1, n-2, ...: every index once, the lowest and the highest left next to each other."""
    lo, hi, out = 0, n - 1, []
    while lo <= hi:
        out.append(lo)
        if hi != lo:
            out.append(hi)
        lo, hi = lo + 1, hi - 1
    return out


def _pareto_budgets(problem: SwapProblem, budgets, n: int) -> list[int]:
    if budgets is None:
        budgets = np.unique(np.linspace(problem.floor, problem.peak_before, n).astype(np.int64))
    return [int(b) for b in budgets]


def _pareto_point(problem: SwapProblem, strategy: str, b: int, slot=None) -> dict:
    """One point of :func:`pareto`.  The budget's order, scores and schedule are let go once the
    point is made (at 10 M events ~50 MB a budget), except the default budget's, which the
    other runs share."""
    d = run_strategy(problem, strategy, "budget", b, slot=slot).as_dict()
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
                        _keep_pack(self.problem, t)
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
        return _slim(r)

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
        res = no_worse(res, {r.strategy: r for r in res if r.mode == "no-overhead"})
        ev = SwapEvaluation(self.problem, self._budget, "default: half-way between the swap floor and the peak", res)
        return ev.as_dict(), list(self._points)


def _forget_budget(problem: SwapProblem, budget: int) -> None:
    """Drop what ``problem.memo`` keeps for one scoring budget (its orders and WDOA/vote scores)."""
    m = problem.memo
    # list(m) copies the keys at once (the other worker thread may add its own meanwhile)
    for key in [k for k in list(m) if isinstance(k, tuple) and len(k) == 3 and k[0] in ("order", "scores")
                and k[2] == budget]:
        m.pop(key, None)
