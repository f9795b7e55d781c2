"""`pyinterpose iterations` and `pyinterpose access` on synthetic traces (loader patched)."""
from __future__ import annotations

import json

import pytest

from pyinterpose.cli import main
from test_iterations import random_trace, training_trace


@pytest.fixture()
def traces(monkeypatch, tmp_path):
    made = {}

    def fake_load(path, quiet=False):
        if path not in made:
            from pyinterpose.errors import TraceError
            raise TraceError(f"no such trace file: {path}")
        return made[path]

    monkeypatch.setattr("pyinterpose.cli._args.load_trace", fake_load)
    monkeypatch.setenv("PYINTERPOSE_CACHE_DIR", str(tmp_path))    # no cached bandwidth
    made["loop.pit"], made["truth"] = training_trace(steps=20, layers=4, warmup=1, noise=0.1, seed=31)
    made["random.pit"] = random_trace(n=500, seed=2)
    return made


def test_iterations_json(traces, capsys):
    assert main(["iterations", "loop.pit", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    truth = traces["truth"]
    assert d["source"] == "auto"
    assert d["period_allocs"] == truth["period_allocs"]
    assert d["count"] == truth["count"]
    assert d["first_steady_seq"] == int(truth["starts"][0])
    assert 0 < d["stable_fraction"] <= 1
    assert len(d["iterations"]) == d["count"]
    assert all(r["duration_ns"] > 0 for r in d["iterations"])


def test_iterations_none_json(traces, capsys):
    assert main(["iterations", "random.pit", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["source"] == "none" and d["count"] == 0 and d["iterations"] == []


def test_iterations_table(traces, capsys):
    assert main(["iterations", "loop.pit", "--limit", "3"]) == 0
    out = capsys.readouterr().out
    assert "allocations per step" in out and "more (--limit N" in out
    assert main(["iterations", "random.pit"]) == 0
    assert "no training loop" in capsys.readouterr().out


def test_errors_are_one_line(traces, capsys):
    assert main(["iterations", "missing.pit"]) != 0
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no such trace file" in err
    assert main(["iterations", "loop.pit", "--pid", "4242"]) != 0
    assert "no process 4242" in capsys.readouterr().err
    assert main(["access", "loop.pit", "--bandwidth", "0"]) != 0
    assert "bandwidth" in capsys.readouterr().err


def test_access_json_and_table(traces, capsys):
    assert main(["access", "loop.pit", "--json", "--bandwidth", "12", "--latency-us", "5"]) == 0
    d = json.loads(capsys.readouterr().out)
    for k in ("ati_quantiles", "filtered_fraction", "outliers", "stability"):
        assert d[k] is not None
    assert set(d["filtered_fraction"]) == {"intervals", "blocks", "bytes"}
    assert d["bandwidth"]["latency_s"] == pytest.approx(5e-6)
    assert main(["access", "loop.pit"]) == 0
    out = capsys.readouterr().out
    assert "filter skipped" in out and "Outliers" in out
    assert main(["access", "random.pit", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["stability"] is None and d["filtered_fraction"] is None
