"""``DataFrame.to_csv(path, index=False)`` at numpy speed, byte for byte the same text.

Columns of integer, bool, string and categorical (string categories) dtypes are formatted
by whole-column numpy operations (decimal digits by repeated division, the distinct strings
formatted once by Python's ``csv`` module with pandas' dialect and gathered by code), placed
in a byte matrix one row per table row and compacted with a mask, a chunk of rows at a time.
A frame with any other column dtype (floats, dates, mixed objects), or with a single column
(where the csv module quotes an empty field), is written by pandas.
"""
from __future__ import annotations

import csv
import io

import numpy as np
import pandas as pd

_POW10 = [np.uint64(10) ** np.uint64(k) for k in range(20)]


def _quote(values: list[str]) -> list[bytes]:
    """Each string as pandas writes a field (csv.QUOTE_MINIMAL, '"' doubled, '\\n' rows)."""
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n", quoting=csv.QUOTE_MINIMAL)
    out = []
    for v in values:
        buf.seek(0)
        buf.truncate()
        w.writerow([v, ""])          # two fields: an empty string is then written unquoted, as in a row
        s = buf.getvalue()
        out.append(s[:-2].encode("utf-8"))   # drop the ',' of the empty second field and the '\n'
    return out


class _Table:
    """A column's distinct field texts as a padded byte matrix; rows pick one by code."""

    def __init__(self, texts: list[bytes]):
        w = max([len(t) for t in texts] + [1])
        self.mat = np.zeros((len(texts), w), np.uint8)
        self.len = np.array([len(t) for t in texts], np.int64)
        for i, t in enumerate(texts):
            self.mat[i, :len(t)] = np.frombuffer(t, np.uint8)
        self.width = w


def _column_plan(s: pd.Series):
    """('int', int64/uint64 array) or ('table', codes, _Table), or None when not supported."""
    dt = s.dtype
    if isinstance(dt, pd.CategoricalDtype):
        cats = dt.categories
        if not (cats.dtype == object or pd.api.types.is_string_dtype(cats.dtype)):
            return None
        if not all(isinstance(c, str) for c in cats):
            return None
        codes = s.cat.codes.to_numpy(np.int64)
        texts = _quote(list(cats)) + [b""]       # code -1 (missing): empty field
        return ("table", np.where(codes < 0, len(cats), codes), _Table(texts))
    if dt == bool:
        return ("table", s.to_numpy(bool).astype(np.int64), _Table([b"False", b"True"]))
    if isinstance(dt, np.dtype) and dt.kind in "iu":
        return ("int", s.to_numpy())
    if dt == object or pd.api.types.is_string_dtype(dt):
        codes, uniq = pd.factorize(s, use_na_sentinel=True)
        if not all(isinstance(u, str) for u in uniq):
            return None
        texts = _quote(list(uniq)) + [b""]
        return ("table", np.where(codes < 0, len(uniq), codes).astype(np.int64), _Table(texts))
    return None


def _int_field(v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Decimal text of each value, right-aligned in a byte matrix, and its length."""
    m = len(v)
    if v.dtype.kind == "u":
        neg = np.zeros(m, bool)
        a = v.astype(np.uint64)
    else:
        v = v.astype(np.int64)
        neg = v < 0
        a = v.view(np.uint64).copy()
        a[neg] = ~a[neg] + np.uint64(1)      # |v| without overflow at INT64_MIN
    top = int(a.max()) if m else 0
    nd = max(1, len(str(top)))
    w = nd + 1
    mat = np.full((m, w), ord("0"), np.uint8)
    x = a.copy()
    for k in range(nd):
        mat[:, w - 1 - k] = (x % np.uint64(10)).astype(np.uint8) + ord("0")
        x //= np.uint64(10)
    length = np.ones(m, np.int64)
    for k in range(1, nd):
        length += a >= _POW10[k]
    if neg.any():
        rows = np.flatnonzero(neg)
        mat[rows, w - 1 - length[rows]] = ord("-")
        length = length + neg
    return mat, length


def write_csv_frame(df: pd.DataFrame, path: str, chunk: int = 1 << 15) -> None:
    """Write ``df`` to ``path`` exactly as ``df.to_csv(path, index=False)`` would."""
    plans = [_column_plan(df[c]) for c in df.columns] if df.columns.is_unique else [None]
    if len(plans) < 2 or any(p is None for p in plans) or not all(isinstance(c, str) for c in df.columns):
        df.to_csv(path, index=False)
        return
    header = b",".join(_quote([str(c) for c in df.columns])) + b"\n"
    n = len(df)
    ncol = len(plans)
    with open(path, "wb") as f:
        f.write(header)
        for r0 in range(0, n, chunk):
            r1 = min(n, r0 + chunk)
            m = r1 - r0
            fields = []
            for p in plans:
                if p[0] == "int":
                    mat, length = _int_field(p[1][r0:r1])
                    fields.append((mat, length, True))
                else:
                    codes, tab = p[1][r0:r1], p[2]
                    fields.append((tab.mat[codes], tab.len[codes], False))
            W = sum(mat.shape[1] for mat, _, _ in fields) + ncol
            M = np.empty((m, W), np.uint8)
            K = np.empty((m, W), bool)
            off = 0
            for j, (mat, length, right) in enumerate(fields):
                w = mat.shape[1]
                M[:, off:off + w] = mat
                cols = np.arange(w)
                K[:, off:off + w] = (cols[None, :] >= (w - length)[:, None]) if right else (cols[None, :] < length[:, None])
                off += w
                M[:, off] = ord(",") if j < ncol - 1 else ord("\n")
                K[:, off] = True
                off += 1
            f.write(M[K].tobytes())
