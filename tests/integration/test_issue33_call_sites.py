"""issue 33.2: call-site tables keep device and host apart, and the sites live at the peak add up to the peak.

Truth: simtrain's truth file (its by_api counts: cudaMallocAsync device blocks, one cudaMallocHost pinned
host buffer made from the same call site) and its own peak of live device bytes."""
from __future__ import annotations

import json
import sys

import pytest

SIMTRAIN = [sys.executable, "-m", "pyinterpose.examples.simtrain"]


def _run(tmp_path, *args):
    from conftest import run_cli

    out, truth = str(tmp_path / "t.pit"), str(tmp_path / "truth.json")
    cp = run_cli("run", "-q", "--simulated-gpu", "-o", out, "--", *SIMTRAIN, *args, "--truth", truth)
    assert cp.returncode == 0, cp.stderr
    s = run_cli("summary", out, "--json")
    assert s.returncode == 0, s.stderr
    with open(truth) as f:
        return json.loads(s.stdout), json.load(f)


def test_sites_count_device_blocks_only_and_add_up_to_the_peak(tmp_path):
    s, truth = _run(tmp_path, "--steps", "6", "--layers", "3")
    device_allocs = truth["by_api"]["cudaMallocAsync"]
    assert truth["by_api"]["cudaMallocHost"] == 1            # a pinned host buffer from the same site
    cs = s["call_sites"]
    assert sum(r["blocks"] for r in cs["by_count"]) == device_allocs
    assert sum(r["blocks"] for r in cs["by_peak"]) == device_allocs
    assert sum(r["peak_live_bytes"] for r in cs["by_peak"]) == truth["peaks"][0]
    (p,) = s["per_process"]
    assert p["allocs"] == device_allocs and p["host_allocs"] == 1


@pytest.mark.slow
def test_ranks_job_sites_never_sum_past_the_peak(tmp_path):
    s, truth = _run(tmp_path, "--ranks", "3", "--steps", "6", "--layers", "3")
    live = [r["peak_live_bytes"] for r in s["call_sites"]["by_peak"]]
    assert sum(live) == s["peak_live_bytes"]
    assert s["peak_live_bytes"] <= sum(t["peak_live_bytes"] for t in truth["ranks"])
