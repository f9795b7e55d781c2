"""Reductions read a piece at a time (pyinterpose.trace.piecewise) and the summary's per-block figures
made from them, against references computed in the test from the whole arrays (numpy's own sum, max,
sort and quantile; pandas groupby; the live curve from its definition)."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

import pyinterpose
from pyinterpose.trace import piecewise


def _pieces(v, k):
    return lambda: (v[i:i + k] for i in range(0, len(v), k))


@pytest.mark.parametrize("rows", ["1", "3", "7", "4096"])
def test_total_and_maximum_in_pieces(rows, monkeypatch):
    monkeypatch.setenv("PYINTERPOSE_CHUNK_ROWS", rows)
    rng = np.random.default_rng(3)
    for n in (1, 2, 5, 29, 300):
        v = rng.integers(-10**6, 10**6, n)
        m = rng.random(n) < 0.4
        assert piecewise.total(v) == int(v.sum())
        assert piecewise.total(v, m) == int(v[m].sum())
        assert piecewise.maximum(v) == int(v.max())
    big = np.array([2**62, 2**62, 2**62, -5], np.int64)       # int64 wrap-around, as numpy's sum
    with np.errstate(over="ignore"):
        assert piecewise.total(big) == int(big.sum())
    assert piecewise.maximum(np.zeros(0, np.int64)) is None


@pytest.mark.parametrize("k", [1, 2, 3, 7, 1000])
def test_running_peak_is_the_max_of_the_whole_cumsum(k):
    rng = np.random.default_rng(k)
    for n in (1, 2, 5, 29, 300):
        d = rng.integers(-1000, 1000, n)
        assert piecewise.running_peak(_pieces(d, k)()) == int(np.cumsum(d).max())
    falling = -np.arange(1, 10)                        # the first value is the peak: no carry lost
    assert piecewise.running_peak(_pieces(falling, k)()) == -1
    assert piecewise.running_peak(iter(())) == 0


@pytest.mark.parametrize("rows", ["1", "4", "7", "1000000"])   # 1-4: a cap of one value, every rank narrowed
def test_order_stats_and_quantiles_are_numpys(rows, monkeypatch):
    monkeypatch.setenv("PYINTERPOSE_CHUNK_ROWS", rows)
    rng = np.random.default_rng(int(rows))
    qs = [0.5, 0.9, 0.99, 0.0, 1.0, 0.25, 1 / 3, 0.999]
    for trial in range(60):
        n = int(rng.integers(1, 90))
        scale = [1, 7, 1000, 10**12, 2**60][trial % 5]
        v = rng.integers(-4, 5, n) * scale + rng.integers(0, 3, n)
        if trial % 6 == 0:
            v[0], v[-1] = np.iinfo(np.int64).max, np.iinfo(np.int64).min
        if trial % 9 == 0:
            v[:] = 42                                     # every value equal
        p = _pieces(v, int(rng.integers(1, 8)))
        srt = np.sort(v)
        n_, got = piecewise.order_stats(p, list(range(-1, n + 1)))
        assert n_ == n
        assert got == [None] + srt.tolist() + [None]
        n_, q = piecewise.quantiles(p, qs)
        ref = np.quantile(v.astype(np.float64), qs)
        assert n_ == n and q.tobytes() == ref.tobytes(), (v, q, ref)
    assert piecewise.quantiles(_pieces(np.zeros(0, np.int64), 3), qs) == (0, None)
    # a median halfway between two values whose two interpolations round differently (numpy takes b - d/2)
    v = np.array([1263248596961149231, -2123342786782762096], np.int64)
    q = piecewise.quantiles(_pieces(v, 1), [0.5])[1]
    assert q.tobytes() == np.quantile(v.astype(np.float64), [0.5]).tobytes()


def test_launch_lag_in_pieces_is_the_whole_arrays(monkeypatch):
    """The launch lag's count, quantiles and maximum of a long table (pieces of one launch) equal
    np.quantile over the process's launches with a device start."""
    from pyinterpose.analysis import clock

    rng = np.random.default_rng(5)
    n = 500
    t = np.cumsum(rng.integers(1, 50, n))
    start = np.where(rng.random(n) < 0.8, t + rng.choice([3, 3, 3, 40, 900, 10**7], n), -1)
    start[::37] = 0                                     # a device start at 0: a launch with a device time
    pid = np.where(rng.random(n) < 0.85, 7, 8)
    la = pd.DataFrame({"pid": pid, "seq": np.arange(n) * 2, "t": t, "dev_start": start,
                       "dev_end": np.where(start >= 0, start + 5, -1), "stream": np.uint64(1),
                       "graph": np.uint64(0)})
    blocks = pd.DataFrame({"pid": [7, 8], "size": [1, 1], "t_alloc": [0, 0], "t_free": [1, 1],
                           "freed": [True, True], "counts_device": [True, True], "seq_alloc": [0, 1],
                           "seq_free": [2, 3], "kind": "device", "api": "cudaMalloc"})
    for rows in ("1", "3", "7"):
        monkeypatch.setenv("PYINTERPOSE_CHUNK_ROWS", rows)
        tr = pyinterpose.Trace.from_tables(blocks=blocks, launches=la)
        for p in (7, 8):
            got = clock._launch_lag_pieces(tr.launches, p)
            m = (start >= 0) & (pid == p)
            lag = (start[m] - t[m]).astype(np.float64)
            q = np.quantile(lag, [0.5, 0.9, 0.99])
            assert got == {"launches": int(m.sum()), "median_ns": float(q[0]), "p90_ns": float(q[1]),
                           "p99_ns": float(q[2]), "max_ns": float(lag.max())}
        assert clock._launch_lag_pieces(tr.launches, 9) is None


