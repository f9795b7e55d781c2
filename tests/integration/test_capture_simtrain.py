"""Every simtrain flavour, with and without forked workers, captured through the
real preload: the trace's counts equal what the workload says it did."""
from __future__ import annotations

import json

import pytest

import pyinterpose
from conftest import run_cli

pytestmark = pytest.mark.slow   # every test here captures, replays or loads whole traces (> a few s)


@pytest.mark.parametrize("framework", ["torch", "jax", "tf"])
@pytest.mark.parametrize("workers", [0, 2])
def test_summary_counts_equal_simtrain_truth(tmp_path, framework, workers):
    trace = str(tmp_path / "t.pit")
    truth_path = tmp_path / "truth.json"
    cp = run_cli("run", "-q", "--simulated-gpu", "-o", trace, "--", "python", "-m", "pyinterpose.examples.simtrain",
                 "--framework", framework, "--steps", "12", "--workers", str(workers), "--noise", "0.1",
                 "--truth", str(truth_path))
    assert cp.returncode == 0, cp.stderr
    truth = json.loads(truth_path.read_text())
    cp = run_cli("summary", trace, "--json")
    assert cp.returncode == 0, cp.stderr
    s = json.loads(cp.stdout)
    assert s["lost_events"] == 0
    assert s["processes"] == workers + 1 == len(truth["pids"])
    c = s["counts"]
    assert c["alloc"] == truth["allocs"]
    assert c["free"] == truth["frees"]
    assert c["launch"] == truth["launches"]
    assert c["access"] == truth["accesses"]
    assert s["bytes_allocated"] == truth["bytes"]
    assert s["by_api"] == truth["by_api"]  # the exact API names the workload called, and nothing else
    assert c["failure"] == 0 and c["unmatched_free"] == 0 and c["never_freed"] == 0
    tr = pyinterpose.load(trace)
    assert sorted(tr.processes["pid"].tolist()) == sorted(truth["pids"])
    parent = truth["pids"][0]
    assert int((tr.processes["ppid"] == parent).sum()) == workers  # workers are the parent's children
    # a block is what the workload allocated: sizes sum to its bytes per process
    assert int(tr.blocks["size"].sum()) == truth["bytes"]
    if framework == "torch":  # blocks view: the cudaMallocAsync backend was chosen from the knob we set
        assert "cudaMallocAsync" in truth["by_api"]
