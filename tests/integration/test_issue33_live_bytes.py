"""issue 33.1: one live-bytes figure for every command on a ranks job with the collective library.

The NCCL-like library maps one 6 MiB handle through two overlapping 4 MiB windows: 6 MiB of physical
memory.  Each rank's truth (what its loop and its collective library counted) is the independent figure
that `summary`, `pools --pid`, `swap`, `fit` and the report's per-GPU peak must all give."""
from __future__ import annotations

import json
import sys

import pytest

SIMTRAIN = [sys.executable, "-m", "pyinterpose.examples.simtrain"]

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def job(tmp_path_factory):
    from conftest import run_cli

    d = tmp_path_factory.mktemp("ranks33")
    out, truth = str(d / "job.pit"), str(d / "truth.json")
    cp = run_cli("run", "-q", "--simulated-gpu", "-o", out, "--", *SIMTRAIN, "--ranks", "3", "--steps", "6",
                 "--layers", "3", "--truth", truth)
    assert cp.returncode == 0, cp.stderr
    with open(truth) as f:
        return out, json.load(f)


def _json(*args):
    from conftest import run_cli

    cp = run_cli(*args, "--json")
    assert cp.returncode == 0, cp.stderr
    return json.loads(cp.stdout)


def test_pools_swap_fit_count_the_double_mapped_window_once(job):
    path, truth = job
    for t in truth["ranks"]:
        pid, peak = str(t["pid"]), t["peak_live_bytes"]
        # pools replays the framework allocator's blocks (simtrain declares torch); the collective library's
        # own buffers are outside it: the 6 MiB handle mapped through two 4 MiB windows plus its 2 MiB IPC
        # buffer, each physical byte once (the pool objects go through cudaMallocFromPoolAsync: the allocator's)
        n = t["nccl"]
        pools = _json("pools", path, "--pid", pid, "--strategies", "cudamalloc")
        assert pools["outside_allocator"]["peak_live_bytes"] == n["buffer_bytes"] + n["ipc_bytes"]
        assert pools["bound_whole_run_bytes"] <= peak
        assert _json("swap", path, "--pid", pid, "--bandwidth", "25")["peak_before"] == peak
        f = _json("fit", path, "--pid", pid, "--capacity", str(peak))
        assert f["lower_bound_bytes"] == peak
        assert f["outside_allocator_peak_bytes"] == n["buffer_bytes"] + n["ipc_bytes"]
        assert f["capacities"][0]["fits"] is True    # the summary's peak fits (issue: "short by 2.0 MiB")


def test_report_gpu_peaks_equal_the_ranks_truth(job, tmp_path):
    from pyinterpose.report import data as D
    import pyinterpose

    path, truth = job
    tr = pyinterpose.load(path)
    by_dev = {t["device"]: t["peak_live_bytes"] for t in truth["ranks"]}
    assert {tl.device: tl.peak for tl in D.memory_timeline(tr)} == by_dev
    from pyinterpose.report import timeline as T
    for dev, peak in by_dev.items():
        p = T.payload(tr, dev)
        assert p["stats"]["peak_bytes"] == peak
