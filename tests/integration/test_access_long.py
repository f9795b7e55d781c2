"""access.analyze on a long trace (issue 30, access33): what it lets go of and writes to files, forced on
small traces, gives every figure the in-memory path gives.

* the pass's per-segment columns (first row, block id, size) written to files (``access_spill.Segments``)
  when the rows are (block ids unique), read back mapped: the same figures as the arrays in memory, and
  not used when ids repeat (then a segment may hold rows of several sizes);
* the live order memoized by the peak (``trace.live.live_order``) let go after it on a long trace when
  access made it (not when it was memoized before: a caller's keeps it).
"""
from __future__ import annotations

import json
import os

import pytest

import pyinterpose
from pyinterpose.analysis import access, access_spill, clock
from pyinterpose.trace import live, pages

from tests.conftest import ROOT
from tests.integration.test_access_spill import SAMPLES, SETTINGS, _reference, _same_both_ways

ORDER = ("model", "live_order")


def _segments_taken(monkeypatch) -> list:
    taken = []
    real = access_spill.Segments.wanted
    monkeypatch.setattr(access_spill.Segments, "wanted",
                        classmethod(lambda cls, *a: taken.append(r := real(*a)) or r))
    return taken


@pytest.mark.parametrize("sample", SAMPLES)
def test_segments_in_files_equal_in_memory(monkeypatch, sample):
    tr = pyinterpose.load(os.path.join(ROOT, "samples", sample))
    taken = _segments_taken(monkeypatch)
    mapped = []
    real_init = access._StreamedIntervals.__init__

    def init(self, *a, **k):
        real_init(self, *a, **k)
        mapped.append(all(pages._file_map(x) is not None for x in (self.seg, self.bid.vals, self.seg_size_i)))
    monkeypatch.setattr(access._StreamedIntervals, "__init__", init)
    for kw in SETTINGS[:3]:
        taken.clear()
        mapped.clear()
        _same_both_ways(monkeypatch, tr, **kw)
        # in memory: no writer (no rows in files); spilled: a writer, its columns mapped back
        assert [x is not None for x in taken] == [False, True] and mapped == [False, True]


def test_segments_in_files_on_the_reference(monkeypatch):
    """The reference's synthetic traces, spilled: a Segments writer for those with unique ids, none for
    the one with ids repeated (sizes of their own), every figure the reference's."""
    ref = _reference()
    monkeypatch.setattr(access_spill, "SPILL_ROWS", 0)
    monkeypatch.setattr(clock, "SPILL_OPS", 0)
    taken = _segments_taken(monkeypatch)
    tr, _ = ref.training_trace(steps=20, layers=4, warmup=1, noise=0.1, seed=5)
    ref.check_variants(tr, os.devnull + ".none")
    # eight analyses: the third of the check's list is the trace with ids repeated
    assert [x is not None for x in taken] == [True, True, True, False, True, True, True, True]


def test_live_order_let_go_on_a_long_trace(monkeypatch):
    path = os.path.join(ROOT, "samples", "torch-cnn-blocks.pit")
    whole = access.analyze(pyinterpose.load(path), bandwidth=25.0, cache_path=os.devnull + ".none")
    tr = pyinterpose.load(path)
    monkeypatch.setenv("PYINTERPOSE_CHUNK_ROWS", "50")       # more blocks than a chunk: a long trace
    assert len(tr.blocks) > 50
    out = access.analyze(tr, bandwidth=25.0, cache_path=os.devnull + ".none")
    assert ORDER not in tr._derived
    assert json.dumps(out) == json.dumps(whole)
    # memoized before (another step of the caller's reads it): kept
    kept = live.live_order(tr)
    out = access.analyze(tr, bandwidth=25.0, cache_path=os.devnull + ".none")
    assert tr._derived[ORDER] is kept
    assert json.dumps(out) == json.dumps(whole)


