"""lifetimes.classify / summary against the synthetic loop's own tags and brute-force peaks."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from pyinterpose.analysis import lifetimes
from pyinterpose.analysis.iterations import find_iterations
from pyinterpose.trace.model import Trace, live_bytes_curve
from test_iterations import random_trace, training_trace


def test_classes_match_roles():
    tr, truth = training_trace(steps=20, layers=5, warmup=1, noise=0.1, seed=11)
    it = find_iterations(tr)
    c = lifetimes.classify(tr, it)
    tags = np.array(truth["tags"])
    first = truth["starts"][0]
    sa = c["seq_alloc"].to_numpy()
    want = np.where(np.isin(tags, ["weight", "optstate"]), "persistent",
                    np.where(sa < first, "outside", "per_iteration"))
    assert (c["class"].astype(str).to_numpy() == want).all()
    # per-iteration blocks: alloc and free in the same step; phase inside [0, 1)
    per = c[c["class"] == "per_iteration"]
    assert (per["iter_alloc"] == per["iter_free"]).all()
    assert ((per["phase"] >= 0) & (per["phase"] < 1)).all()
    # lifetimes in three clocks are consistent
    assert (c["life_ns"] == c["t_free"] - c["t_alloc"]).all()
    assert (c["life_events"] >= 1).all() and (c["life_events"] <= c["life_seq"]).all()


def test_cross_iteration_block():
    # a loop where a buffer allocated in step k is freed in step k+1
    tr, _ = training_trace(steps=10, layers=3, warmup=1, seed=12)
    b = tr.blocks.copy()
    it = find_iterations(tr)
    B = it.boundaries
    new = b.iloc[[0]].copy()
    new["block_id"] = len(b)
    new["size"] = 12345
    new["seq_alloc"], new["seq_free"] = B[3] + 0, B[4] + 1     # straddles the start of step 4
    new["t_alloc"], new["t_free"] = it.boundaries_t[3], it.boundaries_t[4] + 1
    tr2 = Trace.from_tables(blocks=pd.concat([b, new], ignore_index=True), accesses=tr.accesses)
    c = lifetimes.classify(tr2, it)
    row = c[c["block_id"] == len(b)].iloc[0]
    assert row["class"] == "cross_iteration"
    assert (row["iter_alloc"], row["iter_free"]) == (3, 4)


def test_no_loop_classes():
    tr = random_trace(n=800, seed=3)
    c = lifetimes.classify(tr)
    assert set(c["class"].astype(str)) <= {"persistent", "transient"}
    assert (c.loc[~c["freed"], "class"] == "persistent").all()
    span = c["seq_free"].max() - c["seq_alloc"].min()
    short = c["freed"] & ((c["seq_free"] - c["seq_alloc"]) < 0.5 * span)
    assert (c.loc[short, "class"] == "transient").all()


def _brute_peak(blocks):
    best, best_t = 0, None
    for t in sorted(set(blocks["t_alloc"]) | set(blocks["t_free"])):
        live = blocks[(blocks.t_alloc <= t) & ((blocks.t_free > t) | ~blocks.freed)]["size"].sum()
        if live > best:
            best, best_t = live, t
    return best, best_t


def test_summary_peak_against_brute_force():
    tr, _ = training_trace(steps=6, layers=4, warmup=1, seed=13)
    s = lifetimes.summary(tr, top=5)
    want, want_t = _brute_peak(tr.blocks)
    assert s["peak"]["bytes"] == want
    assert s["peak"]["t"] == want_t
    assert sum(s["peak"]["by_class"].values()) == want
    tops = [b["size"] for b in s["peak"]["top_blocks"]]
    assert tops == sorted(tops, reverse=True) and len(tops) == 5
    assert s["blocks"] == len(tr.blocks)
    assert sum(v["blocks"] for v in s["classes"].values()) == len(tr.blocks)
    assert sum(h["blocks"] for h in s["sizes"]["histogram"]) == len(tr.blocks)
    assert sum(h["bytes"] for h in s["sizes"]["histogram"]) == int(tr.blocks["size"].sum())
    assert s["steady_peak"]["per_iteration_max"] <= want


def test_per_iteration_peaks_brute_force():
    tr, _ = training_trace(steps=8, layers=3, warmup=1, seed=14)
    it = find_iterations(tr)
    got = lifetimes.per_iteration_peaks(tr.blocks, it.boundaries_t)
    t, live = live_bytes_curve(tr.blocks)
    for k in range(it.count):
        m = (t >= it.boundaries_t[k]) & (t < it.boundaries_t[k + 1])
        assert got[k] == live[m].max()


def test_size_histogram():
    h = lifetimes.size_histogram(np.array([1, 2, 3, 4, 1024, 1500]))
    assert h == [{"lo": 1, "hi": 2, "blocks": 1, "bytes": 1}, {"lo": 2, "hi": 4, "blocks": 2, "bytes": 5},
                 {"lo": 4, "hi": 8, "blocks": 1, "bytes": 4}, {"lo": 1024, "hi": 2048, "blocks": 2, "bytes": 2524}]


@pytest.mark.parametrize("in_alloc_order", [False, True])
@pytest.mark.parametrize("seed", range(6))
def test_life_events_count_the_events_between_allocation_and_free(seed, in_alloc_order):
    """_life_events (one merge of the sorted frees and allocations) is, per block, the place of its free
    minus the place of its allocation among every allocation and free of the process ordered by seq, a
    free before an allocation at an equal seq, then by block (written here with a Python sort)."""
    from pyinterpose.analysis.lifetimes import _life_events

    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 40))
    sa = rng.integers(0, 30, n)
    if in_alloc_order:
        sa = np.sort(sa)
    sf = sa + rng.integers(0, 12, n)
    events = sorted([(int(sa[i]), 1, i, "a") for i in range(n)] + [(int(sf[i]), 0, i, "f") for i in range(n)])
    place = {(e[3], e[2]): k for k, e in enumerate(events)}
    want = [place[("f", i)] - place[("a", i)] for i in range(n)]
    assert _life_events(sa.astype(np.int64), sf.astype(np.int64)).tolist() == want
