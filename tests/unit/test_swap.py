"""Swap evaluation: hand-computed schedules, WDOA's budget dependence, validator, random invariants."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from pyinterpose.analysis import swap
from pyinterpose.analysis.bandwidth import Bandwidth
from pyinterpose.errors import PyinterposeError
from pyinterpose.trace.model import Trace

MS = 1_000_000          # ns
M = 1_000_000           # bytes: at 1 GB/s and no latency, M bytes take exactly 1 ms
BW = Bandwidth(1e9, 1e9, 0.0, "test")


def _blocks(rows):
    """rows: (block_id, size, t_alloc, t_free) in M / ms units."""
    return pd.DataFrame({"block_id": [r[0] for r in rows], "size": [r[1] * M for r in rows],
                         "t_alloc": [r[2] * MS for r in rows], "t_free": [r[3] * MS for r in rows],
                         "freed": True, "counts_device": True})


def _iv(rows):
    """rows: (block_id, size, start, end) in M / ms units, all access->access."""
    return pd.DataFrame({"block_id": [r[0] for r in rows], "size": [r[1] * M for r in rows],
                         "start_t": [r[2] * MS for r in rows], "end_t": [r[3] * MS for r in rows],
                         "kind": "between"})


def _ms(s: pd.DataFrame, cols):
    return [[round(float(v) / MS, 6) for v in row] for row in s[cols].to_numpy()]


# ---- hand-computed cases ---------------------------------------------------------------

def test_no_overhead_serialises_each_direction():
    # A, B: 4M live all run; C: 10M on [40, 60) -> peak 18M there, 8M elsewhere.
    p = swap.prepare_tables(_blocks([(0, 4, 0, 100), (1, 4, 0, 100), (2, 10, 40, 60)]),
                            _iv([(0, 4, 10, 70), (1, 4, 12, 70)]), BW, min_size=1)
    assert p.peak_before == 18 * M and p.floor == 10 * M
    r = swap.run_strategy(p, "doa", "no-overhead")
    s = r.schedule.sort_values("block_id")
    # A (DOA 52 ms) first: out 10->14, in 66->70; B waits for the D2H channel: out 14->18,
    # and for the H2D channel: in 62->66.
    assert _ms(s, ["out_start", "out_end", "in_start", "in_end", "free_t", "realloc_t", "stall"]) == [
        [10, 14, 66, 70, 14, 66, 0], [14, 18, 62, 66, 18, 62, 0]]
    d = r.as_dict()
    assert d["peak_after"] == 10 * M and d["stall_seconds"] == 0 and d["bytes_moved"] == 16 * M
    assert d["reduction"] == pytest.approx(8 / 18)


def test_budget_mode_counts_both_stalls():
    # A: 4M all run, C: 10M on [40, 60): peak 14M.  A's interval [39, 61] is 22 ms but the
    # over-budget stretch [40, 60) leaves no room: pause 3 ms at 40 for the swap-out
    # (39->43), swap-in starts at 60 and ends 64, 3 ms after the access at 61.
    p = swap.prepare_tables(_blocks([(0, 4, 0, 100), (1, 10, 40, 60)]), _iv([(0, 4, 39, 61)]), BW,
                            min_size=1)
    r = swap.run_strategy(p, "size", "budget", 12 * M)
    assert _ms(r.schedule, ["out_start", "out_end", "free_t", "realloc_t", "in_start", "in_end",
                            "next_access", "stall"]) == [[39, 43, 40, 60, 60, 64, 61, 6]]
    d = r.as_dict()
    assert d["peak_after"] == 10 * M and d["budget_met"] is True
    assert d["stall_seconds"] == pytest.approx(6e-3)
    assert d["overhead_fraction"] == pytest.approx(6 / 100)
    # no-overhead: the transfers hide (out 39->43, in 57->61) but the away window [43, 57)
    # never covers the whole over-budget step, so nothing is gained and nothing is taken.
    r0 = swap.run_strategy(p, "size", "no-overhead")
    assert len(r0.schedule) == 0 and r0.peak_after == 14 * M


def test_latency_and_min_size():
    bw = Bandwidth(2e9, 1e9, 1e-3, "test")   # H2D 2 GB/s, D2H 1 GB/s, 1 ms latency
    p = swap.prepare_tables(_blocks([(0, 4, 0, 100), (1, 1, 0, 100)]),
                            _iv([(0, 4, 10, 90), (1, 1, 10, 90)]), bw, min_size=2 * M)
    assert p.candidates["block_id"].tolist() == [0]          # the 1M block is below min_size
    c = swap.with_derived(p).iloc[0]       # the derived columns are made where read (issue 30)
    assert c["t_out_ns"] == pytest.approx(5 * MS) and c["t_in_ns"] == pytest.approx(3 * MS)
    assert c["doa_ns"] == pytest.approx(72 * MS)


def test_candidate_filter_and_peak_order():
    blocks = _blocks([(0, 2, 0, 100), (1, 2, 0, 100), (2, 8, 50, 60)])
    iv = pd.concat([_iv([(0, 2, 0, 10), (0, 2, 10, 40), (1, 2, 20, 90)]).assign(kind=["alloc_to_first",
                                                                                     "between", "between"]),
                    _iv([(0, 2, 40, 40)])])             # zero ATI: dropped
    p = swap.prepare_tables(blocks, iv, BW, min_size=1)
    assert p.candidates[["block_id", "start_t"]].values.tolist() == [[0, 10 * MS], [1, 20 * MS]]
    assert p.candidates["straddles_peak"].tolist() == [False, True]
    # block 0's interval has the larger size-score tie... the straddling one still comes first
    for s in swap.STRATEGIES:
        assert swap.order(p, s, 5 * M)[0] == 1


def test_wdoa_depends_on_budget():
    # P, Q: 2M all run.  D1: 6M plateau [20, 120) (10M live), D2: 10M spike [150, 160) (14M live).
    # X = P away over the plateau, Y = Q away over the spike.
    blocks = _blocks([(0, 2, 0, 200), (1, 2, 0, 200), (2, 6, 20, 120), (3, 10, 150, 160)])
    p = swap.prepare_tables(blocks, _iv([(0, 2, 10, 130), (1, 2, 140, 170)]), BW, min_size=1)
    assert p.peak_before == 14 * M
    # budget 9M: X = 100 ms x 1M / 5M = 20 ms, Y = 10 ms x 5M / 5M = 10 ms
    assert swap.wdoa(p, 9 * M) == pytest.approx([20 * MS, 10 * MS])
    # budget 12M: the plateau is under budget -> X = 0; Y = 10 ms x 2M / 2M = 10 ms
    assert swap.wdoa(p, 12 * M) == pytest.approx([0, 10 * MS])
    assert swap.wdoa(p, 14 * M) == pytest.approx([0, 0])
    hi_first = swap.scores(p, "wdoa", 9 * M)
    lo_first = swap.scores(p, "wdoa", 12 * M)
    assert hi_first[0] > hi_first[1] and lo_first[0] < lo_first[1]


def test_scores_by_hand():
    blocks = _blocks([(0, 2, 0, 100), (1, 4, 0, 100)])
    p = swap.prepare_tables(blocks, _iv([(0, 2, 10, 50), (1, 4, 10, 15)]), BW, min_size=1)
    # DOA: 40 - 4 = 36 ms, 5 - 8 = -3 ms
    assert swap.scores(p, "doa", 0) == pytest.approx([36 * MS, -3 * MS])
    assert swap.scores(p, "aoa", 0) == pytest.approx([36 * MS * 2 * M, -3 * MS / (4 * M)])
    assert swap.scores(p, "size", 0).tolist() == [2 * M, 4 * M]
    assert swap.scores(p, "outlier", 0) == pytest.approx([40 * MS * 2 * M, 5 * MS * 4 * M])
    # vote: block 0 ranks 1 on DOA, AOA and WDOA (block 1's WDOA is its negative DOA)
    v = swap.scores(p, "vote", 0)
    assert v[0] == -3 and v[1] == -6
    with pytest.raises(PyinterposeError):
        swap.scores(p, "nope", 0)


# ---- validator -------------------------------------------------------------------------

def _valid():
    p = swap.prepare_tables(_blocks([(0, 4, 0, 100), (1, 4, 0, 100), (2, 10, 40, 60)]),
                            _iv([(0, 4, 10, 70), (1, 4, 12, 70)]), BW, min_size=1)
    s = swap.run_strategy(p, "doa", "no-overhead").schedule
    assert swap.validate_schedule(s, "no-overhead", BW) == []
    return s.sort_values("block_id").reset_index(drop=True)


@pytest.mark.parametrize("breakage, mode, expect", [
    (lambda s: s.assign(out_start=s["out_start"] - [0, 2 * MS], out_end=s["out_end"] - [0, 2 * MS],
                        free_t=s["free_t"] - [0, 2 * MS]), "budget", "transfers overlap"),
    (lambda s: s.assign(in_start=s["in_start"] + [0, 2 * MS], in_end=s["in_end"] + [0, 2 * MS]),
     "budget", "transfers overlap"),
    (lambda s: s.assign(in_start=s["in_start"] + 5 * MS, in_end=s["in_end"] + 5 * MS, realloc_t=s["realloc_t"]),
     "budget", "stall not counted"),
    (lambda s: s.assign(in_start=s["in_start"] + 5 * MS, in_end=s["in_end"] + 5 * MS,
                        stall=5 * MS), "no-overhead", "swap-in ends after the next access"),
    (lambda s: s.assign(out_start=s["out_start"] - 11 * MS, out_end=s["out_end"] - 11 * MS,
                        free_t=s["free_t"] - 11 * MS), "no-overhead", "before the previous access"),
    (lambda s: s.assign(free_t=s["free_t"] - 1 * MS), "budget", "stall not counted"),
    (lambda s: s.assign(realloc_t=s["next_access"] + MS), "budget", "away at its next access"),
    (lambda s: s.assign(out_end=s["out_end"] + 0.5 * MS), "budget", "latency + size / bandwidth"),
    (lambda s: pd.concat([s, s.iloc[[0]].assign(out_start=s["out_start"].iloc[0] + 30 * MS)],
                         ignore_index=True), "budget", "swapped out twice"),
])
def test_validator_catches_broken_schedules(breakage, mode, expect):
    problems = swap.validate_schedule(breakage(_valid()), mode, BW)
    assert any(expect in m for m in problems), problems


def test_validator_accepts_counted_stall():
    s = _valid()
    late = s.assign(in_start=s["in_start"] + [3 * MS, 0], in_end=s["in_end"] + [3 * MS, 0], stall=[3 * MS, 0])
    assert swap.validate_schedule(late, "budget", BW) == []
    assert any("stall in no-overhead" in m for m in swap.validate_schedule(late, "no-overhead", BW))


# ---- random invariants -----------------------------------------------------------------

def _random_problem(rng, n_blocks=30, bw=None):
    rows, iv = [], []
    for b in range(n_blocks):
        a = int(rng.integers(0, 500))
        f = a + int(rng.integers(20, 500))
        size = int(rng.integers(1, 8))
        rows.append((b, size, a, f))
        pts = np.sort(rng.choice(np.arange(a + 1, f), size=min(f - a - 1, int(rng.integers(1, 6))),
                                 replace=False))
        for s, e in zip(pts[:-1], pts[1:]):
            iv.append((b, size, int(s), int(e)))
    p = swap.prepare_tables(_blocks(rows), _iv(iv), bw or BW, min_size=1)
    # the compute stream a problem without a trace is replayed on: an op at every interval end,
    # allocation and free, each keeping the stream until the next (issue 21's CPU-clock reading)
    p.test_op_times = sorted({t * MS for r in rows for t in r[2:]} | {t * MS for r in iv for t in r[2:]})
    return p


def _reference_replay(p, sched):
    """tests/unit/replay_reference.py on the problem's stream and ``sched``."""
    from replay_reference import replay as ref

    times = [float(t) for t in p.test_op_times]
    ops = [(t, (times[i + 1] - t) if i + 1 < len(times) else 0.0, 0.0) for i, t in enumerate(times)]
    index = {t: i for i, t in enumerate(times)}
    swaps = [dict(out_start=r.out_start, out_end=r.out_end, free_t=r.free_t, in_start=r.in_start, in_end=r.in_end,
                  size=int(r.size), p=index[float(r.prev_access)], q=index[float(r.next_access)])
             for r in sched.itertuples()]
    return ref(ops, swaps, list(zip(p.events_t.tolist(), p.events_d.tolist())))


