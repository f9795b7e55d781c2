"""Issue 30: the perfetto export's large-allocation instants are chosen a piece of block rows at a
time (``perfetto._large_instant_rows``).  Against the whole-table definition, written here with
pandas: the device blocks of at least ``large`` bytes, sorted by size (largest first) then by
allocation time (pandas' sort on two keys is stable: ties in row order), the first ``max_instants``,
then sorted by allocation time; and their count.  Pieces of 1 to 7 rows and one piece, many ties
in size and in time straddling the cut, rows out of time order, host blocks among them."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from pyinterpose.report.perfetto import _large_instant_rows
from pyinterpose.trace.model import Trace

COLS = ["block_id", "pid", "t_alloc", "size", "api", "kind", "device"]


def _trace(n: int = 300, seed: int = 3) -> Trace:
    rng = np.random.default_rng(seed)
    size = rng.choice([1 << 20, 2 << 20, 3 << 20, 4 << 20, 512], n)      # few sizes: ties everywhere
    t = rng.integers(0, 40, n) * 1000                                         # few instants: ties again
    kind = np.where(rng.random(n) < 0.15, "pinned", "device")
    b = pd.DataFrame({"block_id": np.arange(n) * 3 + 7, "pid": rng.choice([11, 12], n), "size": size,
                      "kind": kind, "api": np.where(kind == "device", "cudaMalloc", "cudaHostAlloc"),
                      "device": rng.choice([0, 1], n), "t_alloc": t, "t_free": t + 500,
                      "seq_alloc": np.arange(n), "seq_free": np.arange(n) + n, "freed": True})
    return Trace.from_tables(blocks=b)


def _reference(tr: Trace, large: int, keep: int):
    b = tr.blocks
    big = b[b["counts_device"].to_numpy(bool) & (b["size"].to_numpy() >= large)]
    top = big.sort_values(["size", "t_alloc"], ascending=[False, True]).head(keep).sort_values("t_alloc")
    return top, len(big)


def _rows(df) -> list[tuple]:
    return list(zip(*(df[c].astype(str).tolist() if c in ("api", "kind") else df[c].tolist() for c in COLS)))


@pytest.mark.parametrize("rows", ["1", "2", "7", "1000000"])
@pytest.mark.parametrize("keep", [0, 1, 5, 16, 37, 100000])
@pytest.mark.parametrize("large", [1 << 20, 3 << 20, 1 << 40])
def test_large_instants_in_pieces_are_the_whole_tables(rows, keep, large, monkeypatch):
    monkeypatch.setenv("PYINTERPOSE_CHUNK_ROWS", rows)
    tr = _trace()
    got, total = _large_instant_rows(tr, large, keep)
    ref, ref_total = _reference(tr, large, keep)
    assert total == ref_total
    assert _rows(got) == _rows(ref)
    assert len(got) == min(keep, ref_total)


def test_ties_straddle_the_cut():
    """The data above does test the tie order: at the cuts of 16 and 37 rows, the last block kept and
    the first one left out have the same size and time (so a cut in another order keeps other blocks)."""
    tr = _trace()
    b = tr.blocks
    big = b[b["counts_device"].to_numpy(bool) & (b["size"].to_numpy() >= 1 << 20)]
    s = big.sort_values(["size", "t_alloc"], ascending=[False, True])
    for k in (16, 37):
        assert (s["size"].iloc[k - 1], s["t_alloc"].iloc[k - 1]) == (s["size"].iloc[k], s["t_alloc"].iloc[k])
