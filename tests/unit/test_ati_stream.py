"""The access section's ATI figure made a chunk at a time (report.ati_stream) is the figure
plots.ati_png draws from the whole arrays, byte for byte; the access analysis' ``between`` hook gives
exactly the device intervals of kind "between" of the whole intervals table, in its order."""
from __future__ import annotations

import numpy as np
import pytest

from pyinterpose.analysis import access
from pyinterpose.analysis.bandwidth import Bandwidth
from pyinterpose.report import ati_stream, plots
from pyinterpose.report.synthetic import training_trace

BW = Bandwidth(25e9, 20e9, 1e-5, "test")


def _chunks(ati, size, step):
    def rows():
        for lo in range(0, len(ati), step):
            yield ati[lo:lo + step], size[lo:lo + step]
    return rows


def _cost_ns(size, bw):
    """The swap cost of a block written out here: out and back at each direction's bandwidth, with
    both latencies."""
    s = np.asarray(size, np.float64)
    return (s / bw.d2h_bytes_per_s + bw.latency_s + s / bw.h2d_bytes_per_s + bw.latency_s) * 1e9


def _cases():
    rng = np.random.default_rng(3)
    n = 20000
    ati = rng.lognormal(9, 3, n).astype(np.int64)
    ati[:40] = 0                       # not drawn (log scale)
    ati[50:55] = -3
    sizes = rng.choice([512, 4096, 3 << 20, 1 << 24], n)
    yield "band", ati, sizes, BW
    yield "line", ati, np.full(n, 1 << 20), BW
    yield "no bandwidth", ati, sizes, None
    yield "one interval", ati[100:101], sizes[100:101], BW
    yield "no positive ATI", np.zeros(30, np.int64), sizes[:30], BW


@pytest.mark.parametrize("step", [1, 997, 1 << 20])
@pytest.mark.parametrize("case", list(_cases()), ids=lambda c: c[0])
def test_figure_from_chunks_is_the_whole_arrays_figure(case, step):
    _, ati, size, bw = case
    want = plots.ati_png(ati, None, _cost_ns(size, bw) if bw is not None else None)
    s = ati_stream.BetweenSummary()
    s(_chunks(ati, size, step))
    got, alt = ati_stream.figure(s, bw)
    assert alt == "ATI distribution"
    assert got == want


def test_no_between_interval_is_no_figure():
    s = ati_stream.BetweenSummary()
    s(_chunks(np.zeros(0, np.int64), np.zeros(0, np.int64), 10))
    assert s.called and ati_stream.figure(s, BW) is False


def test_threshold_marks_are_the_per_interval_quantiles():
    th = np.array([5.0, 1.0, 3.0])
    counts = np.array([4, 7, 2])
    full = np.array([5.0] * 4 + [1.0] * 7 + [3.0] * 2)
    kind, q05, q95, med = ati_stream.threshold_marks(th, counts)
    assert kind == "band"
    assert (q05, q95, med) == (np.quantile(full, 0.05), np.quantile(full, 0.95), np.median(full))
    assert ati_stream.threshold_marks(np.array([2.0]), np.array([9])) == ("line", 2.0)
    assert ati_stream.threshold_marks(np.array([2.0]), np.array([0])) is None


@pytest.mark.parametrize("chunk", ["7", "100000"])
def test_between_hook_gives_the_tables_between_device_rows(monkeypatch, tmp_path, chunk):
    monkeypatch.setenv("PYINTERPOSE_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("PYINTERPOSE_CHUNK_ROWS", chunk)
    tr = training_trace(iterations=5)
    seen = []
    out = access.analyze(tr, bandwidth=16, between=lambda rows: seen.append([list(map(np.copy, r)) for r in rows()]))
    assert len(seen) == 1
    ati = np.concatenate([a for a, _ in seen[0]])
    size = np.concatenate([s for _, s in seen[0]])
    iv = access.access_intervals(tr, out["pid"])
    sel = iv["counts_device"].to_numpy(bool) & (iv["kind"].astype(str).to_numpy() == "between")
    assert sel.sum() > 10
    assert ati.tolist() == iv["ati_ns"].to_numpy()[sel].tolist()
    assert size.tolist() == iv["size"].to_numpy()[sel].tolist()


def test_bin_counts_are_numpys_histogram():
    """Values on the edges (the last edge is its bin's), below the first and above the last."""
    edges = np.array([1.0, 2.0, 4.0, 8.0, 16.0])
    a = np.array([0.5, 1.0, 1.5, 2.0, 3.9, 4.0, 8.0, 15.99, 16.0, 16.01, 100.0])
    assert ati_stream.bin_counts(a, edges).tolist() == np.histogram(a, bins=edges)[0].tolist() == [2, 2, 1, 3]
    rng = np.random.default_rng(4)
    x = rng.lognormal(5, 2, 5000)
    e = np.logspace(0, 4, 50)
    assert ati_stream.bin_counts(x, e).tolist() == np.histogram(x, bins=e)[0].tolist()
