"""Tables as the report shows them: one unit per column, named in the header (:func:`format_frame`),
and identical rows folded into one (:func:`group_rows`)."""
from __future__ import annotations

import math

import numpy as np
import pandas as pd

_BYTE_KEYS = {"size", "bytes", "budget", "peak", "peak_after", "peak_before", "floor", "bound", "lower_bound",
              "capacity", "pool", "saved", "bytes_moved", "pool_bytes", "reserved", "live"}
_ID_COLS = {"block_id", "pid", "device", "seq", "stream", "kernel", "tid"}
_TIME_UNITS = ((1e9, "s", 3), (1e6, "ms", 2), (1e3, "us", 1), (1.0, "ns", 0))
_BYTE_UNITS = ((1 << 40, "TiB"), (1 << 30, "GiB"), (1 << 20, "MiB"), (1 << 10, "KiB"), (1, "B"))


def _col_kind(name: str) -> str:
    k = name.lower().replace(" ", "_")
    words = set(k.split("_"))
    if k in _ID_COLS:
        return "id"
    if words & {"fraction", "share", "pct", "fragmentation"}:
        return "pct"
    if "ratio" in words:
        return "ratio"
    if k.endswith("_ns") or words & {"ns", "time", "ati", "stall", "lifetime"}:
        return "time"
    if k in _BYTE_KEYS or "bytes" in k or words & {"size", "peak", "budget", "floor", "bound"}:
        return "bytes"
    return "number"


def _base_name(name: str) -> str:
    for suf in ("_ns", "_bytes", "_fraction"):
        if name.endswith(suf):
            return name[: -len(suf)]
    return name


def _prints_zero(x: float, dec: int) -> bool:
    """Would the non-zero magnitude ``x`` print as 0 with ``dec`` decimals?"""
    return 0 < x < 0.5 * 10.0 ** -dec


def _decimals(low: float, dec: int, most: int = 6) -> int:
    """``dec`` decimals, or more (up to ``most``) so that the smallest non-zero magnitude ``low`` does not
    print as 0."""
    while dec < most and _prints_zero(low, dec):
        dec += 1
    return dec


def format_frame(df: pd.DataFrame, max_rows: int = 30) -> pd.DataFrame:
    """Human formatting, one unit per column, named in the header: times in the one unit
    (s, ms, µs, ns) that fits the column's median value ("lifetime (ms)"), bytes likewise
    in binary units ("size (MiB)"), fractions as "(%)", ratios with three decimals, counts
    as integers with thousands separators, ids as plain integers; missing values "–".
    No value that is not zero prints as zero: a column whose smallest value would round to 0
    in that unit takes a smaller unit (or, for fractions and ratios, more decimals)."""
    df = df.head(max_rows)
    out = pd.DataFrame(index=df.index)
    for c in df.columns:
        col = df[c]
        name = str(c)
        if pd.api.types.is_bool_dtype(col) or (col.dtype == object and col.map(
                lambda v: isinstance(v, (bool, np.bool_)) or v is None).all() and col.notna().any()):
            out[name] = ["–" if v is None else ("yes" if v else "no") for v in col.tolist()]
            continue
        if not pd.api.types.is_numeric_dtype(col):
            out[name] = ["–" if v is None or (isinstance(v, float) and math.isnan(v)) else
                         ("yes" if v is True else "no" if v is False else str(v)) for v in col.tolist()]
            continue
        vals = col.astype(np.float64).to_numpy()
        fin = vals[np.isfinite(vals)]
        nz = np.abs(fin[fin != 0])
        top = float(np.median(nz)) if len(nz) else 0.0   # the unit that fits the typical value
        low = float(nz.min()) if len(nz) else 0.0        # ... unless it would print a real value as 0
        kind = _col_kind(name)
        if kind == "time":
            k = next((i for i, u in enumerate(_TIME_UNITS) if top >= u[0]), len(_TIME_UNITS) - 1)
            while k + 1 < len(_TIME_UNITS) and _prints_zero(low / _TIME_UNITS[k][0], _TIME_UNITS[k][2]):
                k += 1
            div, unit, dec = _TIME_UNITS[k]
            header, fmt = f"{_base_name(name)} ({unit})", (lambda v, d=div, p=dec: f"{v / d:,.{p}f}")
        elif kind == "bytes":
            k = next((i for i, u in enumerate(_BYTE_UNITS) if top >= 2 * u[0]), len(_BYTE_UNITS) - 1)
            while k + 1 < len(_BYTE_UNITS) and _prints_zero(low / _BYTE_UNITS[k][0], 1):
                k += 1
            div, unit = _BYTE_UNITS[k]
            dec = 0 if unit == "B" else 1
            header, fmt = f"{_base_name(name)} ({unit})", (lambda v, d=div, p=dec: f"{v / d:,.{p}f}")
        elif kind == "pct":
            dec = _decimals(100.0 * low, 1)
            header, fmt = f"{_base_name(name)} (%)", (lambda v, p=dec: f"{100.0 * v:,.{p}f}")
        elif kind == "ratio":
            dec = _decimals(low, 3)
            header, fmt = name, (lambda v, p=dec: f"{v:,.{p}f}")
        elif kind == "id":
            header, fmt = name, (lambda v: f"{int(v)}")
        else:
            integral = bool(len(fin)) and bool(np.all(fin == np.round(fin)))
            dec = _decimals(low, 3)
            header, fmt = name, ((lambda v: f"{int(v):,}") if integral else (lambda v, p=dec: f"{v:,.{p}f}"))
        out[header] = ["–" if not np.isfinite(v) else fmt(v) for v in vals]
    return out.reset_index(drop=True)


def group_rows(df: pd.DataFrame, keys: list[str], id_col: str = "block_id") -> pd.DataFrame:
    """Identical rows (equal ``keys``) folded into one: a leading ``blocks`` column with the
    count ("15 ×") and the ids listed (first and last when many); other columns take the
    first row's value, numeric ones their median when they differ."""
    if len(df) == 0:
        return df
    rows = []
    for _, g in df.groupby(keys, sort=False, dropna=False):
        r = g.iloc[0].copy()
        for c in g.columns:
            if c not in keys and c != id_col and pd.api.types.is_numeric_dtype(g[c]) \
                    and not pd.api.types.is_bool_dtype(g[c]) and g[c].nunique() > 1:
                r[c] = float(g[c].median())
        ids = g[id_col].astype(int).tolist() if id_col in g else []
        r = r.drop(labels=[id_col]) if id_col in r.index else r
        head = pd.Series({"blocks": f"{len(g)} ×" if len(g) > 1 else "1",
                          "block ids": ", ".join(map(str, ids)) if len(ids) <= 3 else
                          f"{ids[0]}, {ids[1]} … {ids[-1]}"})
        rows.append(pd.concat([head, r]))
    out = pd.DataFrame(rows).reset_index(drop=True)
    for c in out.columns:
        v = out[c].tolist()
        if v and all(isinstance(x, (int, float, np.integer, np.floating)) and not isinstance(x, (bool, np.bool_))
                     for x in v):
            out[c] = out[c].astype(np.float64)
        elif v and all(isinstance(x, (bool, np.bool_)) for x in v):
            out[c] = out[c].astype(bool)
    return out