def _brute_peak(blocks_t, sched):
    """Live bytes sampled at every event instant (after all events at it), by brute force."""
    ev = list(blocks_t)
    for r in sched.itertuples():
        ev += [(r.free_t, -r.size), (r.realloc_t, r.size)]
    times = sorted({t for t, _ in ev})
    return max(sum(d for t, d in ev if t <= x) for x in times)


@pytest.mark.parametrize("seed", range(6))
def test_random_invariants(seed):
    rng = np.random.default_rng(seed)
    bw = Bandwidth(1e9 * float(rng.uniform(0.5, 4)), 1e9 * float(rng.uniform(0.5, 4)),
                   float(rng.uniform(0, 2e-3)), "random")
    p = _random_problem(rng, bw=bw)
    ev = list(zip(p.events_t.tolist(), p.events_d.tolist()))
    budgets = [p.floor, p.default_budget, p.peak_before]
    for s in swap.STRATEGIES:
        for mode in swap.MODES:
            for budget in budgets:
                r = swap.run_strategy(p, s, mode, budget)
                sched = r.schedule
                assert swap.validate_schedule(sched, mode, bw) == []
                assert r.peak_after <= r.peak_before
                if mode == "no-overhead":
                    assert r.stall_ns == 0
                    assert (sched["in_end"] <= sched["next_access"] + 1).all()
                    assert r.peak_after == _brute_peak(ev, sched)
                # no swap-out ends after the block's next access (issue 21), in any mode
                assert (sched["out_end"] <= sched["next_access"] + 1).all()
                # peak and stall are those of an independent replay
                want = _reference_replay(p, sched)
                assert r.peak_after == want["peak"]
                assert r.stall_ns == pytest.approx(want["slowdown"], abs=1e-3)
                # channel exclusivity, independently of the validator
                for a, b in (("out_start", "out_end"), ("in_start", "in_end")):
                    iv = sorted(zip(sched[a], sched[b]))
                    assert all(iv[k + 1][0] >= iv[k][1] - 1 for k in range(len(iv) - 1))
                # every swap stays inside its own access interval
                assert (sched["out_start"] >= sched["prev_access"]).all()
                assert (sched["realloc_t"] <= sched["next_access"]).all()