@pytest.mark.parametrize("rows", ["1", "5", "100000"])
def test_live_at_peak_by_group(rows, monkeypatch):
    """Bytes live at the first peak, summed per group, from the curve's events sorted in the test."""
    from pyinterpose.trace import live

    monkeypatch.setenv("PYINTERPOSE_CHUNK_ROWS", rows)
    rng = np.random.default_rng(17)
    n = 300
    t_alloc = np.sort(rng.integers(0, 100, n))
    freed = rng.random(n) < 0.75
    b = pd.DataFrame({"t_alloc": t_alloc, "t_free": np.where(freed, t_alloc + rng.integers(0, 30, n), 10**6),
                      "size": rng.choice([0, 4, 8, 8, 64], n).astype(np.int64), "freed": freed,
                      "counts_device": rng.random(n) < 0.9})
    group = rng.integers(-1, 6, n)                      # -1: in no group

    class T:
        blocks = b
        memo: dict = {}

        def derived(self, key, compute):
            if key not in self.memo:
                self.memo[key] = compute()
            return self.memo[key]
    dev = b["counts_device"].to_numpy()
    ev = sorted([(int(b.t_free[i]), 0, -int(b["size"][i]), i) for i in range(n) if dev[i] and freed[i]] +
                [(int(b.t_alloc[i]), 1, int(b["size"][i]), i) for i in range(n) if dev[i]])
    cs = np.cumsum([e[2] for e in ev])
    k = int(np.argmax(cs))
    want = np.zeros(6, np.int64)
    for e in ev[:k + 1]:
        if group[e[3]] >= 0:
            want[group[e[3]]] += e[2]
    got = live.live_at_peak_by(T(), lambda r: group[r], 6)
    np.testing.assert_array_equal(got, want)
    assert got.sum() != 0


