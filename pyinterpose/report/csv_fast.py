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
from ..trace.pages import release
from ..trace.chunking import chunk_rows
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
    """('int', int64/uint64 array) or ('table', codes(r0, r1), _Table), or None when not supported.
    The arrays are the column's own (a memory-mapped cache column stays mapped): a chunk's codes
    are made when it is formatted."""
    dt = s.dtype
    if isinstance(dt, pd.CategoricalDtype):
        cats = dt.categories
        if not (cats.dtype == object or pd.api.types.is_string_dtype(cats.dtype)):
            return None
        if not all(isinstance(c, str) for c in cats):
            return None
        codes = s.cat.codes.to_numpy()
        texts = _quote(list(cats)) + [b""]       # code -1 (missing): empty field
        return ("table", _codes_of(codes, len(cats)), _Table(texts), codes)
    if dt == bool:
        v = s.to_numpy(bool)
        return ("table", lambda r0, r1: v[r0:r1].astype(np.int64), _Table([b"False", b"True"]), v)
    if isinstance(dt, np.dtype) and dt.kind in "iu":
        return ("int", s.to_numpy())
    if dt == object or pd.api.types.is_string_dtype(dt):
        codes, uniq = pd.factorize(s, use_na_sentinel=True)
        if not all(isinstance(u, str) for u in uniq):
            return None
        texts = _quote(list(uniq)) + [b""]
        return ("table", _codes_of(codes, len(uniq)), _Table(texts), None)
    return None


def _codes_of(codes: np.ndarray, missing: int):
    """A chunk's codes as int64, -1 (missing) as ``missing`` (the empty field's row)."""
    def get(r0: int, r1: int) -> np.ndarray:
        c = codes[r0:r1].astype(np.int64)
        c[c < 0] = missing
        return c
    return get


def lookup_plan(codes_of, values: list) -> tuple | None:
    """A column plan from ``codes_of(r0, r1)`` -> int codes into ``values`` (-1: missing), or None
    when a value is not a string (the caller then lets pandas write the frame)."""
    if not all(isinstance(v, str) for v in values):
        return None
    n = len(values)

    def get(r0: int, r1: int) -> np.ndarray:
        c = np.asarray(codes_of(r0, r1), np.int64)
        c[c < 0] = n
        return c
    return ("table", get, _Table(_quote(values) + [b""]), None)


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
            codes, tab = arg[1](r0, r1), arg[2]
            M[:, off:off + w] = tab.mat[codes]
            length = tab.len[codes]
        K[:, off:off + w] = _keep_table(w, right)[length]
        off += w
        M[:, off] = ord(",") if j < ncol - 1 else ord("\n")
        K[:, off] = True
        off += 1
    return M[K].tobytes()


def write_csv_frame(df: pd.DataFrame, path: str, chunk: int | None = None, threads: int = 1,
                    extra: list[tuple[str, tuple | None]] | None = None, progress=None) -> None:
    """Write ``df`` to ``path`` exactly as ``df.to_csv(path, index=False)`` would.  Chunks of rows
    (``chunk``, default ``min(32768, trace.chunking.chunk_rows())``) are formatted on ``threads``
    threads (report.chunks) and written in order; each chunk's codes are made when it is formatted,
    and the mapped pages of a cached column are given back once its chunk is written
    (``pyinterpose.trace.pages``), so memory holds a chunk, not the table.

    ``extra``: columns appended after ``df``'s, as ``(name, plan)`` with a plan from
    :func:`lookup_plan`; a None plan, like an unsupported column, raises ValueError (the caller
    writes the frame with pandas instead).  ``progress``: called with the fraction written."""

    got = frame_plans(df, extra)
    if got is None:
        if extra:
            raise ValueError("a frame the fast writer does not handle")
        with atomic_path(path) as tmp:
            df.to_csv(tmp, index=False)
        return
    names, plans = got
    with atomic_output(path, "wb") as f:
        f.write(header_text(names))
        write_rows(f, plans, 0, len(df), chunk, threads, progress)


def frame_plans(df: pd.DataFrame, extra: list[tuple[str, tuple | None]] | None = None):
    """``(names, plans)`` of ``df``'s columns and ``extra``'s (see :func:`write_csv_frame`), or None when
    the fast writer does not handle the frame (pandas writes it)."""
    plans = [_column_plan(df[c]) for c in df.columns] if df.columns.is_unique else [None]
    names = list(df.columns)
    for name, plan in extra or []:
        names.append(name)
        plans.append(plan)
    if len(plans) < 2 or any(p is None for p in plans) or not all(isinstance(c, str) for c in names) \
            or len(set(names)) != len(names):
        return None
    return names, plans


def header_text(names: list[str]) -> bytes:
    return b",".join(_quote([str(c) for c in names])) + b"\n"


def write_rows(f, plans, lo: int, hi: int, chunk: int | None = None, threads: int = 1, progress=None) -> None:
    """The CSV text of rows ``[lo, hi)`` written to ``f``, a chunk at a time (see :func:`write_csv_frame`);
    a row's text is its own, so the rows of ``[0, n)`` written in ranges, in order, are the whole text."""
    chunk = chunk or max(1, min(1 << 15, chunk_rows()))
    mapped = [p[1] if p[0] == "int" else p[3] for p in plans]
    starts = range(lo, hi, chunk)
    for r0, text in zip(starts, in_order(lambda r0: _format_rows(plans, r0, min(hi, r0 + chunk)), starts, threads)):
        f.write(text)
        for a in mapped:
            if a is not None:
                release(a, r0, min(hi, r0 + chunk))
        if progress is not None:
            progress((min(hi, r0 + chunk) - lo) / max(1, hi - lo))
