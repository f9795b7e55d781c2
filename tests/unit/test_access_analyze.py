"""access.analyze: bandwidth filter, outliers, pressure shares and stability, hand-checked."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from pyinterpose.analysis import access
from pyinterpose.analysis.iterations import find_iterations
from pyinterpose.errors import PyinterposeError
from pyinterpose.trace.model import Trace
from test_iterations import training_trace


@pytest.fixture()
def nocache(tmp_path):
    return str(tmp_path / "none.json")


def _tiny():
    # block 0: 1 MB, accessed at t=1e6 and t=3e6 (gap 2 ms); block 1: 1 KB accessed at t=1.5e6
    blocks = pd.DataFrame({
        "block_id": [0, 1], "pid": [1, 1], "size": [1_000_000, 1_000], "t_alloc": [0, 1_000_000],
        "t_free": [4_000_000, 2_000_000], "seq_alloc": [0, 1], "seq_free": [10, 6],
        "kind": "device", "api": "cudaMalloc"})
    acc = pd.DataFrame({"block_id": [0, 1, 0], "pid": 1, "seq": [2, 3, 5],
                        "t": [1_000_000, 1_500_000, 3_000_000]})
    return Trace.from_tables(blocks=blocks, accesses=acc)


def test_bandwidth_filter_hand_computed(nocache):
    tr = _tiny()
    # 1 GB/s each way, 10 us latency each way: block 0 needs 2*1ms + 20us = 2.02 ms,
    # block 1 needs 2*1us + 20 us = 22 us.
    r = access.analyze(tr, bandwidth=1.0, latency_us=10, cache_path=nocache)
    # intervals: b0 [0,1ms) 1ms, [1ms,3ms) 2ms, [3ms,4ms) 1ms ; b1 [1ms,1.5ms) .5ms, [1.5ms,2ms) .5ms
    assert r["intervals"] == 5 and r["blocks"] == 2 and r["accessed_blocks"] == 2
    # b0: none >= 2.02 ms -> filtered; b1: both 0.5 ms >= 22 us -> swappable
    assert r["swappable"] == {"intervals": 2, "blocks": 1, "bytes": 1_000}
    assert r["filtered_fraction"]["intervals"] == pytest.approx(3 / 5)
    assert r["filtered_fraction"]["blocks"] == pytest.approx(1 / 2)
    assert r["filtered_fraction"]["bytes"] == pytest.approx(1_000_000 / 1_001_000)
    # a faster link makes block 0's 2 ms gap hide a swap: 10 GB/s -> 0.2 ms + 20 us
    r2 = access.analyze(tr, bandwidth=10.0, latency_us=10, cache_path=nocache)
    assert r2["swappable"]["intervals"] == 5
    assert r2["filtered_fraction"]["intervals"] == 0.0
    assert r["ati_quantiles"]["max"] == 2_000_000 and r["ati_quantiles"]["min"] == 500_000


def test_no_bandwidth_skips_filter(nocache):
    r = access.analyze(_tiny(), cache_path=nocache)
    assert r["filtered_fraction"] is None and r["bandwidth"] is None
    assert "skipped" in r["bandwidth_note"]


def test_bandwidth_from_nvml_meta(nocache):
    tr = _tiny()
    tr.meta = {"nvml": {"available": True, "devices": [
        {"index": 0, "name": "X", "pcie": {"h2d_bytes_per_s": 1e9, "d2h_bytes_per_s": 1e9}}]}}
    r = access.analyze(tr, latency_us=10, cache_path=nocache)
    assert r["bandwidth"]["h2d_bytes_per_s"] == 1e9
    assert r["swappable"]["intervals"] == 2


def test_bad_options(nocache):
    with pytest.raises(PyinterposeError):
        access.analyze(_tiny(), bandwidth=-1, cache_path=nocache)
    with pytest.raises(PyinterposeError):
        access.analyze(_tiny(), ati_quantile=1.5, cache_path=nocache)


def test_outliers_and_pressure(nocache):
    tr = _tiny()
    # thresholds at quantile 0.5: ATI median of [1,2,1,.5,.5] ms = 1 ms; size median of blocks = 500.5 KB
    r = access.analyze(tr, bandwidth=1.0, ati_quantile=0.5, size_quantile=0.5, cache_path=nocache)
    o = r["outliers"]
    assert o["ati_threshold_ns"] == 1_000_000 and o["intervals"] == 3 and o["blocks"] == 1
    assert o["bytes"] == 1_000_000
    # peak: both alive in [1ms, 2ms): 1_001_000 bytes first reached at t=1ms
    assert o["peak_bytes"] == 1_001_000 and o["peak_t"] == 1_000_000
    # at t=1ms block 0 is inside its [1ms,3ms) interval (an outlier)
    assert o["share_of_peak_bytes"] == pytest.approx(1_000_000 / 1_001_000)
    # no loop: the whole trace is the window; outliers are all of block 0's lifetime
    assert o["share_of_pressure"] == pytest.approx(4e12 / (4e12 + 1e9))
    assert o["top"][0]["ati_ns"] == 2_000_000
    # quantile 0 keeps everything: the intervals tile the lifetimes -> share 1
    r0 = access.analyze(tr, ati_quantile=0.0, size_quantile=0.0, cache_path=nocache)
    assert r0["outliers"]["share_of_pressure"] == pytest.approx(1.0)
    assert r0["outliers"]["intervals"] == 5


def test_training_loop_stability(nocache):
    tr, truth = training_trace(steps=30, layers=5, warmup=1, noise=0.0, seed=21)
    r = access.analyze(tr, bandwidth=12.0, cache_path=nocache)
    st = r["stability"]
    assert st["blocks"] == truth["count"] * truth["period_allocs"]
    assert st["stable_blocks"] == 1.0 and st["stable_bytes"] == 1.0
    assert r["iterations"]["count"] == truth["count"]
    # every block access was recorded once per launch naming it
    n_acc = tr.accesses.drop_duplicates(["block_id", "seq"]).shape[0]
    assert r["accesses"] == n_acc


def test_noise_lowers_stability(nocache):
    tr, truth = training_trace(steps=40, layers=5, warmup=1, noise=0.2, seed=22)
    r = access.analyze(tr, bandwidth=12.0, cache_path=nocache)
    st = r["stability"]
    assert st["blocks"] == truth["count"] * truth["period_allocs"] + len(truth["noisy"])
    assert st["stable_blocks"] < 1.0
    # the regular blocks keep their size, position and access count
    assert st["same_size_and_position"] >= 1 - 2 * len(truth["noisy"]) / st["blocks"]
