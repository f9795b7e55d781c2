"""The reader's piecewise helpers (issue 30: a 100 M-event trace read in bounded memory): the record
tables' fields copied out a piece at a time from a mapped spill file, and the blocks' order checked a
piece at a time, against their definitions."""
from __future__ import annotations

import mmap
import os

import numpy as np
import pytest

from pyinterpose.trace import reader, records


@pytest.mark.parametrize("piece", [1, 2, 5, 1 << 20])
def test_in_block_order_is_the_tuple_order(piece, monkeypatch):
    monkeypatch.setattr(reader, "RECORD_PIECE", piece)
    rng = np.random.default_rng(7)
    for n in (0, 1, 2, 3, 7, 40):
        for _ in range(60):
            t = np.sort(rng.integers(0, 4, n)).astype(np.int64)
            pid = rng.integers(0, 3, n).astype(np.int32)
            seq = rng.integers(0, 5, n).astype(np.int64)
            if rng.random() < 0.5:         # often in order: sort by the tuple
                o = sorted(range(n), key=lambda i: (t[i], pid[i], seq[i]))
                t, pid, seq = t[o], pid[o], seq[o]
                if n > 1 and rng.random() < 0.5:     # then one row out of place
                    i = int(rng.integers(0, n - 1))
                    seq[i] = seq[i + 1] + 1
            rows = [(int(a), int(b), int(c)) for a, b, c in zip(t, pid, seq)]
            want = all(rows[i] <= rows[i + 1] for i in range(n - 1))
            assert reader._in_block_order(t, pid, seq) == want, (rows, piece)


@pytest.mark.parametrize("piece", [1, 3, 1000])
def test_fields_of_a_mapped_table_in_pieces(piece, tmp_path, monkeypatch):
    monkeypatch.setattr(reader, "RECORD_PIECE", piece)
    dt = records.event_dtype()
    n = 2500
    rng = np.random.default_rng(3)
    recs = np.zeros(n, dt)
    for f in ("seq", "t_ns", "addr", "size", "aux", "flags", "device", "op"):
        info = np.iinfo(dt[f])
        recs[f] = rng.integers(0, min(info.max, 1 << 40), n, endpoint=True).astype(dt[f])
    path = tmp_path / "t.rec"
    recs.tofile(path)
    with open(path, "rb") as f:
        m = mmap.mmap(f.fileno(), os.path.getsize(path), access=mmap.ACCESS_COPY)
    mapped = np.ndarray((n,), dt, buffer=m)
    cols = reader._fields(mapped, ("seq", "flags", "addr", "op"))
    assert len(cols) == n
    for f in ("seq", "flags", "addr", "op"):
        assert cols[f].dtype == dt[f] and cols[f].flags.c_contiguous
        assert [int(v) for v in cols[f]] == [int(r[f]) for r in recs]
    sub = cols[np.array([5, 0, 2499])]
    assert len(sub) == 3 and sub["seq"].tolist() == [int(recs["seq"][i]) for i in (5, 0, 2499)]


@pytest.mark.parametrize("fail_at", [0, 5, 23])
def test_a_blocks_column_that_cannot_be_written_keeps_the_table_in_memory(fail_at, tmp_path, monkeypatch):
    """The blocks table goes into the cache a column at a time: when one column cannot be written
    (no room left), the table is kept in memory (the columns written before read back), the tables
    are those of a read without the cache, and no cache is left beside the trace."""
    import shutil

    import pandas as pd

    import pyinterpose
    from pyinterpose.trace import colcache

    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    path = str(tmp_path / "t.pit")
    shutil.copy(os.path.join(root, "samples", "torch-cnn-blocks.pit"), path)
    monkeypatch.setenv("PYINTERPOSE_NO_CACHE", "1")
    plain = pyinterpose.load(path)
    monkeypatch.delenv("PYINTERPOSE_NO_CACHE")
    monkeypatch.setenv("PYINTERPOSE_CACHE_MIN_BYTES", "0")
    calls = []
    real = colcache.Writer.one_column

    def one_column(self, name, i, c, s):
        calls.append(c)
        if len(calls) > fail_at:
            raise OSError(28, "No space left on device")
        return real(self, name, i, c, s)

    monkeypatch.setattr(colcache.Writer, "one_column", one_column)
    tr = pyinterpose.load(path)
    assert len(calls) == fail_at + 1          # none tried after the first that failed
    assert not os.path.exists(colcache.cache_dir(path))
    assert sorted(os.listdir(tmp_path)) == ["t.pit"]
    for name in colcache.TABLES:
        pd.testing.assert_frame_equal(getattr(tr, name), getattr(plain, name), check_exact=True, obj=name)


@pytest.mark.parametrize("piece", [1, 2, 5, 1 << 20])
def test_sites_aligned_with_the_blocks_checked_in_pieces(piece, monkeypatch):
    """attach_blocks takes the sites' columns as they are when the sites' (pid, seq) are the blocks'
    own, row for row, strictly ascending; checked a piece at a time, against the whole-key definition."""
    from pyinterpose.trace import stacks

    monkeypatch.setattr(stacks, "SITE_CHUNK", piece)
    rng = np.random.default_rng(11)
    for n in (1, 2, 3, 9, 30):
        for _ in range(80):
            pid = np.sort(rng.integers(1, 3, n)).astype(np.int32)
            seq = rng.integers(0, 6, n).astype(np.int64)
            order = np.lexsort((seq, pid))
            pid, seq = pid[order], seq[order]
            spid, sseq = pid.copy(), seq.copy()
            r = rng.random()
            if r < 0.3:
                sseq[int(rng.integers(0, n))] += 1
            elif r < 0.4:
                spid, sseq = spid[:-1], sseq[:-1]
            keys = [(int(a), int(b)) for a, b in zip(spid, sseq)]
            want = (len(spid) == n and all(k == (int(a), int(b)) for k, a, b in zip(keys, pid, seq))
                    and all(keys[i] < keys[i + 1] for i in range(len(keys) - 1)))
            assert stacks._aligned(pid, seq, spid, sseq) == want, (pid, seq, spid, sseq, piece)
