"""The exact planner (``optimal``): a MiniMalloc-style search, C inner loop.

Python side (this module):
  * strips buffers that span the whole horizon (there is always an optimal plan
    with them stacked at the bottom: move them down and every other buffer keeps
    its relative order) and buffers that conflict with nothing;
  * splits the rest into time-disjoint pieces and solves each on its own;
  * for each piece runs the static preorders WAT, TAW, TWA in rotation (W =
    lifetime width, A = area = width x size, T = the largest cross-section total
    the buffer touches, Z = size; all descending, ties by input order) with a node
    limit that starts at 2 x the number of buffers and doubles each round, under one
    wall-clock deadline;
  * on a machine with more than one core, a second search (its own C context, in a
    second thread: the C loop runs without the GIL) rotates the size-led preorders
    ZWA, TZW, ZTW at the same time; the first answer (a plan, or a proof that none
    fits) stops the other.  The two rotations fail on different instances: on
    generated tilings the size-led ones often finish in 0.1 s where WAT needs
    seconds, and the reverse on others;
  * ``minimize_capacity`` binary-searches the capacity between LOAD and a
    heuristic plan's height and says whether the result is proven optimal.

C side (native/planner/planner.c): the depth-first search itself.
"""
from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass, field

import numpy as np

from .greedy import greedy_place, placement_order
from .problem import InvalidPlanError, components, load, validate_plan

FOUND, INFEASIBLE, NODE_LIMIT, TIMEOUT = 1, 0, 2, 3
HEURISTICS = ("WAT", "TAW", "TWA")          # MiniMalloc's rotation
PORTFOLIO = ("ZWA", "TZW", "ZTW")           # the second thread's rotation
PARALLEL_MIN_BUFFERS = 40                   # below this one search is quicker than starting a thread
MAX_EXACT_BUFFERS = 3000  # per independent piece; the search keeps O(n^2) int32 of scratch


def _lib():
    try:
        from ..._core import ffi, lib
    except ImportError as e:  # pragma: no cover - depends on the build
        raise RuntimeError("pyinterpose._core is not built (python pyinterpose/_build.py core)") from e
    return ffi, lib


@dataclass
class ExactResult:
    status: str                     # "found" | "infeasible" | "timeout"
    offsets: np.ndarray | None
    nodes: int = 0
    seconds: float = 0.0
    details: dict = field(default_factory=dict)


def preorder(heuristic: str, width: np.ndarray, area: np.ndarray, total: np.ndarray,
             size: np.ndarray | None = None) -> np.ndarray:
    """Static order for one heuristic string over the keys W, A, T, Z (descending)."""
    keys = {"W": width, "A": area, "T": total, "Z": size}
    cols = [np.arange(len(width))] + [-keys[c] for c in reversed(heuristic)]
    return np.lexsort(cols).astype(np.int32)


class _Piece:
    """A C search context for one independent group of buffers."""

    def __init__(self, lower, upper, size, heuristics=HEURISTICS):
        self.ffi, self.lib = _lib()
        self.n = len(size)
        self._arrs = [np.ascontiguousarray(a, np.int64) for a in (lower, upper, size)]
        ptr = [self.ffi.cast("int64_t *", a.ctypes.data) for a in self._arrs]
        self.ctx = self.lib.pi_dsa_new(self.n, *ptr)
        if self.ctx == self.ffi.NULL:
            raise MemoryError("pi_dsa_new")
        self.ctx = self.ffi.gc(self.ctx, self.lib.pi_dsa_free)
        totals = np.zeros(self.n, np.int64)
        self.lib.pi_dsa_totals(self.ctx, self.ffi.cast("int64_t *", totals.ctypes.data))
        width = self._arrs[1] - self._arrs[0]
        self.orders = [(h, preorder(h, width, width * self._arrs[2], totals, self._arrs[2])) for h in heuristics]
        self.load = int(self.lib.pi_dsa_load(self.ctx))

    def search(self, capacity: int, heuristic: str, order: np.ndarray, node_limit: int, seconds: float,
               stop: np.ndarray | None = None):
        out = np.zeros(self.n, np.int64)
        nodes = np.zeros(1, np.int64)
        stop_ptr = self.ffi.NULL if stop is None else self.ffi.cast("int32_t *", stop.ctypes.data)
        st = self.lib.pi_dsa_search(self.ctx, int(capacity), self.ffi.cast("int32_t *", order.ctypes.data),
                                    heuristic.encode(), int(node_limit), float(seconds), stop_ptr,
                                    self.ffi.cast("int64_t *", out.ctypes.data),
                                    self.ffi.cast("int64_t *", nodes.ctypes.data))
        if st < 0:
            raise MemoryError("pi_dsa_search")
        return st, out, int(nodes[0])

    def rotate(self, capacity: int, deadline: float, stop: np.ndarray | None = None):
        """Round robin over this context's preorders with a doubling node limit."""
        node_limit = 2 * max(self.n, 1)
        nodes = 0
        while True:
            for heuristic, order in self.orders:
                left = deadline - time.monotonic()
                if left <= 0 or (stop is not None and stop[0]):
                    return TIMEOUT, None, nodes
                st, out, k = self.search(capacity, heuristic, order, node_limit, left, stop)
                nodes += k
                if st == FOUND:
                    return FOUND, out, nodes
                if st in (INFEASIBLE, TIMEOUT):
                    return st, None, nodes
            node_limit *= 2

    def solve(self, capacity: int, deadline: float) -> tuple[int, np.ndarray | None, int]:
        """The rotation here, and the portfolio rotation in a second thread when
        there is a second core; the first answer wins."""
        if self.load > capacity:
            return INFEASIBLE, None, 0
        if self.n < PARALLEL_MIN_BUFFERS or (os.cpu_count() or 1) < 2:
            return self.rotate(capacity, deadline)
        other = _Piece(*self._arrs, heuristics=PORTFOLIO)
        stop = np.zeros(1, np.int32)
        results: list = [None, None]

        def run(i, piece):
            try:
                results[i] = piece.rotate(capacity, deadline, stop)
            except BaseException as e:  # noqa: BLE001 - re-raised below
                results[i] = e
            if isinstance(results[i], tuple) and results[i][0] in (FOUND, INFEASIBLE):
                stop[0] = 1

        th = threading.Thread(target=run, args=(1, other), daemon=True)
        th.start()
        run(0, self)
        th.join()
        for r in results:
            if isinstance(r, BaseException):
                raise r
        nodes = results[0][2] + results[1][2]
        for r in results:
            if r[0] in (FOUND, INFEASIBLE):
                return r[0], r[1], nodes
        return TIMEOUT, None, nodes


