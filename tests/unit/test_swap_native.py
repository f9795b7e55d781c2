"""The C swap scheduler (native/swap/swap.c) against the Python loop it replaced.

``reference_schedule`` below is the former ``swap.schedule`` kept verbatim as a slow
reference: the C loop must give exactly the same schedules (same swaps, same times)
on random instances, including dense ones where transfers queue on both links, runs
merge and the budget pass stalls.
"""
from __future__ import annotations

from bisect import bisect_left, bisect_right

import numpy as np
import pandas as pd
import pytest

from pyinterpose.analysis import swap
from pyinterpose.analysis.bandwidth import Bandwidth


# ---- the former Python implementation (reference) ----------------------------------------

class _Channel:
    """Busy time of one transfer direction: sorted, disjoint runs (touching transfers merge)."""

    MERGE_NS = 1e-3

    def __init__(self):
        self.starts: list[float] = []
        self.ends: list[float] = []

    def earliest(self, t: float, dur: float, limit: float = float("inf")) -> float | None:
        """Earliest s >= t with [s, s + dur) free; None if that s would exceed ``limit``."""
        i = bisect_right(self.ends, t)
        s = t
        while i < len(self.starts) and s <= limit:
            if s + dur <= self.starts[i]:
                break
            s = max(s, self.ends[i])
            i += 1
        return s if s <= limit else None

    def latest(self, deadline: float, dur: float, not_before: float) -> float | None:
        """Latest s with s + dur <= deadline, s >= not_before and [s, s + dur) free; None if none."""
        s = deadline - dur
        j = bisect_left(self.starts, deadline) - 1
        while s >= not_before:
            if j < 0 or self.ends[j] <= s:
                return s
            s = min(s, self.starts[j] - dur)
            j -= 1
        return None

    def add(self, s: float, e: float) -> None:
        i = bisect_left(self.starts, s)
        if i > 0 and self.ends[i - 1] >= s - self.MERGE_NS:        # touches the run before
            i -= 1
            self.ends[i] = max(self.ends[i], e)
        else:
            self.starts.insert(i, s)
            self.ends.insert(i, e)
        while i + 1 < len(self.starts) and self.starts[i + 1] <= self.ends[i] + self.MERGE_NS:
            self.ends[i] = max(self.ends[i], self.ends[i + 1])       # swallow the run after
            del self.starts[i + 1], self.ends[i + 1]


