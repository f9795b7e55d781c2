"""issue 33.16, the small ones: each a defect a new user met (the expected text is the user's, by hand)."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from conftest import ROOT, run_cli

SAMPLE = os.path.join(ROOT, "samples", "loader-blocks.pit")


def test_demo_output_folder_is_ignored_by_git():
    cp = subprocess.run(["git", "check-ignore", "-q", "pyinterpose-demo/demo-torch.html"], cwd=ROOT)
    assert cp.returncode == 0


def test_negative_capacity_is_named_as_such():
    cp = run_cli("fit", SAMPLE, "--capacity", "-1GiB")
    assert cp.returncode == 2
    assert cp.stderr.strip().splitlines() == [
        "pyinterpose: error: fit: argument --capacity: a byte count cannot be negative: '-1GiB'"]


def test_plan_of_a_trace_without_output_says_so():
    cp = run_cli("plan", SAMPLE)
    assert cp.returncode == 2, cp.stdout + cp.stderr
    assert len(cp.stderr.strip().splitlines()) == 1 and "-o" in cp.stderr and cp.stdout == ""


def test_run_help_shows_quiet():
    cp = run_cli("run", "--help")
    assert "-q, --quiet" in cp.stdout


def test_program_killed_by_a_signal_is_named(tmp_path):
    out = str(tmp_path / "segv.pit")
    cp = run_cli("run", "--simulated-gpu", "-o", out, "--", sys.executable, "-c",
                 "import os, signal; os.kill(os.getpid(), signal.SIGSEGV)")
    assert cp.returncode == 139, cp.stderr
    assert "program killed by SIGSEGV (exit status 139)" in cp.stderr


def test_report_of_a_simulated_gpu_says_so(tmp_path):
    out, html = str(tmp_path / "t.pit"), str(tmp_path / "r.html")
    cp = run_cli("run", "-q", "--simulated-gpu", "-o", out, "--", sys.executable, "-m",
                 "pyinterpose.examples.simtrain", "--steps", "3", "--layers", "2")
    assert cp.returncode == 0, cp.stderr
    cp = run_cli("report", out, "-o", html)
    assert cp.returncode == 0, cp.stderr
    page = open(html).read()
    assert ">GPUs<" in page and "simulated (simcuda)" in page


@pytest.mark.slow
def test_gpu_uuids_fit_an_80_column_table(tmp_path):
    out, truth = str(tmp_path / "job.pit"), str(tmp_path / "truth.json")
    cp = run_cli("run", "-q", "--simulated-gpu", "-o", out, "--", sys.executable, "-m",
                 "pyinterpose.examples.simtrain", "--ranks", "3", "--steps", "4", "--layers", "2", "--truth", truth)
    assert cp.returncode == 0, cp.stderr
    cp = run_cli("summary", out, env={"COLUMNS": "80"})
    lines = cp.stdout.splitlines()
    top = next(i for i, ln in enumerate(lines) if ln.strip() == "ranks")
    end = next(i for i in range(top, len(lines)) if lines[i].startswith("└"))
    body = [ln for ln in lines[top + 1:end] if ln.startswith("│")]
    rows = [ln for ln in body if ln.split("│")[1].strip().isdigit()]
    assert len(rows) == 3
    assert len(body) <= 2 * 3, "\n".join(lines[top:end + 1])     # one or two lines per rank
