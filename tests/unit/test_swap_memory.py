"""The swap problem in less memory (issue 30): the narrower and in-place forms give what their
definitions give.  Each reference below is written from the definition (sorts, loops over steps),
never from the code it checks."""
from __future__ import annotations

import numpy as np
import pytest

from pyinterpose.analysis import swap
from pyinterpose.analysis.swap import replay as replay_mod
from pyinterpose.analysis.swap.schedule import schedule_with_candidates
from pyinterpose.analysis.swap.strategies import _order, order

from test_swap import _random_problem


def _peak_by_sorting(t: np.ndarray, d: np.ndarray) -> int:
    """max(0, running sum) over the events sorted by (time, delta): frees first at a tie."""
    if not len(t):
        return 0
    o = np.lexsort((d, t))
    return int(max(0, np.cumsum(d[o]).max()))


class _Problem:
    def __init__(self, events_t, events_d, held=True):
        # held=False: as a problem whose events are its steps (ev_d None: the deltas read from live,
        # the running sum; issue 30)
        self.events_t, self.memo = events_t, {}
        self.ev_d = events_d if held else None
        self.live = np.cumsum(events_d).astype(np.int64)


def _anchor(release: np.ndarray, t: float, alloc: bool) -> int:
    """The op whose delay moves a memory event: an allocation's first op released at or after
    it, a free's last op released by it, by release time, then by the op's index; -1 none
    (loops, from the replay's docstring)."""
    by_release = sorted(range(len(release)), key=lambda i: (release[i], i))
    if alloc:
        later = [i for i in by_release if release[i] >= t]
        return later[0] if later else -1
    before = [i for i in by_release if release[i] <= t]
    return before[-1] if before else -1


@pytest.mark.parametrize("piece", [None, 1, 2, 5])
@pytest.mark.parametrize("held", [True, False])
@pytest.mark.parametrize("in_order", [True, False])
@pytest.mark.parametrize("seed", range(16))
def test_replayed_peak_is_the_sorted_running_sum(seed, in_order, held, piece):
    """The replayed peak (one merge pass in C; or ``piece`` events a call, the merge carried on from one
    call to the next, as on a problem on disk: issue 30) against moving every event by its anchor's delay
    with loops, then the running sum over everything sorted; the ops released in seq order or
    not (a release order given)."""
    rng = np.random.default_rng(seed)
    n_ev = int(rng.integers(0 if seed == 0 else 1, 40))
    ev_t = np.sort(rng.integers(0, 30, n_ev)).astype(np.int64)          # many ties
    ev_d = rng.choice([-1, 1], n_ev) * rng.integers(1, 9, n_ev)
    release = rng.integers(0, 30, int(rng.integers(1, 12))).astype(np.float64)
    if in_order:
        release = np.sort(release)
    delay = np.where(rng.random(len(release)) < 0.5, rng.integers(0, 20, len(release)), 0).astype(np.float64)
    if seed % 5 == 4:
        delay[:] = 0.0                               # nothing late: no event moves
    n_sw = int(rng.integers(0, 6))
    size = rng.integers(1, 9, n_sw).astype(np.int64)
    free_t = rng.integers(0, 35, n_sw).astype(np.float64)
    realloc_t = free_t + rng.integers(0, 10, n_sw)
    o = np.lexsort((np.arange(len(release)), release))
    st = {"n": len(release), "release_sorted": release[o], "ord": None if in_order else o.astype(np.int64)}
    got = replay_mod._replayed_peak(_Problem(ev_t, ev_d, held), st, delay, size, free_t, realloc_t, piece=piece)

    moved = [float(t) + (delay[a] if (a := _anchor(release, float(t), d > 0)) >= 0 else 0.0)
             for t, d in zip(ev_t, ev_d)]
    for i in range(1, len(moved)):                  # none moves before the one before it
        moved[i] = max(moved[i], moved[i - 1])
    t = np.concatenate([np.array(moved, np.float64), free_t, realloc_t])
    d = np.concatenate([ev_d, -size, size])
    assert got == _peak_by_sorting(t, d)


