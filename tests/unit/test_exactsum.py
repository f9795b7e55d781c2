"""analysis.exactsum: sums made a piece at a time equal numpy's whole-array sums, bit for bit.

The reference is numpy itself on the whole array (``np.add.reduce`` / ``.mean()``), on random values
whose magnitudes spread over many decades (so that any other order of additions rounds differently)."""
from __future__ import annotations

import numpy as np
import pytest

from pyinterpose.analysis.exactsum import IntMean, PairwiseSum

LENGTHS = [0, 1, 2, 7, 8, 9, 15, 16, 17, 127, 128, 129, 130, 255, 256, 257, 1000, 1023, 1024, 1025, 4097,
           8191, 8192, 8193, 20000, 65536 + 37, 100_003, 262_145]


def _values(rng, n):
    return rng.random(n) * 10.0 ** rng.uniform(-6, 9, n)


def _pieces(rng, x):
    """``x`` cut at random places (pieces of 0 to a few thousand values, some empty)."""
    out, a = [], 0
    while a < len(x):
        b = min(len(x), a + int(rng.integers(0, 5000)))
        out.append(x[a:b])
        a = b
    return out


@pytest.mark.parametrize("leaf", [8, 64, 128, 1000, 1 << 20])
def test_pairwise_sum_is_numpys(leaf):
    rng = np.random.default_rng(leaf)
    for n in LENGTHS:
        x = _values(rng, n)
        s = PairwiseSum(n, leaf=leaf)
        for p in _pieces(rng, x):
            s.feed(p)
        got, want = s.result(), float(np.add.reduce(x))
        assert got == want, (n, leaf, got, want)
        assert got == float(x.sum())


def test_pairwise_sum_differs_from_a_running_total():
    """The values are such that the order of additions shows (else the tests above prove little)."""
    rng = np.random.default_rng(7)
    x = _values(rng, 100_003)
    running = 0.0
    for p in np.array_split(x, 97):
        running += float(p.sum())
    assert running != float(x.sum())


def test_pairwise_sum_counts_what_it_is_fed():
    s = PairwiseSum(10)
    s.feed(np.ones(4))
    with pytest.raises(ValueError):
        s.result()
    with pytest.raises(ValueError):
        s.feed(np.ones(7))


def test_int_mean_is_numpys():
    rng = np.random.default_rng(3)
    for n in LENGTHS[1:] + [1_000_003]:
        for hi in (10, 10 ** 12, 1 << 62):
            x = rng.integers(0, hi, n, dtype=np.int64)
            m = IntMean()
            for p in _pieces(rng, x) if n < 300_000 else np.array_split(x, 7):
                m.feed(p)
            assert m.result() == float(x.mean()), (n, hi)
    assert IntMean().result() is None
