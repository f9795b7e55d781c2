"""Exact planner: brute-force optimum on small instances, MiniMalloc instances, hidden packings."""
import itertools
import os

import numpy as np
import pytest

from pyinterpose.analysis.pools import exact
from pyinterpose.analysis.pools.generate import hard_instance
from pyinterpose.analysis.pools.problem import arrays, load, read_minimalloc_csv, validate_plan

DATA = "/work/shared/data/dsa-minimalloc"


def first_fit_height(lower, upper, size, order):
    off = {}
    for i in order:
        spans = sorted((off[j], off[j] + size[j]) for j in off if lower[i] < upper[j] and lower[j] < upper[i])
        cur = 0
        for lo, hi in spans:
            if lo - cur >= size[i]:
                break
            cur = max(cur, hi)
        off[i] = cur
    return max(off[i] + size[i] for i in off)


def brute_optimum(lower, upper, size):
    # min over all orders of first fit == OPT (push an optimal plan down in offset order)
    return min(first_fit_height(lower, upper, size, p) for p in itertools.permutations(range(len(size))))


@pytest.mark.parametrize("seed", range(12))
def test_minimize_capacity_matches_brute_force(seed):
    rng = np.random.default_rng(seed)
    n = 6
    lower = rng.integers(0, 8, n)
    upper = lower + rng.integers(1, 6, n)
    size = rng.integers(1, 9, n)
    opt = brute_optimum(lower.tolist(), upper.tolist(), size.tolist())
    r = exact.minimize_capacity(lower, upper, size, time_limit=5)
    assert r.details["height"] == opt
    assert r.details["optimal"] is True
    assert validate_plan(lower, upper, size, r.offsets) == opt
    assert exact.solve(lower, upper, size, opt, 5).status == "found"
    assert opt >= 2       # (sizes 1..8: one less is a capacity to prove infeasible)
    assert exact.solve(lower, upper, size, opt - 1, 5).status == "infeasible"


def test_load_gap_instance_is_proven_above_load():
    # minimize_capacity agrees with brute force and proves its answer optimal
    lower = np.array([0, 0, 2, 4, 4])
    upper = np.array([3, 2, 5, 6, 6])
    size = np.array([2, 1, 2, 1, 2])
    opt = brute_optimum(lower.tolist(), upper.tolist(), size.tolist())
    r = exact.minimize_capacity(lower, upper, size, time_limit=5)
    assert r.details["height"] == opt and r.details["optimal"]
    assert load(lower, upper, size) <= opt


def test_input12_example():
    df = read_minimalloc_csv(os.path.join(DATA, "input.12.csv"))
    lo, up, sz = arrays(df)
    r = exact.solve(lo, up, sz, 12, 5)
    assert r.status == "found"
    assert validate_plan(lo, up, sz, r.offsets, 12) == 12
    assert exact.solve(lo, up, sz, 11, 5).status == "infeasible"


@pytest.mark.parametrize("name", ["C", "J", "K"])
def test_minimalloc_challenging_instances(name):
    df = read_minimalloc_csv(os.path.join(DATA, f"{name}.1048576.csv"))
    lo, up, sz = arrays(df)
    r = exact.solve(lo, up, sz, 1 << 20, 30)
    assert r.status == "found"
    assert validate_plan(lo, up, sz, r.offsets, 1 << 20) <= 1 << 20


def test_hidden_perfect_packing_is_found():
    df, hidden = hard_instance(60, seed=3)
    lo, up, sz = arrays(df)
    assert load(lo, up, sz) == 1 << 20
    validate_plan(lo, up, sz, hidden, 1 << 20)
    r = exact.solve(lo, up, sz, 1 << 20, 20)
    assert r.status == "found"
    assert validate_plan(lo, up, sz, r.offsets, 1 << 20) == 1 << 20
    assert exact.solve(lo, up, sz, (1 << 20) - 1, 5).status == "infeasible"  # below LOAD


def test_full_span_and_disjoint_pieces():
    # two time-disjoint groups under one full-span buffer; zero-size buffer ignored
    lower = np.array([0, 0, 0, 5, 5, 2])
    upper = np.array([10, 5, 5, 10, 10, 3])
    size = np.array([3, 2, 2, 4, 1, 0])
    r = exact.minimize_capacity(lower, upper, size, time_limit=5)
    assert r.details["height"] == 8 and r.details["optimal"]
    validate_plan(lower, upper, size, r.offsets)
    s = exact.solve(lower, upper, size, 8, 5)
    assert s.status == "found" and s.offsets[0] == 0  # the full-span buffer is stacked at the bottom
    assert exact.solve(lower, upper, size, 7, 5).status == "infeasible"


def test_portfolio_threads_agree_with_brute_force(monkeypatch):
    """The two-thread portfolio (forced on for small pieces) finds the brute-force
    optimum and its plans are valid; the first answer stops the other thread."""
    monkeypatch.setattr(exact, "PARALLEL_MIN_BUFFERS", 0)
    monkeypatch.setattr(exact.os, "cpu_count", lambda: 2)
    rng = np.random.default_rng(7)
    for _ in range(6):
        n = 6
        lower = rng.integers(0, 8, n)
        upper = lower + rng.integers(1, 6, n)
        size = rng.integers(1, 9, n)
        opt = brute_optimum(lower.tolist(), upper.tolist(), size.tolist())
        r = exact.solve(lower, upper, size, opt, 5)
        assert r.status == "found" and validate_plan(lower, upper, size, r.offsets, opt) <= opt


@pytest.mark.parametrize("holes", [0.0, 0.15])
def test_generated_instances_have_a_hidden_packing_at_capacity(holes):
    df, hidden = hard_instance(80, seed=1, holes=holes)
    lo, up, sz = arrays(df)
    assert len(df) == 80
    assert load(lo, up, sz) == 1 << 20              # the protected column stays full
    validate_plan(lo, up, sz, hidden, 1 << 20)
    fill = float((sz * (up - lo)).sum()) / float(1 << 40)
    assert (fill == 1.0) if holes == 0 else (0.6 < fill < 0.95)
    r = exact.solve(lo, up, sz, 1 << 20, 20)       # 80 buffers: the portfolio path
    assert r.status == "found"
    assert validate_plan(lo, up, sz, r.offsets, 1 << 20) <= 1 << 20