@pytest.mark.parametrize("seed", range(8))
def test_peak_after_and_the_problem_figures_match_their_definitions(seed):
    """_peak_after (in place) = the sorted running sum; straddles_peak and the floor of
    prepare_tables = their definitions over the steps, candidate by candidate."""
    p = _random_problem(np.random.default_rng(seed), n_blocks=25)
    c = p.candidates
    live, st = p.live, p.steps_t
    peak = int(live.max())
    lo = np.searchsorted(st, c["start_t"].to_numpy(), side="left")
    hi = np.searchsorted(st, c["end_t"].to_numpy(), side="right") - 1
    for j in range(len(c)):
        inside = [k for k in range(len(live)) if st[k] >= c["start_t"].iat[j] and st[k + 1] <= c["end_t"].iat[j]]
        assert list(range(lo[j], max(lo[j], hi[j]))) == inside
        assert bool(c["straddles_peak"].iat[j]) == any(live[k] == peak for k in inside)
    away = [int(live[k]) - sum(int(c["size"].iat[j]) for j in range(len(c))
                               if st[k] >= c["start_t"].iat[j] and st[k + 1] <= c["end_t"].iat[j])
            for k in range(len(live))]
    assert p.floor == max(0, max(away))
    for strategy in swap.STRATEGIES:
        sched = swap.schedule(p, order(p, strategy, p.floor), "budget", p.floor)
        t = np.concatenate([p.events_t.astype(np.float64), sched["free_t"].to_numpy(), sched["realloc_t"].to_numpy()])
        d = np.concatenate([p.events_d, -sched["size"].to_numpy(), sched["size"].to_numpy()])
        assert swap._peak_after(p, sched) == _peak_by_sorting(t, d)


@pytest.mark.parametrize("seed", range(4))
def test_kept_orders_are_int32_and_schedule_as_int64_ones(seed):
    p = _random_problem(np.random.default_rng(50 + seed), n_blocks=40)
    for strategy in swap.STRATEGIES:
        o = _order(p, strategy, p.default_budget)
        assert o.dtype == np.int32
        assert np.array_equal(o, order(p, strategy, p.default_budget))
        assert sorted(o.tolist()) == list(range(len(p.candidates)))
        for mode, b in (("budget", p.default_budget), ("no-overhead", None)):
            a, ca = schedule_with_candidates(p, o, mode, b)
            w, cw = schedule_with_candidates(p, o.astype(np.int64), mode, b)
            assert a.equals(w) and np.array_equal(ca, cw)
            # a candidate named twice is visited at its first place only
            twice = np.concatenate([o, o[::-1]])
            r, cr = schedule_with_candidates(p, twice, mode, b)
            assert r.equals(w) and np.array_equal(cr, cw)


def _long_trace_paths(monkeypatch, on: bool):
    """Take the long-trace paths (one analysis after the other, the clock let go) at any size."""
    import sys

    from pyinterpose.analysis import compare as compare_mod

    from pyinterpose.analysis import clock as clock_mod

    limit = 0 if on else 4_000_000
    for mod in (sys.modules["pyinterpose.analysis.swap.problem"], swap, compare_mod):
        monkeypatch.setattr(mod, "SIDE_BY_SIDE_BLOCKS", limit)
    # and the device clock's ops in files (mapped back), which prepare lets go before the build
    monkeypatch.setattr(clock_mod, "SPILL_OPS", 0 if on else None)


@pytest.mark.parametrize("sample", ["torch-cnn-blocks.pit", "jax-attn-blocks.pit"])
def test_long_trace_paths_give_the_same_swap_and_compare(monkeypatch, sample):
    """compare's row and swap's evaluation, with the iterations and intervals one after the other, the
    pools before the rest and the clock let go, equal those of the side-by-side paths."""
    import os

    from pyinterpose.analysis.compare import compare_files

    path = os.path.join(os.path.dirname(__file__), "..", "..", "samples", sample)
    got = {}
    for on in (False, True):
        _long_trace_paths(monkeypatch, on)
        row, _ = compare_files([path], bandwidth=16.0)
        ev = swap.evaluate(__import__("pyinterpose").load(path), bandwidth=16.0)
        got[on] = (row, ev)
    assert got[True] == got[False]
    assert got[True][1]["candidates"] > 0 and got[True][0]["traces"][0]["swap"] is not None


