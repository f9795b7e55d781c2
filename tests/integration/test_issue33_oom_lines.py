"""issue 33.6 (and 16's "outside"): the OOM lines after `run` for a plain ctypes program: its allocations
are the program's own (never "(framework allocator)"), and the call sites holding the live set are named,
largest first (the program's truth: load_weights holds 40 MiB, forward 6 MiB)."""
from __future__ import annotations

import json
import os
import sys

from conftest import ROOT


def test_oom_lines_of_a_ctypes_program(tmp_path):
    from conftest import run_cli

    out = str(tmp_path / "oom.pit")
    cp = run_cli("run", "--simulated-gpu", "-o", out, "--", sys.executable,
                 os.path.join(ROOT, "tests", "py", "oom_ctypes.py"), env={"SIMCUDA_MEMORY_BYTES": str(64 << 20)})
    assert cp.returncode == 1, cp.stderr
    truth = json.loads(cp.stdout.strip().splitlines()[-1])
    assert truth["failed"] != 0 and truth["held"] == {"load_weights": 40 << 20, "forward": 6 << 20}
    lines = cp.stderr.splitlines()
    live = [ln for ln in lines if ln.strip().startswith("live ")]
    assert live and "(framework allocator)" not in "\n".join(lines)
    held = [ln for ln in lines if ln.strip().startswith("held by")]
    assert len(held) == 1, lines
    assert "in load_weights 40.0 MiB" in held[0] and "in forward 6.0 MiB" in held[0]
    assert held[0].index("load_weights") < held[0].index("forward")
    # "outside" means one thing on adjacent lines: outside the framework's allocator
    s = run_cli("summary", out)
    assert s.returncode == 0, s.stderr
    import re

    assert "outside it" not in s.stdout
    live = [ln for ln in s.stdout.splitlines() if ln.strip().startswith("live ")]
    assert live and not any(re.search(r"outside \d", ln) for ln in live), live
    assert "no framework's allocator recognised" in s.stdout
