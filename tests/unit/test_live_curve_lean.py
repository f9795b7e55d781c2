"""Issue 30 (perf30): the live curve's lean parts against definitions written here.

* ``live_curve._Kind`` (one int64 key of time, flag and block, sorted in place; apart past 63 bits)
  is the stable sort of its events by time: the order of (time, position) pairs;
* ``analysis.clock.frontier_at`` (pieces of a quarter, only the queries inside a piece searched) is
  the latest device end among the ops with a smaller seq, queries on and between the seqs;
* ``report.owner_codes.owner_codes`` names each device block by the owner rule (its recorded owner
  when the trace records any and this one is not empty, else its API);
* ``report.block_codes.series_codes`` is each block's class, looked up by its id;
* the curve split by codes equals the reference curve of ``test_live_curve`` split by the Series,
  also with a block of more than 2 GiB (the counted bytes leave 32 bits)."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from pyinterpose.analysis import guarded
from pyinterpose.analysis.clock import frontier_at
from pyinterpose.report.block_codes import BlockCodes, series_codes
from pyinterpose.report.data import memory_timeline
from pyinterpose.report import live_curve
from pyinterpose.report.owner_codes import owner_codes
from pyinterpose.report.synthetic import training_trace
from pyinterpose.trace.model import Trace
from test_live_curve import _same, _twisted


def _pieces(monkeypatch, rows):
    if rows is None:
        monkeypatch.delenv("PYINTERPOSE_CHUNK_ROWS", raising=False)
    else:
        monkeypatch.setenv("PYINTERPOSE_CHUNK_ROWS", str(rows))


@pytest.mark.parametrize("rows", [None, 1, 3, 7])
@pytest.mark.parametrize("span", [5, 1 << 40, 1 << 62])
@pytest.mark.parametrize("n_blocks", [1, 300, 1 << 20])
def test_kind_is_the_order_of_time_then_position(rows, span, n_blocks, monkeypatch):
    _pieces(monkeypatch, rows)
    rng = np.random.default_rng(span % 97 + n_blocks)
    for n in (0, 1, 2, 17, 300):
        t = rng.integers(-(span // 2), span // 2, n, dtype=np.int64)
        t[rng.random(n) < 0.3] = t[0] if n else 0             # ties
        n_first = n // 3
        # block indices ascending within each part (the frees, then the allocations of 0 bytes), as given
        j = np.concatenate([np.sort(rng.choice(n_blocks, n_first, replace=n_blocks < n_first)),
                            np.sort(rng.choice(n_blocks, n - n_first, replace=n_blocks < n - n_first))])
        want = sorted(range(n), key=lambda i: (int(t[i]), i))
        k = live_curve._Kind(t.copy(), np.array_split(j, 3), n_first, n_blocks)   # the blocks in pieces
        packed = k.key is not None
        if span == 5:
            assert packed                  # one key per event
        elif span == 1 << 62 and n >= 17:
            assert not packed              # times too far apart for one key: sorted apart
        assert len(k) == n
        assert k.t(0, n).tolist() == [int(t[i]) for i in want]
        assert k.j(0, n).tolist() == [int(j[i]) for i in want]
        assert k.later(0, n).tolist() == [i >= n_first for i in want]
        if n:
            assert k.t(n - 1, n).tolist() == [int(t[want[-1]])]
        q = np.sort(np.concatenate([t, t + 1, t - 1, [-(1 << 62), (1 << 62) - 1]]))
        assert k.first_at_or_after(q).tolist() == [int((t < x).sum()) for x in q]


@pytest.mark.parametrize("rows", ["1", "2", "3", "5", "100000"])
def test_frontier_at_on_and_between_the_seqs(rows, monkeypatch):
    import pyinterpose

    monkeypatch.setenv("PYINTERPOSE_CHUNK_ROWS", rows)
    rng = np.random.default_rng(11)
    n = 60
    seq = rng.permutation(n) * 3
    launches = pd.DataFrame({"pid": rng.choice([1, 2], n), "seq": seq, "dev_start": seq * 10 - rng.integers(0, 5, n),
                             "dev_end": seq * 10 + rng.integers(-3, 40, n), "t": np.arange(n)})
    launches.loc[::7, "dev_start"] = -1                      # no device time
    copies = pd.DataFrame({"pid": [1, 2, 1], "seq": [4, 31, 100], "dev_start": [0, 5, 1000],
                           "dev_end": [2000, 6, 1001], "t": [0, 1, 2]})
    tr = pyinterpose.Trace.from_tables(launches=launches, copies=copies)
    q = np.concatenate([np.arange(-2, 3 * n + 3), seq[:10]])
    ops = pd.concat([launches, copies])
    for pid in (1, 2, None):
        o = ops if pid is None else ops[ops["pid"] == pid]
        rows_ = list(zip(o["seq"].tolist(), o["dev_start"].tolist(), o["dev_end"].tolist()))
        want = [max([-1] + [e if (s >= 0 and e >= s) else -1 for sq, s, e in rows_ if sq < x]) for x in q.tolist()]
        assert frontier_at(tr, pid, q).tolist() == want


def _owner_trace(owners, on_device):
    tr = training_trace(iterations=2)
    b = tr.blocks.copy()
    n = len(b)
    b = b.iloc[np.arange(len(owners)) % n].reset_index(drop=True)
    b["block_id"] = np.arange(len(owners)) + 5
    b["owner"] = pd.Categorical(owners)
    b["api"] = pd.Categorical(["cudaMalloc" if i % 3 else "cudaMallocAsync" for i in range(len(owners))])
    b["counts_device"] = np.asarray(on_device, bool)
    return Trace.from_tables(blocks=b, meta=dict(tr.meta))


def _owner_rule(owners, apis, on_device):
    """The recorded owner where there is one (not missing, not empty), else the API."""
    return {i: (owners[i] if owners[i] else apis[i]) for i in range(len(owners)) if on_device[i]}


@pytest.mark.parametrize("rows", [None, 1, 4])
@pytest.mark.parametrize("case", ["recorded", "only off the device", "none"])
def test_owner_codes_follow_the_owner_rule(case, rows, monkeypatch):
    _pieces(monkeypatch, rows)
    k = 23
    on = [i % 4 != 1 for i in range(k)]
    if case == "recorded":
        owners = [["torch.nn.Linear", "", None, "model.encoder", "torch.nn.Linear"][i % 5] for i in range(k)]
    elif case == "only off the device":
        owners = ["" if on[i] else "loader" for i in range(k)]
    else:
        owners = [""] * k
    tr = _owner_trace(owners, on)
    apis = tr.blocks["api"].astype(str).tolist()
    want = _owner_rule(owners, apis, on)
    got = owner_codes(tr)
    assert isinstance(got, BlockCodes)
    assert list(got.names) == sorted(set(want.values()))
    names = [str(x) for x in got.names]
    assert {i: names[c] for i, c in enumerate(got.code.tolist()) if on[i]} == want
    assert all(c == -1 for i, c in enumerate(got.code.tolist()) if not on[i])


def test_owner_codes_none_without_device_blocks():
    assert owner_codes(_owner_trace(["a", ""], [False, False])) is None


@pytest.mark.parametrize("rows", [None, 1, 3])
def test_series_codes_are_the_classes_by_block_id(rows, monkeypatch):
    _pieces(monkeypatch, rows)
    tr = _owner_trace(["x"] * 11, [True] * 11)
    ids = tr.blocks["block_id"].tolist()
    classes = pd.Series(["steady", "persistent", None, "steady", "leak", "steady"],
                        index=pd.Index([ids[3], ids[0], ids[5], ids[9], ids[10], 999], name="block_id"), dtype="str")
    want = {b: (None if b not in classes.index or pd.isna(classes[b]) else str(classes[b])) for b in ids}
    got = series_codes(tr, classes)
    names = [str(x) for x in got.names]
    assert {b: (None if c < 0 else names[c]) for b, c in zip(ids, got.code.tolist())} == want


@pytest.mark.parametrize("rows", [None, 1, 5, 64])
@pytest.mark.parametrize("huge", [False, True])
def test_curve_split_by_codes_is_the_reference(rows, huge, monkeypatch):
    _pieces(monkeypatch, rows)
    tr = _twisted()
    if huge:                                   # blocks of 3 GiB: the counted bytes leave 32 bits
        b = tr.blocks.copy()
        b.loc[b.index[len(b) // 2::9], "size"] = 3 << 30
        tr = Trace.from_tables(blocks=b, accesses=tr.accesses, launches=tr.launches, meta=dict(tr.meta))
    cl = guarded.block_classes(tr, iters=guarded.iterations(tr).value).value
    cl = cl.drop(cl.index[::5])                # some blocks without a class: "other"
    for mp in (6, 40, 4000):
        _same(tr, cl, mp, given=series_codes(tr, cl))
