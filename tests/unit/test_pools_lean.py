"""Issue 30: what ``pools.evaluate`` holds on a long trace.  The masked block columns are copied a
piece of rows at a time (``pools._masked``), and the request stream can be made without its seq
column, letting go of the caller's columns as they are read (``_request_columns(..., seq=False,
consume=True)``).  Against the definitions written here: numpy's boolean indexing, and the stream as
one stable lexsort of all requests (a free first at an equal seq)."""
from __future__ import annotations

import numpy as np
import pytest

from pyinterpose.analysis.pools import _masked, _request_columns


@pytest.mark.parametrize("rows", ["1", "3", "7", "1000000"])
def test_masked_copy_in_pieces_is_boolean_indexing(rows, monkeypatch):
    monkeypatch.setenv("PYINTERPOSE_CHUNK_ROWS", rows)
    rng = np.random.default_rng(5)
    for n in (0, 1, 2, 29, 300):
        mask = rng.random(n) < 0.6
        for a in (rng.integers(-50, 50, n), rng.integers(0, 1 << 60, n).astype(np.uint64), rng.random(n) < 0.5):
            got = _masked(a, mask)
            want = np.array([x for x, m in zip(a.tolist(), mask.tolist()) if m], dtype=a.dtype)
            assert got.dtype == a.dtype
            np.testing.assert_array_equal(got, want)


def test_request_stream_without_seq_letting_go_of_the_columns():
    rng = np.random.default_rng(11)
    n = 400
    sa = rng.permutation(n) * 2                           # not ascending: both argsorts taken
    sf = sa + rng.integers(0, 9, n)
    cols = {"seq_alloc": sa, "seq_free": sf, "freed": rng.random(n) < 0.7, "block_id": np.arange(n) + 100,
            "size": rng.integers(1, 50, n), "stream": rng.integers(0, 3, n).astype(np.uint64)}
    given = dict(cols)
    r = _request_columns(given, times=False, seq=False, consume=True)
    assert given == {}                                    # every column let go
    f = np.flatnonzero(cols["freed"])
    seq = np.concatenate([sa, sf[f]])
    op = np.concatenate([np.ones(n), np.zeros(len(f))])   # a free first at an equal seq
    o = np.lexsort((op, seq))
    assert r["n"] == n + len(f)
    assert "seq" not in r and "t" not in r
    np.testing.assert_array_equal(r["is_alloc"], op[o] == 1)
    np.testing.assert_array_equal(r["block_id"], np.concatenate([cols["block_id"], cols["block_id"][f]])[o])
    np.testing.assert_array_equal(r["size"], np.concatenate([cols["size"], cols["size"][f]])[o])
    np.testing.assert_array_equal(r["stream"], np.concatenate([cols["stream"], cols["stream"][f]])[o])
    kept = dict(cols)
    _request_columns(kept, times=False)
    assert kept.keys() == cols.keys()                     # without consume: the caller's columns stay
