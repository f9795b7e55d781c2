"""Reporters: every section of the HTML report is one, behind one protocol (as memray's reporters are).

A :class:`Reporter` names its section (``id``, ``title``, ``explain``) and fills it: ``fill(section, ctx)``
reads what it needs from ``ctx`` (a :class:`ReportContext`: the trace, the options, and the results of the
analyses the report runs once for all sections), adds facts, figures, tables and notes to the section, and
puts its numbers under its own keys in ``ctx.heads`` (the headlines ``report --json`` prints).  ``applies``
says whether the section appears at all; ``fill`` returning ``False`` drops it too (nothing to show).  A
failure inside ``fill`` becomes a note in that section only, never a broken report.

The reporters, in page order, are listed in one place: :data:`pyinterpose.report.registry.REPORTERS`.
Adding a section is a reporter in its own module and one line there (docs/architecture.md).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

import pandas as pd

from ..analysis.guarded import Result
from ..trace.model import Trace
from .sections import Section


def safe(section: Section, fn: Callable[[], Any]) -> Any:
    """Run a section builder; any failure becomes a note in that section only (and None is returned)."""
    try:
        return fn()
    except Exception as e:  # noqa: BLE001 - one section must not break the report
        section.notes.append(f"not available: {type(e).__name__}: {e}")
        return None


@dataclass
class ReportContext:
    """What every reporter may read: the trace, the report's options, and the analyses' results
    (:class:`pyinterpose.analysis.guarded.Result`: a value, or a "not available" note)."""

    trace: Trace
    bandwidth: float | None = None
    time_limit: float = 5.0
    strategies: Any = None
    top: int = 15
    heads: dict[str, Any] = field(default_factory=dict)   # the headlines, filled by the reporters
    blocks: pd.DataFrame | None = None     # device blocks' device, freed, size (not a copy of every column)
    reserved_view: bool = False
    iterations: Result = field(default_factory=Result)
    classes: Result = field(default_factory=Result)       # block_id -> lifetime class
    access: Result = field(default_factory=Result)        # access.analyze()
    ati_figure: Any = None       # the access section's figure, drawn early (html_sections.ati_figure)
    lifetimes: Result = field(default_factory=Result)
    pools: Result = field(default_factory=Result)         # pools.evaluate()
    timelines: dict | None = None          # device -> interactive timeline payload (None: static figure)
    wait_swap: Callable[[], tuple[Result, Result]] | None = None
    step: Callable[..., None] = lambda *a, **k: None      # progress: step(fraction, label)
    _swap: tuple[Result, Result] | None = None

    def swap(self) -> tuple[Result, Result]:
        """(swap.evaluate(), swap.pareto()) results: the schedules run on a worker thread while the
        sections before them are built; the first call waits for them."""
        if self._swap is None:
            self._swap = self.wait_swap() if self.wait_swap is not None else (Result(), Result())
        return self._swap


def _always(ctx: ReportContext) -> bool:
    return True


@dataclass(frozen=True)
class Reporter:
    """One section of the report (see the module's docstring)."""

    id: str
    title: str
    fill: Callable[[Section, ReportContext], Any]
    explain: str | Callable[[ReportContext], str] = ""
    applies: Callable[[ReportContext], bool] = _always
    progress: tuple[float, str] | None = None    # (fraction, label) the progress bar shows before it runs

    def section(self, ctx: ReportContext) -> Section | None:
        """This reporter's filled section, or None when it does not apply or has nothing to show."""
        if not self.applies(ctx):
            return None
        if self.progress is not None:
            ctx.step(*self.progress)
        s = Section(self.id, self.title, self.explain(ctx) if callable(self.explain) else self.explain)
        return None if safe(s, lambda: self.fill(s, ctx)) is False else s
