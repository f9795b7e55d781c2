"""The strategies: each candidate's score (DOA, AOA, WDOA, vote, size, outlier) and the visiting
order it gives."""
from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pandas as pd

from ...errors import PyinterposeError
from ...trace import pages
from ..bandwidth import Bandwidth
from .ondisk import kept, release
from .problem import (COLUMN_PIECE, STRATEGIES, SwapProblem, column, search_steps, step_f, with_derived)


# ---- scores ----------------------------------------------------------------------------

def wdoa(problem: SwapProblem, budget: int) -> np.ndarray:
    """WDOA (ns) per candidate: integral over the absence window [start + t_out, end - t_in]
    of max(0, live - budget), divided by (peak - budget).  Candidates with DOA < 0 get
    their (negative) DOA; when budget >= peak every value is 0."""
    c = problem.candidates
    doa = column(problem, "doa_ns").astype(np.float64, copy=False)
    over_peak = problem.peak_before - budget
    if over_peak <= 0 or len(c) == 0:
        return np.where(doa < 0, doa, 0.0)
    hides, pa, pb = _wdoa_points(problem)
    w = doa.copy()
    w[hides] = _absence_overload(problem, budget, pa, pb)
    return w


OVERLOAD_PIECE = 1 << 20     # steps at a time in _absence_overload's running sum


def _absence_overload(problem: SwapProblem, budget: int, pa, pb) -> np.ndarray:
    """WDOA's value from the window ends' points ``pa``, ``pb`` (of :func:`_wdoa_points`, or a
    subset of them): integral of max(0, live - budget) over [a, b] / (peak - budget), for
    budget < peak.  Never negative (the integral only grows along the steps)."""
    live = problem.live
    n = len(live)
    # the integral up to step k: the running sum of overload x step length, max(live - budget, 0) in
    # int64, then as float64 times the step lengths, summed in order.  A piece of OVERLOAD_PIECE steps
    # at a time, the running sum carried from piece to piece by adding it to the piece's first term
    # (the sums are the sequential ones of one cumsum, bit for bit), and only its values at the
    # points' steps kept (issue 30: the running sum of every step was 8 bytes a step, and five
    # arrays of the steps' length before that, the swap command's peak at 100 M events)
    need, where = _points_steps(problem, pa, pb)
    at = np.empty(len(need), np.float64)            # the running sum up to each of those steps
    carry = 0.0                                     # up to step lo
    for lo in range(0, n, OVERLOAD_PIECE):
        hi = min(lo + OVERLOAD_PIECE, n)
        over = live[lo:hi] - budget
        np.maximum(over, 0, out=over)               # overload per step
        area = np.diff(step_f(problem, slice(lo, hi + 1)))
        np.multiply(over, area, out=area)
        del over
        if lo:
            area[0] += carry
        np.cumsum(area, out=area)                   # area[i]: the sum up to step lo + 1 + i
        i, j = np.searchsorted(need, [lo, hi])
        kk = need[i:j] - lo
        at[i:j] = np.where(kk == 0, carry, area[np.maximum(kk - 1, 0)])
        carry = float(area[-1])
        del area
    total = carry                                   # up to the last step's end
    ka, kb = where[:len(pa[0])], where[len(pa[0]):]

    def integral(pt, cum_k):
        k, dx, before, after = pt
        val = cum_k + np.maximum(live[k] - budget, 0).astype(np.float64) * dx
        return np.where(before, 0.0, np.where(after, total, val))

    return (integral(pb, at[kb]) - integral(pa, at[ka])) / (problem.peak_before - budget)


def _points_steps(problem: SwapProblem, pa, pb) -> tuple[np.ndarray, np.ndarray]:
    """(the distinct steps of the points ``pa`` and ``pb``, ascending; where each point's step is
    among them, pa's then pb's), kept per problem for the points :func:`_wdoa_points` keeps
    (budget-independent: made once, not at every budget)."""
    m = problem.memo
    got = m.get("wdoa_steps")
    if got is not None and got[0] is pa[0] and got[1] is pb[0]:
        return got[2], got[3]
    need, where = np.unique(np.concatenate([pa[0], pb[0]]), return_inverse=True)
    points = m.get("wdoa_points")
    if points is not None and points[1][0] is pa[0] and points[2][0] is pb[0]:
        m["wdoa_steps"] = kept(problem, (pa[0], pb[0], need, where))
        return m["wdoa_steps"][2], m["wdoa_steps"][3]
    return need, where


