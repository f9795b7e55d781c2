"""report.text formatting and report.data (timeline, histogram, largest blocks) against brute force."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from pyinterpose.report import data
from pyinterpose.report.synthetic import training_trace
from pyinterpose.report.text import fmt_bytes, fmt_ns, to_jsonable
from pyinterpose.trace.model import Trace

MiB = 1 << 20


def test_fmt_bytes_and_ns():
    assert fmt_bytes(0) == "0 B"
    assert fmt_bytes(1023) == "1023 B"
    assert fmt_bytes(1536) == "1.5 KiB"
    assert fmt_bytes(84 * MiB) == "84.0 MiB"
    assert fmt_bytes(3 << 30) == "3.0 GiB"
    assert fmt_bytes(-2048) == "-2.0 KiB"
    assert fmt_bytes(None) == "-" and fmt_bytes(float("nan")) == "-"
    assert fmt_ns(999) == "999 ns" and fmt_ns(1500) == "1.5 us"
    assert fmt_ns(2.5e6) == "2.5 ms" and fmt_ns(2.5e9) == "2.50 s"


def test_to_jsonable_plain_types():
    d = to_jsonable({"a": np.int64(3), "b": np.float32(0.5), "c": np.array([1, 2]), "d": float("nan"),
                     "e": pd.DataFrame({"x": [1]}), 5: (np.bool_(True),)})
    assert d == {"a": 3, "b": 0.5, "c": [1, 2], "d": None, "e": [{"x": 1}], "5": [True]}
    assert type(d["a"]) is int and type(d["5"][0]) is bool


def brute_live(blocks: pd.DataFrame, t: int) -> int:
    """Live device bytes just after all events at instant t (frees at t applied)."""
    b = blocks[blocks["counts_device"]]
    alive = (b["t_alloc"] <= t) & (~b["freed"] | (b["t_free"] > t))
    return int(b.loc[alive, "size"].sum())


def random_trace(n=300, seed=0, devices=(0,)):
    rng = np.random.default_rng(seed)
    t_alloc = rng.integers(0, 10_000, n)
    life = rng.integers(1, 3000, n)
    freed = rng.random(n) < 0.85
    end = int((t_alloc + life).max()) + 1
    df = pd.DataFrame({
        "block_id": np.arange(n), "pid": 7, "device": rng.choice(devices, n), "api": "cudaMalloc",
        "kind": rng.choice(["device", "async", "host"], n, p=[0.6, 0.3, 0.1]),
        "address": rng.integers(1 << 20, 1 << 40, n).astype(np.uint64),
        "size": rng.integers(1, 64 * MiB, n), "t_alloc": t_alloc,
        "t_free": np.where(freed, t_alloc + life, end), "seq_alloc": t_alloc, "seq_free": t_alloc + life,
        "freed": freed, "stream": 0,
    })
    return Trace.from_tables(blocks=df)


@pytest.mark.slow
def test_timeline_matches_brute_force_at_every_instant():
    tr = random_trace(400, seed=1)
    (tl,) = data.memory_timeline(tr, max_points=10**9)
    for t, v in zip(tl.t.tolist(), tl.total.tolist()):
        assert v == brute_live(tr.blocks, t)
    # the curve has one point per distinct event instant
    b = tr.device_blocks
    instants = np.unique(np.r_[b["t_alloc"], b.loc[b["freed"], "t_free"]])
    assert np.array_equal(tl.t, instants)
    assert tl.peak == max(brute_live(tr.blocks, t) for t in instants)


def test_downsampled_timeline_keeps_peak_and_classes_sum_to_total():
    tr = random_trace(2000, seed=2)
    b = tr.blocks
    classes = pd.Series(np.where(b["size"] > 32 * MiB, "big", "small"), index=b["block_id"])
    (full,) = data.memory_timeline(tr, classes=classes, max_points=10**9)
    (tl,) = data.memory_timeline(tr, classes=classes, max_points=100)
    assert len(tl.t) <= 100 + 1
    assert tl.total.max() == full.total.max() == tl.peak
    assert np.all(np.diff(tl.t) > 0)
    stacked = sum(tl.series.values())
    assert np.array_equal(stacked, tl.total)
    # every kept point is a true point of the full curve
    idx = np.searchsorted(full.t, tl.t)
    assert np.array_equal(full.total[idx], tl.total)
    # "big" series at each point equals the brute-force live bytes of big blocks
    bb = b[b["size"] > 32 * MiB]
    for t, v in list(zip(tl.t.tolist(), tl.series["big"].tolist()))[::7]:
        assert v == brute_live(bb, t)


@pytest.mark.slow
def test_timeline_per_device():
    tr = random_trace(300, seed=3, devices=(0, 2))
    tls = data.memory_timeline(tr, max_points=10**9)
    assert [t.device for t in tls] == [0, 2]
    for tl in tls:
        bd = tr.blocks[tr.blocks["device"] == tl.device]
        assert tl.peak == max(brute_live(bd, t) for t in tl.t.tolist())


def test_synthetic_training_peak_is_hand_computed():
    # weights 4x4 MiB + optimizer 4x8 MiB + 4 activations of 8 MiB + one 4 MiB gradient
    tr = training_trace(iterations=3)
    (tl,) = data.memory_timeline(tr)
    assert tl.peak == 16 * MiB + 32 * MiB + 32 * MiB + 4 * MiB


def test_size_histogram_brute_force():
    sizes = np.array([1, 2, 3, 4, 1023, 1024, 1025, 2047, 2048, MiB, MiB + 1, 0])
    blocks = pd.DataFrame({"size": sizes, "counts_device": True})
    h = data.size_histogram(blocks)
    assert h["count"].sum() == len(sizes) and h["bytes"].sum() == sizes.sum()
    for lo, hi, c, nb in h.itertuples(index=False):
        sel = sizes[(np.maximum(sizes, 1) >= lo) & (np.maximum(sizes, 1) < hi)]
        assert c == len(sel) and nb == sel.sum()
        assert hi == 2 * lo
    row = h[h["lo"] == 1024].iloc[0]
    assert row["count"] == 3  # 1024, 1025, 2047


def test_size_histogram_ignores_host_blocks_and_empty():
    blocks = pd.DataFrame({"size": [4096, 8192], "counts_device": [True, False]})
    h = data.size_histogram(blocks)
    assert h["count"].sum() == 1 and h["bytes"].sum() == 4096
    assert len(data.size_histogram(blocks.iloc[:0])) == 0


def test_largest_blocks_order_and_lifetime():
    tr = random_trace(200, seed=4)
    lb = data.largest_blocks(tr, n=5)
    dev = tr.device_blocks
    expect = dev.sort_values(["size", "t_alloc"], ascending=[False, True]).head(5)
    assert lb["block_id"].tolist() == expect["block_id"].tolist()
    assert (lb["lifetime_ns"].to_numpy() == (expect["t_free"] - expect["t_alloc"]).to_numpy()).all()


def test_largest_blocks_with_many_ties_at_the_cut():
    """Thousands of device blocks of the n-th largest size (one size every iteration), some at one
    instant: the rows listed are the first n of every device block sorted by size (largest first),
    then allocation time, then row, with their own columns."""
    rng = np.random.default_rng(9)
    n_blocks = 3000
    size = rng.choice([1 << 20, 1 << 22, 1 << 22, 1 << 22, 5 << 22], n_blocks)
    size[:3] = 7 << 22
    ta = np.sort(rng.integers(0, 800, n_blocks))
    tr = Trace.from_tables(blocks=pd.DataFrame({
        "block_id": np.arange(n_blocks) + 10, "pid": 7, "size": size, "t_alloc": ta, "t_free": ta + 50,
        "seq_alloc": np.arange(n_blocks) * 2, "seq_free": np.arange(n_blocks) * 2 + 1,
        "kind": rng.choice(["device", "host"], n_blocks, p=[0.9, 0.1]), "api": "cudaMalloc", "freed": True}))
    dev = [r for r in tr.blocks.itertuples(index=False) if str(r.kind) == "device"]
    for n in (5, 40, 200):
        want = sorted(range(len(dev)), key=lambda i: (-dev[i].size, dev[i].t_alloc, i))[:n]
        lb = data.largest_blocks(tr, n=n)
        assert lb["block_id"].tolist() == [dev[i].block_id for i in want]
        assert lb["t_alloc"].tolist() == [dev[i].t_alloc for i in want]
        assert lb["lifetime_ns"].tolist() == [50] * n


def test_size_quantiles():
    blocks = pd.DataFrame({"size": [1, 2, 3, 4, 100], "counts_device": True})
    q = data.size_quantiles(blocks)
    assert q["max"] == 100 and q["p50"] == 3 and q["mean"] == 22
