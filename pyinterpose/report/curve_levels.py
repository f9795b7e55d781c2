"""The memory curve of a long run, summarised for the report's timeline: min/max per bucket at several
zoom levels (a multi-resolution pyramid), each level cut into tiles the page decodes only when the
view needs them.

A curve of ``n`` values (live bytes after each event, the event index its x axis) is summarised at
levels ``0 .. L-1``; level ``l`` has ``tile * factor**l`` buckets (powers of two: 2 048, 16 384,
131 072, 1 048 576 by default), bucket ``j`` holding the events ``[j*n//B, (j+1)*n//B)``; with
``B <= n`` no bucket is empty, and each level's edges are a subset of the next's (a bucket of level
``l`` is exactly ``factor`` buckets of level ``l+1``).  Per bucket: the least and the greatest value of
the curve over its events, and the time of its first event.  The step curve between two events keeps
the value after the first, so over the bucket's x range ``[first, last + 1)`` the curve lies within
``[min, max]`` and reaches both.

Pure functions over numpy arrays; :func:`pack_level` makes the page's tiles (delta-coded, gzip,
base64: the same encoding as the exact timeline's arrays).
"""
from __future__ import annotations

import base64
import zlib
from typing import Any

import numpy as np

TILE = 2048           # buckets per tile: about a screen's width of pixels
FACTOR = 8            # each level has this many times the buckets of the one above
MAX_LEVELS = 4        # 2 048 .. 1 048 576 buckets: ~7 MB of tiles at most, whatever the trace's length


def bucket_edges(n: int, buckets: int) -> np.ndarray:
    """The ``buckets + 1`` event indices that cut ``n`` events into ``buckets`` buckets: ``j*n//buckets``."""
    return (np.arange(buckets + 1, dtype=np.int64) * np.int64(n)) // np.int64(buckets)


def level_sizes(n: int, tile: int = TILE, factor: int = FACTOR, max_levels: int = MAX_LEVELS) -> list[int]:
    """Buckets per level: ``tile * factor**l`` for as many levels as have no more buckets than events
    (at least one level, of ``min(tile, n)`` buckets, for a curve of ``n >= 1`` events)."""
    if n <= 0:
        return []
    out = [min(tile, n)]
    while len(out) < max_levels and out[-1] * factor <= n and out[-1] == tile * factor ** (len(out) - 1):
        out.append(out[-1] * factor)
    return out


def levels(values: np.ndarray, times: np.ndarray | None = None, tile: int = TILE, factor: int = FACTOR,
           max_levels: int = MAX_LEVELS) -> list[dict[str, np.ndarray]]:
    """Per level (coarsest first): ``{"lo", "hi"}`` (int64 min and max of ``values`` per bucket) and
    ``"t"`` (``times`` of each bucket's first event, when given).  The finest level is reduced from
    the curve, each coarser one from the level below it."""
    v = np.asarray(values)
    n = len(v)
    sizes = level_sizes(n, tile, factor, max_levels)
    if not sizes:
        return []
    fine = sizes[-1]
    starts = bucket_edges(n, fine)[:-1]
    lo = np.minimum.reduceat(v, starts).astype(np.int64)
    hi = np.maximum.reduceat(v, starts).astype(np.int64)
    t = np.asarray(times)[starts].astype(np.int64) if times is not None else None
    out = [None] * len(sizes)
    out[-1] = {"lo": lo, "hi": hi, **({"t": t} if t is not None else {})}
    for k in range(len(sizes) - 2, -1, -1):
        step = sizes[k + 1] // sizes[k]
        below = out[k + 1]
        idx = np.arange(0, sizes[k + 1], step)
        out[k] = {"lo": np.minimum.reduceat(below["lo"], idx), "hi": np.maximum.reduceat(below["hi"], idx),
                  **({"t": below["t"][::step].copy()} if t is not None else {})}
    return out


def pack_deltas(a: np.ndarray) -> dict[str, Any]:
    """int64 values as ``base`` (the first) and deltas (the first 0), as int32 when every delta fits, else
    float64 (exact below 2**53), little-endian, gzip (level 1), base64."""
    a = np.asarray(a, np.int64)
    base = int(a[0]) if len(a) else 0
    d = np.diff(a, prepend=np.int64(base))
    if len(d) == 0 or (int(d.min()) >= -(1 << 31) and int(d.max()) < (1 << 31)):
        raw, dtype = d.astype("<i4").tobytes(), "int32"
    else:
        raw, dtype = d.astype("<f8").tobytes(), "float64"
    z = zlib.compressobj(1, zlib.DEFLATED, 31)
    return {"dtype": dtype, "n": int(len(d)), "base": base, "b64": base64.b64encode(z.compress(raw) + z.flush()).decode("ascii")}


def pack_level(level: dict[str, np.ndarray], tile: int = TILE) -> list[dict[str, Any]]:
    """One level's tiles: per ``tile`` buckets, its lo, hi and t arrays (each delta-coded from its first value)."""
    n = len(level["lo"])
    out = []
    for s in range(0, n, tile):
        out.append({k: pack_deltas(level[k][s:s + tile]) for k in ("lo", "hi", "t") if k in level})
    return out
