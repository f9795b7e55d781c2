"""Bandwidth: PCIe table, which figure the swap model uses, the cache, measuring (simulated runtime), CLIs."""
from __future__ import annotations

import ctypes
import json
import os
import subprocess
import sys

import pandas as pd
import pytest

from pyinterpose.analysis import bandwidth as bw
from pyinterpose.cli import main
from pyinterpose.errors import PyinterposeError
from pyinterpose.trace.model import Trace


@pytest.fixture(autouse=True)
def _cache(monkeypatch, tmp_path):
    monkeypatch.setenv("PYINTERPOSE_CACHE_DIR", str(tmp_path / "cache"))


def test_pcie_table():
    assert bw.pcie_bytes_per_s(1, 16) == pytest.approx(4e9)
    assert bw.pcie_bytes_per_s(2, 16) == pytest.approx(8e9)
    assert bw.pcie_bytes_per_s(3, 16) == pytest.approx(15.754e9, rel=1e-3)
    assert bw.pcie_bytes_per_s(4, 16) == pytest.approx(31.508e9, rel=1e-3)
    assert bw.pcie_bytes_per_s(5, 8) == pytest.approx(31.508e9, rel=1e-3)
    assert bw.pcie_bytes_per_s(6, 16) == pytest.approx(121.0e9, rel=1e-3)
    assert bw.pcie_bytes_per_s(None, 16) is None and bw.pcie_bytes_per_s(4, 0) is None


def _trace(meta):
    blocks = pd.DataFrame({"block_id": [0], "pid": 1, "device": 1, "size": 1 << 20, "kind": "device",
                           "api": "cudaMalloc", "t_alloc": 0, "t_free": 10})
    return Trace.from_tables(blocks=blocks, meta=meta)


NVML_META = {"nvml": {"available": True, "devices": [
    {"index": 0, "name": "A", "uuid": "GPU-a", "pcie": {"h2d_bytes_per_s": 1e9, "d2h_bytes_per_s": 1e9,
                                                         "basis": "basis-a"}, "c2c": None},
    {"index": 1, "name": "B", "uuid": "GPU-b", "pcie": {"h2d_bytes_per_s": 31.5e9, "d2h_bytes_per_s": 31.5e9,
                                                         "basis": "Gen4 x16 max"}, "c2c": None}]}}


def _measurement(key, h2d=20e9, d2h=25e9, lat=5e-6, simulated=False):
    return {"key": key, "name": f"gpu {key}", "h2d_bytes_per_s": h2d, "d2h_bytes_per_s": d2h,
            "latency_s": lat, "simulated": simulated, "measured_at": "then"}


def test_resolution_order():
    tr = _trace(NVML_META)
    # 3. NVML of the trace's device (block device 1 -> "B"), default latency, said so
    b = bw.resolve_bandwidth(tr)
    assert (b.h2d_bytes_per_s, b.d2h_bytes_per_s, b.latency_s) == (31.5e9, 31.5e9, bw.DEFAULT_LATENCY_S)
    assert "NVML" in b.source and "Gen4 x16 max" in b.source and "default" in b.source
    # 2. a measurement for another GPU is ignored; one for this GPU wins over NVML
    bw.save_measurement(_measurement("GPU-a"))
    assert bw.resolve_bandwidth(tr).h2d_bytes_per_s == 31.5e9
    bw.save_measurement(_measurement("GPU-b"))
    b = bw.resolve_bandwidth(tr)
    assert (b.h2d_bytes_per_s, b.d2h_bytes_per_s, b.latency_s) == (20e9, 25e9, 5e-6)
    assert b.source.startswith("measured") and "GPU-b" in b.source
    assert bw.resolve_bandwidth(tr, latency_us=7).latency_s == pytest.approx(7e-6)
    # 1. given beats everything; GB/s = 1e9 bytes/s
    b = bw.resolve_bandwidth(tr, gbps=12.5, latency_us=0)
    assert (b.h2d_bytes_per_s, b.d2h_bytes_per_s, b.latency_s) == (12.5e9, 12.5e9, 0.0)
    assert b.source.startswith("given")


