"""A grouping of the blocks (their owner library, their lifetime class) as one small code per row of
``trace.blocks`` and a table of names, instead of a Series block_id -> name (issue 30).

The live curve (``report.live_curve``) splits the live bytes by a grouping of the blocks.  Given as a
Series of names, a grouping costs an object pointer and an int64 block id per block (~0.2 GB at 100 M
events, and ~0.5 GB more while ``report.timeline._owners`` builds it from the owner and api columns);
as codes it is two bytes a block.  ``report.owner_codes`` makes the owners' grouping this way.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from ..trace.chunking import spans
from ..trace.pages import release
from .class_lookup import ClassLookup


@dataclass
class BlockCodes:
    """``names``: the group names (strings); ``code``: per row of ``trace.blocks``, the index of
    its group's name in ``names``, or -1 (a row with no group: "other" to the live curve, as a block
    missing from a Series grouping)."""

    names: np.ndarray
    code: np.ndarray


def series_codes(trace, classes: pd.Series) -> BlockCodes:
    """``classes`` (a Series block_id -> name, as the lifetime classifier gives) as a code per row of
    ``trace.blocks``: the names are ``str`` of the Series' distinct values (``pd.factorize``, missing
    values left out), a row's code that of its block id's value (-1: not in the Series, or missing),
    as ``report.class_lookup.ClassLookup`` finds them, a piece of rows at a time.  The Series'
    values are factorized as they are stored (no object copy of a text column)."""
    look = ClassLookup(classes, values=classes.array)
    ids = trace.blocks["block_id"].to_numpy()
    n = len(ids)
    names = np.array([str(v) for v in look.values], dtype=object)
    code = np.empty(n, _small_code_type(len(names)))
    for s, e in spans(n):
        code[s:e] = look.codes(ids[s:e])
        release(ids, s, e)
    return BlockCodes(names, code)


def _small_code_type(n: int):
    """The narrowest signed type holding codes -1 .. n."""
    return np.int8 if n < (1 << 7) - 1 else np.int16 if n < (1 << 15) - 1 else np.int64
