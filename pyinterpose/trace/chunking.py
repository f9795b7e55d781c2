"""How the streamed analyses cut a table into pieces: one knob for all of them.

An analysis that works through a long table in pieces asks :func:`chunk_rows` for the piece size and
walks :func:`spans`.  ``PYINTERPOSE_CHUNK_ROWS`` sets it (default 4 Mi rows); the tests set it to a few
rows to show that a streamed result equals the one computed in a single piece, figure for figure.
"""
from __future__ import annotations

import os

DEFAULT_CHUNK_ROWS = 1 << 22


def chunk_rows() -> int:
    """Rows per piece: ``PYINTERPOSE_CHUNK_ROWS`` (a positive integer), else 4 Mi."""
    v = os.environ.get("PYINTERPOSE_CHUNK_ROWS", "").strip()
    if v:
        try:
            n = int(v)
        except ValueError:
            n = 0
        if n > 0:
            return n
    return DEFAULT_CHUNK_ROWS


def spans(n: int, size: int | None = None):
    """``(start, stop)`` pairs covering ``range(n)`` in pieces of ``size`` rows (``chunk_rows()``)."""
    step = size or chunk_rows()
    for start in range(0, n, step):
        yield start, min(n, start + step)
