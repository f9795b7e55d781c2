"""Iterations, lifetimes and access analysis on real simcuda captures of simtrain,
checked against simtrain's own truth file (independent of the analysis code)."""
from __future__ import annotations

import importlib.util
import json

import pytest

import pyinterpose
from conftest import run_cli
from pyinterpose.analysis import access, iterations, lifetimes
from pyinterpose.trace.model import peak_live_bytes

pytestmark = [pytest.mark.slow,  # every test here captures or drives a browser (> a few s)
              pytest.mark.skipif(importlib.util.find_spec("pyinterpose.examples.simtrain") is None,
                                reason="pyinterpose.examples.simtrain not in this build")]

STEPS = 40


def _reference():
    """tests/unit/test_access_reference.py (its reference imports nothing it checks)."""
    import os
    import sys

    unit = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "unit")
    if unit not in sys.path:
        sys.path.insert(0, unit)
    import test_access_reference
    return test_access_reference


@pytest.fixture(scope="module", params=["torch", "jax", "tf"])
def captured(request, tmp_path_factory):
    fw = request.param
    d = tmp_path_factory.mktemp(f"ana_{fw}")
    out, truth = str(d / f"{fw}.pit"), str(d / f"{fw}.json")
    # the CPU clock: the access reference below computes CPU-clock intervals (the device clock's
    # are checked against the trace's own activity records in test_swap_replay_traces.py)
    cp = run_cli("run", "-q", "--simulated-gpu", "--gpu-clock", "off", "-o", out, "--", "python", "-m",
                 "pyinterpose.examples.simtrain", "--framework", fw, "--steps", str(STEPS),
                 "--noise", "0.1", "--seed", "3", "--truth", truth)
    assert cp.returncode == 0, cp.stderr
    with open(truth) as f:
        return out, json.load(f), d


def test_iterations_cli_matches_truth(captured, native):
    path, truth, _ = captured
    cp = run_cli("iterations", path, "--json")
    assert cp.returncode == 0, cp.stderr
    d = json.loads(cp.stdout)
    assert d["source"] == "auto"
    assert d["period_allocs"] == truth["allocs_per_step"]
    assert d["count"] == truth["steps"]
    # every noisy step holds extra allocations; the others repeat exactly
    assert d["stable_fraction"] == pytest.approx(1 - truth["noise_steps"] / truth["steps"])
    assert sum(1 for r in d["iterations"] if r["extra_allocs"] > 0) == truth["noise_steps"]


def test_lifetimes_and_access_match_truth(captured, native):
    path, truth, d = captured
    tr = pyinterpose.load(path)
    it = iterations.find_iterations(tr)
    s = lifetimes.summary(tr, it)
    dev = tr.blocks[(tr.blocks["pid"] == it.pid) & tr.blocks["counts_device"]]
    assert s["peak"]["bytes"] == peak_live_bytes(dev)
    assert sum(c["blocks"] for c in s["classes"].values()) == len(dev)
    per = s["classes"]["per_iteration"]["blocks"]
    # the regular steps' allocations plus at least one extra per noisy step
    assert per >= truth["steps"] * truth["allocs_per_step"] + truth["noise_steps"]
    assert s["classes"]["persistent"]["blocks"] > 0
    r = access.analyze(tr, bandwidth=12.0, cache_path=str(d / "nocache.json"))
    assert tr.counts["access"] == truth["accesses"]
    # the ATI analysis counts accesses to device blocks (torch's pinned staging buffer is host memory)
    assert r["accesses"] == int(tr.accesses["block_id"].isin(dev["block_id"]).sum())
    assert r["blocks"] == len(dev)
    f = r["filtered_fraction"]
    # the whole analysis equals the independent reference (tests/unit/test_access_reference.py)
    ref = _reference()
    same = ref.reference_analyze(tr, it, bandwidth=12.0, cache_path=str(d / "nocache.json"))
    assert r["clock"] == "cpu"                  # captured with --gpu-clock off
    ref.same(r, same)                           # the reference names the clock too
    ref.same_intervals(tr, it.pid)
    assert 0.0 < f["intervals"] < 1.0           # both sides of the filter are populated at 12 GB/s
    cp = run_cli("access", path, "--json", "--bandwidth", "12",
                 env={"PYINTERPOSE_CACHE_DIR": str(d / "cache")})
    assert cp.returncode == 0, cp.stderr
    j = json.loads(cp.stdout)
    assert j["filtered_fraction"] == pytest.approx(f)
    assert j["stability"]["stable_blocks"] >= 1 - 2 * truth["noise_steps"] * truth["allocs_per_step"] / per


def test_workers_each_process_has_the_loop(tmp_path, native):
    out, truth_path = str(tmp_path / "w.pit"), str(tmp_path / "w.json")
    cp = run_cli("run", "-q", "--simulated-gpu", "-o", out, "--", "python", "-m",
                 "pyinterpose.examples.simtrain", "--framework", "torch", "--steps", "12",
                 "--workers", "1", "--truth", truth_path)
    assert cp.returncode == 0, cp.stderr
    truth = json.load(open(truth_path))
    tr = pyinterpose.load(out)
    assert len(truth["pids"]) == 2
    for pid in truth["pids"]:
        it = iterations.find_iterations(tr, pid)
        assert (it.period_allocs, it.count) == (truth["allocs_per_step"], truth["steps"]), pid
