"""Issue 30: ``report.data.memory_timeline`` made in one pass over each device's events in pieces
(report.live_curve) equals the curve made from whole arrays, here by the reference below (the
in-memory implementation it replaced, kept as the test's own route: every event built, sorted
together, summed and reduced at once), on the samples and a synthetic trace with two devices, ties
and zero-byte allocations, for pieces of a few events and one piece, reduced or not."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

import pyinterpose
from pyinterpose.analysis import guarded
from pyinterpose.analysis.clock import block_times
from pyinterpose.report.data import memory_timeline
from pyinterpose.report.synthetic import training_trace
from pyinterpose.trace.model import Trace
from conftest import gpu_trace


def _ref_events(b, times):
    freed = b["freed"].to_numpy(bool)
    rows = np.arange(len(b))
    t_alloc, t_free = times
    t = np.concatenate([t_free[freed], t_alloc])
    size = (b["device_bytes"] if "device_bytes" in b else b["size"]).to_numpy(np.int64)
    d = np.concatenate([-size[freed], size])
    r = np.concatenate([rows[freed], rows])
    order = np.lexsort((d > 0, t))           # time, the "not positive" kind first, then position
    return t[order], d[order], r[order]


def _ref_keep(t, total, max_points):
    if len(t) == 0:
        return np.zeros(0, dtype=np.int64)
    last_at_t = np.flatnonzero(np.r_[t[1:] != t[:-1], True])
    if len(last_at_t) <= max_points:
        return last_at_t
    tt, vv = t[last_at_t], total[last_at_t]
    nbins = max(1, max_points // 2)
    edges = np.linspace(tt[0], tt[-1] + 1, nbins + 1)
    bin_ = np.clip(np.searchsorted(edges, tt, side="right") - 1, 0, nbins - 1)
    keep = []
    for k in np.unique(bin_):                # per bin: its first peak and its last point
        ix = np.flatnonzero(bin_ == k)
        keep += [ix[int(np.argmax(vv[ix]))], ix[-1]]
    return last_at_t[np.unique(keep)]


def _reference(trace, classes, max_points):
    b = trace.device_blocks
    out = {}
    for dev in sorted(int(d) for d in b["device"].unique()):
        bd = b[b["device"] == dev]
        t, d, r = _ref_events(bd, block_times(trace, bd))
        total = np.cumsum(d)
        i = int(np.argmax(total)) if len(total) else 0
        keep = _ref_keep(t, total, max_points)
        instants = int(np.count_nonzero(t[1:] != t[:-1])) + 1 if len(t) else 0
        series = {"live": total[keep]}
        if classes is not None:
            lab = classes.reindex(bd["block_id"].to_numpy())
            lab = np.array(["other" if pd.isna(x) else str(x) for x in lab], dtype=object)
            series = {name: np.cumsum(np.where(lab[r] == name, d, 0))[keep] for name in sorted(set(lab))}
        out[dev] = dict(t=t[keep], total=total[keep], peak=int(total[i]) if len(total) else 0,
                        peak_t=int(t[i]) if len(t) else 0, events=len(t), reduced=len(keep) < instants,
                        series=series)
    return out


def _twisted() -> Trace:
    tr = training_trace(iterations=5)
    b = tr.blocks.copy()
    rows = np.arange(len(b))
    b["device"] = np.where(rows % 3 == 0, 1, 0).astype(b["device"].dtype)
    b["t_alloc"] = b["t_alloc"] // 4000 * 4000
    b["t_free"] = np.maximum(b["t_free"] // 4000 * 4000, b["t_alloc"])
    b["size"] = np.where(rows % 13 == 4, 0, b["size"].to_numpy())             # allocations of 0 bytes
    return Trace.from_tables(blocks=b, accesses=tr.accesses, launches=tr.launches, meta=dict(tr.meta))


def _same(trace, classes, max_points, given=None):
    """The timeline of ``trace`` split by ``classes`` (given to it as ``given`` when set: the same classes
    in another form) equals the reference's."""
    want = _reference(trace, classes, max_points)
    got = {tl.device: tl for tl in memory_timeline(trace, classes=classes if given is None else given,
                                                   max_points=max_points)}
    assert sorted(got) == sorted(want)
    for dev, w in want.items():
        g = got[dev]
        assert np.array_equal(g.t, w["t"]) and np.array_equal(g.total, w["total"])
        assert (g.peak, g.peak_t, g.events, g.reduced) == (w["peak"], w["peak_t"], w["events"], w["reduced"])
        assert set(g.series) == set(w["series"])
        for k, v in w["series"].items():
            assert np.array_equal(g.series[k], v), k
    return want


@pytest.mark.parametrize("rows", [None, 1, 5, 64])
def test_twisted_trace_in_pieces(rows, monkeypatch):
    if rows is None:
        monkeypatch.delenv("PYINTERPOSE_CHUNK_ROWS", raising=False)
    else:
        monkeypatch.setenv("PYINTERPOSE_CHUNK_ROWS", str(rows))
    tr = _twisted()
    cl = guarded.block_classes(tr, iters=guarded.iterations(tr).value).value
    cl = cl.drop(cl.index[::5])              # some blocks without a class: "other"
    for mp in (6, 40, 4000):
        w = _same(tr, None, mp)
        _same(tr, cl, mp)
        _same(tr, cl.sample(frac=1.0, random_state=2), mp)
    assert len(w) == 2 and any(x["reduced"] for x in _reference(tr, None, 6).values())


@pytest.mark.parametrize("name", ["torch-cnn-blocks.pit", "jax-attn-reserved.pit", "loader-blocks.pit",
                                  "graphs-blocks.pit"])
def test_samples_in_pieces(name, monkeypatch):
    tr = pyinterpose.load(gpu_trace(name))
    cl = guarded.block_classes(tr, iters=guarded.iterations(tr).value).value
    for rows in (None, 7):
        if rows is None:
            monkeypatch.delenv("PYINTERPOSE_CHUNK_ROWS", raising=False)
        else:
            monkeypatch.setenv("PYINTERPOSE_CHUNK_ROWS", str(rows))
        for mp in (50, 4000, 200_000):
            _same(tr, None, mp)
            _same(tr, cl, mp)