@pytest.mark.parametrize("rows", ["1", "6", "100000"])
def test_owner_and_device_sums_in_pieces(rows, monkeypatch):
    """bytes_by_owner's and allocator_info's bytes, per_process' device and allocations, and the graph
    summary's pool bytes: against a groupby over every block."""
    from pyinterpose.analysis import graphs, owners, ranks

    monkeypatch.setenv("PYINTERPOSE_CHUNK_ROWS", rows)
    rng = np.random.default_rng(23)
    n = 240
    t_alloc = np.sort(rng.integers(0, 90, n))
    freed = rng.random(n) < 0.8
    blocks = pd.DataFrame({
        "block_id": np.arange(n), "pid": 1, "device": rng.choice([0, 1, 1], n).astype(np.int16),
        "kind": pd.Categorical(rng.choice(["device", "async", "pool"], n)),
        "api": pd.Categorical(rng.choice(["cudaMalloc", "cudaMallocAsync"], n)),
        "size": rng.choice([1, 8, 16, 512], n).astype(np.int64), "t_alloc": t_alloc,
        "t_free": np.where(freed, t_alloc + rng.integers(0, 20, n), 10_000), "freed": freed,
        "seq_alloc": np.arange(n) * 2, "seq_free": np.arange(n) * 2 + 1,
        "owner": pd.Categorical(rng.choice(["", "libc10_cuda.so", "libnccl.so", "libfoo.so"], n)),
        "graph": np.where(rng.random(n) < 0.3, np.uint64(5), np.uint64(0)),
        "counts_device": rng.random(n) < 0.9})
    in_graph_launch = rng.random(77) < 0.4
    launches = pd.DataFrame({"pid": 1, "seq": np.arange(77) * 3, "t": np.arange(77) * 5, "graph": in_graph_launch})
    tr = pyinterpose.Trace.from_tables(blocks=blocks, launches=launches)
    b = tr.blocks
    dev = b["counts_device"].to_numpy()
    size = b["size"].to_numpy()
    own = b["owner"].astype(str).to_numpy()
    got = owners.bytes_by_owner(tr).set_index("owner")
    label = np.where(own != "", own, b["api"].astype(str).to_numpy())
    want = pd.Series(size[dev]).groupby(label[dev]).sum()
    assert {k: int(v) for k, v in got["bytes"].items()} == {k: int(v) for k, v in want.items()}
    assert {k: int(v) for k, v in got["blocks"].items()} == pd.Series(label[dev]).value_counts().to_dict()
    info = owners.allocator_info(tr)
    m = owners.allocator(tr).mask
    assert info["bytes"] == int(size[m].sum()) and info["outside"]["bytes"] == int(size[dev & ~m].sum())
    (p,) = ranks.per_process(tr)
    d = b["device"].to_numpy()[dev]
    per_dev = {int(u): int(size[dev][d == u].sum()) for u in np.unique(d)}
    assert p["allocs"] == int(dev.sum()) and p["device"] == max(per_dev, key=lambda u: (per_dev[u], -u))
    assert [x["device"] for x in p["devices"]] == sorted(per_dev)
    g = graphs.graph_summary(tr)
    in_graph = b["graph"].to_numpy() != 0
    node = in_graph & np.isin(b["kind"].astype(str).to_numpy(), ["async", "pool"])
    assert g["memory_node_blocks"] == int(node.sum())
    assert g["private_pool_bytes"] == int(size[in_graph & ~node].sum())
    assert g["private_pool_blocks"] == int((in_graph & ~node).sum())
    assert g["graph_launches"] == int(in_graph_launch.sum()) > 0


@pytest.mark.parametrize("rows", ["1", "16", "112", "1000000"])     # pieces of 1, 1, 7 and all tokens
def test_gap_histogram_in_pieces(rows, monkeypatch):
    """The distances from each token to its previous occurrence, counted a piece at a time, against the
    whole-array way (a stable sort of every token, then the consecutive equal ones)."""
    from pyinterpose.analysis import iterations as it

    monkeypatch.setenv("PYINTERPOSE_CHUNK_ROWS", rows)
    rng = np.random.default_rng(31)
    for n, distinct, max_period in ((1, 1, 5), (40, 3, 10), (300, 25, 60), (300, 300, 299), (257, 2, 1)):
        token = rng.integers(0, distinct, n).astype(np.uint64) * np.uint64(0x9E3779B97F4A7C15)
        order = np.argsort(token, kind="stable")
        ts = token[order]
        gaps = (order[1:] - order[:-1])[ts[1:] == ts[:-1]]
        gaps = gaps[(gaps > 0) & (gaps <= max_period)]
        want = np.zeros(max_period + 1, np.int64)
        np.add.at(want, gaps, 1)
        np.testing.assert_array_equal(it._gap_histogram(token, max_period), want)


