"""Float sums made a piece at a time that are numpy's whole-array sums bit for bit (issue 30).

A streamed pass cannot hold a full-length float column to call ``.sum()`` on it, and a plain running
total of the pieces' sums rounds differently.  numpy's sums have a fixed shape, set by the length
alone, so a pass that follows that shape gets the very same float:

* :class:`PairwiseSum` — ``np.add.reduce(a)`` of a contiguous float64 array ``a`` of a length known in
  advance: numpy's pairwise sum (0.0 plus the sum of a tree whose ranges are split at ``n // 2``
  rounded down to a multiple of 8, down to blocks of at most 128 summed with 8 accumulators).  Every
  subtree that fits a leaf (:data:`LEAF` values) is summed by numpy itself on those values (the same
  function on the same range); the subtrees' sums are then added up the tree as numpy adds them.
* :class:`IntMean` — ``x.mean()`` of an int64 array: numpy casts it to float64 through its iterator's
  buffer (:data:`BUFFER` values a time), sums each buffer pairwise and adds the buffers' sums one
  after the other to 0.0, then divides by the count.

``tests/unit/test_exactsum.py`` compares both with numpy on random arrays of many lengths.
"""
from __future__ import annotations

import numpy as np

LEAF = 1 << 20          # values summed by numpy in one call (a subtree of at most this many)
BUFFER = 8192           # numpy's default ufunc buffer size (np.getbufsize())


def _tree(lo: int, n: int, leaf: int):
    """The pairwise tree of ``n`` values from ``lo``: ``(lo, n)`` for a leaf, else ``(left, right)``."""
    if n <= leaf or n <= 128:
        return (lo, n)
    n2 = n // 2
    n2 -= n2 % 8
    return (_tree(lo, n2, leaf), _tree(lo + n2, n - n2, leaf))


def _leaves(node, out: list) -> list:
    if isinstance(node[0], tuple):
        _leaves(node[0], out)
        _leaves(node[1], out)
    else:
        out.append(node)
    return out


class PairwiseSum:
    """``float(np.add.reduce(a))`` of ``n`` float64 values fed in order, a piece at a time (any sizes).

    Holds at most a leaf of values plus the piece being fed."""

    def __init__(self, n: int, leaf: int = LEAF):
        self.n = int(n)
        self.tree = _tree(0, self.n, max(8, int(leaf)))
        self.leaves = _leaves(self.tree, []) if self.n else []
        self.sums: dict[int, float] = {}       # leaf start -> its sum
        self.k = 0                              # next leaf to fill
        self.buf: list[np.ndarray] = []
        self.held = 0
        self.fed = 0

    def feed(self, x: np.ndarray) -> None:
        x = np.asarray(x, np.float64)
        if not len(x):
            return
        self.fed += len(x)
        if self.fed > self.n:
            raise ValueError(f"PairwiseSum: more than {self.n} values fed")
        self.buf.append(x)
        self.held += len(x)
        while self.k < len(self.leaves) and self.held >= self.leaves[self.k][1]:
            lo, m = self.leaves[self.k]
            v = np.concatenate(self.buf) if len(self.buf) > 1 else self.buf[0]
            self.sums[lo] = float(np.add.reduce(np.ascontiguousarray(v[:m])))
            rest = v[m:]
            self.buf = [rest] if len(rest) else []
            self.held = len(rest)
            self.k += 1

    def result(self) -> float:
        """The sum (0.0 for no values); every value must have been fed."""
        if self.fed != self.n:
            raise ValueError(f"PairwiseSum: {self.fed} of {self.n} values fed")
        if not self.n:
            return 0.0
        return 0.0 + self._sum(self.tree)

    def _sum(self, node) -> float:
        if isinstance(node[0], tuple):
            return self._sum(node[0]) + self._sum(node[1])
        return self.sums[node[0]]


class IntMean:
    """``float(x.mean())`` of the int64 values fed in order (any piece sizes): see the module docstring."""

    def __init__(self):
        self.total = 0.0
        self.n = 0
        self.rest = np.zeros(0, np.float64)

    def feed(self, x: np.ndarray) -> None:
        x = np.asarray(x)
        if not len(x):
            return
        self.n += len(x)
        f = x.astype(np.float64)
        if len(self.rest):
            f = np.concatenate([self.rest, f])
        whole = len(f) - len(f) % BUFFER
        total = self.total
        for a in range(0, whole, BUFFER):
            total += float(np.add.reduce(f[a:a + BUFFER]))
        self.total = total
        self.rest = f[whole:].copy()

    def result(self) -> float | None:
        """The mean (None for no values)."""
        if not self.n:
            return None
        total = self.total
        if len(self.rest):
            total += float(np.add.reduce(self.rest))
        return float(np.float64(total) / self.n)
