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
