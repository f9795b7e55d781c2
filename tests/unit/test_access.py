"""access_intervals / analyze against hand-computed values and a brute-force oracle."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from pyinterpose.analysis import access
from pyinterpose.trace.model import Trace


def _blocks(rows):
    cols = ["block_id", "pid", "size", "t_alloc", "t_free", "seq_alloc", "seq_free"]
    df = pd.DataFrame(rows, columns=cols)
    df["kind"] = "device"
    df["api"] = "cudaMalloc"
    return df


def _acc(rows):
    return pd.DataFrame(rows, columns=["block_id", "pid", "seq", "t"])


def test_hand_computed_intervals():
    blocks = _blocks([
        (0, 1, 100, 0, 1000, 0, 10),    # accessed at seq 2 (t 200), seq 5 (t 500)
        (1, 1, 50, 100, 300, 1, 4),     # never accessed
        (2, 2, 10, 50, 900, 3, 9),      # other pid, accessed once
    ])
    accesses = _acc([(0, 1, 5, 500), (0, 1, 2, 200), (2, 2, 6, 600), (0, 1, 5, 500)])
    tr = Trace.from_tables(blocks=blocks, accesses=accesses)
    iv = access.access_intervals(tr)
    got = iv[["block_id", "start_t", "end_t", "start_seq", "end_seq", "ati_ns"]].values.tolist()
    assert got == [
        [0, 0, 200, 0, 2, 200],
        [0, 200, 500, 2, 5, 300],      # duplicate (block 0, seq 5) counted once
        [0, 500, 1000, 5, 10, 500],
        [1, 100, 300, 1, 4, 200],
        [2, 50, 600, 3, 6, 550],
        [2, 600, 900, 6, 9, 300],
    ]
    assert iv["kind"].astype(str).tolist() == [
        "alloc_to_first", "between", "last_to_free", "unaccessed", "alloc_to_first", "last_to_free"]
    assert iv["size"].tolist() == [100, 100, 100, 50, 10, 10]
    only2 = access.access_intervals(tr, pid=2)
    assert only2["block_id"].tolist() == [2, 2]


def _oracle(blocks, accesses):
    out = []
    for _, b in blocks.sort_values("block_id").iterrows():
        a = accesses[accesses.block_id == b.block_id].sort_values("seq")
        a = a[(a.seq >= b.seq_alloc) & (a.seq <= b.seq_free)].drop_duplicates("seq")
        pts = [(b.seq_alloc, b.t_alloc)] + list(zip(a.seq, a.t)) + [(b.seq_free, b.t_free)]
        for (s0, t0), (s1, t1) in zip(pts[:-1], pts[1:]):
            out.append((b.block_id, s0, s1, t1 - t0))
    return out


def test_random_against_oracle():
    rng = np.random.default_rng(7)
    nb = 60
    seq_alloc = np.sort(rng.choice(5000, nb, replace=False))
    life = rng.integers(1, 800, nb)
    blocks = _blocks([(i, 1, int(rng.integers(1, 1 << 20)), int(s) * 10, int(s + l) * 10,
                       int(s), int(s + l)) for i, (s, l) in enumerate(zip(seq_alloc, life))])
    na = 700
    bids = rng.integers(0, nb + 3, na)            # some unknown block ids
    seqs = rng.integers(0, 6000, na)              # some outside lifetimes
    accesses = _acc([(int(b), 1, int(s), int(s) * 10) for b, s in zip(bids, seqs)])
    tr = Trace.from_tables(blocks=blocks, accesses=accesses)
    iv = access.access_intervals(tr)
    got = list(map(tuple, iv[["block_id", "start_seq", "end_seq", "ati_ns"]].values.tolist()))
    want = [tuple(int(x) for x in r) for r in _oracle(blocks, accesses)]
    assert got == want
    # each block's intervals tile its lifetime exactly
    tot = iv.groupby("block_id")["ati_ns"].sum()
    assert (tot.values == (blocks.t_free - blocks.t_alloc).values).all()


def test_empty_trace():
    iv = access.access_intervals(Trace.from_tables())
    assert len(iv) == 0 and list(iv.columns) == access.INTERVAL_COLUMNS