class _Curve:
    """Live bytes per step with range add and a chunked max (numpy per chunk)."""

    def __init__(self, live: np.ndarray, chunk: int = 256):
        n = len(live)
        self.n, self.b = n, chunk
        nc = max(1, -(-n // chunk))
        self.v = np.full(nc * chunk, np.iinfo(np.int64).min // 4, np.int64)
        self.v[:n] = live
        self.cmax = self.v.reshape(nc, chunk).max(axis=1)

    def add(self, lo: int, hi: int, delta: int) -> None:
        if hi <= lo:
            return
        self.v[lo:hi] += delta
        c0, c1 = lo // self.b, (hi - 1) // self.b + 1
        self.cmax[c0:c1] = self.v[c0 * self.b:c1 * self.b].reshape(c1 - c0, self.b).max(axis=1)

    def max_all(self) -> int:
        return int(self.cmax.max()) if self.n else 0

    def max_range(self, lo: int, hi: int) -> int:
        return int(self.v[lo:hi].max()) if hi > lo else np.iinfo(np.int64).min

    def over(self, lo: int, hi: int, thr: int) -> tuple[int, int] | None:
        idx = np.flatnonzero(self.v[lo:hi] > thr)
        return (lo + int(idx[0]), lo + int(idx[-1])) if len(idx) else None




def reference_schedule(problem, idx_order, mode, budget=None):
    """The Python greedy loop that swap.schedule() ran before it moved to C (slow: numpy max
    over whole ranges and list walks per candidate), with the budget pass's transfers kept
    runnable as the C loop now keeps them (issue 21: the swap-out ends by the next access and
    starts before the first over-budget moment; the swap-in starts before the next access).

    ``no-overhead``: target = budget, or as low as timing allows when None.
    ``budget``: keep the peak <= budget (required), counting stalls."""
    target = 0 if budget is None else int(budget)
    c = swap.with_derived(problem)
    st = problem.steps_t
    curve = _Curve(problem.live)
    d2h, h2d = _Channel(), _Channel()
    start = c["start_t"].to_numpy(np.float64)
    end = c["end_t"].to_numpy(np.float64)
    size = c["size"].to_numpy(np.int64)
    t_out = c["t_out_ns"].to_numpy(np.float64)
    t_in = c["t_in_ns"].to_numpy(np.float64)
    lo_iv, hi_iv = swap._steps_inside(st, start, end)
    st_f, n_steps = st.astype(np.float64), len(st) - 1
    block_id = c["block_id"].to_numpy(np.int64)
    iteration = c["iteration"].to_numpy(np.int64)
    rows: list[tuple] = []
    taken: list[tuple[int, int, int]] = []      # (lo, hi, size) of each accepted swap
    # budget mode: first every swap that hides (as no-overhead), then the rest with stalls
    phases = ("no-overhead",) if mode == "no-overhead" else ("no-overhead", "budget")
    used = np.zeros(len(c), dtype=bool)
    for phase in phases:
        for i in idx_order:
            if curve.max_all() <= target:
                break
            if used[i] or curve.max_range(lo_iv[i], hi_iv[i]) <= target:
                continue                           # away or not, this interval never helps
            if phase == "no-overhead":
                os_ = d2h.earliest(start[i], t_out[i], limit=end[i] - t_in[i] - t_out[i])
                if os_ is None:
                    continue
                oe = os_ + t_out[i]
                is_ = h2d.latest(end[i], t_in[i], oe)
                if is_ is None:
                    continue
                f, r, stall = oe, is_, 0.0
            else:
                k1, k2 = curve.over(lo_iv[i], hi_iv[i], target)
                first_over, last_over_end = float(st[k1]), float(st[k2 + 1])
                # the swap-out ends by the next access, and starts before the first over-budget
                # moment when it ends after it; the swap-in starts before the next access
                os_ = d2h.earliest(start[i], t_out[i], limit=min(end[i] - t_out[i], first_over))
                if os_ is None:
                    continue
                oe = os_ + t_out[i]
                if oe > first_over and not os_ < first_over:
                    continue
                f = min(oe, first_over)
                stall = oe - f                     # pause at the first over-budget moment
                need = max(oe, last_over_end)
                is_ = h2d.latest(end[i], t_in[i], need)
                if is_ is None:
                    is_ = h2d.earliest(need, t_in[i], limit=end[i])
                    if is_ is None or not is_ < end[i]:
                        continue
                r = min(is_, end[i])
                stall += max(0.0, is_ + t_in[i] - end[i])  # pause at the next access
            if r <= f:
                continue
            lo = min(int(st_f.searchsorted(f, side="left")), n_steps)
            hi = max(lo, min(int(st_f.searchsorted(r, side="right")) - 1, n_steps))
            if curve.max_range(lo, hi) <= target:
                continue
            if mode == "budget" and phase == "no-overhead":
                k1, k2 = curve.over(lo_iv[i], hi_iv[i], target)
                if lo > k1 or hi <= k2:
                    continue   # hides, but leaves over-budget time in its interval: try it with stalls later
            curve.add(lo, hi, -int(size[i]))
            d2h.add(os_, oe)
            h2d.add(is_, is_ + t_in[i])
            used[i] = True
            taken.append((lo, hi, int(size[i])))
            rows.append((int(block_id[i]), int(size[i]), int(iteration[i]), start[i], os_, oe,
                         f, r, is_, is_ + t_in[i], end[i], stall))
    # drop swaps the reached peak does not need (lowest priority first)
    limit = max(curve.max_all(), target)
    keep = [True] * len(rows)
    for j in range(len(rows) - 1, -1, -1):
        lo, hi, sz = taken[j]
        curve.add(lo, hi, sz)
        if curve.max_all() > limit:
            curve.add(lo, hi, -sz)
        else:
            keep[j] = False
    rows = [r for r, k in zip(rows, keep) if k]
    return pd.DataFrame(rows, columns=swap.SCHEDULE_COLUMNS).astype(
        {"block_id": "int64", "size": "int64", "iteration": "int64"})



# ---- random instances ------------------------------------------------------------------

def _tables(rows, iv, bw):
    """The problem of blocks ``rows`` (id, size, alloc, free) and their intervals ``iv`` (id, size, start, end)."""
    blocks = pd.DataFrame(rows, columns=["block_id", "size", "t_alloc", "t_free"])
    blocks["freed"] = True
    blocks["counts_device"] = True
    ivs = pd.DataFrame(iv, columns=["block_id", "size", "start_t", "end_t"])
    ivs["kind"] = "between"
    return swap.prepare_tables(blocks, ivs, bw, min_size=1)


def _problem(rng, n_blocks, horizon, max_ivs, bw, max_size=8):
    rows, iv = [], []
    for b in range(n_blocks):
        a = int(rng.integers(0, horizon))
        f = a + int(rng.integers(20, horizon))
        size = int(rng.integers(1, max_size)) * 1_000_000
        rows.append((b, size, a * 1000, f * 1000))
        k = min(f - a - 1, int(rng.integers(2, max_ivs + 1)))
        pts = np.sort(rng.choice(np.arange(a + 1, f), size=k, replace=False)) * 1000
        for s, e in zip(pts[:-1], pts[1:]):
            iv.append((b, size, int(s), int(e)))
    return _tables(rows, iv, bw)


def _same(a: pd.DataFrame, b: pd.DataFrame):
    assert list(a.columns) == list(b.columns)
    assert len(a) == len(b)
    for col in a.columns:
        assert np.array_equal(a[col].to_numpy(), b[col].to_numpy()), col


CASES = [  # (blocks, horizon in us, intervals per block, GB/s): sparse to dense links (transfers of a few
    # to a few hundred us against intervals of tens to hundreds: a swap-out must end by the next access)
    (30, 500, 6, 100.0), (80, 2000, 8, 30.0), (200, 3000, 10, 5.0), (150, 400, 5, 200.0), (400, 20000, 12, 2.0)]


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(10))
def test_same_schedules_as_the_python_loop(seed):
    rng = np.random.default_rng(1000 + seed)
    n_blocks, horizon, max_ivs, gbps = CASES[seed % len(CASES)]
    bw = Bandwidth(1e9 * gbps * float(rng.uniform(0.5, 2)), 1e9 * gbps * float(rng.uniform(0.5, 2)),
                   float(rng.uniform(0, 5e-6)), "random")
    p = _problem(rng, n_blocks, horizon, max_ivs, bw)
    assert len(p.candidates) > 20
    budgets = sorted({p.floor, p.default_budget, (p.floor + 3 * p.peak_before) // 4, p.peak_before})
    swaps = 0
    for s in swap.STRATEGIES:
        for b in budgets:
            idx = swap.order(p, s, b)
            for mode, target in (("no-overhead", None), ("no-overhead", b), ("budget", b)):
                want = reference_schedule(p, idx, mode, target)
                got = swap.schedule(p, idx, mode, target)
                _same(got, want)
                swaps += len(got)
    c = swap.with_derived(p)     # a swap-out must end by the next access: some interval must hold one
    assert swaps > 0 or not (c["t_out_ns"] < c["ati_ns"]).any()


def test_dense_links_queue_and_merge():
    # many small candidates on a slow link: transfers queue back to back (runs merge) and
    # the earliest/latest searches must skip over long busy stretches
    rng = np.random.default_rng(7)
    bw = Bandwidth(40e9, 60e9, 0.0, "slow")
    p = _problem(rng, 300, 5000, 15, bw, max_size=3)
    for mode, target in (("no-overhead", None), ("budget", p.floor), ("budget", p.default_budget)):
        idx = swap.order(p, "doa", p.default_budget)
        want = reference_schedule(p, idx, mode, target)
        got = swap.schedule(p, idx, mode, target)
        _same(got, want)
        assert len(got) > 20
        if mode == "budget":    # transfers queue back to back on the device-to-host link
            o = got.sort_values("out_start")
            assert (np.abs(o["out_start"].to_numpy()[1:] - o["out_end"].to_numpy()[:-1]) < 1e-3).sum() >= 2
        assert swap.validate_schedule(got, mode, bw) == []


def test_empty_and_order_checks():
    rng = np.random.default_rng(3)
    p = _problem(rng, 10, 200, 4, Bandwidth(1e9, 1e9, 0.0, "t"))
    e = swap.schedule(p, np.zeros(0, np.int64), "no-overhead")
    assert len(e) == 0 and list(e.columns) == swap.SCHEDULE_COLUMNS
    with pytest.raises(swap.PyinterposeError):
        swap.schedule(p, np.array([len(p.candidates)]), "no-overhead")


# ---- what swap.schedule() removes before the loop, the shared orders and the exact peak --------

def reference_wdoa(problem, budget):
    """swap.wdoa() as it was: the window ends searched on the steps for every budget."""
    c = swap.with_derived(problem)
    doa = c["doa_ns"].to_numpy(np.float64)
    over_peak = problem.peak_before - budget
    if over_peak <= 0 or len(c) == 0:
        return np.where(doa < 0, doa, 0.0)
    st = problem.steps_t.astype(np.float64)
    g = np.maximum(problem.live - budget, 0).astype(np.float64)
    cum = np.concatenate([[0.0], np.cumsum(g * np.diff(st))])

    def integral(x):
        k = np.clip(np.searchsorted(st, x, side="right") - 1, 0, len(g) - 1)
        val = cum[k] + g[k] * (np.minimum(x, st[-1]) - st[k])
        return np.where(x < st[0], 0.0, np.where(x >= st[-1], cum[-1], val))

    a = c["start_t"].to_numpy(np.float64) + c["t_out_ns"].to_numpy(np.float64)
    b = c["end_t"].to_numpy(np.float64) - c["t_in_ns"].to_numpy(np.float64)
    w = (integral(b) - integral(np.minimum(a, b))) / over_peak
    return np.where(doa < 0, doa, w)


def reference_order(problem, strategy, budget):
    """swap.order() as it was: one lexsort of every key, pandas ranks for the vote."""
    c = swap.with_derived(problem)
    if strategy == "vote":
        ranks = [pd.Series(reference_wdoa(problem, budget) if s == "wdoa" else swap.scores(problem, s, budget))
                 .rank(ascending=False, method="min").to_numpy() for s in ("doa", "aoa", "wdoa")]
        s = -np.sum(ranks, axis=0)
    elif strategy == "wdoa":
        s = reference_wdoa(problem, budget)
    else:
        s = swap.scores(problem, strategy, budget)
    keys = (c["start_t"].to_numpy(), c["block_id"].to_numpy(), -c["doa_ns"].to_numpy(), -s,
            ~c["straddles_peak"].to_numpy())
    return np.lexsort(keys)


def _check_problem(p, budgets, modes=(("no-overhead", None), ("no-overhead", "b"), ("budget", "b"))):
    """C schedules == the Python loop, orders == the old lexsort, exact peak == the full sort;
    returns the number of swaps seen."""
    swaps = 0
    for s in swap.STRATEGIES:
        for b in budgets:
            idx = swap.order(p, s, b)
            assert np.array_equal(idx, reference_order(p, s, b)), (s, b)
            if s == "wdoa":
                assert np.array_equal(swap.wdoa(p, b), reference_wdoa(p, b))
            for mode, target in modes:
                target = b if target == "b" else target
                want = reference_schedule(p, idx, mode, target)
                got = swap.schedule(p, idx, mode, target)
                _same(got, want)
                assert swap._peak_after(p, got) == swap._exact_peak(p.events_t, p.events_d, got)
                swaps += len(got)
    return swaps


@pytest.mark.parametrize("seed", range(4))
def test_orders_and_exact_peak_on_random_instances(seed):
    rng = np.random.default_rng(50 + seed)
    n_blocks, horizon, max_ivs, gbps = CASES[seed % len(CASES)]
    p = _problem(rng, n_blocks, horizon, max_ivs, Bandwidth(1e9 * gbps, 1e9 * gbps, 1e-6, "r"))
    # ties on purpose: equal sizes and equal scores must keep the old tie-breaking
    assert _check_problem(p, sorted({p.floor, p.default_budget})) > 0


def _vote_budgets(p):
    return sorted({0, p.floor - 1, p.floor, p.default_budget, p.peak_before - 1, p.peak_before, p.peak_before + 5,
                   *np.linspace(p.floor, p.peak_before, 8).astype(np.int64).tolist()})


@pytest.mark.parametrize("seed,gbps", [(0, 1.0), (1, 0.3), (2, 2.0), (3, 1e-4), (4, 1e4), (5, 0.05)])
def test_vote_order_across_budgets(seed, gbps):
    """The vote order (fixed part sorted once, the hideable candidates merged in per budget)
    equals the old lexsort with pandas ranks at every Pareto budget, below the floor and at
    or above the peak; with nothing that can hide (1e-4 GB/s) and everything (1e4 GB/s)."""
    rng = np.random.default_rng(300 + seed)
    p = _problem(rng, 120, 3000, 8, Bandwidth(1e9 * gbps, 1e9 * gbps, 0.0, "r"), max_size=3)   # equal scores
    hides = (swap.with_derived(p)["doa_ns"] >= 0).to_numpy()
    for b in _vote_budgets(p):
        got = swap.order(p, "vote", b)
        assert swap._vote_order(p, b) is not None      # the per-budget merge, not the general path
        assert np.array_equal(got, reference_order(p, "vote", b)), b
    if gbps == 1e-4:
        assert not hides.any()
    if gbps == 1e4:
        assert hides.all()


@pytest.mark.slow
@pytest.mark.parametrize("name", ["torch-transformer-blocks.pit", "jax-attn-blocks.pit", "loader-blocks.pit"])
def test_vote_order_across_budgets_on_gpu_traces(name):
    from conftest import gpu_trace
    import pyinterpose

    tr = pyinterpose.load(gpu_trace(name))
    p = swap.prepare(tr, Bandwidth(25e9, 25e9, 10e-6, "test"), min_size=1)
    assert 0 < int((swap.with_derived(p)["doa_ns"] >= 0).sum()) < len(p.candidates)
    for b in _vote_budgets(p):
        assert swap._vote_order(p, b) is not None
        assert np.array_equal(swap.order(p, "vote", b), reference_order(p, "vote", b)), b


def test_duplicate_candidates_in_an_order_are_visited_once():
    rng = np.random.default_rng(11)
    p = _problem(rng, 80, 2000, 8, Bandwidth(3e8, 3e8, 0.0, "t"))
    idx = swap.order(p, "doa", p.default_budget)
    twice = np.concatenate([idx, idx[::-1]])
    for mode, target in (("no-overhead", None), ("budget", p.default_budget)):
        _same(swap.schedule(p, twice, mode, target), reference_schedule(p, twice, mode, target))


def test_no_overhead_that_cannot_lower_the_peak_is_empty():
    # the peak step [40, 41) ms is covered by no interval that can hide, so the hiding floor is
    # the peak and the loop is skipped (the Python loop would take swaps, then drop them all)
    from test_swap import _blocks, _iv, BW as BW1
    # (A's [38, 43) covers it but is too short to hide 4 + 4 ms of transfers)
    p = swap.prepare_tables(_blocks([(0, 4, 0, 100), (1, 4, 0, 100), (2, 10, 40, 41)]),
                            _iv([(0, 4, 10, 30), (0, 4, 38, 43), (0, 4, 50, 90), (1, 4, 10, 30),
                                 (1, 4, 50, 90)]), BW1, min_size=1)
    assert swap.hiding_floor(p) == p.peak_before == 18 * 1_000_000 and p.floor == 14 * 1_000_000
    assert len(reference_schedule(p, swap.order(p, "doa", p.floor), "no-overhead", None)) == 0
    for s in swap.STRATEGIES:
        idx = swap.order(p, s, p.default_budget)
        for target in (None, p.default_budget):
            want = reference_schedule(p, idx, "no-overhead", target)
            assert len(want) == 0
            _same(swap.schedule(p, idx, "no-overhead", target), want)
    # budget mode still swaps (with stalls)
    assert len(swap.schedule(p, swap.order(p, "size", p.floor), "budget", p.floor)) > 0


GPU_CASES = [  # (trace, GB/s, min_size, budgets): rich schedules in both modes; sparse and dense links
    ("torch-transformer-blocks.pit", 25, swap.MIN_SIZE, "default,floor"),
    ("torch-transformer-blocks.pit", 2, swap.MIN_SIZE, "default"),
    ("torch-transformer-blocks.pit", 200, 1, "floor"), ("torch-cnn-blocks.pit", 25, swap.MIN_SIZE, "default"),
    ("jax-attn-blocks.pit", 2, 1, "default"),
    ("loader-blocks.pit", 2, 1, "default,floor"), ("torch-cnn-reserved.pit", 25, swap.MIN_SIZE, "default")]


@pytest.mark.slow
@pytest.mark.parametrize("name,gbps,min_size,budgets", GPU_CASES)
def test_same_schedules_on_real_gpu_traces(name, gbps, min_size, budgets):
    from conftest import gpu_trace
    import pyinterpose

    tr = pyinterpose.load(gpu_trace(name))
    p = swap.prepare(tr, Bandwidth(gbps * 1e9, gbps * 1e9, 10e-6, "test"), min_size=min_size)
    b = {"default": p.default_budget, "floor": p.floor}
    swaps = _check_problem(p, [b[k] for k in budgets.split(",")], modes=(("no-overhead", None), ("budget", "b")))
    if name.endswith("blocks.pit") and not name.startswith(("jax", "loader")):
        assert swaps > 100


def test_same_schedules_on_a_bench_trace():
    """The 1 M-event simtrain trace of scripts/bench_analysis.py (set PYINTERPOSE_SWAP_CHECK_TRACE
    to its path; skipped otherwise: the Python loop takes a few minutes on it)."""
    import os
    import pyinterpose

    path = os.environ.get("PYINTERPOSE_SWAP_CHECK_TRACE")
    if not path:
        pytest.skip("set PYINTERPOSE_SWAP_CHECK_TRACE to a large trace to compare the C loop with the Python one")
    tr = pyinterpose.load(path)
    p = swap.prepare(tr, Bandwidth(25e9, 25e9, 10e-6, "test"))
    assert _check_problem(p, [p.default_budget], modes=(("no-overhead", None), ("budget", "b"))) > 0


def _problem_long_and_short(rng, bw):
    """Large blocks touched a few times over the whole run (their away windows span hundreds of steps:
    whole nodes of the scheduler's curve) among many small short-lived ones (narrow intervals: the
    searches that read a node's pending adds from above it), and enough swaps that the links' runs
    fill blocks of many runs."""
    rows, iv = [], []
    horizon = 200_000
    for b in range(60):
        size = int(rng.integers(20, 60)) * 1_000_000
        a = int(rng.integers(0, 5_000))
        f = horizon - int(rng.integers(0, 5_000))
        pts = np.sort(rng.choice(np.arange(a + 1, f), size=4, replace=False))
        rows.append((b, size, a * 1000, f * 1000))
        iv += [(b, size, int(s) * 1000, int(e) * 1000) for s, e in zip(pts[:-1], pts[1:])]
    for b in range(60, 3000):
        size = int(rng.integers(1, 4)) * 1_000_000
        a = int(rng.integers(0, horizon - 400))
        f = a + int(rng.integers(40, 400))
        pts = np.sort(rng.choice(np.arange(a + 1, f), size=int(rng.integers(3, 6)), replace=False))
        rows.append((b, size, a * 1000, f * 1000))
        iv += [(b, size, int(s) * 1000, int(e) * 1000) for s, e in zip(pts[:-1], pts[1:])]
    return _tables(rows, iv, bw)


@pytest.mark.parametrize("seed", range(2))
def test_same_schedules_with_windows_over_whole_curve_nodes(seed):
    # the C curve answers a search inside one or two of its nodes of 64 steps from the node's own
    # steps and the adds pending above it; a swap of a large block lowers whole nodes at once
    rng = np.random.default_rng(900 + seed)
    p = _problem_long_and_short(rng, Bandwidth(20e9, 20e9, 1e-6, "r"))
    assert len(p.live) > 64 * 40
    wide = 0
    for b in sorted({p.floor, (3 * p.floor + p.peak_before) // 4, p.default_budget}):
        for s in ("vote", "size"):
            idx = swap.order(p, s, b)
            for mode, target in (("budget", b), ("no-overhead", None)):
                want = reference_schedule(p, idx, mode, target)
                _same(swap.schedule(p, idx, mode, target), want)
                steps = np.searchsorted(p.events_t, want["realloc_t"]) - np.searchsorted(p.events_t, want["free_t"])
                wide += int((steps >= 2 * 64).sum())
    assert wide > 0     # some away window spans whole nodes of the curve
