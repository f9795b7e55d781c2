"""Shared terminal helpers: the console, tables, byte/time formatting, progress.

Every command prints through these so the look is uniform: rich tables on a
TTY; plain text (no colour, no progress bars) when stdout is a pipe or file.
"""
from __future__ import annotations

import contextlib
import json
import math
import sys
from typing import Any, Iterable, Iterator, Sequence

from rich.console import Console
from rich.table import Table

from ..units import fmt_bytes, fmt_ns, fmt_pct, fmt_ratio  # noqa: F401  (the report's formatters)
from ..analysis.clock import clock_of

def is_tty(stream=None) -> bool:
    stream = stream or sys.stdout
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):
        return False


def console(stream=None) -> Console:
    """A rich Console on ``stream`` (stdout by default); plain when not a TTY."""
    stream = stream or sys.stdout
    tty = is_tty(stream)
    return Console(file=stream, force_terminal=tty, no_color=not tty, highlight=False,
                   soft_wrap=not tty, width=None if tty else 160)


def table(rows: Iterable[Sequence[Any]], columns: Sequence[str], title: str | None = None,
          right: Iterable[int] | None = None, show_header: bool = True) -> Table:
    """A rich Table; ``right`` = indices of right-justified (numeric) columns."""
    right = set(range(1, len(columns))) if right is None else set(right)
    t = Table(title=title, title_justify="left", show_edge=False, header_style="bold",
              show_header=show_header)
    for i, c in enumerate(columns):
        t.add_column(c, justify="right" if i in right else "left")
    for r in rows:
        t.add_row(*["" if v is None else str(v) for v in r])
    return t


def print_table(rows, columns, title=None, right=None, out: Console | None = None,
                show_header: bool = True) -> None:
    (out or console()).print(table(rows, columns, title=title, right=right, show_header=show_header))


def print_kv(pairs: Iterable[tuple[str, Any]], title: str | None = None,
             out: Console | None = None) -> None:
    """Two-column key/value table (headlines)."""
    print_table(list(pairs), ["", ""], title=title, right=[], out=out, show_header=False)


_PLAIN = frozenset({int, str, bool, type(None)})


def to_jsonable(obj: Any) -> Any:
    """Convert numpy/pandas scalars, arrays and frames into plain JSON types."""
    t = type(obj)       # the plain types first, by exact type (millions of calls on big outputs)
    if t is str or t is bool or t is int or obj is None:
        return obj
    if t is dict:
        return {k if type(k) is str else str(k): to_jsonable(v) for k, v in obj.items()}
    if t is list:
        if all(type(x) is dict for x in obj) and all(type(k) is str and type(v) in _PLAIN
                                                     for x in obj for k, v in x.items()):
            return obj          # rows of plain values (e.g. 51 k iterations): nothing to convert
        return [to_jsonable(x) for x in obj]
    import numpy as np
    import pandas as pd

    if isinstance(obj, (bool, str)):
        return obj
    if isinstance(obj, (int,)):
        return int(obj)
    if isinstance(obj, float):
        return None if (math.isnan(obj) or math.isinf(obj)) else obj
    if isinstance(obj, np.bool_):
        return bool(obj)
    if isinstance(obj, np.integer):
        return int(obj)
    if isinstance(obj, np.floating):
        return to_jsonable(float(obj))
    if isinstance(obj, np.ndarray):
        return [to_jsonable(x) for x in obj.tolist()]
    if isinstance(obj, pd.DataFrame):
        return [to_jsonable(r) for r in obj.to_dict(orient="records")]
    if isinstance(obj, pd.Series):
        return to_jsonable(obj.to_dict())
    if isinstance(obj, dict):
        return {str(k): to_jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple, set)):
        return [to_jsonable(x) for x in obj]
    if hasattr(obj, "__dataclass_fields__"):
        return {k: to_jsonable(getattr(obj, k)) for k in obj.__dataclass_fields__}
    import collections.abc

    if isinstance(obj, collections.abc.Sequence) and not isinstance(obj, (bytes, bytearray)):
        return [to_jsonable(x) for x in obj]       # a sequence made when read (diff's steps)
    return str(obj)


def completeness(traces) -> dict:
    """``{"complete": bool}`` plus ``"incomplete_reason"`` when false, for one trace or several."""
    traces = [t for t in (traces if isinstance(traces, (list, tuple)) else [traces]) if t is not None]
    reasons = []
    for t in traces:
        if not t.meta.get("complete", True):
            why = t.meta.get("incomplete_reason") or "incomplete"
            reasons.append(f"{t.path}: {why}" if len(traces) > 1 and t.path else why)
    out: dict = {"complete": not reasons}
    if reasons:
        out["incomplete_reason"] = "; ".join(reasons)
    return out


def print_json(obj: Any, stream=None, trace=None) -> None:
    """One JSON object on stdout (``--json``).  ``trace`` (one or a list): the object also says whether
    the trace(s) it was computed from are complete (``complete``, ``incomplete_reason``)."""
    stream = stream or sys.stdout
    if trace is not None and isinstance(obj, dict):
        obj = {**obj, **completeness(trace)}
        if "clock" not in obj and not isinstance(trace, (list, tuple)):
            obj = {**obj, **clock_of(trace).as_dict()}
    # a top-level value with json_chunks() (diff's steps: ~450 k rows at 100 M events) is written from
    # its chunks where it stands, not made into Python objects and one string first: the same bytes
    lazy = [k for k, v in obj.items() if hasattr(v, "json_chunks")] if isinstance(obj, dict) else []
    if not lazy:
        stream.write(json.dumps(to_jsonable(obj), indent=None, separators=(",", ":")) + "\n")
        stream.flush()
        return
    import uuid

    mark = {k: f"\0pyinterpose-json-{uuid.uuid4().hex}-{i}\0" for i, k in enumerate(lazy)}
    text = json.dumps(to_jsonable({k: mark.get(k, v) for k, v in obj.items()}), indent=None,
                      separators=(",", ":"))
    for k in lazy:
        head, text = text.split(json.dumps(mark[k]), 1)
        stream.write(head)
        for chunk in obj[k].json_chunks():
            stream.write(chunk)
    stream.write(text + "\n")
    stream.flush()


@contextlib.contextmanager
def progress(description: str, enabled: bool | None = None, stream=None) -> Iterator[Any]:
    """A transient spinner/bar while a long load or analysis runs.

    Yields an object with ``update(fraction)``; a no-op when stdout/stderr is
    not a TTY (``enabled=None``) or ``enabled=False``."""
    stream = stream or sys.stderr
    if enabled is None:
        enabled = is_tty(stream)
    if not enabled:
        yield _NoProgress()
        return
    from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn  # lazy: rich progress only for a terminal

    con = Console(file=stream)
    with Progress(SpinnerColumn(), TextColumn("{task.description}"), BarColumn(),
                  TimeElapsedColumn(), console=con, transient=True) as p:
        task = p.add_task(description, total=None)
        yield _Progress(p, task)


class _NoProgress:
    def update(self, fraction: float | None = None, description: str | None = None) -> None:
        pass


class _Progress:
    def __init__(self, p, task):
        self._p, self._task = p, task

    def update(self, fraction: float | None = None, description: str | None = None) -> None:
        kw: dict[str, Any] = {}
        if fraction is not None:
            kw.update(total=1.0, completed=max(0.0, min(1.0, fraction)))
        if description is not None:
            kw["description"] = description
        self._p.update(self._task, **kw)