@pytest.mark.parametrize("seed", range(4))
def test_long_problem_runs_equal_the_others(monkeypatch, seed):
    """_run_all's long-trace path (orders made on first use and let go, their inputs let go) gives
    every strategy's result of the other path, with one worker and with two."""
    import os

    def results(long: bool, cpus: int):
        monkeypatch.setattr(swap, "LONG_CANDIDATES", -1 if long else 1 << 40)
        monkeypatch.setattr(os, "cpu_count", lambda: cpus)
        monkeypatch.setattr(swap, "LONG_WORKERS", cpus)
        p = _random_problem(np.random.default_rng(200 + seed), n_blocks=40)
        ev = swap.analyse(None, problem=p)
        if long:
            assert not [k for k in p.memo if k in swap.ORDER_INPUTS or (isinstance(k, tuple) and k[0] == "order")]
        return [(r.strategy, r.mode, r.peak_after, r.stall_ns, r.schedule.to_dict("list")) for r in ev.results]

    want = results(False, 2)
    assert results(True, 2) == want
    assert results(True, 1) == want


@pytest.mark.parametrize("shuffled", [False, True])
@pytest.mark.parametrize("seed", range(6))
def test_tie_order_is_the_three_key_lexsort(monkeypatch, seed, shuffled):
    """The tie order (-DOA, then block, then start) from one stable sort when the rows are in
    (block, start) order, from the lexsort otherwise: both equal the definition, a sort of the
    rows by their key tuples written out (many ties in every key, pieces of 3 rows)."""
    import pandas as pd

    from pyinterpose.analysis.swap import strategies as strat

    rng = np.random.default_rng(700 + seed)
    n = int(rng.integers(1, 60))
    blk = np.sort(rng.integers(0, 6, n)).astype(np.int64)
    start = np.zeros(n, np.int64)
    for b in np.unique(blk):
        at = np.flatnonzero(blk == b)
        start[at] = np.sort(rng.integers(0, 5, len(at)))
    doa = rng.choice([-2.0, -1.0, 0.0, 1.5, 3.0], n)
    if shuffled:
        perm = rng.permutation(n)
        blk, start, doa = blk[perm], start[perm], doa[perm]

    class P:
        memo: dict = {}
    p = P()
    p.memo = {}
    p.candidates = pd.DataFrame({"block_id": blk, "start_t": start, "doa_ns": doa})
    monkeypatch.setattr(strat, "ORDER_CHECK_PIECE", 3)
    got = strat._tie_order(p)
    want = sorted(range(n), key=lambda i: (-doa[i], blk[i], start[i], i))
    assert got.tolist() == want
    rows_sorted = all((blk[i], start[i]) <= (blk[i + 1], start[i + 1]) for i in range(n - 1))
    assert strat._in_block_start_order(blk, start) == rows_sorted


@pytest.mark.parametrize("seed", range(6))
def test_rank_from_a_given_order_is_pandas_rank(seed):
    """A rank read from an order that sorts the values from the largest, ties in any order (the
    tie order for DOA), = pandas' descending min rank; and the DOA rank a problem keeps."""
    import pandas as pd

    from pyinterpose.analysis.swap.strategies import _rank, _rank_desc_min, _tie_order

    rng = np.random.default_rng(seed)
    x = rng.integers(-5, 6, 300).astype(np.float64)          # many ties
    o = np.lexsort((rng.random(len(x)), -x))                  # largest first, ties shuffled
    assert np.array_equal(_rank_desc_min(x, o), pd.Series(x).rank(ascending=False, method="min").to_numpy())
    p = _random_problem(np.random.default_rng(70 + seed), n_blocks=30)
    _tie_order(p)
    doa = swap.with_derived(p)["doa_ns"].to_numpy(np.float64)
    assert np.array_equal(_rank(p, "doa", 0), pd.Series(doa).rank(ascending=False, method="min").to_numpy())