def test_no_candidates_is_a_plain_result():
    p = swap.prepare_tables(_blocks([(0, 4, 0, 100)]), _iv([]), BW, min_size=1)
    r = swap.run_strategy(p, "vote", "budget", 2 * M)
    assert len(r.schedule) == 0 and r.peak_after == 4 * M and r.as_dict()["budget_met"] is False


# ---- whole-trace entry points ----------------------------------------------------------

def _trace():
    """Two training-like steps: weights W (4M, all run) and activation A (6M) freed in backward."""
    blocks = pd.DataFrame({
        "block_id": [0, 1, 2, 3], "pid": 7, "size": [4 * M, 6 * M, 6 * M, 3 * M], "kind": "device",
        "api": "cudaMalloc", "t_alloc": [0, 10 * MS, 110 * MS, 45 * MS],
        "t_free": [200 * MS, 90 * MS, 190 * MS, 55 * MS],
        "seq_alloc": [0, 1, 10, 5], "seq_free": [100, 9, 19, 6]})
    acc = pd.DataFrame({"block_id": [0, 1, 1, 0, 0, 2, 2, 0], "pid": 7,
                        "seq": [2, 2, 8, 8, 11, 11, 18, 18],
                        "t": [20 * MS, 20 * MS, 80 * MS, 80 * MS, 120 * MS, 120 * MS, 180 * MS, 180 * MS]})
    return Trace.from_tables(blocks=blocks, accesses=acc)


