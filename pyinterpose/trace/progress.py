"""A progress bar on stderr for long reads (rich), or nothing.

``bar(description, enabled)`` is a context manager giving ``update(fraction, description=None)``;
disabled, ``update`` does nothing.  Callers enable it only when stderr is a terminal
(``report.text.load_trace``), so pipes and files never see one.  The bar is transient: gone
once the work is done."""
from __future__ import annotations

import contextlib
import sys


@contextlib.contextmanager
def bar(description: str, enabled: bool):
    if not enabled:
        yield lambda fraction, description=None: None
        return
    from rich.console import Console  # lazy: rich only for a progress bar on a terminal
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn  # lazy: rich only for a progress bar on a terminal

    with Progress(TextColumn("{task.description}"), BarColumn(), TextColumn("{task.percentage:>3.0f}%"),
                  TimeElapsedColumn(), console=Console(file=sys.stderr), transient=True) as p:
        task = p.add_task(description, total=1.0)

        def update(fraction, description=None):
            kw = {"completed": max(0.0, min(1.0, float(fraction)))}
            if description is not None:
                kw["description"] = description
            p.update(task, **kw)
        yield update
