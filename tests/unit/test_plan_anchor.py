"""The plan's anchor and servable requests (issue 30: computed by codes, no string or groupby per row)
against a reference written here with pandas' groupby, on tables built to hold each case."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from pyinterpose.analysis.pools import plan_file as P
from pyinterpose.trace.plan_format import owner_hash


def _reference_anchor(req: pd.DataFrame, bounds: np.ndarray):
    sa = req["seq_alloc"].to_numpy(np.int64)
    it = np.searchsorted(bounds, sa, side="right") - 1
    inside = (it >= 0) & (it < len(bounds) - 1)
    if not inside.any():
        return None
    df = pd.DataFrame({"size": req["size"].to_numpy()[inside], "site": req["site"].to_numpy()[inside],
                       "it": it[inside]})
    per = df.groupby(["size", "site", "it"]).size().unstack(fill_value=0)
    once = per[(per == 1).all(axis=1) & (per.shape[1] == len(bounds) - 1)]
    if once.empty:
        return None
    live, best, best_live = 0, None, None
    ev = sorted([(int(a), int(s)) for a, s in zip(sa, req["size"])] +
                [(int(f), -int(s)) for f, s, fr in zip(req["seq_free"], req["size"], req["freed"]) if fr])
    before = {}
    for t, d in ev:                       # (time, delta) order: frees first at a tie
        if d > 0:
            before.setdefault(t, live)
        live += d
    cand = {(int(a), int(b)) for a, b in once.index}
    for i in np.flatnonzero(it == 0):
        key = (int(req["size"].iat[i]), int(req["site"].iat[i]))
        if key in cand and (best_live is None or before[int(sa[i])] < best_live):
            best, best_live = key, before[int(sa[i])]
    return best


def _requests(rows: list[tuple[int, int, int]], frees: dict[int, int]) -> pd.DataFrame:
    """rows: (seq_alloc, size, site) in seq order; frees: seq_alloc -> seq_free."""
    sa = np.array([r[0] for r in rows], np.int64)
    return pd.DataFrame({"block_id": np.arange(len(rows)), "size": np.array([r[1] for r in rows], np.int64),
                         "seq_alloc": sa, "seq_free": np.array([frees.get(int(a), -1) for a in sa], np.int64),
                         "freed": np.array([int(a) in frees for a in sa], bool), "owner": "",
                         "site": np.array([r[2] for r in rows], np.uint64)})


def _random_case(rng, periods: int):
    """(rows (seq, size, site), frees {seq: seq_free}, last seq) of ``periods`` iterations of requests."""
    rows, frees, seq = [], {}, 0
    for k in range(periods):
        keys = [(4096, 7), (8192, 7), (4096, 9)]            # once per iteration (candidates)
        if k != 3:
            keys.append((512, 7))                           # missing from one iteration
        keys += [(1024, 9)] * (2 if k == 2 else 1) if k != 4 else []   # n_it times in all, twice in one
        keys += [(int(rng.integers(1, 50)) * 256, int(rng.integers(1, 4)))] * int(rng.integers(0, 3))
        rng.shuffle(keys)
        for size, site in keys:
            seq += 1
            rows.append((seq, size, site))
            if rng.random() < 0.8:
                frees[seq] = seq + int(rng.integers(1, 12))
    return rows, frees, seq


@pytest.mark.parametrize("seed", range(12))
def test_anchor_matches_the_groupby_reference(seed):
    n_it = 6
    rows, frees, seq = _random_case(np.random.default_rng(seed), n_it)
    per = len(rows) // n_it            # iterations cut at equal counts: some keys straddle a cut
    starts = np.array([rows[i * per][0] for i in range(n_it)] + [seq + 1], np.int64)
    req = _requests(rows, frees)
    got = P._anchor(req, starts)
    assert got == _reference_anchor(req, starts)
    ANCHORS.append(got)


ANCHORS: list = []


def _blocks_of(req: pd.DataFrame) -> pd.DataFrame:
    """A blocks table holding ``req``'s requests (one process, served kind and API), each site an owner text
    whose hash is the site written in the case (sites ``s`` -> owner ``lib{s}.so``)."""
    cat = pd.Categorical
    n = len(req)
    return pd.DataFrame({
        "block_id": req["block_id"].to_numpy(), "pid": np.ones(n, np.int32), "kind": cat(["device"] * n),
        "api": cat(["cudaMalloc"] * n), "size": req["size"].to_numpy(), "seq_alloc": req["seq_alloc"].to_numpy(),
        "seq_free": req["seq_free"].to_numpy(), "freed": req["freed"].to_numpy(), "counts_device": np.ones(n, bool),
        "owner": cat([f"lib{int(s)}.so" for s in req["site"]])})


@pytest.mark.parametrize("piece", [1, 2, 3, 5, 1000])
def test_anchor_in_pieces_matches_the_groupby_reference(piece, monkeypatch):
    """The long-trace path's anchor (issue 30: its counts made a piece of requests at a time, a key's two
    requests in one iteration seen across a piece's end) on the random cases above, against the reference."""
    monkeypatch.setenv("PYINTERPOSE_CHUNK_ROWS", str(4 * piece))          # pieces of ``piece`` rows
    held = 0
    for seed in range(40):
        n_it = 6
        # the last period: requests after the last iteration (teardown)
        rows, frees, _ = _random_case(np.random.default_rng(seed), n_it + 1)
        per = len(rows) // (n_it + 1)
        starts = np.array([rows[i * per][0] for i in range(n_it + 1)], np.int64)
        req = _requests(rows, frees)
        c = P._Columns.of(_blocks_of(req))
        want = _reference_anchor(req.assign(site=[owner_hash(f"lib{int(s)}.so") for s in req["site"]]), starts)
        counts = P._AnchorCounts(starts, len(c.sites))
        for lo in range(0, len(req), piece):
            r = np.arange(lo, min(lo + piece, len(req)))
            counts.add(req["seq_alloc"].to_numpy()[r], req["size"].to_numpy()[r],
                       c.site_idx_of_cat[c.cat(0, len(req), r)])
        assert counts.anchor(c, np.ones(len(req), bool)) == want, seed
        held += want is not None
    assert 0 < held < 40


