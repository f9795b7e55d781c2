"""capture.nvml against a fake pynvml module (no GPU here)."""
from __future__ import annotations

import sys
import time
import types

import pytest

from pyinterpose.capture import nvml
from pyinterpose.trace.model import NVML_COLUMNS


class NVMLError(Exception):
    pass


def _fake(devices, init_error=None):
    """A pynvml stand-in: ``devices`` = list of dicts of what each query answers (missing = error)."""
    m = types.ModuleType("pynvml")
    m.NVMLError = NVMLError
    m.NVML_PCIE_UTIL_TX_BYTES, m.NVML_PCIE_UTIL_RX_BYTES = 0, 1
    m.NVML_NVLINK_MAX_LINKS = 4
    m.NVML_FI_DEV_NVLINK_GET_SPEED = 164
    m.NVML_FI_DEV_C2C_LINK_COUNT = 170
    m.NVML_FI_DEV_C2C_LINK_GET_MAX_BW = 172
    m.calls = {"init": 0, "shutdown": 0, "throughput": 0}

    def init():
        if init_error:
            raise NVMLError(init_error)
        m.calls["init"] += 1

    def q(key):
        def f(h, *rest):
            v = devices[h].get(key)
            if v is None:
                raise NVMLError(f"{key}: Not Supported")
            return v(*rest) if callable(v) else v
        return f

    m.nvmlInit = init
    m.nvmlShutdown = lambda: m.calls.__setitem__("shutdown", m.calls["shutdown"] + 1)
    m.nvmlSystemGetDriverVersion = lambda: "575.51"
    m.nvmlDeviceGetCount = lambda: len(devices)
    m.nvmlDeviceGetHandleByIndex = lambda i: i
    m.nvmlDeviceGetName = q("name")
    m.nvmlDeviceGetUUID = q("uuid")
    m.nvmlDeviceGetMemoryInfo = q("mem")
    m.nvmlDeviceGetCurrPcieLinkGeneration = q("gen_cur")
    m.nvmlDeviceGetCurrPcieLinkWidth = q("width_cur")
    m.nvmlDeviceGetMaxPcieLinkGeneration = q("gen_max")
    m.nvmlDeviceGetMaxPcieLinkWidth = q("width_max")
    m.nvmlDeviceGetGpuMaxPcieLinkGeneration = q("gpu_gen_max")
    m.nvmlDeviceGetNvLinkState = q("nvlink_state")
    m.nvmlDeviceGetNvLinkVersion = q("nvlink_version")
    m.nvmlDeviceGetC2cModeInfoV = q("c2c_info")

    def fields(h, ids):
        vals = devices[h].get("fields", {})
        out = []
        for fid in ids:
            ok = fid in vals
            out.append(types.SimpleNamespace(nvmlReturn=0 if ok else 3, valueType=1,
                                             value=types.SimpleNamespace(uiVal=vals.get(fid, 0))))
        return out
    m.nvmlDeviceGetFieldValues = fields

    def throughput(h, counter):
        m.calls["throughput"] += 1
        v = devices[h].get("tx" if counter == 0 else "rx")
        if v is None:
            raise NVMLError("Not Supported")
        return v
    m.nvmlDeviceGetPcieThroughput = throughput
    return m


H100 = {"name": b"NVIDIA H100 80GB HBM3", "uuid": "GPU-1234", "mem": types.SimpleNamespace(total=80 << 30,
        used=5 << 30), "gen_cur": 1, "width_cur": 16, "gen_max": 5, "width_max": 16, "gpu_gen_max": 5,
        "nvlink_state": lambda link: 1 if link < 2 else 0, "nvlink_version": lambda link: 4,
        "fields": {164: 26562}, "tx": 1000, "rx": 2000}
OLD = {"name": "Tesla T4", "uuid": "GPU-old", "mem": types.SimpleNamespace(total=16 << 30, used=1 << 30),
       "gen_cur": 3, "width_cur": 8}  # no max link, no NVLink, no throughput
