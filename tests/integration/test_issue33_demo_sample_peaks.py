"""issue 33.14: `demo --sample` prints two peak-live figures; the one of the framework allocator's blocks
only (the pools' whole-run bound) says that it leaves the libraries out.

Truth: PyTorch's own max_memory_allocated for the sample (its truth file) is the allocator-only figure."""
from __future__ import annotations

import json
import os


def test_sample_peaks_say_which_excludes_the_libraries(tmp_path):
    from conftest import ROOT, run_cli
    from pyinterpose.report.text import fmt_bytes

    with open(os.path.join(ROOT, "samples", "torch-cnn-blocks.truth.json")) as f:
        allocated = json.load(f)["pytorch_reported"]["max_memory_allocated"]
    cp = run_cli("demo", "--sample", "-o", str(tmp_path / "d"), env={"COLUMNS": "200"})
    assert cp.returncode == 0, cp.stderr
    lines = [ln for ln in cp.stdout.splitlines() if fmt_bytes(allocated) in ln and "lower bound, whole run" in ln]
    assert len(lines) == 1, cp.stdout
    assert "framework allocator's blocks only" in lines[0] and "libraries" in lines[0], lines[0]