def test_the_random_cases_held_anchors_and_none():
    assert any(a is not None for a in ANCHORS) and any(a is None for a in ANCHORS), ANCHORS


def test_anchor_twice_in_one_iteration_is_no_anchor():
    # (1024, 9): six requests over six iterations, but two in the third and none in the fifth
    rows, seq = [], 0
    for k in range(6):
        for key in [(1024, 9)] * (2 if k == 2 else 0 if k == 4 else 1) + [(64, 1)] * 2:
            seq += 1
            rows.append((seq, *key))
    req = _requests(rows, {})
    starts = np.array([r[0] for r in rows if r[2] == 1][::2] + [seq + 1], np.int64)
    assert _reference_anchor(req, starts) is None
    assert P._anchor(req, starts) is None
    # made once per iteration, it is the anchor
    rows = [(i + 1, 1024, 9) if i % 3 == 0 else (i + 1, 64, 1) for i in range(18)]
    req = _requests(rows, {})
    starts = np.array([1, 4, 7, 10, 13, 16, 19], np.int64)
    assert P._anchor(req, starts) == _reference_anchor(req, starts) == (1024, 9)


def test_servable_reads_texts_per_category():
    from types import SimpleNamespace
    cat = pd.Categorical
    b = pd.DataFrame({
        "block_id": np.arange(7), "pid": np.array([1, 1, 1, 2, 1, 1, 1], np.int32),
        "kind": cat(["device", "managed", "async", "device", "pool", "device", None]),
        "api": cat(["cudaMalloc", "cudaMallocManaged", "cudaMallocAsync", "cudaMalloc", "cuMemAllocFromPoolAsync",
                    "cudaMalloc", "cudaMalloc"]),
        "size": np.array([10, 20, 30, 40, 50, 0, 70], np.int64),
        "seq_alloc": np.array([5, 1, 3, 2, 4, 6, 7], np.int64), "seq_free": np.full(7, -1, np.int64),
        "freed": np.zeros(7, bool), "owner": cat(["libx.so", "", None, "liby.so", "", "libx.so", "libx.so"])})
    r = P.servable(SimpleNamespace(blocks=b), 1)
    # pid 1, a served kind and API, a positive size; in seq order
    assert r["block_id"].tolist() == [2, 4, 0]
    assert [str(o) for o in r["owner"]] == ["nan", "", "libx.so"]       # as astype(str) reads them
    assert r["site"].tolist() == [owner_hash("nan"), owner_hash(""), owner_hash("libx.so")]
