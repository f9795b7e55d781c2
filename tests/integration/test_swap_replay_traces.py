"""Every strategy's schedules replayed on the demo, simtrain and the real GPU traces (issue 21):
no-overhead schedules replay with zero delay, and no schedule has a swap-out ending after the
block's next access, at several bandwidths."""
from __future__ import annotations

import importlib.util
import os

import numpy as np
import pytest

import pyinterpose
from conftest import gpu_trace, run_cli
from pyinterpose.analysis import swap

pytestmark = pytest.mark.slow   # every test here captures, replays or loads whole traces (> a few s)

GBPS = (4.0, 16.0, 55.0, 400.0)      # 55: the H100's measured PCIe (shared/data/gpu-traces/bandwidth-h100.json)


def _check(trace):
    for gbps in GBPS:
        p = swap.problem_for(trace, bandwidth=gbps, latency_us=8.0)
        for s in swap.STRATEGIES:
            for mode in swap.MODES:
                r = swap.run_strategy(p, s, mode)
                sched = r.schedule
                assert swap.validate_schedule(sched, mode, p.bandwidth) == []
                assert (sched["out_end"] <= sched["next_access"] + 1.0).all(), (gbps, s, mode)
                assert (sched["in_start"] < sched["next_access"]).all(), (gbps, s, mode)
                if mode == "no-overhead":
                    assert r.stall_ns == 0 and r.replay.delayed_ops == 0, (gbps, s)
                    assert r.peak_after == swap._exact_peak(p.events_t, p.events_d, sched)
                assert r.peak_after <= r.peak_before


@pytest.mark.parametrize("name", ["torch-cnn-blocks.pit", "torch-transformer-blocks.pit", "jax-attn-blocks.pit"])
def test_real_gpu_traces(name):
    _check(pyinterpose.load(gpu_trace(name)))


@pytest.fixture(scope="module")
def demo_trace(tmp_path_factory):
    d = tmp_path_factory.mktemp("demo")
    cp = run_cli("demo", "-o", str(d / "out"), env={"PYINTERPOSE_CACHE_DIR": str(d)})
    assert cp.returncode == 0, cp.stderr[-2000:]
    path = [os.path.join(d, "out", f) for f in os.listdir(d / "out") if f.endswith(".pit")]
    assert path
    return path[0]


@pytest.mark.skipif(importlib.util.find_spec("pyinterpose.examples.simtrain") is None, reason="no simtrain")
def test_demo(demo_trace):
    _check(pyinterpose.load(demo_trace))


@pytest.mark.skipif(importlib.util.find_spec("pyinterpose.examples.simtrain") is None, reason="no simtrain")
@pytest.mark.parametrize("framework", ["torch", "jax"])
def test_simtrain(tmp_path, framework):
    out = str(tmp_path / "t.pit")
    cp = run_cli("run", "-q", "--simulated-gpu", "-o", out, "--", "python", "-m", "pyinterpose.examples.simtrain",
                 "--framework", framework)
    assert cp.returncode == 0, cp.stderr
    _check(pyinterpose.load(out))


@pytest.fixture(scope="module")
def device_trace(tmp_path_factory):
    """simtrain on simcuda with an H100-like device clock (the GPU lags the CPU, a tail in ms)."""
    if importlib.util.find_spec("pyinterpose.examples.simtrain") is None:
        pytest.skip("no simtrain")
    out = str(tmp_path_factory.mktemp("devclock") / "t.pit")
    cp = run_cli("run", "-q", "--simulated-gpu", "-o", out, "--", "python", "-m", "pyinterpose.examples.simtrain",
                 "--framework", "torch", "--device-time", "h100-like")
    assert cp.returncode == 0, cp.stderr
    return pyinterpose.load(out)


def test_device_clock_simtrain_intervals_from_the_activity_records(device_trace):
    """On simcuda's device clock, the access intervals between accesses equal those computed from
    the trace's own device activity records (gpu_activity, joined to the launches by seq): from the
    end of one accessing op to the start of the next."""
    from pyinterpose.analysis.access import access_intervals
    from pyinterpose.analysis.clock import clock_of, launch_lag

    tr = device_trace
    pid = tr.main_pid
    assert clock_of(tr, pid).label.startswith("gpu (") and launch_lag(tr)["median_ns"] > 0
    g = tr.gpu_activity
    g = g[(g["pid"] == pid) & (g["seq"] >= 0)]
    span = g.groupby("seq").agg(start=("start", "min"), end=("end", "max"))
    start, end = span["start"].to_dict(), span["end"].to_dict()
    a = tr.accesses[tr.accesses["pid"] == pid]
    b = tr.blocks[tr.blocks["pid"] == pid].set_index("block_id")
    want = set()
    for bid, seqs in a.groupby("block_id")["seq"]:
        lo, hi = int(b.loc[bid, "seq_alloc"]), int(b.loc[bid, "seq_free"])
        s = sorted({int(x) for x in seqs if lo <= x <= hi})
        for x, y in zip(s[:-1], s[1:]):
            if x in end and y in start:
                want.add((int(bid), end[x], max(end[x], start[y])))
    iv = access_intervals(tr, pid)
    iv = iv[iv["kind"] == "between"]
    got = set(zip(iv["block_id"].tolist(), iv["start_t"].tolist(), iv["end_t"].tolist()))
    assert len(want) > 100 and want <= got and len(got - want) == 0


def test_device_clock_simtrain_schedules(device_trace):
    p = swap.problem_for(device_trace, bandwidth=25.0)
    assert p.clock["clock"].startswith("gpu (")
    _check(device_trace)