def test_ops_in_files_from_launches_and_copies_of_two_processes(monkeypatch):
    """The device clock's ops in files (a column at a time, put in seq order a piece at a time) hold the
    arrays made in memory when they come from launches and copies interleaved in seq and from one of two
    processes (the tables' rows masked, then sorted by seq)."""
    import numpy as np
    import pandas as pd
    from pyinterpose.trace.model import Trace

    ref = _reference()
    tr, _ = ref.training_trace(steps=12, layers=3, warmup=1, noise=0.1, seed=2)
    la = ref.with_device_clock(tr, seed=4, untimed=0.2).launches
    rng = np.random.default_rng(9)
    la = la.assign(pid=np.where(rng.random(len(la)) < 0.3, 7, la["pid"].to_numpy()))     # a second process
    cp = rng.random(len(la)) < 0.4                                                        # some ops are copies
    copies = pd.DataFrame({c: la[c].to_numpy()[cp] for c in ("pid", "seq", "t", "stream", "dev_start", "dev_end")})
    tr = Trace.from_tables(blocks=tr.blocks, accesses=tr.accesses, launches=la[~cp].reset_index(drop=True),
                           copies=copies, meta=tr.meta)
    pid = int(tr.blocks["pid"].iloc[0])
    got = {}
    for spill in (False, True):
        monkeypatch.setattr(clock, "SPILL_OPS", 0 if spill else 1 << 60)
        monkeypatch.setenv("PYINTERPOSE_CHUNK_ROWS", "28")          # written in pieces of 7 ops
        o = clock._ops(tr, pid, True)
        got[spill] = [np.asarray(x) for x in (o.seq, o.t, o.start, o.end, o.stream, o.frontier, o.timed)]
    assert isinstance(o.seq, np.memmap) and len(o.seq) > 100
    assert len(o.seq) < int((la["pid"] == pid).sum()) + 1 and (np.diff(got[True][0]) > 0).all()
    for a, b in zip(got[False], got[True]):
        assert a.dtype == b.dtype and np.array_equal(a, b)


def test_touches_seqs_let_go_on_the_device_clock(monkeypatch):
    """The reference's synthetic traces, spilled: on the device clock the touches' seqs are let go for the
    pass (each piece takes them from its accesses) and every figure is the reference's; kept elsewhere."""
    from pyinterpose.analysis import intervals
    ref = _reference()
    monkeypatch.setattr(access_spill, "SPILL_ROWS", 0)
    monkeypatch.setattr(clock, "SPILL_OPS", 0)
    dropped = []
    real = intervals.drop_seqs
    monkeypatch.setattr(intervals, "drop_seqs", lambda trace, tc: dropped.append(r := real(trace, tc)) or r)
    tr, _ = ref.training_trace(steps=20, layers=4, warmup=1, noise=0.1, seed=5)
    ref.check_variants(tr, os.devnull + ".none")
    # eight analyses: the seventh is on the device clock
    assert dropped == [False] * 6 + [True, False]


@pytest.mark.parametrize("rows", ["4000000", "5"])
def test_pieces_without_the_touches_seqs_are_the_pieces(monkeypatch, rows):
    """The pieces of a device-clock trace made after :func:`intervals.drop_seqs` (seqs from the accesses)
    are the pieces made with the touches' seqs, every column (start_seq and end_seq too)."""
    import pandas as pd
    from pyinterpose.analysis import intervals
    monkeypatch.setenv("PYINTERPOSE_CHUNK_ROWS", rows)
    ref = _reference()
    tr, _ = ref.training_trace(steps=12, layers=3, warmup=1, noise=0.1, seed=2)
    tr = ref.with_device_clock(tr, seed=4, untimed=0.2)
    want = pd.concat(list(intervals.pieces(tr, None, size=50)), ignore_index=True)
    tc = intervals.touches(tr, None)
    assert intervals.drop_seqs(tr, tc) and tc.seq is None
    got = pd.concat(list(intervals.pieces(tr, None, size=50, tc=tc)), ignore_index=True)
    assert len(got) > 200 and (got["start_seq"] != got["end_seq"]).any()
    pd.testing.assert_frame_equal(got, want)
    with intervals.shared(tr):          # touches kept with the trace: not let go
        assert not intervals.drop_seqs(tr, intervals.touches(tr, None))
