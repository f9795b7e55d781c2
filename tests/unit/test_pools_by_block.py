"""The request stream by block (``pools.by_block``, issue 30) against independent definitions: the
requests in order written as one plain Python sort of (seq, free before alloc, table order), their
running peak as a Python sum, and the replays of the Python reference simulators
(``allocators_reference.py``) on the per-request stream with the blocks' own ids — in pieces of 1, 3 and
64 rows and in one piece, with ascending and shuffled seqs, and seqs too large to pack."""
import importlib
import random
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

from conftest import gpu_trace
from pyinterpose.analysis.pools import evaluate
from pyinterpose.analysis.pools.allocators import RequestArrays, _lib, simulate

from allocators_reference import simulate_reference  # noqa: E402  (beside this file, on sys.path)
from test_pools_allocsim import CASES, _size  # noqa: E402

bb = importlib.import_module("pyinterpose.analysis.pools.by_block")

MiB = 1 << 20


def random_blocks(seed: int, n: int = 300, seq_base: int = 0, shuffled: bool = False) -> pd.DataFrame:
    """Blocks with seqs that share values (an alloc and a free at one seq, two frees at one seq), some
    never freed, some freed at their own seq; rows in alloc order, or shuffled."""
    rng = random.Random(seed)
    streams = rng.choice([[0], [7], [0, 7], [0, 7, 13], [1 << 63 | 5, 3]])
    rows = []
    for k in range(n):
        sa = seq_base + rng.randint(0, 3 * n)
        freed = rng.random() < 0.8
        sf = sa + rng.choice([0, 1, 2, rng.randint(0, n)]) if freed else -1
        rows.append((1000 + 3 * k + rng.randint(0, 2), sa, sf, freed, _size(rng), rng.choice(streams)))
    df = pd.DataFrame(rows, columns=["block_id", "seq_alloc", "seq_free", "freed", "size", "stream"])
    df["stream"] = df["stream"].astype(np.uint64)
    if not shuffled:
        df = df.sort_values("seq_alloc", kind="stable")
    df = df.reset_index(drop=True)
    df["block_id"] = np.arange(len(df)) * 3 + 1000 + np.array([rng.randint(0, 2) for _ in range(len(df))])
    if shuffled:
        df["block_id"] = df["block_id"].to_numpy()[rng.sample(range(len(df)), len(df))]
    return df


def reference_requests(blocks: pd.DataFrame, mask: np.ndarray) -> list[tuple]:
    """(slot, is_alloc, block_id, size, stream) per request: every selected block's alloc and its free if
    freed, sorted by seq, a free before an alloc at one seq, then table order."""
    reqs = []
    rows = np.flatnonzero(mask)
    for slot, r in enumerate(rows):
        b = blocks.iloc[r]
        reqs.append(((int(b.seq_alloc), 1, slot), (slot, True, int(b.block_id), int(b["size"]), int(b.stream))))
        if b.freed:
            reqs.append(((int(b.seq_free), 0, slot), (slot, False, int(b.block_id), int(b["size"]), int(b.stream))))
    return [v for _, v in sorted(reqs)]


def reference_seqs(blocks: pd.DataFrame, mask: np.ndarray) -> list[int]:
    """Each request's seq, in :func:`reference_requests`'s order."""
    keys = []
    for slot, r in enumerate(np.flatnonzero(mask)):
        b = blocks.iloc[r]
        keys.append((int(b.seq_alloc), 1, slot))
        if b.freed:
            keys.append((int(b.seq_free), 0, slot))
    return [k[0] for k in sorted(keys)]


def _trace(blocks):
    return SimpleNamespace(blocks=blocks)


@pytest.mark.parametrize("chunk", [1, 3, 64, None])
@pytest.mark.parametrize("shuffled", [False, True])
def test_by_block_is_the_sorted_request_stream(chunk, shuffled, monkeypatch):
    if chunk is None:
        monkeypatch.delenv("PYINTERPOSE_CHUNK_ROWS", raising=False)
    else:
        monkeypatch.setenv("PYINTERPOSE_CHUNK_ROWS", str(chunk))
    for seed in range(6):
        blocks = random_blocks(seed, shuffled=shuffled)
        rng = np.random.default_rng(seed)
        for mask in (np.ones(len(blocks), bool), rng.random(len(blocks)) < 0.6, np.zeros(len(blocks), bool)):
            ref = reference_requests(blocks, mask)
            r = bb.by_block(_trace(blocks), mask)
            a = r["arrays"]
            assert r["n"] == len(ref) == a.n
            assert r["allocs"] == int(mask.sum())
            assert a.req.dtype == np.int32
            assert a.req.tolist() == [s if al else ~s for s, al, *_ in ref]
            assert a.bsize.tolist() == blocks["size"].to_numpy()[mask].tolist()
            # the streams: first seen over the requests, each slot its block's stream
            seen = list(dict.fromkeys(st for *_, st in ref))
            assert a.nstreams == len(seen)
            assert [int(a.svals[a.bsidx[s]]) for s, *_ in ref] == [st for *_, st in ref]
            assert [int(v) for v in a.svals] == seen
            peak, live = 0, 0
            for _, al, _, size, _ in ref:
                live += size if al else -size
                peak = max(peak, live)
            assert r["peak"] == peak
            assert "seq" not in r
            rs = bb.by_block(_trace(blocks), mask, seq=True)
            assert rs["seq"].dtype == np.int64 and rs["seq"].tolist() == reference_seqs(blocks, mask)
            assert rs["arrays"].req.tolist() == a.req.tolist()


