"""analysis.search.searchsorted: the insertion points of needles in no order, found in sorted order,
equal a brute-force count per needle (ties, repeated needles, both sides, sorted and unsorted)."""
from __future__ import annotations

import numpy as np
import pytest

from pyinterpose.analysis import search


def _brute(a, v, side):
    # the number of elements before each needle's insertion point, counted directly
    return np.array([int((a < x).sum()) if side == "left" else int((a <= x).sum()) for x in v], np.int64)


@pytest.mark.parametrize("piece", [1 << 20, 1, 3, 64])
@pytest.mark.parametrize("side", ["left", "right"])
@pytest.mark.parametrize("n", [0, 1, 2, 50, 700])
def test_sorted_search_equals_brute_force(monkeypatch, side, n, piece):
    monkeypatch.setattr(search, "MIN_NEEDLES", 0)     # the sorting path at any size
    monkeypatch.setattr(search, "MIN_HAYSTACK", 0)
    monkeypatch.setattr(search, "PIECE", piece)       # the needles sorted a piece at a time
    rng = np.random.default_rng(n)
    a = np.sort(rng.integers(0, 60, 200))             # many ties
    v = rng.integers(-5, 70, n)                       # below, inside and above, repeated, in no order
    got = search.searchsorted(a, v, side=side)
    assert got.tolist() == _brute(a, v, side).tolist()
    s = np.sort(v)                                    # already ascending: the plain search
    assert search.searchsorted(a, s, side=side).tolist() == _brute(a, s, side).tolist()


def test_large_unsorted_needles_take_the_sorted_path(monkeypatch):
    rng = np.random.default_rng(7)
    a = np.sort(rng.integers(0, 1 << 40, search.MIN_HAYSTACK * 2))
    v = a[rng.integers(0, len(a), search.MIN_NEEDLES * 2)] + rng.integers(-1, 2, search.MIN_NEEDLES * 2)
    calls = []
    real = np.argsort
    monkeypatch.setattr(search.np, "argsort", lambda x, **k: calls.append(len(x)) or real(x, **k))
    got = search.searchsorted(a, v, side="left")
    assert calls == [len(v)]
    # independent: the insertion point is the first position whose element is >= the needle
    ok_lo = (got == 0) | (a[np.maximum(got - 1, 0)] < v)
    ok_hi = (got == len(a)) | (a[np.minimum(got, len(a) - 1)] >= v)
    assert ok_lo.all() and ok_hi.all()
