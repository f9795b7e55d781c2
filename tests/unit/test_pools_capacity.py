"""pools: a capacity is a real constraint (a strategy that cannot fit says so, with no ratio or
fragmentation), a steady window without the allocator's blocks has nothing to plan (said, not
"0 B proven optimal"), and a trace without allocations says so (pools and the minimalloc export).
Ground truth: hand-built traces whose live bytes are known."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from pyinterpose.analysis.pools import evaluate, steady_problem
from pyinterpose.analysis.pools import _planner_row
from pyinterpose.analysis.pools.generate import hard_instance
from pyinterpose.analysis.pools.problem import load
from pyinterpose.errors import PyinterposeError
from pyinterpose.trace.model import Trace

MiB = 1 << 20


def trace_of(rows, meta=None) -> Trace:
    b = pd.DataFrame(rows)
    b.insert(0, "block_id", np.arange(len(b)))
    return Trace.from_tables(blocks=b, meta=meta or {"view": "blocks", "framework": "torch"})


def block(api, size, sa, sf, freed=True):
    return {"pid": 1, "api": api, "kind": "async" if api == "cudaMallocAsync" else "device",
            "address": 0x1000 * (sa + 1), "size": size, "seq_alloc": sa, "seq_free": sf,
            "t_alloc": sa * 100, "t_free": sf * 100, "freed": freed}


def loop_trace(api="cudaMallocAsync", steps=12, prelude=0):
    """``prelude`` 1 MiB allocator blocks freed at once, then steps x [4 MiB, 8 MiB] through ``api``:
    12 MiB live at the peak of every step."""
    rows, seq = [], 0
    for _ in range(prelude):
        rows.append(block("cudaMallocAsync", MiB, seq, seq + 1))
        seq += 2
    for _ in range(steps):
        rows.append(block(api, 4 * MiB, seq, seq + 3))
        rows.append(block(api, 8 * MiB, seq + 1, seq + 2))
        seq += 4
    return trace_of(rows)


def test_capacity_below_the_need_does_not_fit_anywhere():
    res = evaluate(loop_trace(), time_limit=1.0, capacity=10 * MiB)
    assert res["bound_bytes"] == 12 * MiB and res["capacity_bytes"] == 10 * MiB
    for r in res["strategies"]:
        assert r["fits"] is False, r
        assert r["ratio_to_bound"] is None and r["fragmentation"] is None, r
        assert r["does_not_fit"]
    planners = [r for r in res["strategies"] if r["bound"] == "steady"]
    assert all("12,582,912 B live at once" in r["does_not_fit"] for r in planners)
    sims = [r for r in res["strategies"] if r["bound"] == "whole_run"]
    assert all(r["oom_at_request"] >= 0 and "out of memory" in r["does_not_fit"] for r in sims)


def test_capacity_above_the_need_fits_and_without_one_nothing_is_said():
    res = evaluate(loop_trace(), time_limit=1.0, capacity=64 * MiB)
    assert all(r["fits"] for r in res["strategies"])
    assert all(r["ratio_to_bound"] >= 1.0 for r in res["strategies"])
    res = evaluate(loop_trace(), time_limit=1.0)
    assert res["capacity_bytes"] is None and not any("fits" in r for r in res["strategies"])


def test_a_heuristic_over_capacity_says_so_and_the_optimal_planner_searches_within_it():
    prob, _ = hard_instance(16, seed=3)                  # a packing at capacity 2^20 exists
    lo, up, sz = (prob[c].to_numpy(np.int64) for c in ("lower", "upper", "size"))
    bound = load(lo, up, sz)
    assert bound == 1 << 20
    heur = [_planner_row(prob, s, bound, 2.0, 1 << 20) for s in ("greedy-size", "xla-heap", "smartpool-bf")]
    for r in heur:
        assert r["fits"] == (r["peak_bytes"] <= 1 << 20)
        assert r["fits"] or ("over the capacity 1,048,576 B" in r["does_not_fit"] and r["ratio_to_bound"] is None)
    opt = _planner_row(prob, "optimal", bound, 5.0, 1 << 20)
    assert opt["fits"] is True and opt["peak_bytes"] == 1 << 20


def test_nothing_to_plan_when_the_steady_window_holds_no_allocator_block():
    """The loop is a library's (cuMemAlloc_v2); the allocator's blocks all live before it."""
    tr = loop_trace(api="cuMemAlloc_v2", prelude=3)
    res = evaluate(tr, time_limit=1.0)
    assert res["iteration"]["source"] == "auto" and res["iteration"]["blocks"] == 0
    assert res["nothing_to_plan"].startswith("nothing to plan: the steady window")
    assert "none of the pytorch allocator's blocks (3 in the run" in res["nothing_to_plan"]
    for r in res["strategies"]:
        if r["bound"] == "steady":
            assert r["skipped"] == res["nothing_to_plan"] and r["peak_bytes"] is None
            assert "optimal" not in r
    assert res["bound_whole_run_bytes"] == MiB


def test_no_allocations_in_this_trace():
    tr = Trace.from_tables(meta={"view": "blocks"})
    with pytest.raises(PyinterposeError, match="^no allocations in this trace"):
        evaluate(tr)
    with pytest.raises(PyinterposeError, match="^no allocations in this trace"):
        steady_problem(tr)


def test_cli_says_it(monkeypatch, capsys, tmp_path):
    from pyinterpose.cli import main

    traces = {"empty.pit": Trace.from_tables(meta={"view": "blocks"}), "loop.pit": loop_trace(),
              "lib.pit": loop_trace(api="cuMemAlloc_v2", prelude=3)}
    monkeypatch.setattr("pyinterpose.cli._args.load_trace", lambda path, quiet=False: traces[path])
    monkeypatch.setenv("COLUMNS", "300")
    assert main(["pools", "empty.pit"]) == 2
    err = capsys.readouterr().err
    assert err.strip() == "pyinterpose: error: no allocations in this trace: nothing to replay or plan"
    out = tmp_path / "e.csv"
    assert main(["export", "empty.pit", "--format", "minimalloc", "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.strip() == "pyinterpose: error: no allocations in this trace: nothing to replay or plan"
    assert not out.exists()
    assert main(["pools", "loop.pit", "--capacity", str(10 * MiB)]) == 0
    out = " ".join(capsys.readouterr().out.replace("│", " ").split())
    assert "the run does not fit with any strategy" in out and "DOES NOT FIT" in out
    assert "-" + "%" not in out and "%" not in out.split("fragmentation")[-1]   # no fragmentation figure
    assert main(["pools", "lib.pit"]) == 0
    out = " ".join(capsys.readouterr().out.replace("│", " ").split())
    assert "nothing to plan" in out and "proven optimal" not in out
