"""issue 33.4: the framework is read from what the program did and declared, not from its command line.

simtrain's plain command (its torch path: no --framework on the command line) and a --ranks job are a
PyTorch-like program (its truth file says which framework path ran); `demo --sample --framework jax`
analyses the JAX sample (the sample's own truth file says jax), and a framework with no sample says so."""
from __future__ import annotations

import json
import sys

import pytest

SIMTRAIN = [sys.executable, "-m", "pyinterpose.examples.simtrain"]
NAMES = {"torch": "pytorch", "jax": "jax", "tf": "tensorflow"}


@pytest.mark.parametrize("extra", [[], ["--ranks", "2"], ["--framework", "jax"]])
def test_framework_without_the_command_line(tmp_path, extra):
    from conftest import run_cli

    out, truth = str(tmp_path / "t.pit"), str(tmp_path / "truth.json")
    cp = run_cli("run", "-q", "--simulated-gpu", "-o", out, "--", *SIMTRAIN, "--steps", "4", "--layers", "2",
                 *extra, "--truth", truth)
    assert cp.returncode == 0, cp.stderr
    with open(truth) as f:
        want = NAMES[json.load(f)["framework"]]
    s = json.loads(run_cli("summary", out, "--json").stdout)
    assert s["framework"] == want
    assert s["allocator"]["framework_from"] != "command"


def test_demo_sample_follows_the_framework(tmp_path):
    from conftest import ROOT, run_cli
    import os

    cp = run_cli("demo", "--sample", "--framework", "jax", "-o", str(tmp_path / "d"), "--json")
    assert cp.returncode == 0, cp.stderr
    d = json.loads(cp.stdout)
    with open(os.path.join(ROOT, "samples", "jax-attn-blocks.truth.json")) as f:
        assert json.load(f)["framework"] == "jax"
    assert os.path.basename(d["trace"]) == "jax-attn-blocks.pit"
    cp = run_cli("demo", "--sample", "--framework", "tf", "-o", str(tmp_path / "e"))
    assert cp.returncode == 2 and "no tensorflow sample" in cp.stderr and len(cp.stderr.strip().splitlines()) == 1
