"""Reductions of long columns a piece at a time: sums, maxima and exact quantiles.

A command that reads one number from a full-length column (the bytes of the masked blocks, the
latest time, the launch lag's median) made a full-length copy of what it selected (``size[mask]``:
8 bytes a block), and left every page of the mapped column resident.  Here each is read a piece of
``chunk_rows() // 4`` rows at a time (:func:`piece_rows`), the mapped pages of each piece given
back once it is read (:mod:`.pages`).  The answers are the whole-array ones exactly:

* :func:`total` — ``int(col[mask].sum())`` (int64 arithmetic: the same wrap-around, any order);
* :func:`maximum` — ``int(col.max())``;
* :func:`ascending` — ``(a[1:] >= a[:-1]).all()``; :func:`running_peak` — ``max(cumsum(d))``;
* :func:`order_stats` / :func:`quantiles` — the k-th smallest of integer values yielded in pieces,
  and ``np.quantile`` (method "linear") of their float64 values, from the same order statistics and
  the same arithmetic (``tests/unit/test_piecewise.py`` compares it with ``np.quantile``).  Values
  are narrowed by counting them per sub-range (65,536 sub-ranges a pass) until the candidates of each
  rank fit a piece, then those are sorted: a few passes, no full-length copy.
"""
from __future__ import annotations

import numpy as np

from .chunking import chunk_rows, spans
from .pages import release

_BITS = 16          # a pass of order_stats counts 2**16 sub-ranges of each open range
_U64 = (1 << 64) - 1