def solve(lower, upper, size, capacity: int, time_limit: float = 10.0) -> ExactResult:
    """Find a packing of height <= capacity, or prove there is none, within time_limit s."""
    t0 = time.monotonic()
    deadline = t0 + max(time_limit, 0.0)
    lower = np.asarray(lower, np.int64)
    upper = np.asarray(upper, np.int64)
    size = np.asarray(size, np.int64)
    n = len(size)
    offsets = np.zeros(n, np.int64)
    if n == 0:
        return ExactResult("found", offsets)
    if (size > capacity).any() or load(lower, upper, size) > capacity:
        return ExactResult("infeasible", None, seconds=time.monotonic() - t0)
    live = np.flatnonzero((upper > lower) & (size > 0))
    nodes = 0
    pieces = components(lower[live], upper[live])
    status = "found"
    for piece in pieces:
        idx = live[piece]
        lo, up, sz = lower[idx], upper[idx], size[idx]
        full = (lo == lo.min()) & (up == up.max())
        base = int(sz[full].sum())
        offsets[idx[full]] = np.concatenate([[0], np.cumsum(sz[full])[:-1]]) if full.any() else []
        rest = idx[~full]
        if len(rest) == 0:
            continue
        if len(rest) > MAX_EXACT_BUFFERS:
            return ExactResult("timeout", None, nodes, time.monotonic() - t0,
                               {"reason": f"piece of {len(rest)} buffers exceeds {MAX_EXACT_BUFFERS}"})
        st, out, k = _Piece(lower[rest], upper[rest], size[rest]).solve(capacity - base, deadline)
        nodes += k
        if st == FOUND:
            offsets[rest] = out + base
        elif st == INFEASIBLE:
            return ExactResult("infeasible", None, nodes, time.monotonic() - t0)
        else:
            status = "timeout"
            break
    if status != "found":
        return ExactResult(status, None, nodes, time.monotonic() - t0)
    validate_plan(lower, upper, size, offsets, capacity)
    return ExactResult("found", offsets, nodes, time.monotonic() - t0)


def minimize_capacity(lower, upper, size, time_limit: float = 10.0,
                      start_offsets: np.ndarray | None = None) -> ExactResult:
    """Smallest height found within time_limit: binary search over capacity between
    LOAD (a lower bound) and the height of ``start_offsets`` (a valid heuristic plan).

    ``details["optimal"]`` is True when the height equals LOAD or the capacity one
    below the height was proven infeasible (infeasibility is monotone in capacity)."""
    t0 = time.monotonic()
    deadline = t0 + time_limit
    lower = np.asarray(lower, np.int64)
    upper = np.asarray(upper, np.int64)
    size = np.asarray(size, np.int64)
    lb = load(lower, upper, size)
    if start_offsets is None:
        start_offsets = greedy_place(lower, upper, size, placement_order("size", lower, upper, size), True)
    best = np.asarray(start_offsets, np.int64)
    hi = validate_plan(lower, upper, size, best) if len(size) else 0
    lo = lb              # search range [lo, hi]; hi is always achieved
    max_infeasible = lb - 1  # infeasibility is monotone: a proof at c covers all c' <= c
    nodes = 0
    probes = []
    # First try LOAD itself (tight instances are common), then bisect.
    cap = lo
    while lo < hi:
        left = deadline - time.monotonic()
        if left <= 0.01:
            break
        # give each probe a fair share, but never less than 1/8 of what is left
        r = solve(lower, upper, size, cap, time_limit=max(left / 4, min(left, 0.25)))
        nodes += r.nodes
        probes.append({"capacity": int(cap), "status": r.status, "seconds": round(r.seconds, 4)})
        if r.status == "found":
            best = r.offsets
            hi = validate_plan(lower, upper, size, best, cap)
        elif r.status == "infeasible":
            lo = cap + 1
            max_infeasible = max(max_infeasible, cap)
        else:
            lo = cap + 1  # unknown: look above, remember it is not proven
        cap = (lo + hi) // 2
    optimal = bool(max_infeasible >= hi - 1)
    if len(size):
        validate_plan(lower, upper, size, best)
    return ExactResult("found", best, nodes, time.monotonic() - t0,
                       {"optimal": optimal, "load": lb, "height": int(hi), "probes": probes})


__all__ = ["solve", "minimize_capacity", "ExactResult", "InvalidPlanError", "preorder", "HEURISTICS", "PORTFOLIO"]
