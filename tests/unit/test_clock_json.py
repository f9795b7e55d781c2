"""Every JSON output names the clock it used (issue 21): "gpu (cupti)" on a trace with device
times, "cpu" with its note on one without; summary gives the launch-to-start lag."""
from __future__ import annotations

import json

import numpy as np
import pytest

from pyinterpose.cli import main
from pyinterpose.report.synthetic import training_trace
from pyinterpose.trace.model import Trace

COMMANDS = [["summary", "x.pit", "--json"], ["iterations", "x.pit", "--json"],
            ["access", "x.pit", "--json", "--bandwidth", "12"], ["pools", "x.pit", "--json"],
            ["swap", "x.pit", "--json", "--bandwidth", "12"], ["compare", "x.pit", "x.pit", "--json"]]


def _device(tr: Trace) -> Trace:
    la = tr.launches.copy()
    la["dev_start"] = la["t"] + 200_000          # 0.2 ms launch lag, 0.5 ms kernels
    la["dev_end"] = la["dev_start"] + 500_000
    procs = tr.processes.assign(clock="cupti", clock_note="")
    return Trace.from_tables(blocks=tr.blocks, accesses=tr.accesses, launches=la, markers=tr.markers,
                             processes=procs, nvml=tr.nvml, kernels=tr.kernels, meta=tr.meta)


@pytest.mark.parametrize("device", [True, False])
@pytest.mark.parametrize("argv", COMMANDS, ids=lambda a: a[0])
def test_json_names_its_clock(monkeypatch, tmp_path, capsys, argv, device):
    monkeypatch.setenv("PYINTERPOSE_CACHE_DIR", str(tmp_path / "cache"))
    tr = training_trace(step_ns=1_000_000)
    tr = _device(tr) if device else tr
    monkeypatch.setattr("pyinterpose.cli._args.load_trace", lambda path, quiet=False: tr)
    assert main(argv) == 0
    d = json.loads(capsys.readouterr().out)
    rows = d["traces"] if argv[0] == "compare" else [d]
    for r in rows:
        if device:
            assert r["clock"] == "gpu (cupti)"
        else:
            assert r["clock"] == "cpu" and r["clock_note"].startswith("no device times: CPU clock (")
    if argv[0] == "summary":
        lag = d["launch_lag"]
        if device:
            assert lag["median_ns"] == 200_000 and lag["max_ns"] == 200_000 and lag["launches"] == len(tr.launches)
        else:
            assert lag is None
