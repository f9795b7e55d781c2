"""access_common.find: ``np.searchsorted`` with the needles in the haystack's own integer type when they fit
it, the same indices as numpy's (Python ints, int64 arrays, values past the type's range, both sides)."""
from __future__ import annotations

import numpy as np
import pytest

from pyinterpose.analysis.access_common import find


@pytest.mark.parametrize("dtype", [np.int32, np.int64, np.uint16])
@pytest.mark.parametrize("side", ["left", "right"])
def test_find_is_searchsorted(dtype, side):
    rng = np.random.default_rng(3)
    a = np.sort(rng.integers(0, 60_000, 5000)).astype(dtype)
    a[100:140] = a[100]                                         # runs of one value
    needles = [0, int(a[100]), int(a[-1]), int(a[-1]) + 1, 59_999, -5, 1 << 40, -(1 << 40)]
    for x in needles:
        assert int(find(a, x, side)) == int(np.searchsorted(a, x, side=side)), x
    arr = np.array(needles[:5] + list(rng.integers(0, 60_000, 200)), np.int64)
    assert np.array_equal(find(a, arr, side), np.searchsorted(a, arr, side=side))
    wide = np.array(needles, np.int64)                          # past the type's range: numpy's own way
    assert np.array_equal(find(a, wide, side), np.searchsorted(a, wide, side=side))
    assert np.array_equal(find(a, np.zeros(0, np.int64), side), np.zeros(0, np.intp))
