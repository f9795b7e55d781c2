"""Trace-level pools: request stream, steady problem, evaluate, and the CLI commands."""
import json

import numpy as np
import pandas as pd
import pytest

from pyinterpose.analysis.pools import evaluate, requests, steady_problem
from pyinterpose.analysis.pools.generate import training_trace
from pyinterpose.analysis.pools.problem import arrays, load
from pyinterpose.cli import main
from pyinterpose.trace.model import Trace, peak_live_bytes


def small_trace():
    # seq: 1 a0(w) 2 a1 3 a2 4 f1 5 a3 6 f2 7 f3 8 a4 9 f4 ; block 5 host (ignored)
    b = pd.DataFrame({
        "block_id": [0, 1, 2, 3, 4, 5], "pid": 7, "kind": ["device"] * 5 + ["host"],
        "size": [100, 10, 20, 30, 40, 999],
        "seq_alloc": [1, 2, 3, 5, 8, 2], "seq_free": [10, 4, 6, 7, 9, 3],
        "freed": [False, True, True, True, True, True], "stream": 0,
    })
    b["t_alloc"] = b["seq_alloc"] * 10
    b["t_free"] = b["seq_free"] * 10
    return Trace.from_tables(blocks=b)


def test_requests_order_and_content():
    r = requests(small_trace())
    assert r["seq"].tolist() == [1, 2, 3, 4, 5, 6, 7, 8, 9]
    assert r["op"].tolist() == ["alloc", "alloc", "alloc", "free", "alloc", "free", "free", "alloc", "free"]
    assert r["block_id"].tolist() == [0, 1, 2, 1, 3, 2, 3, 4, 4]


def test_steady_problem_window():
    df = steady_problem(small_trace(), window=(3, 8))  # events 3..7: a2 f1 a3 f2 f3
    rows = {int(r.block_id): (r.lower, r.upper, r.crossing) for r in df.itertuples()}
    assert rows == {0: (0, 5, "through"), 1: (0, 1, "in"), 2: (0, 3, "inner"), 3: (2, 4, "inner")}
    assert df.attrs["events"] == 5
    assert load(*arrays(df)) == 100 + 20 + 30


def test_evaluate_on_training_trace():
    tr, bounds = training_trace(iterations=5, layers=8, seed=2)
    res = evaluate(tr, window=bounds[2], time_limit=2)
    assert res["bound_whole_run_bytes"] == peak_live_bytes(tr.blocks)
    prob = steady_problem(tr, window=bounds[2])
    assert res["bound_bytes"] == load(*arrays(prob))
    assert set(prob["crossing"]) == {"inner", "in", "out", "through"}
    names = [r["strategy"] for r in res["strategies"]]
    assert names == ["cudamalloc", "pytorch", "bfc", "cnmem", "smartpool-bf", "smartpool-ff",
                     "greedy-size", "xla-heap", "optimal"]
    for r in res["strategies"]:
        assert r["ratio_to_bound"] >= 1.0 - 1e-12
        assert r["fragmentation"] == pytest.approx((r["peak_bytes"] - (res["bound_bytes"] if r["bound"] == "steady"
                                                   else res["bound_whole_run_bytes"])) / r["peak_bytes"])
    opt = res["strategies"][-1]
    assert opt["optimal"] is True and opt["peak_bytes"] == res["bound_bytes"]
    sp = next(r for r in res["strategies"] if r["strategy"] == "smartpool-bf")
    assert sp["peak_bytes"] >= 2 * sp["details"]["cross_region_bytes"]


def test_evaluate_rejects_unknown_strategy():
    from pyinterpose.errors import PyinterposeError
    with pytest.raises(PyinterposeError):
        evaluate(small_trace(), strategies="pytorch,nope", window=(1, 10))


def test_plan_cli_exit_codes(tmp_path, capsys):
    src = tmp_path / "in.csv"
    src.write_text("id,lower,upper,size\nb1,0,3,4\nb2,3,9,4\nb3,0,9,4\nb4,9,21,4\nb5,0,21,4\n")
    out = tmp_path / "out.csv"
    assert main(["plan", "--csv", str(src), "--capacity", "12", "-o", str(out), "--json"]) == 0
    res = json.loads(capsys.readouterr().out)
    assert res["height_bytes"] == 12 and res["optimal"] is True
    plan = pd.read_csv(out)
    assert list(plan.columns) == ["id", "lower", "upper", "size", "offset"]
    assert (plan["offset"] + plan["size"]).max() <= 12
    assert main(["plan", "--csv", str(src), "--capacity", "11", "-o", str(tmp_path / "x.csv")]) == 3
    assert not (tmp_path / "x.csv").exists()
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no plan within capacity 11" in err[0]
    assert main(["plan", "--csv", str(src), "--capacity", "12", "--strategy", "greedy-size", "-o", str(out), "-f"]) == 0
    bad = tmp_path / "bad.csv"
    bad.write_text("id,lower,upper\n1,2,3\n")
    assert main(["plan", "--csv", str(bad), "--capacity", "12"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "missing column" in err[0]
