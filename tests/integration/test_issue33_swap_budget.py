"""issue 33.3: swap's budget mode never costs time without saving memory, never does worse than the
no-overhead schedule, and "overhead" is stall / run duration (the trace's duration, as the README says).

The demo's capture (simtrain --framework torch) at 16 GB/s: a link too slow for the budget schedules to
save anything at the peak."""
from __future__ import annotations

import json
import sys

import pytest

pytestmark = pytest.mark.slow


def test_budget_mode_pays_only_for_memory_and_overhead_is_over_the_run(tmp_path):
    from conftest import run_cli

    out = str(tmp_path / "demo.pit")
    cp = run_cli("run", "-q", "--simulated-gpu", "-o", out, "--", sys.executable, "-m",
                 "pyinterpose.examples.simtrain", "--framework", "torch")
    assert cp.returncode == 0, cp.stderr
    s = json.loads(run_cli("summary", out, "--json").stdout)
    cp = run_cli("swap", out, "--bandwidth", "16", "--json")
    assert cp.returncode == 0, cp.stderr
    sw = json.loads(cp.stdout)
    rows = {(r["strategy"], r["mode"]): r for r in sw["strategies"]}
    assert len(rows) == 12
    for (strategy, mode), r in rows.items():
        if r["stall_seconds"] > 0:
            assert r["peak_after"] < sw["peak_before"], (strategy, mode, r)
        assert r["overhead_fraction"] == pytest.approx(r["stall_seconds"] / s["duration_s"], rel=1e-6)
        if mode == "budget":
            free = rows[(strategy, "no-overhead")]
            assert (r["peak_after"], r["stall_seconds"]) <= (free["peak_after"], free["stall_seconds"]) \
                or r["peak_after"] < free["peak_after"], (strategy, r, free)