def test_evaluate_json_and_schedule_table():
    ev = swap.analyse(_trace(), bandwidth=1.0, latency_us=0)
    d = ev.as_dict()
    assert d["bandwidth"]["h2d_bytes_per_s"] == 1e9 and "given" in d["bandwidth"]["source"]
    assert d["peak_before"] == 13 * M
    got = {(r["strategy"], r["mode"]) for r in d["strategies"]}
    assert got == {(s, m) for s in swap.STRATEGIES for m in swap.MODES}
    for r in d["strategies"]:
        assert set(r) >= {"strategy", "mode", "peak_before", "peak_after", "reduction", "stall_seconds",
                          "overhead_fraction", "swaps", "bytes_moved"}
        assert r["peak_after"] <= r["peak_before"]
    # swapping the 6M activation over [20, 80] ms hides (12 ms of transfers) and takes the 3M
    # spike at [45, 55) down to 7M; the rest of step 1 still holds W + A = 10M.
    no = next(r for r in d["strategies"] if r["strategy"] == "size" and r["mode"] == "no-overhead")
    assert no["peak_after"] == 10 * M and no["stall_seconds"] == 0
    t = ev.schedule_table()
    assert list(t.columns[:8]) == ["strategy", "mode", "block_id", "out_start", "out_end", "in_start",
                                   "in_end", "next_access"]
    row = t[(t.strategy == "size") & (t["mode"] == "no-overhead")].iloc[0]
    assert (row.block_id, row.out_start, row.out_end, row.in_start, row.in_end, row.next_access) == \
        pytest.approx((1, 0.020, 0.026, 0.074, 0.080, 0.080))
    assert swap.evaluate(_trace(), bandwidth=1.0, latency_us=0)["strategies"] == d["strategies"]


