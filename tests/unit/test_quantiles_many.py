"""access_spill.quantiles_many: the quantiles of several sets of integers from shared counting passes equal
numpy's ``np.quantile`` of each set (the same floats), in pieces cut at random, with sets of one value,
values over 60 bits and negative ones, and sets that need several passes (more values than a piece holds)."""
from __future__ import annotations

import numpy as np
import pytest

from pyinterpose.analysis.access_spill import quantiles_many

QS = (0.0, 0.1, 0.25, 0.5, 0.9, 0.99, 0.999, 1.0)


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("rows", ["40", "4000000"])
def test_quantiles_many_equal_numpy(monkeypatch, seed, rows):
    monkeypatch.setenv("PYINTERPOSE_CHUNK_ROWS", rows)      # 40: a piece of 10 values, every set counted
    rng = np.random.default_rng(seed)
    n = 5000
    x = np.concatenate([rng.integers(0, 1 << 40, n // 2), rng.integers(-(1 << 62), 1 << 62, n // 4),
                        rng.integers(0, 50, n - n // 2 - n // 4)]).astype(np.int64)
    rng.shuffle(x)
    kind = rng.integers(0, 4, n)
    kind[kind == 3] = 2                                      # set 3 empty
    x[kind == 1] = 77                                        # set 1: one value
    sets = {s: x[kind == s] if s < 4 else x for s in range(5)}
    sets = {s: v for s, v in sets.items() if len(v)}
    cuts = np.sort(rng.choice(np.arange(1, n), 20, replace=False))
    passes = []

    def pieces(active):
        passes.append(tuple(active))
        for part in np.split(np.arange(n), cuts):
            yield {s: (x[part] if s == 4 else x[part][kind[part] == s]) for s in active}
    want = {s: np.quantile(v.astype(np.float64), QS) for s, v in sets.items()}
    got = quantiles_many(pieces, {s: (QS, (len(v), int(v.min()), int(v.max()))) for s, v in sets.items()})
    assert sorted(got) == sorted(want) == [0, 1, 2, 4]
    for s in want:
        assert got[s].tobytes() == want[s].tobytes(), s
    if rows == "40":
        assert len(passes) >= 3 and len(passes[0]) == 3          # set 1 (one value) needs no pass