def _wdoa_points(problem: SwapProblem, hides: np.ndarray | None = None):
    """(indices of the candidates that can hide, (points of their windows' starts), (of their
    ends)): where each absence window's ends fall on the steps, per end x (step k holding x,
    x - start of step k, x before the first step, x after the last); budget-independent, kept
    per problem. Only those that can hide (DOA >= 0): the others' WDOA is their own DOA.
    ``hides``: those indices when the caller has them (``np.flatnonzero(doa >= 0)``)."""
    m = problem.memo
    if "wdoa_points" not in m:
        c = problem.candidates
        n = len(problem.live)
        if hides is None:
            hides = np.flatnonzero(column(problem, "doa_ns").astype(np.float64, copy=False) >= 0)
        a = c["start_t"].to_numpy()[hides].astype(np.float64) + column(problem, "t_out_ns", hides).astype(np.float64, copy=False)
        b = c["end_t"].to_numpy()[hides].astype(np.float64) - column(problem, "t_in_ns", hides).astype(np.float64, copy=False)
        # issue 30: the pages of the columns and of the steps read here go once read (file maps: .ondisk)
        pages.release_all(*(c[k] for k in ("start_t", "end_t", "size") if k in c))

        first, last = step_f(problem, 0), step_f(problem, -1)

        def points(x):
            k = np.clip(search_steps(problem, x, "right") - 1, 0, n - 1)
            pt = k, np.minimum(x, last) - step_f(problem, k), x < first, x >= last
            pages.release(problem.steps_t)
            return pt

        m["wdoa_points"] = kept(problem, (hides, points(np.minimum(a, b)), points(b)))
    return m["wdoa_points"]


def scores(problem: SwapProblem, strategy: str, budget: int) -> np.ndarray:
    """Score per candidate (higher = swap first)."""
    c = problem.candidates
    if strategy == "doa":
        return column(problem, "doa_ns").astype(np.float64, copy=False)
    if strategy in ("aoa", "outlier"):
        return _elementwise(problem, strategy)
    size = c["size"].to_numpy(np.float64)
    if strategy == "wdoa":
        return wdoa(problem, budget)
    if strategy == "vote":
        ranks = [_rank(problem, s, budget) for s in ("doa", "aoa", "wdoa")]
        return -np.sum(ranks, axis=0)
    if strategy == "size":
        return size
    raise PyinterposeError(f"unknown swap strategy {strategy!r} (choose from {', '.join(STRATEGIES)})")


def _elementwise(problem: SwapProblem, strategy: str) -> np.ndarray:
    """AOA (DOA x size when DOA >= 0, else DOA / size) or the outlier score (ATI x size) of every
    candidate, a piece of ``COLUMN_PIECE`` rows at a time into the answer: the same operations on the
    same values as over the whole columns (issue 30: five float64 temporaries of every candidate
    otherwise, ~0.4 GB at 100 M events, two orders made at a time)."""
    size_col = problem.candidates["size"].to_numpy()
    n = len(size_col)
    out = np.empty(n, np.float64)
    if strategy == "aoa":
        for lo, hi, doa in _doa_pieces(problem, COLUMN_PIECE):
            size = size_col[lo:hi].astype(np.float64)
            out[lo:hi] = np.where(doa >= 0, doa * size, doa / np.maximum(size, 1))
        return out
    for lo in range(0, n, COLUMN_PIECE):
        rows = slice(lo, min(lo + COLUMN_PIECE, n))
        out[rows] = column(problem, "ati_ns", rows).astype(np.float64) * size_col[rows].astype(np.float64)
    return out


