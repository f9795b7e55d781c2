"""Calls into the analyses for reports, exports and compare, each guarded.

Each call returns a :class:`Result`: ``value`` (the analysis' own object) or
``None`` with ``note`` = "not available: <reason>", so one failing or missing
analysis degrades one report section, never the whole report.
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any, Callable

import pandas as pd

from ..errors import PyinterposeError
from ..trace.model import Trace
from ..trace.piecewise import piece_rows


@dataclass
class Result:
    value: Any = None
    note: str = ""

    @property
    def ok(self) -> bool:
        return self.value is not None


def _call(module: str, func: str, *args, **kwargs) -> Result:
    try:
        mod = importlib.import_module(f"pyinterpose.analysis.{module}")
    except ImportError as e:
        return Result(None, f"not available: the {module} analysis is not in this build ({e})")
    fn: Callable | None = getattr(mod, func, None)
    if fn is None:
        return Result(None, f"not available: pyinterpose.analysis.{module}.{func} is missing")
    try:
        return Result(fn(*args, **kwargs), "")
    except PyinterposeError as e:
        return Result(None, f"not available: {e}")
    except Exception as e:  # an analysis bug must not take the whole report down
        return Result(None, f"not available: {module}.{func} failed ({type(e).__name__}: {e})")


def iterations(trace: Trace) -> Result:
    return _call("iterations", "find_iterations", trace)


def lifetimes_summary(trace: Trace, iters=None) -> Result:
    return _call("lifetimes", "summary", trace, iters=iters)


def _as_class_series(obj: Any) -> pd.Series | None:
    """block_id -> class name from whatever classify() returns."""
    if isinstance(obj, pd.Series):
        return obj.astype(object)
    if isinstance(obj, pd.DataFrame):
        for col in ("class", "lifetime_class", "category", "cls"):
            if col in obj.columns:
                idx = obj["block_id"] if "block_id" in obj.columns else obj.index
                return pd.Series(obj[col].astype(str).to_numpy(), index=pd.Index(idx, name="block_id"))
    return None


def block_classes(trace: Trace, iters=None) -> Result:
    """block_id -> class (persistent, per_iteration, ...) from lifetimes.classify; on a long trace (more
    blocks than a piece) from lifetimes.class_series, the same classes made a piece at a time without
    classify's table (~120 bytes a block)."""
    long = len(trace.blocks) > piece_rows()
    r = _call("lifetimes", "class_series" if long else "classify", trace, iters=iters)
    if not r.ok or long:
        return r
    s = _as_class_series(r.value)
    if s is None:
        return Result(None, f"not available: lifetimes.classify returned {type(r.value).__name__}")
    return Result(s, "")


def access(trace: Trace, bandwidth: float | None = None, iters=None, between=None) -> Result:
    return _call("access", "analyze", trace, bandwidth=bandwidth, iters=iters,
                 **({} if between is None else {"between": between}))


def pools(trace: Trace, strategies=None, time_limit: float = 5.0) -> Result:
    return _call("pools", "evaluate", trace, strategies=strategies, time_limit=time_limit)


def swap(trace: Trace, **kw) -> Result:
    return _call("swap", "evaluate", trace, **kw)


def swap_pareto(trace: Trace, **kw) -> Result:
    return _call("swap", "pareto", trace, **kw)


def swap_work(problem) -> Result:
    """:class:`pyinterpose.analysis.swap.SwapWork` on a prepared problem: the swap evaluation and
    the Pareto sweep as one list of tasks that threads work through."""
    return _call("swap", "SwapWork", problem)


def swap_work_results(work: Result) -> tuple[Result, Result]:
    """(the evaluation, the Pareto points) of a :func:`swap_work`, each a Result: a failure
    becomes the note of both, as :func:`_call` would make it."""
    if not work.ok:
        return work, work
    try:
        ev, points = work.value.results()
    except PyinterposeError as e:
        r = Result(None, f"not available: {e}")
        return r, r
    except Exception as e:  # an analysis bug must not take the whole report down
        r = Result(None, f"not available: swap failed ({type(e).__name__}: {e})")
        return r, r
    return Result(ev, ""), Result(points, "")
