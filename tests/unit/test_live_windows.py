"""trace.live_windows.masked_peaks (lifetimes' peak and per-iteration peaks) and flame's peak live set,
read from the live-event order in pieces, against a reference written here: every event of the masked
device blocks in time order (frees first at one instant), a running sum, its first maximum, and the
maximum inside each window of boundaries."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from pyinterpose.analysis.flame import peak_bytes_per_block
from pyinterpose.trace.live_windows import masked_peaks
from pyinterpose.trace.model import Trace


def _trace(seed: int, n: int = 300, in_order: bool = True) -> Trace:
    rng = np.random.default_rng(seed)
    ta = rng.integers(0, 4000, n)
    if in_order:
        ta = np.sort(ta)
    return Trace.from_tables(blocks=pd.DataFrame({
        "pid": rng.integers(1, 3, n), "size": rng.integers(1, 1 << 16, n), "t_alloc": ta,
        "t_free": ta + rng.integers(0, 700, n), "seq_alloc": np.arange(n) * 2, "seq_free": np.arange(n) * 2 + 9,
        "kind": rng.choice(["device", "host"], n, p=[0.8, 0.2]), "api": "cudaMalloc",
        "freed": rng.random(n) < 0.85}))


def _reference_events(trace: Trace, mask=None):
    """(t, delta, row) of the device blocks' events in the curve's order, written out by hand."""
    b = trace.blocks
    ev = []
    for row, r in enumerate(b.itertuples(index=False)):
        if str(r.kind) != "device" or (mask is not None and not mask[row]):
            continue
        ev.append((int(r.t_alloc), int(r.size), row))
        if bool(r.freed):
            ev.append((int(r.t_free), -int(r.size), row))
    ev.sort(key=lambda e: (e[0], e[1]))       # by time, the negative deltas (frees) first
    return ev


def _reference(trace: Trace, mask, bounds):
    ev = _reference_events(trace, mask)
    live, best, t_best, run = 0, None, -1, []
    for t, d, _ in ev:
        live += d
        run.append((t, live))
        if best is None or live > best:
            best, t_best = live, t
    windows = []
    for k in range(len(bounds) - 1):
        inside = [v for t, v in run if bounds[k] <= t < bounds[k + 1]]
        windows.append(max(inside) if inside else 0)
    return len(ev), (0 if best is None else best), t_best, windows


@pytest.mark.parametrize("chunk", ["5", "64", "100000"])
@pytest.mark.parametrize("seed,in_order", [(1, True), (2, True), (3, False)])
def test_masked_peaks_equal_the_reference(monkeypatch, chunk, seed, in_order):
    monkeypatch.setenv("PYINTERPOSE_CHUNK_ROWS", chunk)
    tr = _trace(seed, in_order=in_order)
    pid = tr.blocks["pid"].to_numpy()
    b = tr.blocks
    ta, tf = b["t_alloc"].to_numpy(), b["t_free"].to_numpy()
    # boundaries at events' own instants (an event at a boundary is the later window's), one window
    # empty, one of a single instant
    bounds = np.sort(np.array([-5, ta[10], ta[10], tf[40], tf[40] + 1, ta[200], 4800]))
    for mask in (pid == 1, pid == 2, np.ones(len(pid), bool)):
        got = masked_peaks(tr, mask, bounds)
        n, peak, t, windows = _reference(tr, mask, bounds)
        assert (got.events, got.peak, got.t) == (n, peak, t)
        assert got.per_window.tolist() == windows
    assert masked_peaks(tr, pid == 1).per_window is None


@pytest.mark.parametrize("chunk", ["1", "100000"])
def test_the_first_of_two_equal_peaks_is_the_peak(monkeypatch, chunk):
    """Two blocks of one size live one after the other: the peak is first reached at the first one
    (in one piece, and with each event a piece of its own)."""
    monkeypatch.setenv("PYINTERPOSE_CHUNK_ROWS", chunk)
    tr = Trace.from_tables(blocks=pd.DataFrame({
        "pid": [1, 1], "size": [10, 10], "t_alloc": [0, 10], "t_free": [5, 15], "seq_alloc": [0, 2],
        "seq_free": [1, 3], "kind": "device", "api": "cudaMalloc", "freed": True}))
    got = masked_peaks(tr, np.ones(2, bool))
    assert (got.events, got.peak, got.t) == (4, 10, 0)
    t, per_block = peak_bytes_per_block(tr)
    assert (t, per_block.tolist()) == (0, [10, 0])


def test_masked_peaks_of_no_events():
    tr = _trace(4)
    got = masked_peaks(tr, np.zeros(len(tr.blocks), bool), np.array([0, 10, 20]))
    assert (got.events, got.peak, got.t, got.per_window.tolist()) == (0, 0, -1, [0, 0])


@pytest.mark.parametrize("chunk", ["3", "100000"])
@pytest.mark.parametrize("seed", [5, 6, 7])
def test_flame_peak_live_set_equals_the_reference(monkeypatch, chunk, seed):
    """The bytes each block holds at the first event where the live device bytes peak."""
    monkeypatch.setenv("PYINTERPOSE_CHUNK_ROWS", chunk)
    tr = _trace(seed, in_order=seed != 7)
    ev = _reference_events(tr)
    live, best, k_best = 0, None, -1
    for k, (_, d, _) in enumerate(ev):
        live += d
        if best is None or live > best:
            best, k_best = live, k
    want = np.zeros(len(tr.blocks), np.int64)
    for _, d, row in ev[:k_best + 1]:
        want[row] += d
    t, got = peak_bytes_per_block(tr)
    assert t == ev[k_best][0]
    assert got.tolist() == want.tolist()
    assert int(got.sum()) == best
