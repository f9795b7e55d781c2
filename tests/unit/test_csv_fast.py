"""report.csv_fast writes the same bytes as pandas' ``to_csv(index=False)``."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

import pyinterpose
from pyinterpose.analysis import guarded
from pyinterpose.report import exports
from pyinterpose.report.csv_fast import write_csv_frame
from pyinterpose.report.synthetic import training_trace
from conftest import gpu_trace


def same_as_pandas(df, tmp_path, chunk=1 << 15):
    a, b = tmp_path / "fast.csv", tmp_path / "pandas.csv"
    write_csv_frame(df, str(a), chunk=chunk, threads=2 if chunk == 3 else 1)
    df.to_csv(b, index=False)
    assert a.read_bytes() == b.read_bytes()


@pytest.mark.parametrize("chunk", [1, 3, 1 << 15])
def test_edge_values(tmp_path, chunk):
    rng = np.random.default_rng(0)
    n = 50
    df = pd.DataFrame({
        "i64": np.r_[[0, -1, 9, 10, -10, np.iinfo(np.int64).min, np.iinfo(np.int64).max],
                     rng.integers(-10 ** 12, 10 ** 12, n - 7)].astype(np.int64),
        "u64": np.concatenate([np.array([0, 2 ** 64 - 1, 10 ** 19, 10 ** 19 - 1], np.uint64),
                               rng.integers(0, 2 ** 62, n - 4).astype(np.uint64)]),
        "i16": rng.integers(-300, 300, n).astype(np.int16),
        "u8": rng.integers(0, 255, n).astype(np.uint8),
        "flag": rng.random(n) < 0.5,
        "cat": pd.Categorical(rng.choice(["a", "b,c", 'q"x', "", "line\nbreak", "é", None], n)),
        "s": pd.Series(rng.choice(["x", "", "y z", None, "comma,here"], n), dtype=object),
        "st": pd.Series(rng.choice(["u", "v", None], n)).astype(str),
    })
    same_as_pandas(df, tmp_path, chunk)
    same_as_pandas(df.iloc[:0], tmp_path, chunk)          # header only
    same_as_pandas(df[["cat"]], tmp_path, chunk)          # one column: an empty field is quoted there
    df2 = df.assign(f=rng.random(n))                       # floats: pandas writes it
    same_as_pandas(df2, tmp_path, chunk)


def test_blocks_csv_synthetic_and_real(tmp_path):
    for tr in [training_trace(iterations=4)] + [pyinterpose.load(gpu_trace(n)) for n in
                                                ("torch-cnn-blocks.pit", "jax-attn-reserved.pit", "loader-blocks.pit")]:
        cl = guarded.block_classes(tr, iters=guarded.iterations(tr).value).value
        p = tmp_path / "b.csv"
        exports.write_csv(tr, str(p), classes=cl)
        q = tmp_path / "ref.csv"
        exports.blocks_table(tr, cl).to_csv(q, index=False)
        assert p.read_bytes() == q.read_bytes()
        assert len(pd.read_csv(p)) == len(tr.blocks)