def _rank_desc_min(x: np.ndarray, o: np.ndarray | None = None) -> np.ndarray:
    """``pd.Series(x).rank(ascending=False, method="min")`` (float64 ranks, 1 = largest; ties take
    the lowest rank) by one sort, or none when ``o`` already orders ``x`` from the largest (any
    order among ties)."""
    x = np.asarray(x, dtype=np.float64)
    n = len(x)
    if n == 0 or np.isnan(x).any():
        return pd.Series(x).rank(ascending=False, method="min").to_numpy()
    neg = -x
    if o is None:
        o = np.argsort(neg)     # ties share their group's first rank whatever their order
    return _ranks_from_order(neg, o, dtype=np.float64)


def _rank(problem: SwapProblem, strategy: str, budget: int) -> np.ndarray:
    """:func:`_rank_desc_min` of a strategy's scores, kept per problem for the budget-independent ones."""
    if strategy == "wdoa":
        return _rank_desc_min(_scores(problem, strategy, budget))
    key = ("rank", strategy)
    m = problem.memo
    if key not in m:
        # DOA's order is the tie order's first key: its rank needs no sort of its own
        by = m.get("tie_order") if strategy == "doa" else None
        r = _rank_desc_min(_scores(problem, strategy, budget), by)
        r.flags.writeable = False
        m[key] = kept(problem, r)
    return m[key]


def _scores(problem: SwapProblem, strategy: str, budget: int) -> np.ndarray:
    """:func:`scores` (not kept: each is made from the candidates' columns in one pass, and what
    is kept per problem is the orders and ranks made from them — issue 30: a score array of
    every candidate per strategy was ~76 MB each at 100 M events)."""
    return np.asarray(scores(problem, strategy, budget))


def order(problem: SwapProblem, strategy: str, budget: int) -> np.ndarray:
    """Candidate indices in swap order: peak-straddling first, then by score, then DOA
    (then block, then start: ``np.lexsort((start_t, block_id, -doa_ns, -score, ~straddles_peak))``).

    The tie-breaking order (DOA, block, start) is the same for every strategy and is sorted once
    per problem; each strategy then needs one stable sort of its score over it."""
    c = problem.candidates
    if strategy not in STRATEGIES:
        raise PyinterposeError(f"unknown swap strategy {strategy!r} (choose from {', '.join(STRATEGIES)})")
    if strategy == "vote":
        fast = _vote_order(problem, budget)
        if fast is not None:
            return fast
    s = _scores(problem, strategy, budget)
    base = _tie_order(problem)
    neg = s[base]
    del s                           # the scores in the tie order only (issue 30: 8 bytes a candidate)
    np.negative(neg, out=neg)
    n = len(base)
    if n > 1 and (neg[1:] >= neg[:-1]).all():
        # already in score order over the tie order (DOA's own: the tie order's first key): a
        # stable sort would give it back as it is
        strad = c["straddles_peak"].to_numpy(bool)[base]
        return np.concatenate([base[strad], base[~strad]])
    if n and np.isfinite(neg).all():
        lo, hi = float(neg.min()), float(neg.max())
        span = hi - lo + 1.0
        if 2.0 * span * n < 2.0 ** 62 and (neg == np.rint(neg)).all():
            # whole-number scores in a small range (the vote's rank sums): (not straddling, score,
            # place in the tie order) packed into one distinct int64 key, and one unstable sort
            # (faster than the stable float sort) gives the same order
            strad = c["straddles_peak"].to_numpy(bool)[base]
            key = (neg - lo).astype(np.int64)
            key += (~strad).astype(np.int64) * int(span)
            key *= n
            key += np.arange(n, dtype=np.int64)
            return base[np.argsort(key)]
    by_score = base[np.argsort(neg, kind="stable")]
    strad = c["straddles_peak"].to_numpy(bool)[by_score]
    return np.concatenate([by_score[strad], by_score[~strad]])