def test_frees_sorted_by_packed_keys_or_argsort():
    """Both routes of _sort_frees give the stable sort of the seqs with their slots alongside."""
    rng = np.random.default_rng(1)
    for sf in (rng.integers(0, 50, 1000), rng.integers(0, 1 << 40, 1000),
               np.array([(1 << 61) + 5, 3, (1 << 61) + 5, 3]), np.array([-4, 7, -4, 0]), np.array([5])):
        sf = sf.astype(np.int64)
        slots = np.arange(len(sf), dtype=np.int32)[::-1].copy()
        order = sorted(range(len(sf)), key=lambda i: (int(sf[i]), i))
        s2, f2 = bb._sort_frees(sf.copy(), slots.copy())
        assert s2.tolist() == [int(sf[i]) for i in order]
        assert f2.tolist() == [int(slots[i]) for i in order]
        assert f2.dtype == np.int32


@pytest.mark.parametrize("chunk", [4, 12, None])
@pytest.mark.parametrize("other", [8, 30])
def test_shared_block_ids_are_refused(chunk, other, monkeypatch):
    """Two selected blocks with one id (next to each other, across pieces of one row, or apart): no
    stream by block; the ids distinct again once one is not selected."""
    if chunk is None:
        monkeypatch.delenv("PYINTERPOSE_CHUNK_ROWS", raising=False)
    else:
        monkeypatch.setenv("PYINTERPOSE_CHUNK_ROWS", str(chunk))
    blocks = random_blocks(3, n=40)
    blocks.loc[other, "block_id"] = blocks.loc[7, "block_id"]
    mask = np.ones(len(blocks), bool)
    assert bb.by_block(_trace(blocks), mask) is None
    mask[other] = False                      # the two rows no longer both selected
    assert bb.by_block(_trace(blocks), mask) is not None


@pytest.mark.parametrize("chunk", [4, 8, 12, None])
def test_ascending_across_pieces(chunk, monkeypatch):
    """ascending sees every neighbouring pair, those across a piece's edge too."""
    if chunk is None:
        monkeypatch.delenv("PYINTERPOSE_CHUNK_ROWS", raising=False)
    else:
        monkeypatch.setenv("PYINTERPOSE_CHUNK_ROWS", str(chunk))
    from pyinterpose.trace.piecewise import ascending
    for n in (0, 1, 2, 5, 9):
        assert ascending(np.arange(n))
    for k in range(1, 9):
        a = np.arange(9)
        a[k] = a[k - 1] - 1                  # one pair descending, at each place in turn
        assert not ascending(a), (k, chunk)
    assert ascending(np.array([1, 1, 1, 2, 2, 3, 3, 3, 3]))


@pytest.mark.skipif(_lib()[1] is None, reason="pyinterpose._core is not built with native/allocsim")
@pytest.mark.parametrize("allocator,opts", CASES, ids=[f"{a}-{i}" for i, (a, _) in enumerate(CASES)])
def test_replay_by_block_equals_the_reference(allocator, opts):
    """The native replays of the by-block stream equal the Python reference simulators on the per-request
    stream with the blocks' own ids and streams (with a capacity: out-of-memory stops too)."""
    ooms = 0
    for seed in range(5):
        blocks = random_blocks(seed * 7 + len(allocator), n=250, shuffled=seed % 2 == 1)
        mask = np.random.default_rng(seed).random(len(blocks)) < 0.9
        ref = reference_requests(blocks, mask)
        df = pd.DataFrame([("alloc" if al else "free", bid, size, st) for _, al, bid, size, st in ref],
                          columns=["op", "block_id", "size", "stream"])
        df["stream"] = df["stream"].astype(np.uint64)
        arrs = bb.by_block(_trace(blocks), mask)["arrays"]
        peak = int(np.cumsum(np.where(df["op"] == "alloc", 1, -1) * df["size"].to_numpy(np.int64)).max())
        for capacity in (None, int(peak * 0.9), int(peak * 1.7)):
            c = simulate(arrs, allocator, capacity, series=True, **opts)
            p = simulate_reference(df, allocator, capacity, series=True, **opts)
            c.pop("seconds")
            assert np.array_equal(c.pop("reserved_after"), p.pop("reserved_after")), (allocator, opts, capacity)
            assert c == p, (allocator, opts, capacity)
            ooms += c["oom_at"] is not None
    assert ooms > 0


