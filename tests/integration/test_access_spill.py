"""access.analyze on a long trace (issue 30): the per-interval columns written to files and read a chunk
at a time (pyinterpose.analysis.access_spill) give every figure the in-memory path gives, bit for bit.

``access_spill.SPILL_ROWS`` forces either path at any size: 0 spills every trace, a huge value none.
The in-memory path is itself checked against the independent reference of
tests/unit/test_access_reference.py; here the spilled path is checked against that reference too (on
the synthetic traces that take each path: host blocks, repeated ids with sizes of their own, several
processes, the device clock, repeated touches), and against the in-memory path on the six samples and
the demo-sized simtrain trace, with several thresholds and pieces of a few rows."""
from __future__ import annotations

import json
import os
import sys

import numpy as np
import pytest

import pyinterpose
from pyinterpose.analysis import access, access_spill, clock, intervals

from tests.conftest import ROOT
from tests.integration.test_streamed_access import demo_trace  # noqa: F401  (the fixture)

SAMPLES = ["graphs-blocks.pit", "jax-attn-blocks.pit", "jax-attn-reserved.pit", "loader-blocks.pit",
           "torch-cnn-blocks.pit", "torch-cnn-reserved.pit"]
SETTINGS = [dict(bandwidth=25.0), dict(bandwidth=3.0, ati_quantile=0.5, size_quantile=0.2),
            dict(bandwidth=None, ati_quantile=0.0, size_quantile=0.0, top=3),
            dict(bandwidth=1.0, ati_quantile=1.0, size_quantile=1.0, top=0),
            dict(bandwidth=16.0, ati_quantile=0.7, size_quantile=0.5, top=10_000)]


def _reference():
    unit = os.path.join(ROOT, "tests", "unit")
    if unit not in sys.path:
        sys.path.insert(0, unit)
    import test_access_reference
    return test_access_reference


def _analyze(monkeypatch, tr, spill: bool, **kw):
    """access.analyze with the rows spilled or not; asserts which path ran."""
    monkeypatch.setattr(access_spill, "SPILL_ROWS", 0 if spill else 1 << 60)
    monkeypatch.setattr(clock, "SPILL_OPS", 0 if spill else 1 << 60)      # the device clock's ops too
    taken = []
    real = access_spill.Rows.wanted
    monkeypatch.setattr(access_spill.Rows, "wanted", classmethod(lambda cls, n: taken.append(r := real(n)) or r))
    rows = []
    out = access.analyze(tr, cache_path=os.devnull + ".none", between=lambda f: rows.append(
        [tuple(map(np.copy, r)) for r in f()]), **kw)
    assert len(taken) == 1 and (taken[0] is not None) == spill
    between = [np.concatenate([r[i] for r in rows[0]]) if rows[0] else [] for i in (0, 1)]
    return out, between


def _same_both_ways(monkeypatch, tr, **kw):
    a, ra = _analyze(monkeypatch, tr, False, **kw)
    b, rb = _analyze(monkeypatch, tr, True, **kw)
    _reference().same(b, a)
    assert json.dumps(a) == json.dumps(b)
    for x, y in zip(ra, rb):
        assert np.array_equal(x, y)
    return a


@pytest.mark.parametrize("sample", SAMPLES)
def test_spilled_equals_in_memory_on_the_samples(monkeypatch, sample):
    tr = pyinterpose.load(os.path.join(ROOT, "samples", sample))
    outs = [_same_both_ways(monkeypatch, tr, **kw) for kw in SETTINGS]
    assert outs[0]["intervals"] > 50 and outs[0]["outliers"]["intervals"] > 0
    assert outs[2]["outliers"]["intervals"] == outs[0]["intervals"]      # every row an outlier
    assert len(outs[4]["outliers"]["top"]) == outs[4]["outliers"]["intervals"]


@pytest.mark.parametrize("rows", [pytest.param("48", marks=pytest.mark.slow), "300"])
def test_spilled_in_small_pieces_equals_in_memory(monkeypatch, rows):
    """Pieces and chunks of a few rows: the segments of a block cut across chunks."""
    monkeypatch.setenv("PYINTERPOSE_CHUNK_ROWS", rows)
    for sample in ("torch-cnn-blocks.pit", "jax-attn-reserved.pit"):
        tr = pyinterpose.load(os.path.join(ROOT, "samples", sample))
        for kw in SETTINGS[:3]:
            _same_both_ways(monkeypatch, tr, **kw)


@pytest.mark.slow
def test_spilled_equals_in_memory_on_the_demo(monkeypatch, demo_trace):  # noqa: F811
    tr = pyinterpose.load(demo_trace)
    for kw in SETTINGS[:3]:
        _same_both_ways(monkeypatch, tr, **kw)