def _tie_order(problem: SwapProblem, neg_doa: np.ndarray | None = None) -> np.ndarray:
    """The candidates by -DOA, then block, then start (every strategy's tie-breaking), once per problem.
    ``neg_doa``: ``-column(problem, "doa_ns")`` when the caller holds it (not made again)."""
    m = problem.memo
    if "tie_order" not in m:
        c = problem.candidates
        blk, start = c["block_id"].to_numpy(), c["start_t"].to_numpy()
        in_order = _in_block_start_order(blk, start)
        pages.release_all(blk, start)       # issue 30: the pass's pages of the columns (when mapped)
        neg = -column(problem, "doa_ns") if neg_doa is None else neg_doa
        if in_order:
            # the candidates are made block by block, each block's in time order: then the rows'
            # own order breaks DOA's ties as (block, start) would, and one stable sort of -DOA
            # gives the lexsort's order (issue 30: two of its three passes, ~3 s at 100 M events)
            o = np.argsort(neg, kind="stable")
        else:
            o = np.lexsort((start, blk, neg))
            pages.release_all(blk, start)
        del neg
        o = _indices(o)                     # int32: the int64 order goes as soon as it is copied
        m["tie_order"] = kept(problem, o)
    return m["tie_order"]


ORDER_CHECK_PIECE = 1 << 20    # rows compared at a time by _in_block_start_order


def _in_block_start_order(blk: np.ndarray, start: np.ndarray) -> bool:
    """Whether the rows are sorted by (block, start): a piece at a time, no row-sized temporaries."""
    n = len(blk)
    step = ORDER_CHECK_PIECE
    for lo in range(0, max(n - 1, 0), step):
        hi = min(lo + step + 1, n)
        b, s = blk[lo:hi], start[lo:hi]
        if not (b[1:] >= b[:-1]).all():
            return False
        same = b[1:] == b[:-1]
        if not (s[1:][same] >= s[:-1][same]).all():
            return False
    return True


def _indices(x: np.ndarray) -> np.ndarray:
    """Candidate indices as int32 when every one fits (they index the candidates: exact), kept so."""
    return x.astype(np.int32) if len(x) < 2 ** 31 - 1 else x


VOTE_PIECE = COLUMN_PIECE      # candidates at a time in _vote_fixed's passes and _ranks_from_order
# _vote_fixed sorts AOA on a second thread while this one sorts DOA (the tie order), from 100 000
# candidates on a machine of more than one core: at 100 M events (9.5 M candidates) ~1.3 s sooner for
# ~150 MB more at once (its -AOA and order beside -DOA and the tie order's sort)
VOTE_SIDE_BY_SIDE = True
VOTE_SIDE_BY_SIDE_MIN = 100_000