@pytest.mark.parametrize("sample", ["torch-cnn-blocks.pit", "jax-attn-blocks.pit", "graphs-blocks.pit"])
def test_access_pass_writes_the_rows_swaps_problem_makes(monkeypatch, sample, tmp_path):
    """Inside intervals.for_swap the access pass writes the rows swap's problem would make with its own
    pass (kind between, size >= min size, its columns, in order); the problem reads those (its own pass
    does not run) and comes out the same; compare (long trace path) and the long report the same."""
    import os

    import pandas as pd

    import pyinterpose
    from pyinterpose.analysis import access, intervals
    from pyinterpose.analysis.compare import compare_files
    from pyinterpose.analysis.swap import problem as problem_mod

    path = os.path.join(os.path.dirname(__file__), "..", "..", "samples", sample)
    for min_size in (problem_mod.MIN_SIZE, 1):
        tr = pyinterpose.load(path)
        want = problem_mod._between_intervals(tr, tr.main_pid, min_size)
        tr = pyinterpose.load(path)
        tmp = tmp_path / f"tmp{min_size}"
        tmp.mkdir()
        monkeypatch.setenv("TMPDIR", str(tmp))
        import tempfile
        monkeypatch.setattr(tempfile, "tempdir", None)
        with intervals.for_swap(tr, tr.main_pid, min_size):
            access.analyze(tr, bandwidth=16.0)
            assert os.listdir(tmp) == []                      # the files are gone once mapped
            passes = []
            real = intervals.pieces
            monkeypatch.setattr(intervals, "pieces", lambda *a, **k: passes.append(1) or real(*a, **k))
            got = problem_mod._between_intervals(tr, tr.main_pid, min_size)
            monkeypatch.setattr(intervals, "pieces", real)
            assert passes == []
            assert len(want) > 0
            pd.testing.assert_frame_equal(got, want, check_exact=True)
            assert problem_mod._between_intervals(tr, tr.main_pid, min_size).equals(want)   # taken once: made again
    got = {}
    for on in (False, True):
        _long_trace_paths(monkeypatch, on)
        seen = []
        real_rows = intervals.swap_rows
        monkeypatch.setattr(intervals, "swap_rows", lambda *a: seen.append(r := real_rows(*a)) or r)
        row, _ = compare_files([path], bandwidth=16.0)
        monkeypatch.setattr(intervals, "swap_rows", real_rows)
        assert any(r is not None for r in seen) == on
        got[on] = row
    assert got[True] == got[False]


def _overload_integral(st: list, live: list, budget: int, x: float) -> float:
    """Integral of max(0, live - budget) over [st[0], x], step by step in time order (x clipped to
    the steps; 0 before the first): the sum of each whole step's area, then the part of x's step."""
    if x < st[0]:
        return 0.0
    x = min(x, st[-1])
    total = 0.0
    for k in range(len(live)):
        over = float(max(live[k] - budget, 0))
        if st[k + 1] <= x and k + 1 < len(live):
            total += over * (st[k + 1] - st[k])
        else:
            return total + over * (x - st[k])
    return total


