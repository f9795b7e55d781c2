"""issue 33.13: `summary` of an --apply trace says which iterations its per-iteration table leaves out
(an ellipsis row), instead of jumping from one iteration to a later one silently.

Hand count: rows for "before the loop" and iterations 0..18 (20 rows); 12 shown (6 first, 6 last), so
iterations 5..12 (8 rows) are hidden."""
from __future__ import annotations

import io

from rich.console import Console

from pyinterpose.report.summary_text import print_applied
from pyinterpose.units import fmt_bytes


def _process(n_iter: int) -> dict:
    cols = ["served", "no_key", "occupied", "bigger", "capture", "overlap", "off", "other"]
    rows = [{"iteration": i, **{c: 1 for c in cols}} for i in range(-1, n_iter)]
    return {"pid": 7, "by_reason": {}, "served": 5, "requests": 5, "served_blocks": 5, "served_bytes": 5,
            "arena_capacity": 10, "arena_reserved": True, "fell_through": 0, "real_peak_bytes": 5,
            "refused": False, "iterations": rows}


def _text(n_iter: int) -> str:
    buf = io.StringIO()
    print_applied(Console(file=buf, width=160), {"plan": {"plan": "p.plan"}, "processes": [_process(n_iter)]},
                  fmt_bytes)
    return buf.getvalue()


def test_hidden_iterations_get_an_ellipsis_row():
    out = _text(19)
    assert "… 8 iterations (5–12) not shown" in out
    for shown in ("before the loop", " 4 ", " 13 ", " 18 "):
        assert shown in out


def test_no_ellipsis_when_every_row_fits():
    assert "not shown" not in _text(11)
