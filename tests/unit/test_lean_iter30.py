"""The lean paths of issue 30's third memory round (iter30) against their in-memory definitions,
written here: pieces of a few rows (``PYINTERPOSE_CHUNK_ROWS``) against numpy/pandas on whole arrays."""
from __future__ import annotations

import io
import json

import numpy as np
import pandas as pd
import pytest

import pyinterpose


@pytest.mark.parametrize("rows", ["4", "8", "28", "100000"])
def test_factorize_in_pieces_is_pandas_factorize(rows, monkeypatch):
    """Codes and distinct values in first-appearance order, NaN/None -> -1, int64 codes from 2**15 values."""
    from pyinterpose.report.class_lookup import factorize

    monkeypatch.setenv("PYINTERPOSE_CHUNK_ROWS", rows)
    rng = np.random.default_rng(5)
    cases = [np.array(["b", "a", None, "b", "c", np.nan, "a", "d"] * 3, object),
             np.array(rng.choice(["x", "y", "z", "w"], 50).tolist(), object),
             np.array([], object)]
    if rows == "100000":        # past 2**15 distinct values, in pieces of 25 k values: int64 codes from then on
        cases.append(np.array([f"v{i}" for i in rng.permutation(40000)] + ["v7", "v0"], object))
    for v in cases:
        want_c, want_u = pd.factorize(v, use_na_sentinel=True)
        c, u = factorize(v)
        np.testing.assert_array_equal(c, want_c)
        assert list(u) == list(want_u)
        assert c.dtype == (np.int16 if len(want_u) < (1 << 15) else np.int64)


@pytest.mark.parametrize("rows", ["4", "12", "100000"])
def test_take_sorted_and_order_check_in_pieces(rows, monkeypatch):
    from pyinterpose.analysis import iterations as it

    monkeypatch.setenv("PYINTERPOSE_CHUNK_ROWS", rows)
    rng = np.random.default_rng(9)
    a = rng.integers(-50, 50, 97)
    for idx in (np.sort(rng.choice(97, 30, replace=False)), np.arange(97), np.zeros(0, np.int64), np.array([96])):
        np.testing.assert_array_equal(it._take_sorted(a, idx), a[idx])
    seq = np.sort(rng.integers(0, 40, 60))
    bid = rng.integers(0, 5, 60)
    for s, b in ((seq, bid), (np.arange(60), bid), (seq, np.arange(60)), (np.arange(1), np.arange(1))):
        want = len(s) < 2 or bool(np.all((np.diff(s) > 0) | ((np.diff(s) == 0) & (np.diff(b) >= 0))))
        assert it._in_order(s, b) == want
    # a pair out of order at a piece's edge: each piece checked with the row before it
    for k in range(1, 60):
        s = np.arange(60)
        s[k] = s[k - 1] - 1
        assert not it._in_order(s, np.zeros(60, np.int64))


@pytest.mark.parametrize("rows", ["4", "100000"])
def test_process_rows_of_one_range_are_views_equal_to_the_mask(rows, monkeypatch):
    """The process's rows as one range (a host block first): views of the table's columns, equal to the
    masked rows; the signature made from them equals the whole sort's, the step ends included."""
    from pyinterpose.analysis import iterations as it

    monkeypatch.setenv("PYINTERPOSE_CHUNK_ROWS", rows)
    rng = np.random.default_rng(3)
    n = 90
    seq_a = np.arange(n) * 3
    freed = rng.random(n) < 0.8
    b = pd.DataFrame({"block_id": np.arange(n), "pid": 7, "seq_alloc": seq_a, "t_alloc": seq_a * 10,
                      "size": rng.choice([8, 16, 64], n), "freed": freed,
                      "seq_free": np.where(freed, seq_a + 1 + 3 * rng.integers(0, 4, n), -1),
                      "t_free": np.where(freed, seq_a * 10 + 7, -1),
                      "counts_device": np.arange(n) >= 2, "kind": "device", "api": "cudaMalloc"})
    _, first = np.unique(b["seq_free"].to_numpy(), return_index=True)
    b.loc[~np.isin(np.arange(n), first), "freed"] = False       # distinct free seqs
    tr = pyinterpose.Trace.from_tables(blocks=b)
    r = it._process_rows(tr, 7)
    assert r.span == (2, n)
    sub = b[b["counts_device"]]
    for c in ("seq_alloc", "t_alloc", "size", "seq_free", "freed"):
        col = r[c].to_numpy()
        np.testing.assert_array_equal(col, sub[c].to_numpy())
        assert np.shares_memory(col, tr.blocks[c].to_numpy())
    a, w = it._signature(r, (0, 0)), it._signature_whole(sub.reset_index(drop=True), (0, 0))
    for f in ("seq", "t", "size", "token"):
        np.testing.assert_array_equal(getattr(a, f), getattr(w, f))
    np.testing.assert_array_equal(a.step_end_at(np.arange(len(w.token))), w.step_end_seq)
    want_end = np.where(sub["freed"], sub["seq_free"] + 1, sub["seq_alloc"] + 1)
    np.testing.assert_array_equal(w.step_end_seq, want_end)