def test_pareto_is_monotone_in_budget():
    pts = swap.pareto(_trace(), bandwidth=1.0, budgets=[13 * M, 10 * M, 7 * M, 4 * M])
    assert [p["budget"] for p in pts] == [13 * M, 10 * M, 7 * M, 4 * M]
    # floor 10M: before the first access at 20 ms, W + A1 = 10M are live and nothing can leave
    for p in pts:
        assert p["peak_after"] == max(p["budget"], 10 * M)
    stalls = [p["stall_seconds"] for p in pts]
    assert stalls == sorted(stalls)                     # a tighter budget never costs less here
    assert pts[0]["stall_seconds"] == 0 and pts[0]["peak_after"] == 13 * M


def test_evaluate_errors(monkeypatch, tmp_path):
    monkeypatch.setenv("PYINTERPOSE_CACHE_DIR", str(tmp_path))
    with pytest.raises(PyinterposeError, match="no bandwidth"):
        swap.evaluate(_trace())                          # no NVML, no measurement, no --bandwidth
    with pytest.raises(PyinterposeError, match="strategy"):
        swap.evaluate(_trace(), bandwidth=1.0, strategies=["bogus"])
    with pytest.raises(PyinterposeError, match="no allocations"):
        swap.evaluate(Trace.from_tables(), bandwidth=1.0)


def test_candidate_table_has_every_score():
    t = swap.candidates(_trace(), bandwidth=1.0, latency_us=0)
    assert {f"score_{s}" for s in swap.STRATEGIES} <= set(t.columns)
    # straddling the 13M peak at [45, 55): W and A1 over [20, 80], listed first
    assert t["straddles_peak"].tolist()[:2] == [True, True]
    assert sorted(t["block_id"].tolist()[:2]) == [0, 1]
    assert len(t) == 5                                   # W: 3 intervals, A1 and A2: 1 each


