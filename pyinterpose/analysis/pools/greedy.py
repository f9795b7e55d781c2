"""The greedy placement every heuristic planner is made of (pyinterpose.analysis.pools.planners), and the
exact planner's starting plan (pyinterpose.analysis.pools.exact)."""
from __future__ import annotations

import numpy as np


def greedy_place(lower, upper, size, order, best_fit: bool) -> np.ndarray:
    """Offsets of the blocks placed one by one in ``order``, each in the best-fitting (``best_fit``) or the
    first gap among the placed blocks whose lifetimes overlap it, else on top (native/planner)."""
    from ..._core import ffi, lib   # compiled: absent from a source tree that is not built

    lower = np.ascontiguousarray(lower, np.int64)
    upper = np.ascontiguousarray(upper, np.int64)
    size = np.ascontiguousarray(size, np.int64)
    order = np.ascontiguousarray(order, np.int32)
    out = np.zeros(len(size), np.int64)
    if len(size) == 0:
        return out
    h = lib.pi_greedy_place(len(size), ffi.cast("int64_t *", lower.ctypes.data),
                            ffi.cast("int64_t *", upper.ctypes.data), ffi.cast("int64_t *", size.ctypes.data),
                            ffi.cast("int32_t *", order.ctypes.data), 1 if best_fit else 0,
                            ffi.cast("int64_t *", out.ctypes.data))
    if h < 0:
        raise MemoryError("pi_greedy_place")
    return out


def placement_order(kind: str, lower, upper, size) -> np.ndarray:
    """The order a heuristic places the blocks in: "size", "smartpool", "spatial" or "temporal"."""
    idx = np.arange(len(size))
    dur = upper - lower
    if kind == "size":          # size desc, stable
        return np.lexsort((idx, -size))
    if kind == "smartpool":     # size desc, earliest malloc first
        return np.lexsort((idx, lower, -size))
    if kind == "spatial":
        return np.lexsort((idx, -dur, -size))
    if kind == "temporal":
        return np.lexsort((idx, -size, -dur))
    raise ValueError(kind)