@pytest.mark.parametrize("rows", ["1", "5", "100000"])
def test_process_rows_and_time_at_seq_in_pieces(rows, monkeypatch):
    """The process's rows copied column by column equal the blocks' own rows; the time of the last
    alloc/free at or before a seq, read in pieces, equals the maximum over those rows."""
    from pyinterpose.analysis import iterations as it

    monkeypatch.setenv("PYINTERPOSE_CHUNK_ROWS", rows)
    rng = np.random.default_rng(41)
    n = 200
    seq_a = np.sort(rng.choice(np.arange(4 * n), n, replace=False))
    freed = rng.random(n) < 0.7
    b = pd.DataFrame({"block_id": np.arange(n), "pid": rng.choice([3, 4], n), "seq_alloc": seq_a,
                      "t_alloc": seq_a * 10, "size": rng.integers(1, 99, n), "freed": freed,
                      "seq_free": np.where(freed, seq_a + rng.integers(1, 30, n), -1),
                      "t_free": np.where(freed, seq_a * 10 + rng.integers(1, 300, n), -1),
                      "counts_device": rng.random(n) < 0.8, "kind": "device", "api": "cudaMalloc"})
    tr = pyinterpose.Trace.from_tables(blocks=b)
    for pid in (3, 4):
        rows_ = it._process_rows(tr, pid)
        m = (b["pid"] == pid) & b["counts_device"]
        sub = b[m]
        assert len(rows_) == len(sub)
        for c in ("seq_alloc", "t_alloc", "size", "seq_free"):
            np.testing.assert_array_equal(rows_[c].to_numpy(), sub[c].to_numpy())
        fs = b["seq_free"].to_numpy()[m.to_numpy() & freed]
        for seq in (-1, 0, int(seq_a[5]), int(seq_a[n // 2]) + 1, 10 * n, *fs[::7].tolist()):
            ta = sub["t_alloc"][sub["seq_alloc"] <= seq]
            tf = sub["t_free"][sub["freed"] & (sub["seq_free"] <= seq)]
            want = max([int(x.max()) for x in (ta, tf) if len(x)], default=0)
            assert it._t_at_seq(tr, pid, seq, rows_) == want


@pytest.mark.parametrize("rows", ["1", "7", "100000"])
def test_main_pid_counted_in_pieces(rows, monkeypatch):
    """The process with the most blocks (pandas' value_counts, as before), counted a piece at a time."""
    monkeypatch.setenv("PYINTERPOSE_CHUNK_ROWS", rows)
    rng = np.random.default_rng(43)
    for pids, reps in (([5, 9, 9, 2], None), ([7, 7, 3, 3, 1], None), ([1, 2], [3, 1]), ([4, 6], [2, 5])):
        col = np.repeat(pids, reps if reps is not None else rng.integers(1, 4, len(pids)))
        rng.shuffle(col)
        b = pd.DataFrame({"pid": col.astype(np.int32), "size": 1, "t_alloc": 0, "t_free": 1, "freed": True,
                          "counts_device": True, "seq_alloc": 0, "seq_free": 1, "kind": "device",
                          "api": "cudaMalloc"})
        tr = pyinterpose.Trace.from_tables(blocks=b)
        vc = pd.Series(col).value_counts()
        assert tr.main_pid == int(vc.idxmax())
        assert (pd.Series(col) == tr.main_pid).sum() == vc.max()


@pytest.mark.parametrize("rows", ["1", "3", "100000"])
def test_helpers_detected_over_distinct_stacks(rows, monkeypatch):
    """The allocation helpers found from the blocks' stack ids counted per id equal the walk over every
    block (the whole-array way, written here), on a stack tree where two helper frames wrap every site."""
    from pyinterpose.trace import stacks

    monkeypatch.setenv("PYINTERPOSE_CHUNK_ROWS", rows)
    # nodes: 0 root(main) <- 1 train <- 2 site_a, 3 site_b; helper frames h1 (node 4, 6), h2 (node 5, 7)
    parent = np.array([-1, 0, 1, 1, 2, 4, 3, 6], np.int64)
    frame = np.array([0, 1, 2, 3, 4, 5, 4, 5], np.int64)
    recs = [{"kind": "python"}] * 6
    rng = np.random.default_rng(7)
    cases = (np.array([5, 7] * 10 + [-1]), np.array([5] * 9 + [7] * 9 + [0] * 3), rng.choice([5, 7, 7, -1, 0], 60),
             rng.choice([5, 7, 3, -1], 9), np.array([0, -1, 5]))
    found = []
    for sid in cases:
        b = pd.DataFrame({"stack_id": sid.astype(np.int64)})

        class T:
            blocks = b
        cur = sid[sid >= 0].astype(np.int64)
        want: set = set()
        total = len(cur)
        if total >= 2:
            for _ in range(64):
                fr = frame[cur]
                counts = np.bincount(fr, minlength=len(recs))
                f = int(np.argmax(counts))
                sel = fr == f
                above = parent[cur[sel]]
                if counts[f] < stacks.HELPER_SHARE * total or (above < 0).any() or not (above != above[0]).any():
                    break
                want.add(f)
                cur = cur.copy()
                cur[sel] = above
        assert stacks._detect_helpers(T(), parent, frame, recs) == want
        found.append(want)
    assert found[0] == {4, 5} and found[1] == set()


@pytest.mark.parametrize("rows", ["1", "7", "100000"])
def test_signature_facts_with_shared_seqs(rows, monkeypatch):
    """live_before and gap_before made for a few allocations from one pass over the frees equal the
    whole sort's, on blocks where a free and an allocation share a seq (frees first) and sizes wrap."""
    from pyinterpose.analysis import iterations as it

    monkeypatch.setenv("PYINTERPOSE_CHUNK_ROWS", rows)
    rng = np.random.default_rng(47)
    n = 120
    seq_a = np.sort(rng.choice(np.arange(0, 6 * n, 2), n, replace=False))
    freed = rng.random(n) < 0.8
    # frees on distinct seqs, some equal to a later allocation's seq
    later = np.minimum(np.searchsorted(seq_a, seq_a + 1) + rng.integers(0, 4, n), n - 1)
    seq_f = np.where(rng.random(n) < 0.5, seq_a[later], seq_a + 1 + 2 * rng.integers(0, 5, n))
    seq_f = np.where(seq_f <= seq_a, seq_a + 1, seq_f)
    _, first = np.unique(seq_f, return_index=True)
    freed &= np.isin(np.arange(n), first)                       # distinct free seqs
    size = rng.choice([1, 64, 2**62], n).astype(np.int64)
    b = pd.DataFrame({"block_id": np.arange(n), "seq_alloc": seq_a, "t_alloc": seq_a * 3, "size": size,
                      "freed": freed, "seq_free": np.where(freed, seq_f, -1),
                      "t_free": np.where(freed, seq_f * 3 + 1, -1)})
    with np.errstate(over="ignore"):
        a, w = it._signature(b, (0, 0)), it._signature_whole(b, (0, 0))
        assert a.live_before is None and np.isin(seq_f[freed], seq_a).any()
        for j in (np.arange(n), np.arange(40, 61), np.array([0]), np.array([n - 1])):
            lb, gb = a.facts(j)
            np.testing.assert_array_equal(lb, w.live_before[j])
            np.testing.assert_array_equal(gb, w.gap_before[j])


@pytest.mark.parametrize("rows", ["1", "7", "100000"])
def test_steady_problem_read_in_pieces(rows, monkeypatch):
    """The steady iteration's problem read a piece of blocks at a time equals the one made from the
    masked columns copied whole (the in-memory route, still taken when the columns are given)."""
    import os

    from pyinterpose.analysis import pools
    from tests.conftest import ROOT

    monkeypatch.setenv("PYINTERPOSE_CHUNK_ROWS", rows)
    checked = 0
    for name in ("torch-cnn-blocks.pit", "jax-attn-blocks.pit", "loader-blocks.pit"):
        tr = pyinterpose.load(os.path.join(ROOT, "samples", name))
        pid = pools.resolve_pid(tr, None)
        window, _ = pools._steady_window(tr, pid)
        b = tr.blocks
        sfc = b["seq_free"].to_numpy()
        sf = np.sort(sfc[b["freed"].to_numpy() & (sfc > window[0]) & (sfc < window[1])])
        # the steady window, and windows starting or ending right at a free's seq
        for win in (window, (int(sf[len(sf) // 3]), window[1]), (window[0], int(sf[len(sf) // 2]))):
            for only in (False, True):
                cols = pools._block_columns(tr, pools._device_mask(tr, pid, only))
                want = pools.steady_problem(tr, pid, window=win, allocator_only=only, _cols=cols)
                got = pools.steady_problem(tr, pid, window=win, allocator_only=only)
                pd.testing.assert_frame_equal(got, want)
                assert got.attrs == want.attrs
                checked += len(got)
    assert checked > 0


@pytest.mark.parametrize("rows", ["1", "7", "100000"])
def test_class_series_in_pieces_is_classifys(rows, monkeypatch):
    """The classes made a piece of blocks at a time equal classify's class column (the whole table), on
    the samples and on a synthetic run with leaking call sites, steps and blocks of two processes."""
    import os

    from pyinterpose.analysis import guarded, lifetimes
    from pyinterpose.analysis.iterations import find_iterations
    from tests.conftest import ROOT

    monkeypatch.setenv("PYINTERPOSE_CHUNK_ROWS", rows)

    def whole(tr, it):
        c = lifetimes._classify(tr, it, it.pid)
        return pd.Series(c["class"].astype(str).to_numpy(), index=pd.Index(c["block_id"], name="block_id"))
    seen = set()
    for name in ("torch-cnn-blocks.pit", "jax-attn-blocks.pit", "loader-blocks.pit", "graphs-blocks.pit"):
        tr = pyinterpose.load(os.path.join(ROOT, "samples", name))
        it = find_iterations(tr)
        got = lifetimes.class_series(tr, it)
        pd.testing.assert_series_equal(got, whole(tr, it))
        pd.testing.assert_series_equal(guarded.block_classes(tr, iters=it).value, whole(tr, it))
        seen |= set(got.tolist())
    # a loop of 6 steps: per-step blocks, and a site (stack 4) that never frees, in steps 0-3
    rows_ = []
    seq = 0
    for step in range(6):
        for k in range(3):
            rows_.append((seq, seq + 2, True, 1)); seq += 1
        if step < 4:                        # never freed, allocated in exactly LEAK_STEPS steps after the first
            rows_.append((seq, -1, False, 4)); seq += 1
        seq += 3
    n = len(rows_)
    sa = np.array([r[0] for r in rows_]); sf = np.array([r[1] for r in rows_])
    fr = np.array([r[2] for r in rows_]); sid = np.array([r[3] for r in rows_])
    b = pd.DataFrame({"block_id": np.arange(n), "pid": 1, "size": 8, "kind": "device", "api": "cudaMalloc",
                      "counts_device": True, "t_alloc": sa * 10, "t_free": np.where(fr, sf * 10, 10**6),
                      "seq_alloc": sa, "seq_free": np.where(fr, sf, -1), "freed": fr, "stack_id": sid})
    tr = pyinterpose.Trace.from_tables(blocks=b)
    it = find_iterations(tr, 1)
    assert it.count >= 2
    got = lifetimes.class_series(tr, it, 1)
    pd.testing.assert_series_equal(got, whole(tr, it))
    seen |= set(got.tolist())
    assert {"leak", "per_iteration"} <= seen