@pytest.mark.parametrize("rows", [None, pytest.param("7", marks=pytest.mark.slow)])
def test_spilled_equals_the_reference(monkeypatch, rows):
    """The spilled path against the independent reference analysis, on the synthetic traces."""
    ref = _reference()
    if rows:
        monkeypatch.setenv("PYINTERPOSE_CHUNK_ROWS", rows)
    monkeypatch.setattr(access_spill, "SPILL_ROWS", 0)
    monkeypatch.setattr(clock, "SPILL_OPS", 0)
    spilled = []
    real = access_spill.quantile_summaries
    monkeypatch.setattr(access_spill, "quantile_summaries", lambda *a: spilled.append(1) or real(*a))
    nocache = os.devnull + ".none"
    tr, _ = ref.training_trace(steps=20, layers=4, warmup=1, noise=0.1, seed=5)
    ref.check_variants(tr, nocache)
    assert len(spilled) == 8


def test_touches_past_int32_are_kept_in_int64(monkeypatch):
    """Seqs from 2**31 on do not fit the touches' int32 columns: the C pass says so and they are made in
    int64; the analysis equals the reference's (and that of the same trace with small seqs, shifted)."""
    ref = _reference()
    tr, _ = ref.training_trace(steps=12, layers=3, warmup=1, noise=0.1, seed=2)
    shift = (1 << 31) + 12345
    b = tr.blocks.copy()
    b["seq_alloc"] += shift
    b["seq_free"] += shift
    a = tr.accesses.copy()
    a["seq"] += shift
    big = ref._rebuild(tr, b, a)
    assert intervals.touches(tr, None).seq.dtype == np.int32
    tc = intervals.touches(big, None)
    assert tc.seq.dtype == np.int64 and int(tc.seq.min()) >= shift
    nocache = os.devnull + ".none"
    got = ref.check(big, bandwidth=12.0, cache_path=nocache)
    small = ref.check(tr, bandwidth=12.0, cache_path=nocache)
    assert got["ati_quantiles"] == small["ati_quantiles"] and got["outliers"] == small["outliers"]


def test_block_ids_past_int32_are_kept_in_int64(monkeypatch):
    """Block ids from 2**31 on do not fit the int32 the touches and the pass hold ids in when they can:
    kept in int64, with the reference's figures (the long path, in pieces of a few rows too).  The
    accesses' ids are int32 (the trace's tables), so such blocks are the unaccessed ones here."""
    ref = _reference()
    monkeypatch.setattr(access_spill, "SPILL_ROWS", 0)
    monkeypatch.setattr(clock, "SPILL_OPS", 0)
    tr, _ = ref.training_trace(steps=12, layers=3, warmup=1, noise=0.1, seed=4)
    b = tr.blocks.copy()
    b["block_id"] = b["block_id"].astype(np.int64)
    b.loc[b.index[1::3], "block_id"] += 1 << 33          # a third of the blocks: ids past int32
    big = ref._rebuild(tr, b)
    assert intervals.touches(tr, None).bid.dtype == np.int32
    assert intervals.touches(big, None).bid.dtype == np.int64
    nocache = os.devnull + ".none"
    for rows in (None, "5"):
        if rows:
            monkeypatch.setenv("PYINTERPOSE_CHUNK_ROWS", rows)
        got = ref.check(big, bandwidth=12.0, cache_path=nocache, top=20, ati_quantile=0.5, size_quantile=0.2)
        assert got["stability"]["blocks"] > 0 and got["outliers"]["intervals"] > 0
        assert any(r["block_id"] >= 1 << 33 for r in got["outliers"]["top"])
        assert got["accessed_blocks"] < got["blocks"]


def test_ops_in_files_are_the_ops(monkeypatch):
    """The device clock's ops written to files (a long trace) hold the arrays made in memory."""
    ref = _reference()
    tr, _ = ref.training_trace(steps=12, layers=3, warmup=1, noise=0.1, seed=2)
    tr = ref.with_device_clock(tr, seed=4, untimed=0.2)
    got = {}
    for spill in (False, True):
        monkeypatch.setattr(clock, "SPILL_OPS", 0 if spill else 1 << 60)
        monkeypatch.setenv("PYINTERPOSE_CHUNK_ROWS", "7")          # the frontier made in pieces of 1
        o = clock._ops(tr, None, True)
        got[spill] = [np.asarray(x) for x in (o.seq, o.t, o.start, o.end, o.stream, o.frontier, o.timed)]
    assert isinstance(o.seq, np.memmap) and len(o.seq) > 100
    assert 0 < got[True][6].sum() < len(o.seq)
    for a, b in zip(got[False], got[True]):
        assert a.dtype == b.dtype and np.array_equal(a, b)


def test_the_files_are_gone(monkeypatch, tmp_path):
    """The spilled columns' files live in TMPDIR only while the pass writes them (then mapped, unlinked)."""
    import tempfile
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setattr(tempfile, "tempdir", None)
    tr = pyinterpose.load(os.path.join(ROOT, "samples", "torch-cnn-blocks.pit"))
    _analyze(monkeypatch, tr, True, bandwidth=25.0)
    assert os.listdir(tmp_path) == []
