"""MiniMalloc CSV I/O, LOAD and the plan validator."""
import re

import numpy as np
import pytest

from pyinterpose.analysis.pools.problem import (InvalidPlanError, components, load, read_minimalloc_csv,
                                                validate_plan, write_minimalloc_csv)
from pyinterpose.errors import PyinterposeError


def test_roundtrip_and_legacy_columns(tmp_path):
    p = tmp_path / "a.csv"
    p.write_text("buffer,start,end,size\nx,0,2,4\ny,3,3,5\n")
    df = read_minimalloc_csv(str(p))
    assert df["id"].tolist() == ["x", "y"]
    assert df["upper"].tolist() == [3, 4]  # inclusive end + 1
    df["offset"] = [0, 0]
    q = tmp_path / "b.csv"
    write_minimalloc_csv(df, str(q))
    assert q.read_text().splitlines()[0] == "id,lower,upper,size,offset"
    back = read_minimalloc_csv(str(q))
    assert back["offset"].tolist() == [0, 0] and back["upper"].tolist() == [3, 4]


@pytest.mark.parametrize("text", ["id,lower,size\n1,0,3\n", "id,lower,upper,size\n1,0,x,3\n",
                                  "id,lower,upper,size\n1,5,2,3\n", "id,lower,upper,size\n1,0,2,-1\n",
                                  "id,lower,upper,size\n1,0,2,1\n1,0,2,1\n", ""])
def test_bad_csv_is_a_user_error(tmp_path, text):
    p = tmp_path / "bad.csv"
    p.write_text(text)
    with pytest.raises(PyinterposeError):
        read_minimalloc_csv(str(p))


def test_load_half_open():
    # [0,3) and [3,6) never live together; [1,4) overlaps both
    assert load([0, 3, 1], [3, 6, 4], [5, 7, 2]) == 9
    assert load([0, 3], [3, 6], [5, 7]) == 7
    assert load([], [], []) == 0


def test_validator_accepts_and_rejects():
    lower, upper, size = np.array([0, 3, 1]), np.array([3, 6, 4]), np.array([5, 7, 2])
    assert validate_plan(lower, upper, size, [0, 0, 7]) == 9
    assert validate_plan(lower, upper, size, [2, 2, 0]) == 9
    with pytest.raises(InvalidPlanError):
        validate_plan(lower, upper, size, [0, 0, 4])      # #2 overlaps #0 in address
    with pytest.raises(InvalidPlanError):
        validate_plan(lower, upper, size, [0, 1, 7])      # #1 overlaps #2 ([7,9) vs [1,8))
    with pytest.raises(InvalidPlanError):
        validate_plan(lower, upper, size, [0, 0, 7], capacity=8)
    with pytest.raises(InvalidPlanError):
        validate_plan(lower, upper, size, [0, -1, 7])


def test_validator_against_brute_force():
    rng = np.random.default_rng(0)
    for _ in range(200):
        n = 6
        lo = rng.integers(0, 6, n)
        up = lo + rng.integers(1, 4, n)
        sz = rng.integers(1, 4, n)
        off = rng.integers(0, 6, n)
        bad = any(lo[i] < up[j] and lo[j] < up[i] and off[i] < off[j] + sz[j] and off[j] < off[i] + sz[i]
                  for i in range(n) for j in range(i + 1, n))
        if bad:
            with pytest.raises(InvalidPlanError):
                validate_plan(lo, up, sz, off)
        else:
            assert validate_plan(lo, up, sz, off) == int((off + sz).max())


def test_validator_names_a_real_conflict_on_larger_plans():
    rng = np.random.default_rng(1)
    for _ in range(150):
        n = int(rng.integers(2, 60))
        lo = rng.integers(0, 30, n)
        up = lo + rng.integers(0, 8, n)        # some empty lifetimes: they conflict with nothing
        sz = rng.integers(0, 9, n)             # some zero sizes too
        off = rng.integers(0, 40, n)
        pairs = {(i, j) for i in range(n) for j in range(i + 1, n)
                 if lo[i] < up[j] and lo[j] < up[i] and off[i] < off[j] + sz[j] and off[j] < off[i] + sz[i]
                 and up[i] > lo[i] and up[j] > lo[j] and sz[i] > 0 and sz[j] > 0}
        if not pairs:
            assert validate_plan(lo, up, sz, off) == int((off + sz).max())
            continue
        with pytest.raises(InvalidPlanError) as e:
            validate_plan(lo, up, sz, off)
        i, j = (int(x) for x in re.findall(r"#(\d+)", str(e.value)))
        assert (i, j) in pairs


def test_components():
    parts = components([0, 1, 5, 6], [2, 5, 7, 8])
    assert sorted(sorted(p.tolist()) for p in parts) == [[0, 1], [2, 3]]