def test_budget_mode_prefers_swaps_that_hide():
    # A 4M and B 3M all run, C 10M on [40, 60): peak 17M.  "size" ranks A's [39, 61] first,
    # but it only works with a 6 ms stall; B's [20, 80] hides (out 20->23, in 77->80) and
    # alone brings the peak to the 14M budget, so budget mode takes B only, without a stall.
    p = swap.prepare_tables(_blocks([(0, 4, 0, 100), (1, 3, 0, 100), (2, 10, 40, 60)]),
                            _iv([(0, 4, 39, 61), (1, 3, 20, 80)]), BW, min_size=1)
    r = swap.run_strategy(p, "size", "budget", 14 * M)
    assert _ms(r.schedule, ["block_id", "out_start", "out_end", "in_start", "in_end", "stall"]) == \
        [[1 / MS, 20, 23, 77, 80, 0]]
    assert r.peak_after == 14 * M
    # a tighter budget needs A as well, and then its stalls are counted
    r = swap.run_strategy(p, "size", "budget", 11 * M)
    assert r.peak_after <= 11 * M and r.stall_ns == pytest.approx(6 * MS)


def test_one_prepared_problem_serves_evaluate_and_pareto(monkeypatch):
    tr = _trace()
    calls = []
    real = swap.prepare
    monkeypatch.setattr(swap, "prepare", lambda *a, **k: calls.append(1) or real(*a, **k))
    p = swap.problem_for(tr, bandwidth=1.0, latency_us=0)
    d = swap.evaluate(tr, problem=p)
    pts = swap.pareto(tr, problem=p, budgets=[13 * M, 7 * M])
    assert len(calls) == 1
    assert d == swap.evaluate(tr, bandwidth=1.0, latency_us=0)
    assert pts == swap.pareto(tr, bandwidth=1.0, latency_us=0, budgets=[13 * M, 7 * M])
    only = swap.evaluate(tr, problem=p, modes=("no-overhead",))
    assert only["strategies"] == [r for r in d["strategies"] if r["mode"] == "no-overhead"]
    with pytest.raises(PyinterposeError, match="mode"):
        swap.evaluate(tr, problem=p, modes=("bogus",))


@pytest.mark.slow
def test_report_prepares_the_swap_problem_once(monkeypatch):
    from pyinterpose.report import html
    from pyinterpose.report.synthetic import training_trace

    calls = []
    real = swap.prepare
    monkeypatch.setattr(swap, "prepare", lambda *a, **k: calls.append(1) or real(*a, **k))
    rep = html.build(training_trace(iterations=6, step_ns=200_000), bandwidth=16)
    assert len(calls) == 1
    assert "swap_pareto" in rep.headlines and "swap" in rep.headlines


# ---- the report's shared task list -------------------------------------------------------

def _work_threads(problem, n_threads: int, **kw):
    import threading

    w = swap.SwapWork(problem, **kw)
    ts = [threading.Thread(target=w.work) for _ in range(n_threads - 1)]
    for t in ts:
        t.start()
    out = w.results()                 # the caller's thread works too, then waits
    for t in ts:
        t.join()
    return out


@pytest.mark.parametrize("seed", range(4))
def test_swap_work_gives_what_evaluate_and_pareto_give(seed):
    """SwapWork (the report's one task list for the evaluation and the Pareto sweep) gives what
    evaluate() and pareto() give, whatever the number of threads working through it."""
    rng = np.random.default_rng(100 + seed)
    p = _random_problem(rng, n_blocks=60)
    want = (swap.evaluate(None, problem=p), swap.pareto(None, problem=p))
    for n in (1, 2, 3):
        q = _random_problem(np.random.default_rng(100 + seed), n_blocks=60)   # a fresh memo each time
        assert _work_threads(q, n) == want


@pytest.mark.slow
def test_swap_work_on_gpu_traces():
    import glob
    import os

    import pyinterpose

    root = os.path.join(os.path.dirname(__file__), "..", "..", "samples")
    paths = [x for x in sorted(glob.glob(os.path.join(root, "*-blocks.pit")))]
    assert paths
    for path in paths:
        tr = pyinterpose.load(path)
        try:
            p = swap.problem_for(tr, 16.0)
        except PyinterposeError:
            continue
        want = (swap.evaluate(tr, 16.0, problem=p), swap.pareto(tr, 16.0, problem=p))
        tr2 = pyinterpose.load(path)
        assert _work_threads(swap.problem_for(tr2, 16.0), 2) == want, path


def test_swap_work_raises_an_unknown_strategy():
    with pytest.raises(PyinterposeError):
        swap.SwapWork(_random_problem(np.random.default_rng(1)), strategy="nope")