def _vote_fixed(problem: SwapProblem) -> dict | None:
    """What the vote order shares across budgets (once per problem; None: use the general path).

    The vote's score is the sum of three ranks (DOA, AOA, WDOA at the budget). Only WDOA
    depends on the budget, and only for the candidates that can hide (DOA >= 0): the others
    score their own negative DOA, below every hideable one's WDOA (>= 0). So a candidate that
    cannot hide has a rank sum of its DOA and AOA ranks + its DOA rank again (where its WDOA
    ranks), the same at every budget, and its place among the others
    like it is fixed: they are sorted once here, by one distinct int64 key per candidate
    (not straddling the peak, rank sum, place in the tie order) that orders exactly as
    :func:`order`'s sort. At 10 M events that is 1.03 M of 1.08 M candidates.

    Made one step after another with little held at once (issue 30: this was the swap command's
    peak at 100 M events, ~1 GB over what the process held before): -DOA (float64) for the tie
    order's sort and the DOA ranks, then -AOA for its sort and ranks, the ranks as whole numbers
    (int32 where 3 n fits: the same values as :func:`_rank_desc_min`'s float64 ones), the keys a
    piece of ``VOTE_PIECE`` candidates at a time, sorted in place (a key ends with the place in
    the tie order, so the candidate is read back from it: no argsort)."""
    m = problem.memo
    if "vote_fixed" in m:
        return m["vote_fixed"]
    c = problem.candidates
    n = len(c)
    big = 3 * n + 1                     # above every rank sum (each rank <= n)
    if n == 0 or 2.0 * big * n + n >= 2.0 ** 62:
        m["vote_fixed"] = None
        return None
    rdt = np.int32 if big < 2 ** 31 else np.int64
    side = VOTE_SIDE_BY_SIDE and n >= VOTE_SIDE_BY_SIDE_MIN and (os.cpu_count() or 1) > 1
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="pyinterpose-swap") as ex:
        # AOA's sort beside DOA's (numpy's sorts release the GIL); the pool waits for it on any way out
        aoa = ex.submit(_aoa_ranks, problem, rdt) if side else None
        neg = np.empty(n, np.float64)       # -DOA
        hide = np.empty(n, bool)            # DOA >= 0: can hide
        for lo, hi, d in _doa_pieces(problem):
            np.negative(d, out=neg[lo:hi])
            np.greater_equal(d, 0, out=hide[lo:hi])
        if np.isnan(neg).any():
            m["vote_fixed"] = None
            return None
        stored = c["doa_ns"].dtype if "doa_ns" in c else np.dtype(np.float64)
        base = _tie_order(problem, neg if stored == np.float64 else None)
        ranks_doa = _ranks_from_order(neg, base, dtype=rdt)     # DOA's, from its order: no sort
        del neg
        ranks = aoa.result() if side else _aoa_ranks(problem, rdt)
    release(problem)
    ranks += ranks_doa                                          # DOA + AOA ranks: budget-independent
    vi, pa, pb = _wdoa_points(problem, np.flatnonzero(hide))    # the hideable ones (DOA >= 0)
    release(problem)
    place = np.empty(n, rdt)
    for lo in range(0, n, VOTE_PIECE):
        hi = min(lo + VOTE_PIECE, n)
        place[base[lo:hi]] = np.arange(lo, hi, dtype=rdt)
    not_strad = ~c["straddles_peak"].to_numpy(bool)

    def key(idx, rank_sum):
        k = not_strad[idx].astype(np.int64)
        k *= big
        k += rank_sum.astype(np.int64)
        k *= n
        k += place[idx]
        return k

    # the others' WDOA rank: every hideable candidate's DOA (>= 0) is above theirs, so their WDOA
    # (= DOA) ranks where their DOA ranks among all
    kf = np.empty(n - len(vi), np.int64)
    at = 0
    for lo in range(0, n, VOTE_PIECE):
        hi = min(lo + VOTE_PIECE, n)
        fi = lo + np.flatnonzero(~hide[lo:hi])
        rs = ranks[fi].astype(np.int64)
        rs += ranks_doa[fi]
        kf[at:at + len(fi)] = key(fi, rs)
        at += len(fi)
    del hide, ranks_doa
    ranks_vi = ranks[vi]
    del ranks
    kf.sort()                           # distinct keys: any sort gives the one order
    idx = np.empty(len(kf), base.dtype)     # as the tie order's (_indices: int32 where they fit)
    for lo in range(0, len(kf), VOTE_PIECE):
        idx[lo:lo + VOTE_PIECE] = base[kf[lo:lo + VOTE_PIECE] % n]
    # key() reads these two through its closure: rebound to their files on a problem on disk (.ondisk),
    # and named in the dict so that ondisk.release finds them
    place, not_strad = kept(problem, place), kept(problem, not_strad)
    m["vote_fixed"] = fixed = kept(problem, {"idx": idx, "key": kf, "var": vi,
                                             "var_ranks": ranks_vi, "points": (pa, pb)})
    fixed.update({"key_of": key, "place": place, "not_strad": not_strad})
    del idx, kf
    release(problem)
    return fixed


