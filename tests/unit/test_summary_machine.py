"""summary shows the machine the trace was captured on (GPU names, memory, host link, driver,
framework versions when recorded), in text and --json; ground truth: what the capture recorded in
the real H100 sample's metadata (samples/README.md's provenance) and a package's own version."""
from __future__ import annotations

import json
import os
import sys

import pytest

import pyinterpose
from pyinterpose.analysis.machine import machine
from pyinterpose.analysis.summary import summarize
from pyinterpose.capture import run as capture_run
from pyinterpose.trace.model import Trace

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SAMPLE = os.path.join(ROOT, "samples", "torch-cnn-blocks.pit")


@pytest.fixture()
def h100():
    if not os.path.exists(SAMPLE):
        pytest.skip("samples/torch-cnn-blocks.pit not committed")
    return pyinterpose.load(SAMPLE)


def test_machine_of_the_h100_sample(h100):
    m = summarize(h100)["machine"]
    assert m["simulated_gpu"] is False and m["driver"] == "580.159.04"     # samples/README.md
    (g,) = m["gpus"]
    assert g["name"] == "NVIDIA H100 80GB HBM3" and g["memory_bytes"] == 85520809984
    assert g["link"]["pcie"] == {"gen": 5, "width": 16, "bytes_per_s": pytest.approx(63.015e9, rel=1e-4)}
    assert m["frameworks"] == {}            # this trace predates the record: said, not guessed


def test_summary_text_and_json(h100, monkeypatch, capsys):
    from pyinterpose.cli import main

    monkeypatch.setattr("pyinterpose.cli._args.load_trace", lambda path, quiet=False: h100)
    monkeypatch.setenv("COLUMNS", "250")
    assert main(["summary", "x.pit"]) == 0
    out = capsys.readouterr().out
    assert "NVIDIA H100 80GB HBM3, 79.6 GiB; PCIe Gen5 x16, 63.0 GB/s per direction" in out
    assert "580.159.04" in out and "versions not recorded" in out
    assert main(["summary", "x.pit", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["machine"]["gpus"][0]["name"] == "NVIDIA H100 80GB HBM3" and d["machine"]["driver"] == "580.159.04"


def test_framework_versions_shown_when_recorded(monkeypatch, capsys):
    from pyinterpose.cli import main

    tr = Trace.from_tables(meta={"view": "blocks", "simulated_gpu": True, "frameworks": {"torch": "2.11.0+cu130"},
                                 "nvml": {"available": False, "reason": "no driver"}})
    assert machine(tr)["frameworks"] == {"torch": "2.11.0+cu130"}
    monkeypatch.setattr("pyinterpose.cli._args.load_trace", lambda path, quiet=False: tr)
    monkeypatch.setenv("COLUMNS", "250")
    assert main(["summary", "x.pit"]) == 0
    out = capsys.readouterr().out
    assert "torch 2.11.0+cu130" in out and "simulated (simcuda)" in out


def test_capture_records_the_versions_of_its_own_pythons_packages(monkeypatch):
    import numpy

    monkeypatch.setattr(capture_run, "_FRAMEWORK_DISTS", ("numpy", "no-such-dist-xyz"))
    env = dict(os.environ)
    assert capture_run.framework_versions([sys.executable, "train.py"], env) == {"numpy": numpy.__version__}
    # another interpreter, or not Python at all: nothing reported
    assert capture_run.framework_versions(["/opt/other/bin/python3", "train.py"], env) == {}
    assert capture_run.framework_versions(["./a.out"], env) == {}
