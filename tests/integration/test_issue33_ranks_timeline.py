"""issue 33.12: in a ranks job's report, every GPU's timeline opens on one steady iteration of the rank on
that GPU (its own iterations), not on a sliver at the far right placed by another rank's boundaries.

Truth: each rank's truth (its steps; one rank per device), and the payload's own events."""
from __future__ import annotations

import json
import sys

import pytest

pytestmark = pytest.mark.slow


def test_each_gpu_timeline_opens_on_its_ranks_iteration(tmp_path):
    from conftest import run_cli
    import pyinterpose
    from pyinterpose.analysis.iterations import find_iterations
    from pyinterpose.report import timeline as T

    out, truth = str(tmp_path / "job.pit"), str(tmp_path / "truth.json")
    cp = run_cli("run", "-q", "--simulated-gpu", "-o", out, "--", sys.executable, "-m",
                 "pyinterpose.examples.simtrain", "--ranks", "3", "--steps", "8", "--layers", "3", "--truth", truth)
    assert cp.returncode == 0, cp.stderr
    with open(truth) as f:
        ranks = json.load(f)["ranks"]
    tr = pyinterpose.load(out)
    main = find_iterations(tr)           # the report's iterations: one process's
    for r in ranks:
        p = T.payload(tr, r["device"], iterations=main)
        lo, hi = p["initial"]
        # this rank's own step boundaries (steps + 1 of them), each at an event of this GPU
        assert len(p["iters"]) == r["steps"] + 1, (r, p["iters"])
        assert 0 < p["iters"][0] < p["iters"][-1] < p["events"]
        # the window: the middle step of this rank, well inside its events
        k = (len(p["iters"]) - 1) // 2
        assert lo <= p["iters"][k] < p["iters"][k + 1] <= hi < p["events"] - 1, (r, p["initial"], p["iters"])
        assert hi - lo < p["events"] // 2
