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
from ..outfile import atomic_output, atomic_path
from .chunks import in_order

_POW10_ARR = np.array([10 ** k for k in range(20)], np.uint64)


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


_DIGITS4 = np.frombuffer("".join(f"{i:04d}" for i in range(10000)).encode(), np.uint8).reshape(10000, 4)


def _int_plan(v: np.ndarray):
    """|v| as uint64, the negative rows (or None), the digit count of the largest and the field width."""
    if v.dtype.kind == "u":
        neg = None
        a = v.astype(np.uint64)
    else:
        v = v.astype(np.int64)
        a = v.view(np.uint64).copy()
        neg = v < 0
        if neg.any():
            a[neg] = ~a[neg] + np.uint64(1)      # |v| without overflow at INT64_MIN
        else:
            neg = None
    top = int(a.max()) if len(a) else 0
    nd = max(1, len(str(top)))
    return a, neg, nd, (nd + 3) // 4 * 4 + (neg is not None)


def _int_field(a: np.ndarray, neg, nd: int, out: np.ndarray) -> np.ndarray:
    """Write the decimal text of each value right-aligned into ``out`` (rows x width); its length."""
    w = out.shape[1]
    groups = (nd + 3) // 4
    x = a.copy() if groups > 1 else a
    for g in range(groups):             # four digits per division
        out[:, w - 4 * (g + 1):w - 4 * g] = _DIGITS4[(x % np.uint64(10000)).astype(np.intp)]
        if g < groups - 1:
            x //= np.uint64(10000)
    length = np.maximum(np.searchsorted(_POW10_ARR, a, side="right"), 1)   # digits: count of 10**k <= a
    if neg is not None:
        rows = np.flatnonzero(neg)
        out[rows, w - 1 - length[rows]] = ord("-")
        length = length + neg
    return length


_KEEP: dict[tuple[int, bool], np.ndarray] = {}


def _keep_table(w: int, right: bool) -> np.ndarray:
    """Row L: which of a field's w bytes hold its text of length L (right- or left-aligned)."""
    t = _KEEP.get((w, right))
    if t is None:
        cols = np.arange(w)
        lens = np.arange(w + 1)[:, None]
        t = _KEEP[(w, right)] = (cols[None, :] >= w - lens) if right else (cols[None, :] < lens)
    return t


def _format_rows(plans, r0: int, r1: int) -> bytes:
    """The CSV text of rows [r0, r1): every field written in place into one byte matrix (a row
    per row), a mask of the bytes each field's text takes, one boolean selection."""
    m = r1 - r0
    cols = []
    for p in plans:
        if p[0] == "int":
            a, neg, nd, w = _int_plan(p[1][r0:r1])
            cols.append((w, True, (a, neg, nd)))
        else:
            cols.append((p[2].width, False, p))
    ncol = len(cols)
    W = sum(w for w, _, _ in cols) + ncol
    M = np.empty((m, W), np.uint8)
    K = np.empty((m, W), bool)
    off = 0
    for j, (w, right, arg) in enumerate(cols):
        if right:
            length = _int_field(*arg, out=M[:, off:off + w])
        else:
            codes, tab = arg[1][r0:r1], arg[2]
            M[:, off:off + w] = tab.mat[codes]
            length = tab.len[codes]
        K[:, off:off + w] = _keep_table(w, right)[length]
        off += w
        M[:, off] = ord(",") if j < ncol - 1 else ord("\n")
        K[:, off] = True
        off += 1
    return M[K].tobytes()


def write_csv_frame(df: pd.DataFrame, path: str, chunk: int = 1 << 15, threads: int = 1) -> None:
    """Write ``df`` to ``path`` exactly as ``df.to_csv(path, index=False)`` would.  Chunks of rows
    are formatted on ``threads`` threads (report.chunks) and written in order."""

    plans = [_column_plan(df[c]) for c in df.columns] if df.columns.is_unique else [None]
    if len(plans) < 2 or any(p is None for p in plans) or not all(isinstance(c, str) for c in df.columns):
        with atomic_path(path) as tmp:
            df.to_csv(tmp, index=False)
        return
    header = b",".join(_quote([str(c) for c in df.columns])) + b"\n"
    n = len(df)
    with atomic_output(path, "wb") as f:
        f.write(header)
        for text in in_order(lambda r0: _format_rows(plans, r0, min(n, r0 + chunk)), range(0, n, chunk), threads):
            f.write(text)
