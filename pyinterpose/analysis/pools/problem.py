"""The offset-planning problem: MiniMalloc CSV I/O, LOAD (plan validation: pyinterpose.trace.plan_format).

A *problem* is a DataFrame with columns ``id, lower, upper, size`` (MiniMalloc's
form): buffer ``id`` lives over the half-open interval ``[lower, upper)`` and needs
``size`` bytes.  A *plan* adds an ``offset`` column.  Two buffers conflict when their
intervals overlap (``a.lower < b.upper and b.lower < a.upper``); a buffer that ends
at t and one that starts at t may share memory.  Buffers of zero size or zero
length conflict with nothing.
"""
from __future__ import annotations

import os

import numpy as np
import pandas as pd

from ...errors import PyinterposeError
from ...trace.plan_format import InvalidPlanError, validate_plan  # noqa: F401  (part of the problem's API)

PROBLEM_COLUMNS = ["id", "lower", "upper", "size"]

# MiniMalloc's reader accepts these legacy names (src/converter.cc).
_ALIASES = {"buffer": "id", "buffer_id": "id", "start": "lower", "begin": "lower"}


def _fits_int64(text: str) -> bool:
    import decimal

    try:
        v = int(decimal.Decimal(text))
    except (decimal.InvalidOperation, ValueError, OverflowError):
        return False
    return -(2**63) <= v < 2**63


def read_minimalloc_csv(path: str) -> pd.DataFrame:
    """Read a MiniMalloc CSV (``id,lower,upper,size`` half-open; legacy ``buffer``,
    ``start``/``begin`` and inclusive ``end`` accepted; optional ``offset`` kept).

    Raises PyinterposeError (exit 2) with a one-line message on bad input."""
    if not os.path.exists(path):
        raise PyinterposeError(f"{path}: no such file")
    try:
        df = pd.read_csv(path, dtype=str, skipinitialspace=True)
    except Exception as e:  # empty file, binary junk, ragged rows
        raise PyinterposeError(f"{path}: not a readable CSV ({type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''})")
    df.columns = [str(c).strip().lower() for c in df.columns]
    df = df.rename(columns={c: _ALIASES[c] for c in df.columns if c in _ALIASES})
    if "upper" not in df.columns and "end" in df.columns:
        df["upper"] = df.pop("end")
        inclusive_end = True
    else:
        inclusive_end = False
    missing = [c for c in PROBLEM_COLUMNS if c not in df.columns]
    if missing:
        raise PyinterposeError(f"{path}: missing column(s) {', '.join(missing)} "
                               f"(expected header id,lower,upper,size)")
    if df.columns.duplicated().any():
        raise PyinterposeError(f"{path}: duplicate column names")
    out = pd.DataFrame({"id": df["id"].astype(str).str.strip()})
    for c in ["lower", "upper", "size"] + (["offset"] if "offset" in df.columns else []):
        vals = pd.to_numeric(df[c].str.strip(), errors="coerce")
        bad = vals.isna() | (vals != np.floor(vals))
        if bad.any():
            row = int(np.flatnonzero(bad.to_numpy())[0])
            raise PyinterposeError(f"{path}: row {row + 2}: column {c!r} is not an integer: {df[c].iloc[row]!r}")
        if vals.dtype != np.int64:  # uint64 or float: a value may not fit in 64-bit signed
            big = ~df[c].str.strip().map(_fits_int64).to_numpy(bool)
            if big.any():
                row = int(np.flatnonzero(big)[0])
                raise PyinterposeError(f"{path}: row {row + 2}: column {c!r} is out of range "
                                       f"(at most 2**63-1): {df[c].iloc[row]!r}")
        out[c] = vals.astype(np.int64)
    if inclusive_end:
        out["upper"] += 1
    if (out["size"] < 0).any():
        row = int(np.flatnonzero((out["size"] < 0).to_numpy())[0])
        raise PyinterposeError(f"{path}: row {row + 2}: negative size")
    if (out["upper"] < out["lower"]).any():
        row = int(np.flatnonzero((out["upper"] < out["lower"]).to_numpy())[0])
        raise PyinterposeError(f"{path}: row {row + 2}: upper < lower")
    if out["id"].duplicated().any():
        dup = out["id"][out["id"].duplicated()].iloc[0]
        raise PyinterposeError(f"{path}: duplicate id {dup!r}")
    return out


def write_minimalloc_csv(df: pd.DataFrame, path: str) -> None:
    """Write ``id,lower,upper,size`` (plus ``offset`` when present) as MiniMalloc CSV."""
    cols = PROBLEM_COLUMNS + (["offset"] if "offset" in df.columns else [])
    missing = [c for c in PROBLEM_COLUMNS if c not in df.columns]
    if missing:
        raise PyinterposeError(f"problem table lacks column(s) {', '.join(missing)}")
    from ...outfile import atomic_path

    with atomic_path(path) as tmp:
        df[cols].to_csv(tmp, index=False)


def arrays(problem: pd.DataFrame) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    return (problem["lower"].to_numpy(np.int64), problem["upper"].to_numpy(np.int64),
            problem["size"].to_numpy(np.int64))


def load(lower, upper, size) -> int:
    """LOAD: the largest total size live at one time (half-open intervals)."""
    lower = np.asarray(lower, np.int64)
    upper = np.asarray(upper, np.int64)
    size = np.asarray(size, np.int64)
    keep = (upper > lower) & (size > 0)
    if not keep.any():
        return 0
    t = np.concatenate([lower[keep], upper[keep]])
    d = np.concatenate([size[keep], -size[keep]])
    order = np.lexsort((d, t))  # at equal time, ends (negative) first
    return int(np.cumsum(d[order]).max())


def components(lower, upper) -> list[np.ndarray]:
    """Split buffers into groups with no lifetime overlap between groups (cut at
    times no buffer spans); each group can be planned on its own."""
    lower = np.asarray(lower, np.int64)
    upper = np.asarray(upper, np.int64)
    n = len(lower)
    if n == 0:
        return []
    order = np.lexsort((upper, lower))
    reach = np.maximum.accumulate(upper[order])
    cut = np.flatnonzero(lower[order][1:] >= reach[:-1]) + 1
    return np.split(order, cut)
