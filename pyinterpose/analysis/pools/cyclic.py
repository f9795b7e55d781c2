"""The plan's window as a cycle (issue 31: a pool plan must not cost memory against no plan).

The plan lays out one steady iteration, repeated.  A block allocated in the window and freed in the next
iteration is, in the steady state, live over ``[a, E)`` of the window *and* over ``[0, f)`` — its previous
iteration's instance, freed at ``f`` — at the same address: a circular arc.  Planners take one interval per
buffer, so the plan used to give such a block the whole window ``[0, E)``, which reserves its bytes over
``[f, a)`` too, where nothing of it lives: on the transformer trace the arena was 101 MB (5.4 %) above the
trace's own peak, exactly the bytes of the window's crossing blocks.

:func:`rotate` cuts the cycle elsewhere: at event ``r`` every interval is shifted by ``-r`` modulo the
window; an arc that does not contain ``r`` becomes one interval, one that does (and any inner interval
that contains ``r``) gets the whole window.  The cut with the smallest LOAD is kept (the first one on a
tie); the offsets the planner gives in the rotated window are the cycle's (a rotation of time changes no
overlap between two buffers that are both single intervals in it).  Pure functions of arrays.
"""
from __future__ import annotations

import numpy as np

from .problem import load


def rotated(lower, upper, arc_end, E: int, r: int) -> tuple[np.ndarray, np.ndarray]:
    """Intervals at cut ``r``.  Rows with ``arc_end < 0`` are plain intervals ``[lower, upper)`` of the
    window (``[0, E)``: live throughout); rows with ``arc_end >= 0`` are arcs ``[lower, E) u [0, arc_end)``."""
    lo = np.asarray(lower, np.int64)
    up = np.asarray(upper, np.int64)
    ae = np.asarray(arc_end, np.int64)
    arc = ae >= 0
    whole_before = (~arc) & (lo <= 0) & (up >= E)
    # plain intervals
    nl = np.where(lo >= r, lo - r, lo - r + E)
    nu = np.where(lo >= r, up - r, up - r + E)
    spans = (~arc) & (lo < r) & (up > r)
    # arcs: one interval when the cut falls in their gap [arc_end, lower]
    in_gap = arc & (ae <= r) & (r <= lo)
    nl = np.where(arc, lo - r, nl)
    nu = np.where(arc, E - r + ae, nu)
    whole = whole_before | spans | (arc & ~in_gap)
    nl = np.where(whole, 0, nl)
    nu = np.where(whole, E, nu)
    return nl, nu


def rotate(lower, upper, arc_end, size, E: int) -> tuple[int, np.ndarray, np.ndarray]:
    """(r, lower, upper): the cut of the cycle with the smallest LOAD, over every event of the window."""
    best = None
    for r in range(max(1, int(E))):
        nl, nu = rotated(lower, upper, arc_end, E, r)
        ld = load(nl, nu, size)
        if best is None or ld < best[0]:
            best = (ld, r, nl, nu)
    return best[1], best[2], best[3]