@pytest.mark.parametrize("piece", [1, 3, 1000])
def test_json_rows_written_in_pieces_is_print_json(piece, monkeypatch):
    from pyinterpose.report import json_rows
    from pyinterpose.report.text import print_json

    monkeypatch.setattr(json_rows, "_PIECE", piece)
    rows = [{"index": i, "start_seq": 10 * i, "exact": i % 3 == 0, "name": f"s\u00e9{i}\"", "x": None}
            for i in range(7)]
    for k in (0, 1, 7):
        head = {"source": "auto", "count": k, "note": "rows of iterations", "d": {"a": 1.5}}
        want, got = io.StringIO(), io.StringIO()
        print_json({**head, "iterations": rows[:k]}, stream=want)
        json_rows.print_json_rows(head, "iterations", k, lambda lo, hi: rows[lo:hi], stream=got)
        assert got.getvalue() == want.getvalue()
        assert json.loads(got.getvalue())["iterations"] == rows[:k]


def test_iterations_rows_are_to_dicts_list():
    from pyinterpose.analysis.iterations import Iterations

    b = np.array([5, 9, 20, 22, 40], np.int64)
    it = Iterations("auto", 1, 4, 4, 5, 0.5, b, b * 100 + np.array([0, 3, 1, 9, 2]),
                    np.array([True, False, True, True]), np.array([0, 2, 0, 1], np.int64))
    want = [{"index": i, "start_seq": int(b[i]), "end_seq": int(b[i + 1]),
             "start_t": int(it.boundaries_t[i]), "duration_ns": int(it.boundaries_t[i + 1] - it.boundaries_t[i]),
             "exact": bool(it.exact[i]), "extra_allocs": int(it.extras[i])} for i in range(4)]
    assert it.to_dict()["iterations"] == want
    assert it.rows(1, 3) == want[1:3] and it.rows(3, 10) == want[3:] and it.rows(4, 5) == []


@pytest.mark.parametrize("rows", ["4", "9", "100000"])
def test_frees_place_counted_in_pieces(rows, monkeypatch):
    """Per free time (sorted), the allocations at a strictly earlier time: np.searchsorted on the whole
    sorted times; None when the times do not ascend in block order."""
    from pyinterpose.report import memory_viz_stream as S

    monkeypatch.setenv("PYINTERPOSE_CHUNK_ROWS", rows)
    rng = np.random.default_rng(17)
    n = 80
    ta = np.sort(rng.integers(0, 200, n))
    b = pd.DataFrame({"t_alloc": ta})

    class SB:
        pos = np.arange(n, dtype=np.int32)
        gather = S.SnapshotBlocks.gather

        def col(self, name):
            return b[name].to_numpy()
    sb = SB()
    sb.n = n
    tf = np.sort(rng.integers(-5, 230, 50))
    for sel in (np.arange(n), np.sort(rng.choice(n, 33, replace=False))):
        got = S._before_ascending(sb, sel.astype(np.int32), tf, np.int32)
        np.testing.assert_array_equal(got, np.searchsorted(ta[sel], tf, side="left"))
    b["t_alloc"] = ta[::-1].copy()
    assert S._before_ascending(sb, np.arange(n, dtype=np.int32), tf, np.int32) is None
    keep = rng.random(n) < 0.4
    np.testing.assert_array_equal(S._positions(keep, np.int32), np.flatnonzero(keep))


def test_span_is_indexed_as_its_arange():
    from pyinterpose.report.memory_viz_stream import Span, _positions

    a = np.arange(5, 5 + 23, dtype=np.int32)
    s = Span(5, 23, np.int32)
    rng = np.random.default_rng(2)
    assert len(s) == len(a)
    for k in (slice(None), slice(3, 9), slice(0, 0), slice(20, 40), slice(-4, None), slice(2, 17, 3), slice(9, 3)):
        np.testing.assert_array_equal(s[k], a[k])
        assert s[k].dtype == a.dtype
    for k in (0, 22, -1, -23, np.int64(7)):
        assert s[k] == a[k]
    for k in (np.array([], np.int64), np.sort(rng.choice(23, 9, replace=False)), rng.integers(0, 23, 30)):
        np.testing.assert_array_equal(s[k], a[k])
    m = rng.random(23) < 0.5
    np.testing.assert_array_equal(s[m], a[m])
    for bad in (23, -24, np.array([23]), np.array([-1])):
        with pytest.raises(IndexError):
            s[bad]
    keep = np.zeros(40, bool)
    keep[6:30] = True
    p = _positions(keep, np.int32)
    assert isinstance(p, Span)
    np.testing.assert_array_equal(p[:], np.flatnonzero(keep))
    keep[10] = False
    p = _positions(keep, np.int32)
    assert isinstance(p, np.ndarray)
    np.testing.assert_array_equal(p, np.flatnonzero(keep))


def test_sort_by_time_is_the_stable_argsort():
    from pyinterpose.report.memory_viz_stream import _sort_by_time

    rng = np.random.default_rng(8)
    for t0, span, n in ((0, 5, 60), (-10**12, 10**9, 300), (7, 0, 10), (0, 2**61, 40), (3, 9, 1), (0, 9, 0)):
        rows = np.sort(rng.choice(10 * n + 1, n, replace=False)).astype(np.int32)
        t = rng.integers(t0, t0 + span + 1, n).astype(np.int64)
        want_rows = rows[np.argsort(t, kind="stable")]
        want_t = np.sort(t, kind="stable")
        got = _sort_by_time(t, rows)
        np.testing.assert_array_equal(got, want_rows)
        np.testing.assert_array_equal(t, want_t)
        assert got.dtype == rows.dtype
