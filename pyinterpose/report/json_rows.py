"""One JSON object whose longest list is written a piece of rows at a time (``--json`` of a long run).

``print_json`` builds the whole object, and ``json.dumps`` its whole text, before writing: for
``iterations --json`` at 100 M events that is one dict per step (450 k steps, ~0.2 GB of Python
objects).  :func:`print_json_rows` writes the same bytes — the object's text from ``print_json``
with the list's place marked, and the list's rows made and written ``rows(lo, hi)`` a piece at a
time, each row a dict of plain values, as ``json.dumps`` writes them with ``print_json``'s
separators.
"""
from __future__ import annotations

import io
import json
import sys
from typing import Any, Callable

from .text import print_json

_PIECE = 1 << 14          # rows made and written at a time


def print_json_rows(obj: dict, key: str, count: int, rows: Callable[[int, int], list[dict[str, Any]]],
                    stream=None, trace=None) -> None:
    """``print_json({**obj, key: rows(0, count)}, stream, trace)`` (``key`` placed where ``obj`` has
    it, else last), with the list made and written ``_PIECE`` rows at a time.  The rows must be dicts
    of plain JSON values (str keys; str, int, bool, None, finite float values): ``print_json`` writes
    those unchanged."""
    stream = stream or sys.stdout
    mark = "\x00rows of %s\x00" % key
    head = io.StringIO()
    print_json({**obj, key: mark}, stream=head, trace=trace)
    text = head.getvalue()
    quoted = json.dumps(mark)
    at = text.index(quoted)
    if text.count(quoted) != 1:        # the mark must be the list's place only
        raise ValueError(f"cannot place {key!r} in the JSON object")
    stream.write(text[:at])
    stream.write("[")
    for lo in range(0, count, _PIECE):
        part = json.dumps(rows(lo, min(count, lo + _PIECE)), indent=None, separators=(",", ":"))
        stream.write(("," if lo else "") + part[1:-1])
    stream.write("]")
    stream.write(text[at + len(quoted):])
    stream.flush()