def test_by_block_arrays_refuse_a_slot_out_of_range():
    if _lib()[1] is None:
        pytest.skip("pyinterpose._core is not built with native/allocsim")
    from pyinterpose.errors import PyinterposeError
    arrs = RequestArrays.by_block(np.array([0, 1, ~0, 5], np.int32), np.array([10, 20], np.int64),
                                  np.zeros(2, np.uint64))
    assert arrs.nstreams < 0                 # the numbering of the streams refused it
    for allocator in ("cudamalloc", "pytorch", "bfc", "cnmem"):
        with pytest.raises(PyinterposeError, match="outside what the simulators model"):
            simulate(arrs, allocator)
    arrs.nstreams, arrs.svals = 1, np.zeros(1, np.uint64)     # and each replay refuses it on its own
    for allocator in ("cudamalloc", "pytorch", "bfc", "cnmem"):
        with pytest.raises(PyinterposeError, match="outside what the simulators model"):
            simulate(arrs, allocator)


@pytest.mark.parametrize("name", ["torch-cnn-blocks.pit", "jax-attn-reserved.pit"])
def test_evaluate_falls_back_to_the_per_request_stream(name, monkeypatch):
    """Shared block ids (no by-block stream): evaluate replays the per-request columns, with the same
    answer as by block on a trace where both exist."""
    from pyinterpose.trace.reader import load
    trace = load(gpu_trace(name))
    a = evaluate(trace, time_limit=1.0)
    monkeypatch.setattr(importlib.import_module("pyinterpose.analysis.pools"), "by_block", lambda t, m: None)
    b = evaluate(load(gpu_trace(name)), time_limit=1.0)

    def strip(r):
        return {**r, "strategies": [{k: v for k, v in s.items() if k not in ("seconds", "details")}
                                    for s in r["strategies"]]}
    assert strip(a) == strip(b)


@pytest.mark.skipif(_lib()[1] is None, reason="pyinterpose._core is not built with native/allocsim")
@pytest.mark.parametrize("name", ["torch-cnn-blocks.pit", "jax-attn-blocks.pit", "loader-blocks.pit"])
def test_replay_stream_replays_as_the_request_stream(name):
    """fit's stream (pools.replay_stream, by block) against pools.request_stream (per request) on the GPU
    samples: the same seqs, and each allocator's reserved curve the same, request for request."""
    from pyinterpose.analysis.owners import allocator_mask
    from pyinterpose.analysis.pools import replay_stream, request_stream
    from pyinterpose.trace.reader import load
    trace = load(gpu_trace(name))
    a = request_stream(trace)
    b = replay_stream(trace, None, allocator_mask(trace))
    assert b["arrays"].req is not None
    assert np.array_equal(a["seq"], b["seq"])
    for allocator, opts in (("cudamalloc", {}), ("pytorch", {}), ("pytorch", {"expandable_segments": True}),
                            ("bfc", {}), ("cnmem", {"streams": True})):
        x = simulate(a["arrays"], allocator, series=True, **opts)
        y = simulate(b["arrays"], allocator, series=True, **opts)
        assert np.array_equal(x.pop("reserved_after"), y.pop("reserved_after")), (name, allocator)
        x.pop("seconds"), y.pop("seconds")
        assert x == y


@pytest.mark.skipif(_lib()[1] is None, reason="pyinterpose._core is not built with native/allocsim")
@pytest.mark.parametrize("name", ["torch-cnn-blocks.pit", "jax-attn-blocks.pit"])
def test_reserved_curve_by_block_is_the_per_request_curve(name, monkeypatch):
    """reserved_curve replayed by block (block_id and is_alloc made on first read) against the same curve
    from the per-request stream: every column equal, request for request."""
    from pyinterpose.analysis.pools import _reserved_curve
    from pyinterpose.trace.reader import load
    trace = load(gpu_trace(name))
    a = _reserved_curve(trace, "pytorch", None)
    assert set(a) == {"seq", "bytes"}                 # nothing made until read
    monkeypatch.setattr(importlib.import_module("pyinterpose.analysis.pools"), "by_block", lambda *a, **k: None)
    b = _reserved_curve(trace, "pytorch", None)
    for k in ("block_id", "is_alloc", "seq", "bytes"):
        assert a[k].dtype == b[k].dtype and np.array_equal(a[k], b[k]), (name, k)
    assert set(a) == set(b)
    with pytest.raises(KeyError):
        a["size"]
