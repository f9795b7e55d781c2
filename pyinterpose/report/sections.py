"""What a report is made of: :class:`Section` (one titled part: facts, figures, tables, notes)
and :class:`Report` (the sections of one trace or job, with the headlines ``--json`` prints)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pandas as pd


@dataclass
class Section:
    id: str
    title: str
    explain: str = ""
    figures: list[tuple[str, str]] = field(default_factory=list)   # (base64 png, alt text)
    tables: list[tuple[str, pd.DataFrame]] = field(default_factory=list)  # (caption, formatted table)
    facts: list[tuple[str, str]] = field(default_factory=list)      # headline key/values
    notes: list[str] = field(default_factory=list)                  # "not available: ..." etc.
    html: list[str] = field(default_factory=list)                   # interactive fragments (timeline)
    tail: list[str] = field(default_factory=list)    # HTML for the end of the page, after the scripts: data
                                                     # the first view does not need (a timeline's finer levels)


@dataclass
class Report:
    title: str
    facts: list[tuple[str, str]]
    sections: list[Section]
    headlines: dict[str, Any]
    warnings: list[str] = field(default_factory=list)
