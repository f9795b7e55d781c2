"""The touches of the access intervals made with the accesses read a range at a time (issue 30:
``intervals._touches_in_ranges``, count then scatter per range, the pages of each range given back)
equal an independent pandas reference, whatever the range's length: ranges of a few accesses cut a
block's touches across ranges, and on the device clock a touch keeps its access row (the range's
first row + its place in the range)."""
from __future__ import annotations

import os

import numpy as np
import pandas as pd
import pytest

import pyinterpose
from pyinterpose.analysis import intervals

from tests.conftest import ROOT

SAMPLES = ["graphs-blocks.pit", "jax-attn-blocks.pit", "jax-attn-reserved.pit", "loader-blocks.pit",
           "torch-cnn-blocks.pit", "torch-cnn-reserved.pit"]


def ref_touches(trace, pid, by_row: bool):
    """(block ids in order, touches per block, their seqs, their t or access row), from pandas only:
    the accesses of a block of ``pid`` inside [seq_alloc, seq_free], in seq order within the block
    (ties in access order), the first of equal seqs kept."""
    b = trace.blocks
    blk = pd.DataFrame({"block_id": b["block_id"].to_numpy(np.int64), "pid": b["pid"].to_numpy(),
                        "seq_alloc": b["seq_alloc"].to_numpy(np.int64),
                        "seq_free": b["seq_free"].to_numpy(np.int64)})
    if pid is not None:
        blk = blk[blk["pid"] == pid]
    blk = blk.sort_values("block_id", kind="mergesort").reset_index(drop=True)
    assert blk["block_id"].is_unique          # the samples' ids are (the reference joins on them)
    a = trace.accesses
    acc = pd.DataFrame({"block_id": a["block_id"].to_numpy(np.int64), "seq": a["seq"].to_numpy(np.int64),
                        "t": np.arange(len(a)) if by_row else a["t"].to_numpy(np.int64),
                        "k": np.arange(len(a))})
    m = acc.merge(blk.reset_index().rename(columns={"index": "r"}), on="block_id", how="inner")
    m = m[(m["seq"] >= m["seq_alloc"]) & (m["seq"] <= m["seq_free"])]
    m = m.sort_values(["r", "seq", "k"], kind="mergesort").drop_duplicates(["r", "seq"], keep="first")
    cnt = m.groupby("r").size().reindex(range(len(blk)), fill_value=0).to_numpy()
    return blk["block_id"].to_numpy(), cnt, m["seq"].to_numpy(), m["t"].to_numpy()


def _same_as_reference(tr, pid) -> bool:
    """The touches of ``pid`` equal the reference's; whether they are by access row (the device clock)."""
    tc = intervals.touches(tr, pid)
    by_row = tc.clocks is not None
    bid, cnt, seq, t = ref_touches(tr, pid, by_row=by_row)
    assert len(seq) > 0
    assert np.array_equal(tc.bid, bid)
    assert np.array_equal(tc.cnt, cnt)
    assert np.array_equal(np.asarray(tc.seq, np.int64), seq)
    assert np.array_equal(np.asarray(tc.t, np.int64), t)
    return by_row


@pytest.mark.parametrize("sample", SAMPLES)
@pytest.mark.parametrize("rows", ["1", "7", "1000", None])
def test_touches_in_ranges_are_the_reference(monkeypatch, sample, rows):
    if rows is None:
        monkeypatch.delenv("PYINTERPOSE_CHUNK_ROWS", raising=False)
    else:
        monkeypatch.setenv("PYINTERPOSE_CHUNK_ROWS", rows)
    tr = pyinterpose.load(os.path.join(ROOT, "samples", sample))
    pids = sorted({int(p) for p in tr.blocks["pid"].to_numpy()})
    for pid in pids + [None]:
        _same_as_reference(tr, pid)


def _synthetic():
    """The reference module's synthetic traces: a training loop, on the device clock too (access rows),
    with repeated touches, a second process."""
    import sys

    unit = os.path.join(ROOT, "tests", "unit")
    if unit not in sys.path:
        sys.path.insert(0, unit)
    import test_access_reference as ref

    tr, _ = ref.training_trace(steps=12, layers=4, warmup=1, noise=0.1, seed=5)
    return [tr, ref.with_device_clock(tr, seed=3, untimed=0.1), ref.with_repeated_touches(tr),
            ref.with_second_process(tr)]


@pytest.mark.parametrize("rows", ["1", "5", "64", None])
def test_touches_in_ranges_on_synthetic_traces(monkeypatch, rows):
    if rows is None:
        monkeypatch.delenv("PYINTERPOSE_CHUNK_ROWS", raising=False)
    else:
        monkeypatch.setenv("PYINTERPOSE_CHUNK_ROWS", rows)
    kinds = set()
    for tr in _synthetic():
        for pid in sorted({int(p) for p in tr.blocks["pid"].to_numpy()}) + [None]:
            kinds.add(_same_as_reference(tr, pid))
    assert kinds == {True, False}          # both kinds of touch (CPU time, access row) checked