def test_c2c_preferred_over_pcie():
    meta = {"nvml": {"available": True, "devices": [
        {"index": 1, "name": "GH200", "uuid": "GPU-gh", "pcie": {"h2d_bytes_per_s": 63e9, "d2h_bytes_per_s": 63e9},
         "c2c": {"bytes_per_s": 450e9, "basis": "c2c"}}]}}
    b = bw.resolve_bandwidth(_trace(meta))
    assert b.h2d_bytes_per_s == 450e9 and "C2C" in b.source


def test_no_figure_is_an_error_not_a_guess():
    for meta in ({}, {"nvml": {"available": False, "reason": "no driver"}}):
        with pytest.raises(PyinterposeError, match="no bandwidth"):
            bw.resolve_bandwidth(_trace(meta))
    with pytest.raises(PyinterposeError, match="> 0"):
        bw.resolve_bandwidth(_trace({}), gbps=0)


def test_simulated_trace_uses_simulated_measurement():
    tr = _trace({"simulated_gpu": True, **NVML_META})
    assert bw.trace_gpu_keys(tr) == ["simulated"]
    with pytest.raises(PyinterposeError, match="simulated"):   # the real GPU's NVML link is not used
        bw.resolve_bandwidth(tr)
    bw.save_measurement(_measurement("simulated", h2d=7e9, d2h=6e9, simulated=True))
    b = bw.resolve_bandwidth(tr)
    assert b.h2d_bytes_per_s == 7e9 and "simulated" in b.source


def test_cache_roundtrip_and_corrupt_file():
    path = bw.cache_file()
    assert bw.load_measurements() == {}
    bw.save_measurement(_measurement("GPU-x"))
    bw.save_measurement(_measurement("GPU-y", h2d=1.0))
    got = bw.load_measurements()
    assert set(got) == {"GPU-x", "GPU-y"} and got["GPU-y"]["h2d_bytes_per_s"] == 1.0
    with open(path, "w") as f:
        f.write("{not json")
    assert bw.load_measurements() == {}


def test_measure_without_cuda_is_a_clear_error(monkeypatch):
    def no_lib(*a, **k):
        raise OSError("cannot open shared object file")
    monkeypatch.setattr(ctypes, "CDLL", no_lib)
    monkeypatch.setattr(ctypes.util, "find_library", lambda name: None)
    with pytest.raises(PyinterposeError, match="no GPU to measure"):
        bw.measure()


def test_bandwidth_cli_without_gpu_is_one_line(monkeypatch, capsys):
    def no_gpu(simulated):
        raise PyinterposeError("no GPU to measure: no CUDA runtime (libcudart) could be loaded")
    monkeypatch.setattr(bw, "_load_cudart", no_gpu)
    assert main(["bandwidth"]) != 0
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1 and "no GPU" in err


SIM = os.path.join(bw.simulated_runtime_dir(), "libcudart.so.13")


@pytest.mark.slow
@pytest.mark.skipif(not os.path.exists(SIM), reason="simcuda not built (python pyinterpose/_build.py simcuda)")
def test_measure_simulated_runtime_and_cache():
    # a subprocess: loading the simulated libcuda.so.1 must not leak into this test process
    r = subprocess.run([sys.executable, "-m", "pyinterpose", "bandwidth", "--simulated-gpu", "--size", "1",
                        "--repeat", "3", "--json"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    m = json.loads(r.stdout)
    assert m["key"] == "simulated" and m["simulated"] is True
    assert m["h2d_bytes_per_s"] > 0 and m["d2h_bytes_per_s"] > 0 and m["latency_s"] >= 0
    assert m["size_bytes"] == 1 << 20
    assert bw.load_measurements()["simulated"]["h2d_bytes_per_s"] == m["h2d_bytes_per_s"]
    b = bw.resolve_bandwidth(_trace({"simulated_gpu": True}))
    assert b.h2d_bytes_per_s == m["h2d_bytes_per_s"] and "simulated" in b.source
