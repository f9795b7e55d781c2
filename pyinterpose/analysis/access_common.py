"""What the access analysis' in-memory path (:mod:`.access`) and its long-trace path (:mod:`.access_spill`)
both use: the swap cost, shares, the first rows of a key, a segment column's rows, the chunk size."""
from __future__ import annotations

import numpy as np

from ..trace import chunking
from .search import position


def swap_cost_ns(size: np.ndarray, bw) -> np.ndarray:
    """Time to swap a block out and back in: size/BW_d2h + size/BW_h2d + both latencies (ns)."""
    s = np.asarray(size, dtype=np.float64)
    return (bw.d2h_seconds(s) + bw.h2d_seconds(s)) * 1e9


def _share(part: float, whole: float) -> float | None:
    return float(part) / float(whole) if whole else None


def _top_order(key: np.ndarray, top: int) -> np.ndarray:
    """``np.argsort(key, kind="stable")[:top]`` without sorting all of ``key`` (no NaN in key)."""
    if top < 0 or len(key) <= 4 * top + 64:
        return np.argsort(key, kind="stable")[:top]
    kth = np.partition(key, top - 1)[top - 1]
    cand = np.flatnonzero(key <= kth)              # the first `top`, and any ties at the last value
    return cand[np.argsort(key[cand], kind="stable")[:top]]


def _repeat_rows(vals: np.ndarray, seg: np.ndarray, s: slice) -> np.ndarray:
    """``np.repeat(vals, segment lengths)[s]``: the value of each row's segment (``seg``: the
    segment starts, from 0) for the rows of ``s``, without the rows outside it."""
    j0 = position(seg, s.start, side="right") - 1
    j1 = position(seg, s.stop, side="left")
    b = np.append(seg[j0:j1], s.stop)
    b[0] = s.start
    return np.repeat(vals[j0:j1], np.diff(b))


def _step() -> int:
    """Rows per chunk of the per-row passes: 1 Mi, fewer when ``PYINTERPOSE_CHUNK_ROWS`` says so."""
    return min(1 << 20, chunking.chunk_rows())
