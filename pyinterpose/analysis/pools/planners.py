"""Offline, lifetime-aware offset planners over a problem table (id, lower, upper, size).

* ``smartpool-bf`` / ``smartpool-ff`` — SINGA SmartPool (Zhang et al., arXiv 1903.06631;
  apache/singa PR #412 ``SmartMemPool``): size descending, earliest malloc first on
  ties; each block goes into the best-fitting (smallest) / first (lowest) gap among
  the already placed blocks whose lifetimes overlap it, else on top.  Cross-iteration
  blocks get SINGA's doubled region: blocks allocated in the window and freed after it
  (``crossing == "out"``) are coloured among themselves into [0, X); their twins from
  the previous iteration (``"in"``: allocated before, freed inside) go into the backup
  copy [X, X + max(X, height of the "in" blocks)); everything else (``"inner"`` and
  ``"through"`` blocks, the latter alive over the whole window so they simply stack)
  is coloured above both regions (``"kept"`` blocks, never freed, are treated as inner).  Without a ``crossing`` column all blocks are inner.
* ``greedy-size`` — TFLite greedy by size (Pisarchyk & Lee, arXiv 2001.03288): size
  descending (stable), best fit among lifetime-overlapping placed blocks.
* ``xla-heap`` — XLA ``GlobalDecreasingSizeBestFitHeap``: best fit under the spatial
  order (size desc, duration desc, id) and the temporal order (duration desc, size
  desc); the smaller heap wins, as ``ChooseBestHeapAlgorithm`` does.
* ``optimal`` — :mod:`.exact`: with a capacity, a decision search; without one, the
  smallest capacity found between LOAD and the best heuristic within the time limit.

Every plan is validated before it is returned (:func:`.problem.validate_plan`).
"""
from __future__ import annotations

import os
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from ...errors import PyinterposeError
from . import exact
from .greedy import greedy_place, placement_order
from .problem import arrays, load, validate_plan

PLANNERS = ("smartpool-bf", "smartpool-ff", "greedy-size", "xla-heap", "optimal")


@dataclass
class Plan:
    strategy: str
    offsets: np.ndarray
    peak_bytes: int
    seconds: float
    optimal: bool | None = None       # only for "optimal"
    details: dict = field(default_factory=dict)


def place(lower, upper, size, strategy: str) -> np.ndarray:
    """Offsets from one heuristic (no validation, no cross-iteration handling)."""
    lower, upper, size = (np.asarray(a, np.int64) for a in (lower, upper, size))
    if strategy == "greedy-size":
        return greedy_place(lower, upper, size, placement_order("size", lower, upper, size), True)
    if strategy in ("smartpool-bf", "smartpool-ff"):
        return greedy_place(lower, upper, size, placement_order("smartpool", lower, upper, size),
                       strategy == "smartpool-bf")
    if strategy == "xla-heap":
        # both orders at once (the C loop runs without the GIL); the lower heap wins,
        # the spatial one on ties, as ChooseBestHeapAlgorithm keeps the first best
        orders = [placement_order(kind, lower, upper, size) for kind in ("spatial", "temporal")]
        if len(size) >= 20000 and (os.cpu_count() or 1) > 1:
            with ThreadPoolExecutor(2) as ex:
                offs = list(ex.map(lambda o: greedy_place(lower, upper, size, o, True), orders))
        else:
            offs = [greedy_place(lower, upper, size, o, True) for o in orders]
        heights = [int((o + size).max()) if len(size) else 0 for o in offs]
        return offs[int(np.argmin(heights))]
    raise PyinterposeError(f"unknown planner {strategy!r} (choose from {', '.join(PLANNERS)})")


def _smartpool(problem: pd.DataFrame, best_fit: bool) -> tuple[np.ndarray, dict]:
    lower, upper, size = arrays(problem)
    strategy = "smartpool-bf" if best_fit else "smartpool-ff"
    crossing = problem["crossing"].astype(str).to_numpy() if "crossing" in problem else np.full(len(size), "inner")
    out_m, in_m = crossing == "out", crossing == "in"
    rest = ~(out_m | in_m)
    offsets = np.zeros(len(size), np.int64)

    def colour(mask):
        if not mask.any():
            return 0
        off = place(lower[mask], upper[mask], size[mask], strategy)
        offsets[mask] = off
        return int((off + size[mask]).max())

    x = colour(out_m)
    h_in = colour(in_m)
    offsets[in_m] += x
    base = x + max(x, h_in)
    colour(rest)
    offsets[rest] += base
    return offsets, {"cross_region_bytes": x, "backup_region_bytes": max(x, h_in),
                     "cross_blocks": int(out_m.sum() + in_m.sum())}


def plan(problem: pd.DataFrame, strategy: str, time_limit: float = 10.0,
         capacity: int | None = None) -> Plan:
    """Plan ``problem`` with one strategy; the plan is validated (and within
    ``capacity`` for ``optimal`` when a capacity is given).

    For heuristics a capacity is only checked by the caller (``peak_bytes``)."""
    if strategy not in PLANNERS:
        raise PyinterposeError(f"unknown planner {strategy!r} (choose from {', '.join(PLANNERS)})")
    t0 = time.perf_counter()
    lower, upper, size = arrays(problem)
    details: dict = {}
    optimal = None
    if strategy in ("smartpool-bf", "smartpool-ff"):
        offsets, details = _smartpool(problem, strategy == "smartpool-bf")
    elif strategy == "optimal":
        if capacity is not None:
            r = exact.solve(lower, upper, size, capacity, time_limit)
            details = {"status": r.status, "nodes": r.nodes}
            if r.status != "found":
                return Plan(strategy, None, -1, time.perf_counter() - t0, False, details)
            offsets = r.offsets
            optimal = bool(int((offsets + size).max(initial=0)) == load(lower, upper, size))
        else:
            # start from the best heuristic, then squeeze the capacity down
            cands = [place(lower, upper, size, s) for s in ("greedy-size", "xla-heap")]
            start = min(cands, key=lambda o: int((o + size).max(initial=0)))
            r = exact.minimize_capacity(lower, upper, size, time_limit, start)
            offsets = r.offsets
            optimal = r.details["optimal"]
            details = {"nodes": r.nodes, "probes": len(r.details["probes"]),
                       "heuristic_start_bytes": int((start + size).max(initial=0))}
    else:
        offsets = place(lower, upper, size, strategy)
    peak = validate_plan(lower, upper, size, offsets,
                         capacity if (strategy == "optimal" and capacity is not None) else None)
    return Plan(strategy, offsets, peak, time.perf_counter() - t0, optimal, details)
