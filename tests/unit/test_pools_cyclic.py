"""The plan's window as a cycle (pyinterpose.analysis.pools.cyclic): a block allocated in the window and freed
in the next iteration is an arc; the cut keeps its bytes off where nothing of it lives.

Ground truth: the steady state's live bytes counted by brute force over a few repeated iterations (every
block instance at its own times), independent of the module."""
from __future__ import annotations

import numpy as np

from pyinterpose.analysis.pools.cyclic import rotate, rotated
from pyinterpose.analysis.pools.problem import load


def _steady_peak(E, blocks):
    """blocks: (start, end, size) with end possibly > E (freed in the next iteration); the peak of live bytes
    over iteration 3 of 6, every iteration's instance of every block live over [k E + start, k E + end)."""
    live = np.zeros(6 * E, np.int64)
    for k in range(6):
        for s, e, n in blocks:
            live[k * E + s: min(6 * E, k * E + e)] += n
    return int(live[3 * E: 4 * E].max())


# an iteration of 10 events: grads (100 B) allocated at 7, freed at 2 of the next iteration; activations
# (60 B) over [2, 6); a peak buffer (50 B) over [4, 6)
E = 10
BLOCKS = [(7, 12, 100), (2, 6, 60), (4, 6, 50)]


def _rows():
    lower = np.array([7, 2, 4])
    upper = np.array([E, 6, 6])
    arc_end = np.array([2, -1, -1])        # the grads' previous instance is freed at event 2
    size = np.array([100, 60, 50])
    return lower, upper, arc_end, size


def test_the_whole_window_overcounts_and_the_cut_does_not():
    lower, upper, arc_end, size = _rows()
    truth = _steady_peak(E, BLOCKS)
    assert truth == 110                                 # activations + peak buffer; the grads are away
    whole = load(np.where(arc_end >= 0, 0, lower), np.where(arc_end >= 0, E, upper), size)
    assert whole == 210                                 # the grads counted over [0, E)
    r, nl, nu = rotate(lower, upper, arc_end, size, E)
    assert load(nl, nu, size) == truth
    assert arc_end[0] <= r <= lower[0]                  # cut in the grads' gap: one interval for them
    assert (nl[0], nu[0]) == (lower[0] - r, E - r + arc_end[0])


def test_a_cut_inside_an_interval_gives_it_the_whole_window():
    lower, upper, arc_end, size = _rows()
    nl, nu = rotated(lower, upper, arc_end, E, 3)      # event 3 lies in the activations' [2, 6)
    assert (nl[1], nu[1]) == (0, E)
    assert (nl[2], nu[2]) == (1, 3)                     # [4, 6) shifted by 3
    nl, nu = rotated(lower, upper, arc_end, E, 8)      # event 8 lies in the grads' arc [7, E) u [0, 2)
    assert (nl[0], nu[0]) == (0, E)
    assert (nl[1], nu[1]) == (4, 8)                     # [2, 6) wrapped: 2 - 8 + 10


def test_every_cut_is_safe():
    """Whatever the cut, two rows that are live together in the steady state overlap in the rotated window
    (so the planner never gives them the same bytes)."""
    lower, upper, arc_end, size = _rows()
    ev = lambda i, t: (lower[i] <= t < upper[i]) if arc_end[i] < 0 else (t >= lower[i] or t < arc_end[i])  # noqa: E731
    for r in range(E):
        nl, nu = rotated(lower, upper, arc_end, E, r)
        for t in range(E):
            for i in range(3):
                if ev(i, t):
                    assert nl[i] <= (t - r) % E < nu[i], (r, t, i)
