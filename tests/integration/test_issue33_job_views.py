"""issue 33.5: job views of traces without rank variables name processes, never "rank None", and copies
of one trace are one trace (said so), not separate ranks with one pid.

Truth: the files themselves — b.pit is a byte copy of a.pit; c.pit another capture (simtrain's truth
gives its pid)."""
from __future__ import annotations

import json
import shutil
import sys

SIMTRAIN = [sys.executable, "-m", "pyinterpose.examples.simtrain", "--steps", "4", "--layers", "2"]


def test_copies_are_detected_and_no_rank_none(tmp_path):
    from conftest import run_cli

    job = tmp_path / "job"
    job.mkdir()
    pids = []
    for name in ("a", "c"):
        truth = str(tmp_path / f"{name}.json")
        cp = run_cli("run", "-q", "--simulated-gpu", "-o", str(job / f"{name}.pit"), "--", *SIMTRAIN, "--truth", truth)
        assert cp.returncode == 0, cp.stderr
        with open(truth) as f:
            pids += json.load(f)["pids"]
    shutil.copy(job / "a.pit", job / "b.pit")
    glob = str(job / "*.pit")
    cp = run_cli("summary", glob, "--json")
    assert cp.returncode == 0, cp.stderr
    res = json.loads(cp.stdout)
    assert sorted(r["pid"] for r in res["per_rank"]) == sorted(pids)       # a's process once, c's once
    assert [(d["trace"], d["copy_of"]) for d in res["duplicates"]] == [(str(job / "b.pit"), str(job / "a.pit"))]
    cp = run_cli("summary", glob)
    assert cp.returncode == 0, cp.stderr
    assert "rank None" not in cp.stdout
    assert "b.pit is a copy of" in cp.stdout
    assert f"pid {pids[0]}" in cp.stdout or f"pid {pids[1]}" in cp.stdout
    out = str(tmp_path / "job.html")
    cp = run_cli("report", glob, "-o", out)
    assert cp.returncode == 0, cp.stderr
    with open(out) as f:
        html = f.read()
    assert "rank None" not in html and "b.pit is a copy of" in html