GH200 = {"name": "GH200", "uuid": "GPU-gh", "mem": types.SimpleNamespace(total=96 << 30, used=0),
         "gen_max": 5, "width_max": 16, "c2c_info": types.SimpleNamespace(isC2cEnabled=1),
         "fields": {170: 10, 172: 45000}}


def test_link_info_derives_bandwidth_from_max_link(monkeypatch):
    fake = _fake([H100, OLD, GH200])
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    info = nvml.link_info()
    assert info["available"] is True and info["driver"] == "575.51"
    h100, old, gh = info["devices"]
    assert (h100["index"], h100["name"], h100["uuid"], h100["total_bytes"]) == \
        (0, "NVIDIA H100 80GB HBM3", "GPU-1234", 80 << 30)
    p = h100["pcie"]
    assert (p["gen_current"], p["width_current"], p["gen_max"], p["width_max"], p["gpu_gen_max"]) == (1, 16, 5, 16, 5)
    # Gen5 x16: 32 GT/s x 128/130 / 8 bits x 16 lanes, from the max link although the link idles at Gen1
    assert p["h2d_bytes_per_s"] == pytest.approx(32e9 * 128 / 130 / 8 * 16)
    assert p["d2h_bytes_per_s"] == p["h2d_bytes_per_s"]
    assert "max" in p["basis"] and "Gen1" in p["basis"]
    assert h100["nvlink"] == {"links_active": 2, "links": [0, 1], "version": 4, "speed_mbps_per_link": 26562}
    assert h100["c2c"] is None
    # old GPU: only the current link -> Gen3 x8 with a warning in the basis
    assert old["pcie"]["h2d_bytes_per_s"] == pytest.approx(8e9 * 128 / 130 / 8 * 8)
    assert "CURRENT" in old["pcie"]["basis"]
    assert old["nvlink"] is None and old["c2c"] is None
    assert gh["c2c"]["links"] == 10 and gh["c2c"]["bytes_per_s"] == pytest.approx(10 * 45000e6)
    assert fake.calls["init"] == 1 and fake.calls["shutdown"] == 1


def test_link_info_never_raises(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", _fake([], init_error="Driver Not Loaded"))
    info = nvml.link_info()
    assert info["available"] is False and "Driver Not Loaded" in info["reason"]
    monkeypatch.setitem(sys.modules, "pynvml", None)       # import fails
    info = nvml.link_info()
    assert info["available"] is False and "pynvml" in info["reason"]


def test_sampler_collects_rows(monkeypatch):
    fake = _fake([H100, OLD])
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    t0 = time.monotonic_ns()
    s = nvml.NvmlSampler(interval_s=0.001).start()
    deadline = time.monotonic() + 5
    while fake.calls["throughput"] < 8 and time.monotonic() < deadline:
        time.sleep(0.005)
    df = s.stop()
    t1 = time.monotonic_ns()
    assert list(df.columns) == list(NVML_COLUMNS)
    assert {c: str(df[c].dtype) for c in df.columns} == NVML_COLUMNS
    assert len(df) >= 4 and set(df["device"]) == {0, 1}
    assert ((df["t"] >= t0) & (df["t"] <= t1)).all()          # time.monotonic_ns clock
    d0, d1 = df[df.device == 0], df[df.device == 1]
    assert (d0["used_bytes"] == 5 << 30).all() and (d0["pcie_tx_kbs"] == 1000).all()
    assert (d0["pcie_rx_kbs"] == 2000).all()
    assert d1["pcie_tx_kbs"].isna().all() and (d1["used_bytes"] == 1 << 30).all()
    assert fake.calls["shutdown"] == 1
    assert s.stop().shape == df.shape                          # stopping twice is harmless


def test_sampler_without_nvml(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", _fake([], init_error="no driver"))
    s = nvml.NvmlSampler().start()
    df = s.stop()
    assert len(df) == 0 and list(df.columns) == list(NVML_COLUMNS)
    assert "no driver" in s.error