@pytest.mark.parametrize("seed", range(8))
def test_wdoa_is_the_overload_integral_over_each_absence_window(seed):
    """WDOA of every hideable candidate (made in place, issue 30) = the integral of the overload over its
    absence window [start + t_out, end - t_in], step by step, / (peak - budget), at budgets from
    the floor to above the peak; the others' = their DOA."""
    p = _random_problem(np.random.default_rng(300 + seed), n_blocks=30)
    c = swap.with_derived(p)
    st = [float(v) for v in p.steps_t.astype(np.float64)]
    live = [int(v) for v in p.live]
    peak = p.peak_before
    positive = 0
    for budget in sorted({p.floor, p.default_budget, (p.floor + peak) // 3, peak - 1, peak}):
        got = swap.wdoa(p, budget)
        for j in range(len(c)):
            doa = float(c["doa_ns"].iat[j])
            if not doa >= 0 or peak - budget <= 0:
                assert got[j] == (doa if doa < 0 else 0.0)
                continue
            a = float(c["start_t"].iat[j]) + float(c["t_out_ns"].iat[j])
            b = float(c["end_t"].iat[j]) - float(c["t_in_ns"].iat[j])
            want = (_overload_integral(st, live, budget, b) - _overload_integral(st, live, budget, min(a, b))) \
                / (peak - budget)
            assert got[j] == pytest.approx(want, rel=1e-12, abs=1e-9)
            positive += want > 0
    assert positive > 0          # some window does see memory above a budget


@pytest.mark.parametrize("seed", range(6))
def test_replay_search_is_numpys_searchsorted(monkeypatch, seed):
    """replay._search (sorted needles, each search galloping on in C) = np.searchsorted, element for
    element, on both sides, with ties, needles before and after every value, sorted and not; and a
    replay with every search through it equals the independent replay reference."""
    from test_swap import _reference_replay

    rng = np.random.default_rng(400 + seed)
    a = np.sort(rng.integers(0, 50, size=int(rng.integers(1, 300))).astype(np.float64))
    x = rng.integers(-5, 56, size=int(rng.integers(1, 500))).astype(np.float64) + rng.choice([0.0, 0.5], 1)
    monkeypatch.setattr(replay_mod, "SEARCH_MIN", 0)
    for needles in (x, np.sort(x), np.sort(x)[::-1].copy()):
        for side in ("left", "right"):
            want = [int(np.sum(a < v)) if side == "left" else int(np.sum(a <= v)) for v in needles]
            got = replay_mod._search(a, needles, side)
            assert got.dtype == np.int64 and got.tolist() == want
    p = _random_problem(np.random.default_rng(500 + seed), n_blocks=30)
    sched, cand = schedule_with_candidates(p, order(p, "doa", p.floor), "budget", p.floor)
    rp = replay_mod.replay(p, sched, cand)
    ref = _reference_replay(p, sched)
    assert len(sched) > 0
    assert rp.slowdown_ns == pytest.approx(ref["slowdown"], abs=1e-6)
    assert rp.peak_after == ref["peak"]


@pytest.mark.parametrize("seed", range(4))
def test_long_pareto_two_at_a_time_equals_one_at_a_time(monkeypatch, seed):
    """The sweep on a long trace two budgets at a time (the lowest beside the highest) gives every point
    of the sweep one budget at a time, in budget order; and the report's order of work (sweep, then
    evaluation) gives the evaluation of a fresh problem."""
    import os

    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    monkeypatch.setattr(swap, "LONG_CANDIDATES", -1)
    got = {}
    for workers in (1, 2):
        monkeypatch.setattr(swap, "LONG_WORKERS", workers)
        monkeypatch.setattr(swap, "SWEEP_WORKERS", workers)
        p = _random_problem(np.random.default_rng(600 + seed), n_blocks=40)
        budgets = sorted({int(b) for b in np.linspace(p.floor, p.peak_before, 7)})
        sweep = swap.pareto(None, problem=p, budgets=budgets)
        got[workers] = (sweep, swap.evaluate(None, problem=p))
    want = []
    for b in budgets:
        p = _random_problem(np.random.default_rng(600 + seed), n_blocks=40)
        r = swap.run_strategy(p, "vote", "budget", b).as_dict()
        want.append((b, r["peak_after"], r["swaps"], r["stall_seconds"]))
    assert [(pt["budget"], pt["peak_after"], pt["swaps"], pt["stall_seconds"]) for pt in got[2][0]] == want
    assert got[2] == got[1]
    assert got[2][1] == swap.evaluate(None, problem=_random_problem(np.random.default_rng(600 + seed), n_blocks=40))
    assert sum(pt["swaps"] for pt in got[2][0]) > 0


def test_paired_budgets_take_each_once_lowest_beside_highest():
    assert swap._paired(0) == []
    assert swap._paired(1) == [0]
    assert swap._paired(7) == [0, 6, 1, 5, 2, 4, 3]
    assert swap._paired(8) == [0, 7, 1, 6, 2, 5, 3, 4]


def test_long_sweep_schedules_one_at_a_time(monkeypatch):
    """On a long trace, of the sweep's two threads (SWEEP_WORKERS forced to 2) one schedules at a time
    (run_strategy's slot): the other's orders and replays go on beside it."""
    import os
    import sys
    import threading
    import time

    sched_mod = sys.modules["pyinterpose.analysis.swap.schedule"]
    real = sched_mod.schedule_with_candidates
    state = {"now": 0, "most": 0, "threads": set()}
    lock = threading.Lock()

    def counted(*a, **k):
        with lock:
            state["now"] += 1
            state["most"] = max(state["most"], state["now"])
            state["threads"].add(threading.get_ident())
        try:
            time.sleep(0.02)
            return real(*a, **k)
        finally:
            with lock:
                state["now"] -= 1

    monkeypatch.setattr(sched_mod, "schedule_with_candidates", counted)
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    monkeypatch.setattr(swap, "LONG_CANDIDATES", -1)
    monkeypatch.setattr(swap, "LONG_WORKERS", 2)
    monkeypatch.setattr(swap, "SWEEP_WORKERS", 2)
    p = _random_problem(np.random.default_rng(700), n_blocks=40)
    swap.pareto(None, problem=p, budgets=sorted({int(b) for b in np.linspace(p.floor, p.peak_before, 8)}))
    assert state["most"] == 1
    assert len(state["threads"]) == 2


def test_long_evaluation_runs_on_the_workers_asked_for(monkeypatch):
    """On a long trace the evaluation runs on LONG_WORKERS threads, or on the caller's alone with
    long_workers=1, with the same results."""
    import os
    import sys
    import threading

    sched_mod = sys.modules["pyinterpose.analysis.swap.schedule"]
    real = sched_mod.schedule_with_candidates
    seen = []

    def recorded(*a, **k):
        seen.append(threading.get_ident())
        return real(*a, **k)

    monkeypatch.setattr(sched_mod, "schedule_with_candidates", recorded)
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    monkeypatch.setattr(swap, "LONG_CANDIDATES", -1)
    monkeypatch.setattr(swap, "LONG_WORKERS", 2)
    one = swap.evaluate(None, problem=_random_problem(np.random.default_rng(800), n_blocks=40), long_workers=1)
    assert set(seen) == {threading.get_ident()} and len(seen) == 12
    seen.clear()
    two = swap.evaluate(None, problem=_random_problem(np.random.default_rng(800), n_blocks=40))
    assert threading.get_ident() not in seen and len(seen) == 12
    assert one == two


def test_the_replay_lets_go_of_the_problems_op_columns_not_the_callers():
    """A problem built from the caller's ops (``plan --swap`` builds one and reads its ops after the
    replay) keeps the caller's dict whole: the replay drops seq and stream from the problem's own."""
    import os

    import pyinterpose
    from pyinterpose.analysis.access import access_intervals
    from pyinterpose.analysis.bandwidth import Bandwidth
    from pyinterpose.analysis.clock import clock_of

    tr = pyinterpose.load(os.path.join(os.path.dirname(__file__), "..", "..", "samples", "torch-cnn-blocks.pit"))
    ops = clock_of(tr, tr.main_pid).replay_ops()
    mine = dict(ops)
    bw = Bandwidth(16e9, 16e9, 0.0, "test")
    p = swap.prepare_tables(tr.blocks, access_intervals(tr, tr.main_pid), bw, min_size=1, ops=ops)
    sched, cand = schedule_with_candidates(p, order(p, "doa", p.default_budget), "no-overhead", None)
    assert len(sched) > 0
    replay_mod.replay(p, sched, cand)
    assert "seq" not in p.ops and "stream" not in p.ops          # the problem's let go
    assert set(ops) == set(mine) and all(ops[k] is mine[k] for k in mine)


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("piece", [1, 3, 1 << 20])
def test_derived_candidate_columns_are_their_definitions(monkeypatch, seed, piece):
    """ati_ns, t_out_ns, t_in_ns and doa_ns are made where read (issue 30), for every row a piece at
    a time: each value is its definition from the size, the times and the link, computed here in
    plain Python floats (IEEE doubles, the same operations in the same order), for every row and
    for a selection of rows."""
    from pyinterpose.analysis.swap import problem as problem_mod

    monkeypatch.setattr(problem_mod, "COLUMN_PIECE", piece)
    from pyinterpose.analysis.bandwidth import Bandwidth

    p = _random_problem(np.random.default_rng(900 + seed), n_blocks=30, bw=Bandwidth(3e9, 1e9, 1e-5, "test"))
    c = p.candidates
    assert not any(k in c for k in swap.DERIVED)             # not held: made where read
    bw = p.bandwidth
    size, start, end = (c[k].tolist() for k in ("size", "start_t", "end_t"))
    t_out = [(bw.latency_s + float(s) / bw.d2h_bytes_per_s) * 1e9 for s in size]
    t_in = [(bw.latency_s + float(s) / bw.h2d_bytes_per_s) * 1e9 for s in size]
    want = {"ati_ns": [e - s for s, e in zip(start, end)], "t_out_ns": t_out, "t_in_ns": t_in,
            "doa_ns": [float(e - s) - a - b for s, e, a, b in zip(start, end, t_out, t_in)]}
    rows = np.arange(len(c))[::2]
    table = swap.with_derived(p)
    assert list(table.columns) == swap.CANDIDATE_COLUMNS
    for k, v in want.items():
        assert swap.column(p, k).tolist() == v
        assert swap.column(p, k, rows).tolist() == [v[i] for i in rows]
        assert table[k].tolist() == v
    assert swap.column(p, "ati_ns").dtype == np.int64


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("piece", [1, 2, 5])
def test_absence_overload_in_pieces_is_one_running_sum(monkeypatch, seed, piece):
    """WDOA's running sum made a piece of steps at a time (issue 30) is the one cumsum of every
    step's overload x length, bit for bit (the carry added to each piece's first term)."""
    from pyinterpose.analysis.swap import strategies as st_mod

    p = _random_problem(np.random.default_rng(950 + seed), n_blocks=30)
    for budget in sorted({p.floor, p.default_budget, p.peak_before - 1}):
        if budget >= p.peak_before:
            continue
        pts = swap._wdoa_points(p)
        monkeypatch.setattr(st_mod, "OVERLOAD_PIECE", 1 << 30)
        whole = swap._absence_overload(p, budget, pts[1], pts[2])
        monkeypatch.setattr(st_mod, "OVERLOAD_PIECE", piece)
        got = swap._absence_overload(p, budget, pts[1], pts[2])
        assert got.tobytes() == whole.tobytes()
        assert np.array_equal(swap.wdoa(p, budget)[pts[0]], got)


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("drop_last", [False, True])
def test_step_search_on_the_int64_steps_is_the_float64_one(seed, drop_last):
    """search_steps (float64 needles among the int64 steps, as integers: issue 30, no float64
    copy of the steps) gives np.searchsorted's answers on the steps as float64, on needles at,
    between, before and after the steps, whole and fractional; step_f the float64 steps."""
    from pyinterpose.analysis.swap.problem import search_steps, step_f

    p = _random_problem(np.random.default_rng(1000 + seed), n_blocks=40)
    st = np.array([float(v) for v in p.steps_t.tolist()])             # the steps as doubles, in Python
    hay = st[:-1] if drop_last else st
    rng = np.random.default_rng(seed)
    x = np.concatenate([st, st + 0.5, st - 0.25, st + 1e-9, [-1e9, -0.5, st[-1] + 7.5, 1e15],
                        rng.uniform(st[0] - 10, st[-1] + 10, 300)])
    rng.shuffle(x)
    for side in ("left", "right"):
        want = [int(np.searchsorted(hay, v, side=side)) for v in x]
        assert search_steps(p, x, side, drop_last=drop_last).tolist() == want
    k = rng.integers(0, len(st), 50)
    assert step_f(p, k).tolist() == st[k].tolist()
    assert step_f(p, k[:10], offset=1).tolist() == st[1:][k[:10]].tolist()
    assert float(step_f(p, -1)) == st[-1] and step_f(p, slice(2, 9)).tolist() == st[2:9].tolist()


@pytest.mark.parametrize("piece", [1, 4, 1 << 20])
@pytest.mark.parametrize("seed", range(4))
def test_integer_ranks_from_an_order_are_pandas_rank(monkeypatch, seed, piece):
    """_ranks_from_order (whole-number ranks read a piece of the order at a time) = pandas' descending
    min rank, ties shuffled in the order, pieces of 1 and 4 rows (groups of ties across pieces), -0.0
    beside 0.0."""
    import pandas as pd

    from pyinterpose.analysis.swap import strategies as strat

    monkeypatch.setattr(strat, "VOTE_PIECE", piece)
    rng = np.random.default_rng(900 + seed)
    n = int(rng.integers(1, 200))
    x = rng.integers(-4, 5, n).astype(np.float64) * rng.choice([1.0, 0.5, 1e12], n)
    x[rng.random(n) < 0.1] = -0.0
    o = np.lexsort((rng.random(n), -x))               # largest first, ties in a random order
    want = pd.Series(x).rank(ascending=False, method="min").to_numpy()
    for dtype in (np.int32, np.int64):
        got = strat._ranks_from_order(-x, o, dtype=dtype)
        assert got.dtype == dtype and np.array_equal(got, want)


@pytest.mark.parametrize("zeros", [False, True])
@pytest.mark.parametrize("side", [False, True])
@pytest.mark.parametrize("piece", [3, 1 << 20])
@pytest.mark.parametrize("seed,gbps", [(0, 1.0), (1, 0.3), (2, 2.0), (3, 1e4)])
def test_vote_fixed_is_its_definition(monkeypatch, seed, gbps, piece, side, zeros):
    """_vote_fixed (its passes a piece at a time, AOA's sort on a second thread or not) keeps what its
    definition gives, written here from pandas ranks and the lexsort of the tie-breaking keys: the
    candidates that cannot hide sorted by (not straddling, DOA rank + AOA rank + DOA rank, place in
    the tie order), the others with their DOA + AOA rank sums; and the vote orders equal the reference.
    ``zeros``: a stored DOA column with DOAs of exactly 0.0 and -0.0 (they can hide)."""
    import os

    import pandas as pd

    from pyinterpose.analysis.bandwidth import Bandwidth
    from pyinterpose.analysis.swap import strategies as strat
    from test_swap_native import _problem, _vote_budgets, reference_order

    monkeypatch.setattr(strat, "VOTE_PIECE", piece)
    monkeypatch.setattr(strat, "VOTE_SIDE_BY_SIDE", side)
    monkeypatch.setattr(strat, "VOTE_SIDE_BY_SIDE_MIN", 0)
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    rng = np.random.default_rng(300 + seed)
    p = _problem(rng, 120, 3000, 8, Bandwidth(1e9 * gbps, 1e9 * gbps, 0.0, "r"), max_size=3)   # equal scores
    if zeros:
        d = swap.with_derived(p)["doa_ns"].to_numpy(np.float64)
        u = rng.random(len(d))
        p.candidates["doa_ns"] = np.where(u < 0.2, 0.0, np.where(u < 0.3, -0.0, d))
    c = swap.with_derived(p)
    n = len(c)
    assert not zeros or (c["doa_ns"] == 0).sum() > 0
    doa, size = c["doa_ns"].to_numpy(np.float64), c["size"].to_numpy(np.float64)
    aoa = np.array([d * s if d >= 0 else d / max(s, 1) for d, s in zip(doa, size)])
    rd = pd.Series(doa).rank(ascending=False, method="min").to_numpy().astype(np.int64)
    ra = pd.Series(aoa).rank(ascending=False, method="min").to_numpy().astype(np.int64)
    tie = np.lexsort((c["start_t"].to_numpy(), c["block_id"].to_numpy(), -doa))
    place = np.argsort(tie)
    not_strad = (~c["straddles_peak"].to_numpy(bool)).astype(np.int64)
    big = 3 * n + 1
    fi, vi = np.flatnonzero(~(doa >= 0)), np.flatnonzero(doa >= 0)
    keys = [((not_strad[i] * big + 2 * rd[i] + ra[i]) * n + place[i], i) for i in fi]
    keys.sort()

    fixed = strat._vote_fixed(p)
    assert fixed["key"].tolist() == [k for k, _ in keys]
    assert fixed["idx"].tolist() == [i for _, i in keys]
    assert fixed["var"].tolist() == vi.tolist()
    assert np.asarray(fixed["var_ranks"]).tolist() == (rd + ra)[vi].tolist()
    assert strat._tie_order(p).tolist() == tie.tolist()
    for b in _vote_budgets(p):
        assert strat._vote_order(p, b) is not None
        assert np.array_equal(swap.order(p, "vote", b), reference_order(p, "vote", b)), b


@pytest.mark.parametrize("seed", range(4))
def test_replay_zeros_are_zeros_in_pages_of_their_own(seed):
    """The replay's delays start as np.zeros: every value 0.0, writable, float64 (a private anonymous map
    above ZEROS_MAP_MIN bytes: issue 30)."""
    n = int(np.random.default_rng(seed).integers(replay_mod.ZEROS_MAP_MIN // 8, replay_mod.ZEROS_MAP_MIN // 2))
    z = replay_mod._zeros(n)
    assert z.dtype == np.float64 and len(z) == n and z.flags.writeable and not z.any()
    z[n // 2] = 1.5
    assert np.count_nonzero(z) == 1 and z[n // 2] == 1.5
    assert not replay_mod._zeros(3).any()


@pytest.mark.parametrize("seed", range(3))
def test_aoa_and_outlier_scores_made_in_pieces(monkeypatch, seed):
    """AOA and the outlier score made a piece of 3 candidates at a time are the formulas over the whole
    columns: DOA x size where DOA >= 0, else DOA / size; ATI x size (float64, bit for bit)."""
    from pyinterpose.analysis.swap import problem as problem_mod
    from pyinterpose.analysis.swap import strategies as strat

    p = _random_problem(np.random.default_rng(seed), n_blocks=25)
    c = p.candidates
    size = c["size"].to_numpy(np.float64)
    doa = (c["end_t"].to_numpy() - c["start_t"].to_numpy()) - p.bandwidth.d2h_seconds(size) * 1e9 \
        - p.bandwidth.h2d_seconds(size) * 1e9
    want_aoa = np.where(doa >= 0, doa * size, doa / np.maximum(size, 1))
    want_outlier = (c["end_t"].to_numpy() - c["start_t"].to_numpy()).astype(np.float64) * size
    monkeypatch.setattr(strat, "COLUMN_PIECE", 3)
    assert len(c) > 6
    assert strat.scores(p, "aoa", 0).tobytes() == want_aoa.tobytes()
    assert strat.scores(p, "outlier", 0).tobytes() == want_outlier.tobytes()
