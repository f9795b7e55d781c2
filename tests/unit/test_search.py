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


@pytest.mark.parametrize("dtype", [np.int8, np.int16, np.int32, np.uint8, np.uint32, np.int64])
@pytest.mark.parametrize("side", ["left", "right"])
def test_narrow_haystack_same_answers_and_needles_in_its_type(monkeypatch, dtype, side):
    info = np.iinfo(dtype)
    rng = np.random.default_rng(int(info.bits) + (side == "right"))
    lo, hi = max(int(info.min), -100), min(int(info.max), 100)
    a = np.sort(rng.integers(lo, hi + 1, 300)).astype(dtype)     # ties, and the type's own bounds
    a[0], a[-1] = info.min, info.max
    a.sort()
    inside = rng.integers(lo, hi + 1, 40)                            # int64 needles within the type's range
    i64 = np.iinfo(np.int64)
    outside = np.array([x for x in (int(info.min) - 1, int(info.max) + 1, -(1 << 40), 1 << 40)
                        if i64.min <= x <= i64.max])                 # past the type's range (int64 needles)
    seen = []
    real = np.searchsorted
    monkeypatch.setattr(search.np, "searchsorted", lambda x, y, **k: seen.append(np.asarray(y).dtype) or real(x, y, **k))
    for v in (inside, np.concatenate([inside, outside])):
        seen.clear()
        got = search.searchsorted(a, v, side=side)
        assert got.tolist() == _brute(a, v, side).tolist()
        if v is inside:
            assert seen == [np.dtype(dtype)]          # the needles cast, not the haystack copied
    for x in [*inside[:5].tolist(), *outside.tolist(), int(info.min), int(info.max)]:
        assert search.position(a, x, side=side) == int(_brute(a, [x], side)[0])
        assert isinstance(search.position(a, np.int64(x), side=side), int)


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("piece", [1, 3, 1 << 20])
def test_merge_places_are_the_stable_sort_of_the_concatenation(seed, piece):
    """Each element's place in the merge of two ascending arrays (the first's before the second's at
    equal values) is where a stable argsort of their concatenation puts it, piece by piece."""
    from pyinterpose.analysis.search import merge_places

    rng = np.random.default_rng(seed)
    a = np.sort(rng.integers(0, 20, int(rng.integers(0, 30))))
    b = np.sort(rng.integers(0, 20, int(rng.integers(0, 30))))
    inverse = np.empty(len(a) + len(b), np.int64)
    inverse[np.argsort(np.concatenate([a, b]), kind="stable")] = np.arange(len(a) + len(b))
    got = np.full(len(a) + len(b), -1, np.int64)
    for which, lo, at in merge_places(a, b, piece):
        assert len(at) <= piece
        got[(0 if which == 0 else len(a)) + lo + np.arange(len(at))] = at
    assert got.tolist() == inverse.tolist()