def piece_rows() -> int:
    """Rows per piece of a per-block pass that holds several arrays of its piece at once: a
    quarter of :func:`.chunking.chunk_rows` (1 Mi rows by default)."""
    return max(1, chunk_rows() // 4)


def total(col, mask: np.ndarray | None = None) -> int:
    """``int(col[mask].sum())`` (``col``: an integer column; ``mask``: bool per row or None for all)
    in pieces; the mapped pages of ``col`` given back."""
    a = np.asarray(col)
    out = np.int64(0)
    for lo, hi in spans(len(a), piece_rows()):
        p = np.asarray(a[lo:hi], np.int64)
        if mask is not None:
            p = p[mask[lo:hi]]
        with np.errstate(over="ignore"):
            out = out + p.sum(dtype=np.int64)
        release(a, lo, hi)
    return int(out)


def maximum(col):
    """``col.max()`` (a Python int) in pieces, the mapped pages given back; None when empty."""
    a = np.asarray(col)
    best = None
    for lo, hi in spans(len(a), piece_rows()):
        m = a[lo:hi].max()
        best = m if best is None or m > best else best
        release(a, lo, hi)
    return None if best is None else int(best)


def ascending(a: np.ndarray) -> bool:
    """``a`` is in non-decreasing order (every neighbouring pair, those across a piece's edge too),
    compared a piece at a time (no full-length bool array)."""
    if len(a) < 2:
        return True
    return all(bool((a[lo + 1:hi + 1] >= a[lo:hi]).all()) for lo, hi in spans(len(a) - 1))


def running_peak(deltas) -> int:
    """``max(cumsum(d))`` of the concatenation of the integer arrays ``deltas`` yields (0 for none),
    a piece at a time: each piece's running sum starts from the previous piece's last."""
    best, carry = None, 0
    for d in deltas:
        if not len(d):
            continue
        cs = np.cumsum(d)
        cs += carry
        m = int(cs.max())
        best = m if best is None else max(best, m)
        carry = int(cs[-1])
    return best if best is not None else 0


def extent(pieces) -> tuple[int, int | None, int | None]:
    """``(n, min, max)`` of the integer values ``pieces()`` yields (min and max None when n is 0)."""
    n, lo, hi = 0, None, None
    for p in pieces():
        if len(p):
            n += len(p)
            a, b = int(p.min()), int(p.max())
            lo = a if lo is None or a < lo else lo
            hi = b if hi is None or b > hi else hi
    return n, lo, hi


def order_stats(pieces, ranks, ext: tuple | None = None) -> tuple[int, list]:
    """``(n, [v_k for k in ranks])``: the k-th smallest (0-based) of the integer values that
    ``pieces()`` yields (a function returning a new iterator of int64 arrays each call; every call
    must yield the same values); a rank outside ``[0, n)`` gives None.  ``ext``: their
    :func:`extent` when the caller has it.  Each pass counts the values of every value range still
    holding a rank in 65,536 equal sub-ranges (a shift of the offset from the range's start) and
    keeps the sub-range holding it; a range of at most :func:`piece_rows` values is collected and sorted."""
    n, lo, hi = ext if ext is not None else extent(pieces)
    ranks = [int(k) for k in ranks]
    out: list = [None] * len(ranks)
    todo: dict[tuple, list] = {}          # (lo, hi) inclusive -> [values in it, values below lo, rank indices]
    want = [i for i, k in enumerate(ranks) if 0 <= k < n]
    if want:
        todo[(lo, hi)] = [n, 0, want]
    cap = piece_rows()
    while todo:
        plan = {}
        for (a, b), (c, below, idx) in list(todo.items()):
            if a == b:                     # one value
                for i in idx:
                    out[i] = a
                del todo[(a, b)]
            else:
                plan[(a, b)] = None if c <= cap else max(0, (b - a).bit_length() - _BITS)
        if not plan:
            break
        acc = {r: [] if sh is None else np.zeros(((r[1] - r[0]) >> sh) + 1, np.int64) for r, sh in plan.items()}
        for p in pieces():
            for (a, b), sh in plan.items():
                v = p[(p >= a) & (p <= b)]
                if sh is None:
                    acc[(a, b)].append(v)
                else:       # v - a, exact in uint64 (0 <= v - a < 2**64), then the sub-range
                    off = v.view(np.uint64) - np.uint64(a & _U64)
                    acc[(a, b)] += np.bincount((off >> np.uint64(sh)).astype(np.int64), minlength=len(acc[(a, b)]))
        new: dict[tuple, list] = {}
        for (a, b), sh in plan.items():
            _, below, idx = todo.pop((a, b))
            if sh is None:
                v = np.sort(np.concatenate(acc[(a, b)]))
                for i in idx:
                    out[i] = int(v[ranks[i] - below])
                continue
            c = np.cumsum(acc[(a, b)])
            for i in idx:
                j = int(np.searchsorted(c, ranks[i] - below, side="right"))
                r = (a + (j << sh), min(b, a + ((j + 1) << sh) - 1))
                e = new.setdefault(r, [int(acc[(a, b)][j]), below + (int(c[j - 1]) if j else 0), []])
                e[2].append(i)
        todo = new
    return n, out


def quantile_ranks(qs, n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``(virtual, prev, lo, hi)``: numpy's "linear" method's positions for the quantiles ``qs`` of ``n`` values
    (n > 0): the order statistics ``lo`` and ``hi`` (int64 ranks) it interpolates between, and where."""
    qs = np.asarray(qs, np.float64)
    virtual = (n - 1) * qs
    prev = np.floor(virtual)
    nxt = prev + 1
    above = virtual >= n - 1
    prev[above], nxt[above] = n - 1, n - 1
    below = virtual < 0
    prev[below], nxt[below] = 0, 0
    return virtual, prev, prev.astype(np.int64), nxt.astype(np.int64)


def interpolated(virtual: np.ndarray, prev: np.ndarray, lo_vals, hi_vals) -> np.ndarray:
    """The quantiles from the order statistics at :func:`quantile_ranks`' ``lo`` and ``hi``, as numpy's
    "linear" method computes them (the same float operations)."""
    a = np.array(lo_vals, np.int64).astype(np.float64)
    b = np.array(hi_vals, np.int64).astype(np.float64)
    gamma = np.asanyarray(virtual - prev, dtype=np.float64)
    diff = b - a
    res = np.add(a, diff * gamma)
    np.subtract(b, diff * (1 - gamma), out=res, where=gamma >= 0.5)
    return res


def quantiles(pieces, qs, ext: tuple | None = None) -> tuple[int, np.ndarray | None]:
    """``(n, np.quantile(values.astype(np.float64), qs))`` of the integer values ``pieces()`` yields
    (:func:`order_stats`), computed as numpy's "linear" method does; ``(0, None)`` when there are none."""
    ext = ext if ext is not None else extent(pieces)
    n = ext[0]
    if n == 0:
        return 0, None
    virtual, prev, pi, ni = quantile_ranks(qs, n)
    _, vals = order_stats(pieces, list(pi) + list(ni), ext)
    return n, interpolated(virtual, prev, vals[:len(pi)], vals[len(pi):])
