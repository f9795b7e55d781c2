"""simtrain --device-time h100-like: the same work as without it, with kernels that take device time so
that the GPU timeline lags the CPU's (checked on simcuda's own device log)."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest


def _simtrain(tmp_path, framework, device_time, steps=20):
    log = tmp_path / f"{framework}-{device_time}.log"
    truth = tmp_path / f"{framework}-{device_time}.json"
    env = {k: v for k, v in os.environ.items() if not k.startswith("SIMCUDA_") and k != "LD_PRELOAD"}
    env["SIMCUDA_DEVICE_LOG"] = str(log)
    subprocess.run([sys.executable, "-m", "pyinterpose.examples.simtrain", "--framework", framework,
                    "--steps", str(steps), "--device-time", device_time, "--truth", str(truth)],
                   env=env, check=True, capture_output=True, timeout=120)
    rows = [line.rstrip("\n").split("\t") for line in open(log) if not line.startswith("#")]
    with open(truth) as f:
        return json.load(f), rows


def test_device_log_reader(tmp_path):
    from pyinterpose.examples.devicelog import read_device_log

    truth, rows = _simtrain(tmp_path, "torch", "h100-like", steps=3)
    df = read_device_log(str(tmp_path / "torch-h100-like.log"))
    assert len(df) == len(rows) and (df["op"] == "kernel").sum() == truth["launches"]
    assert (df["end_ns"] >= df["start_ns"]).all() and (df["start_ns"] >= df["enqueue_ns"]).all()
    assert ((df["start_cupti"] - df["start_ns"]).astype("int64") >= 1700000000000000000).all()
    assert df["name"].isna().sum() == (df["op"] != "kernel").sum()
    assert df["corr"].is_unique  # no graphs here: one op per call


@pytest.mark.parametrize("framework", ["torch", "tf"])
def test_h100_like_lags_and_keeps_the_work(tmp_path, framework):
    off, off_rows = _simtrain(tmp_path, framework, "off")
    on, rows = _simtrain(tmp_path, framework, "h100-like")
    assert on.pop("device_time") == "h100-like" and "device_time" not in off
    assert {k: v for k, v in on.items() if k != "pids"} == {k: v for k, v in off.items() if k != "pids"}
    kernels = [r for r in rows if r[0] == "kernel"]
    assert len(kernels) == on["launches"] == len([r for r in off_rows if r[0] == "kernel"])
    enq, start, end = (np.array([int(r[i]) for r in kernels]) for i in (6, 7, 8))
    lag, dur = (start - enq) / 1e3, (end - start) / 1e3  # microseconds
    assert (lag >= 5).all()  # the 5 us launch latency
    assert 20 < np.median(lag) < 1000 and np.percentile(lag, 99) > 300  # behind the CPU, with a tail in ms
    assert 5 < np.median(dur) < 60 and (dur >= 400).any()  # short kernels and a few long ones
    # off: no device time at all (every op starts when it is enqueued and takes nothing)
    assert all(r[6] == r[7] == r[8] for r in off_rows)
