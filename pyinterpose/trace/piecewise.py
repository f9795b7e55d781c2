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
    return n, order_stats_many(lambda active: ({0: x} for x in pieces()), {0: (ranks, (n, lo, hi))})[0]


def order_stats_many(pieces, sets: dict) -> dict:
    """``{s: order_stats(pieces of s, ranks, ext)[1]}`` (``sets``: ``{s: (ranks, (n, min, max))}``)
    from shared passes: each pass reads the rows once (``pieces(active)``, see :func:`quantiles_many`) and
    counts, for every set with a rank still open, its values in 65,536 equal sub-ranges of each open range
    (or collects them when at most ``piece_rows()``)."""
    out = {s: [None] * len(r) for s, (r, _) in sets.items()}
    todo = {}       # set -> {(lo, hi) inclusive: [values in it, values below lo, rank indices]}
    for s, (ranks, (n, lo, hi)) in sets.items():
        want = [j for j, r in enumerate(ranks) if 0 <= r < n]
        todo[s] = {(lo, hi): [n, 0, want]} if want else {}
    cap = piece_rows()
    while any(todo.values()):
        plan = {}
        for s, t in todo.items():
            for (a, b), (c, below, idx) in list(t.items()):
                if a == b:                     # one value
                    for j in idx:
                        out[s][j] = a
                    del t[(a, b)]
                else:
                    plan.setdefault(s, {})[(a, b)] = None if c <= cap else max(0, (b - a).bit_length() - _BITS)
        if not plan:
            break
        acc = {s: {r: [] if sh is None else np.zeros(((r[1] - r[0]) >> sh) + 1, np.int64) for r, sh in p.items()}
               for s, p in plan.items()}
        for chunk in pieces(tuple(plan)):
            for s, p in plan.items():
                x = chunk[s]
                for (a, b), sh in p.items():
                    v = x[(x >= a) & (x <= b)]
                    if sh is None:
                        acc[s][(a, b)].append(v)
                    else:       # v - a, exact in uint64 (0 <= v - a < 2**64), then the sub-range
                        off = v.view(np.uint64) - np.uint64(a & _U64)
                        acc[s][(a, b)] += np.bincount((off >> np.uint64(sh)).astype(np.int64),
                                                      minlength=len(acc[s][(a, b)]))
        for s, p in plan.items():
            t, new, ranks = todo[s], {}, sets[s][0]
            for (a, b), sh in p.items():
                _, below, idx = t.pop((a, b))
                if sh is None:
                    v = np.sort(np.concatenate(acc[s][(a, b)]))
                    for j in idx:
                        out[s][j] = int(v[ranks[j] - below])
                    continue
                c = np.cumsum(acc[s][(a, b)])
                for j in idx:
                    i = int(np.searchsorted(c, ranks[j] - below, side="right"))
                    r = (a + (i << sh), min(b, a + ((i + 1) << sh) - 1))
                    e = new.setdefault(r, [int(acc[s][(a, b)][i]), below + (int(c[i - 1]) if i else 0), []])
                    e[2].append(j)
            t.update(new)
    return out


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
    if ext[0] == 0:
        return 0, None
    return ext[0], quantiles_many(lambda active: ({0: x} for x in pieces()), {0: (qs, ext)})[0]


def quantiles_many(pieces, sets: dict) -> dict:
    """``{s: quantiles(pieces of s, qs, ext)[1]}`` for several sets of integer values at once
    (``sets``: ``{s: (qs, (n, min, max))}``, each with n > 0), the counting passes over the rows shared:
    ``pieces(active)`` yields, per chunk, ``{s: int64 values of s}`` for the sets in ``active``.  The same
    values: exact order statistics (:func:`order_stats_many`) interpolated as numpy's "linear" method does."""
    plans = {s: quantile_ranks(qs, ext[0]) for s, (qs, ext) in sets.items()}
    vals = order_stats_many(pieces, {s: (list(pi) + list(ni), sets[s][1]) for s, (_, _, pi, ni) in plans.items()})
    out = {}
    for s, (virtual, prev, pi, _) in plans.items():
        out[s] = interpolated(virtual, prev, vals[s][:len(pi)], vals[s][len(pi):])
    return out