def _doa_pieces(problem: SwapProblem, piece: int | None = None):
    """(lo, hi, DOA of the candidates lo:hi as float64) for each piece of ``piece`` (None: ``VOTE_PIECE``)
    candidates; the pages of the columns read are given back after each piece (when they are file maps:
    .ondisk)."""
    c = problem.candidates
    n = len(c)
    names = [k for k in ("doa_ns", "size", "start_t", "end_t") if k in c]
    step = VOTE_PIECE if piece is None else piece
    for lo in range(0, n, step):
        hi = min(lo + step, n)
        d = column(problem, "doa_ns", slice(lo, hi)).astype(np.float64, copy=False)
        yield lo, hi, d
        for k in names:
            pages.release(c[k], lo, hi)


def _aoa_ranks(problem: SwapProblem, dtype) -> np.ndarray:
    """:func:`_rank_desc_min` of the AOA scores (:func:`scores`), as whole numbers of ``dtype``: -AOA
    made a piece at a time, one sort, the ranks read from it a piece at a time."""
    neg = _elementwise(problem, "aoa")      # as scores()
    np.negative(neg, out=neg)               # -AOA
    o = np.argsort(neg)                 # ties in any order: they share their group's first rank
    r = _ranks_from_order(neg, o, dtype=dtype)
    return r


def _ranks_from_order(neg: np.ndarray, o: np.ndarray, dtype=np.int32) -> np.ndarray:
    """:func:`_rank_desc_min` of ``-neg`` as whole numbers of ``dtype`` (1 = largest; ties take the
    lowest rank), given ``o`` that sorts ``neg`` ascending (any order among ties; no NaN): a piece of
    ``VOTE_PIECE`` of the order at a time, no array of the values' length but the answer."""
    n = len(o)
    r = np.empty(n, dtype)
    prev, carry = None, 0       # the value at the piece's row before, and its group's first rank
    for lo in range(0, n, VOTE_PIECE):
        hi = min(lo + VOTE_PIECE, n)
        oo = o[lo:hi]
        v = neg[oo]
        g = np.arange(lo + 1, hi + 1, dtype=dtype)     # a group's first row ranks at its place + 1
        g[1:][v[1:] == v[:-1]] = 0
        if lo and v[0] == prev:
            g[0] = 0
        np.maximum.accumulate(g, out=g)
        if lo:
            np.maximum(g, carry, out=g)
        r[oo] = g
        prev, carry = v[-1], g[-1]
    return r


def _vote_order(problem: SwapProblem, budget: int) -> np.ndarray | None:
    """:func:`order` for the vote at ``budget`` from :func:`_vote_fixed`: WDOA and its rank for
    the candidates that can hide only, their keys sorted, merged into the fixed ones."""
    fixed = _vote_fixed(problem)
    if fixed is None:
        return None
    vi = fixed["var"]
    if problem.peak_before - budget > 0 and len(vi):
        w = _absence_overload(problem, budget, *fixed["points"])
        if not (w >= 0).all():          # NaN or a negative value: the general path decides
            return None
    else:
        w = np.zeros(len(vi))
    kv = fixed["key_of"](vi, fixed["var_ranks"] + _rank_desc_min(w))
    o = np.argsort(kv)
    # every key is distinct (it holds the place in the tie order): insert each hideable
    # candidate before the first fixed one with a larger key
    return np.insert(fixed["idx"], np.searchsorted(fixed["key"], kv[o]), vi[o])


def _order(problem: SwapProblem, strategy: str, budget: int) -> np.ndarray:
    """:func:`order`, kept per problem (read-only): both modes of a strategy share it."""
    key = ("order", strategy, int(budget))
    m = problem.memo
    if key not in m:
        o = _indices(order(problem, strategy, budget))
        o.flags.writeable = False
        m[key] = kept(problem, o)
    return m[key]


def candidate_table(problem: SwapProblem, budget: int | None = None) -> pd.DataFrame:
    """The candidates with every strategy's score (``score_<strategy>``; WDOA at ``budget``,
    default half-way between floor and peak), best vote first."""
    b = problem.default_budget if budget is None else int(budget)
    c = with_derived(problem)
    for s in STRATEGIES:
        c[f"score_{s}"] = scores(problem, s, b)
    return c.iloc[order(problem, "vote", b)].reset_index(drop=True)
