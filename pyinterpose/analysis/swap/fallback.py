"""Budget mode never does worse than no-overhead (issue 33.3).

A budget schedule that stalls the run must buy memory the no-overhead schedule (which never stalls) does
not reach; otherwise the no-overhead schedule is what budget mode offers, marked ``fallback``."""
from __future__ import annotations

import dataclasses

from .schedule import SwapResult


def dominated(budget: SwapResult, free: SwapResult) -> bool:
    """True when ``budget`` costs time (or as much) without reaching a lower peak than ``free``."""
    return budget.peak_after >= free.peak_after and budget.stall_ns >= free.stall_ns and \
        (budget.stall_ns > free.stall_ns or budget.peak_after > free.peak_after)


def no_worse(results: list[SwapResult], free_of: dict[str, SwapResult]) -> list[SwapResult]:
    """``results`` with each dominated budget-mode result replaced by its strategy's no-overhead
    result (``free_of``: strategy -> no-overhead result), kept as a budget-mode row (its budget and
    ``budget_met`` against it) with ``fallback = "no-overhead"``."""
    out = []
    for r in results:
        free = free_of.get(r.strategy)
        if r.mode == "budget" and free is not None and dominated(r, free):
            r = dataclasses.replace(free, mode="budget", budget=r.budget, fallback="no-overhead")
        out.append(r)
    return out
