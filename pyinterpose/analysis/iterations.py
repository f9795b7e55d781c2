"""Iteration detection: the period of the training loop, found from the trace alone.

Signature (after SINGA's ``PoolOptSeqRepeatableTestPreProcess``): the process's
allocation/free events in ``seq`` order; a malloc contributes its size and a free the
lifetime of its block counted in alloc/free events.  We attach the free's lifetime to
its malloc, so the signature is one integer *token* per allocation,
``(size, lifetime_in_events)`` hashed to 64 bits (``-1`` = never freed): the same
information as SINGA's sequence, with the period directly in allocations.

Period finder (near-linear instead of SINGA's O(n^2) search):

1. candidate periods = the most frequent gaps between consecutive occurrences of the
   same token (a token that occurs once per step recurs after exactly one period), and
   the lags with the highest self-match count, all lags at once by FFT of the
   signature mapped to random unit phases (O(n log n));
2. each candidate ``p`` is scored by the share of positions ``i`` with
   ``T[i] == T[i+p]`` (on a fixed random sample of positions for long traces);
   the smallest candidate (or divisor of it) within ``tolerance`` of the best score
   wins — multiples of the period score the same, sub-periods (repeated layers) score
   lower because lifetimes differ between layers;
3. the steady start is the first run of ``p`` consecutive matches; the step boundary
   (the phase) is the allocation in that window with the fewest live bytes before
   it (the loop's low point), ties broken by the longest idle gap before it;
4. steps are then matched one after the other against that reference step's size
   sequence, exact matches found with a rolling hash in O(n); a step may contain up to
   ``max_extra`` unpredictable extra allocations (noise), matched as the reference
   subsequence with the extras skipped.  Matching extends backwards and forwards from
   the reference; the longest run of matched steps is reported.

No loop (best score below ``min_score`` or fewer than ``min_steps`` steps) gives
``source="none"`` and ``count=0`` instead of an invented period.  Markers from
:func:`pyinterpose.mark_step` override detection (``source="markers"``).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from ..errors import PyinterposeError
from ..heap import give_back
from ..trace.chunking import chunk_rows, spans
from ..trace.model import Trace
from ..trace.pages import release, release_tables
from ..trace.piecewise import piece_rows
from .clock import clock_of

_M64 = np.uint64(0xFFFFFFFFFFFFFFFF)


@dataclass
class Iterations:
    """Result of :func:`find_iterations` (the contract in :mod:`pyinterpose.trace.model`)."""

    source: str                      # "auto" | "markers" | "none"
    pid: int | None
    period_allocs: int
    count: int
    first_steady_seq: int
    stable_fraction: float
    boundaries: np.ndarray           # int64, len count+1 (empty when count == 0)
    boundaries_t: np.ndarray         # int64 ns
    exact: np.ndarray = field(default_factory=lambda: np.zeros(0, bool))   # per step: no extras, same signature
    extras: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))  # per step: extra allocations
    score: float = 0.0               # share of signature positions repeating at the period
    seq_range: tuple[int, int] = (0, 0)  # the analysed process's [first seq, last seq + 1)
    reason: str = ""                 # why no loop was reported (source "none")
    clock: dict = field(default_factory=lambda: {"clock": "cpu"})   # the clock of boundaries_t (.clock)

    @property
    def durations_ns(self) -> np.ndarray:
        return np.diff(self.boundaries_t) if self.count else np.zeros(0, np.int64)

    def steady_window(self) -> tuple[int, int]:
        """(seq_lo, seq_hi) of one representative steady step: the exact step nearest the
        middle of the run.  With no loop found, the whole process's range."""
        if self.count == 0:
            return self.seq_range
        idx = np.flatnonzero(self.exact) if self.exact.any() else np.arange(self.count)
        k = int(idx[np.argmin(np.abs(idx - (self.count - 1) / 2))])
        return int(self.boundaries[k]), int(self.boundaries[k + 1])

    def iteration_of(self, seq: np.ndarray) -> np.ndarray:
        """Index of the regular step containing each seq (-1 outside the run)."""
        seq = np.asarray(seq, dtype=np.int64)
        if self.count == 0:
            return np.full(seq.shape, -1, dtype=np.int64)
        k = np.searchsorted(self.boundaries, seq, side="right") - 1
        return np.where((k >= 0) & (k < self.count), k, -1).astype(np.int64)

    def to_dict(self, per_iteration: bool = True) -> dict[str, Any]:
        d = self.durations_ns
        out: dict[str, Any] = {
            "source": self.source, "pid": self.pid, "period_allocs": int(self.period_allocs),
            "count": int(self.count), "first_steady_seq": int(self.first_steady_seq),
            "stable_fraction": float(self.stable_fraction), "score": round(float(self.score), 4),
            "duration_ns": ({"mean": float(d.mean()), "median": float(np.median(d)),
                             "min": int(d.min()), "max": int(d.max()),
                             "cv": float(d.std() / d.mean()) if d.mean() > 0 else 0.0}
                            if len(d) else None),
            "steady_window": list(self.steady_window()),
        }
        if self.reason:
            out["reason"] = self.reason
        out.update(self.clock)
        if per_iteration:
            out["iterations"] = self.rows(0, self.count)
        return out

    def rows(self, lo: int, hi: int) -> list[dict[str, Any]]:
        """The entries of ``to_dict()["iterations"]`` for steps ``[lo, hi)`` (a writer that streams
        the list asks for a piece of steps at a time)."""
        hi = min(hi, self.count)
        if hi <= lo:
            return []
        b = self.boundaries[lo:hi + 1].tolist()
        bt = self.boundaries_t[lo:hi + 1].tolist()
        d = np.diff(self.boundaries_t[lo:hi + 1]).tolist()
        ex = [bool(x) for x in self.exact[lo:hi].tolist()] if len(self.exact) else [True] * (hi - lo)
        xa = [int(x) for x in self.extras[lo:hi].tolist()] if len(self.extras) else [0] * (hi - lo)
        return [{"index": lo + i, "start_seq": int(b[i]), "end_seq": int(b[i + 1]), "start_t": int(bt[i]),
                 "duration_ns": int(di), "exact": e, "extra_allocs": x}
                for i, di, e, x in zip(range(hi - lo), d, ex, xa)]


# ---------------------------------------------------------------------------------------
# signature
# ---------------------------------------------------------------------------------------

def _mix64(x: np.ndarray) -> np.ndarray:
    """splitmix64 finaliser, vectorised (uint64 arithmetic wraps)."""
    z = x.astype(np.uint64) + np.uint64(0x9E3779B97F4A7C15)
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


@dataclass
class _Signature:
    seq: np.ndarray        # seq_alloc of each allocation, ascending
    t: np.ndarray          # t_alloc
    size: np.ndarray       # int64
    token: np.ndarray      # uint64: hash(size, lifetime in events)
    live_before: np.ndarray | None  # live bytes just before each allocation (None: see facts)
    gap_before: np.ndarray | None   # ns since the previous alloc/free event (None: see facts)
    step_end_seq: np.ndarray | None  # per allocation: seq_free + 1 if freed else seq_alloc + 1 (None: step_end_at)
    seq_range: tuple[int, int]
    frees: Any = None      # () -> iterator of (seq_free, size, t_free) of the frees, a piece at a time
    freed: np.ndarray | None = None     # per allocation (with seq_free: step_end_at, when step_end_seq is None)
    seq_free: np.ndarray | None = None

    def step_end_at(self, j: np.ndarray) -> np.ndarray:
        """``step_end_seq[j]``: read from the array when the signature holds it, else made for ``j``
        only from the allocations' own columns (8 bytes an allocation not kept: only the last step's
        are asked for)."""
        if self.step_end_seq is not None:
            return self.step_end_seq[j]
        return np.where(self.freed[j], self.seq_free[j] + 1, self.seq[j] + 1)

    def facts(self, j: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(live_before, gap_before) of the allocations at the ascending indices ``j``: read from the
        arrays when the signature holds them, else computed for those allocations only from one pass
        over the frees (:func:`_facts_at`; 16 bytes an allocation not kept for a window of one step)."""
        j = np.asarray(j, np.int64)
        if self.live_before is not None:
            return self.live_before[j], self.gap_before[j]
        return _facts_at(self, j)


_BLOCK_COLUMNS = ["block_id", "seq_alloc", "t_alloc", "size", "freed", "seq_free", "t_free"]


def _process_blocks(trace: Trace, pid: int) -> pd.DataFrame:
    """The process's device blocks (all its blocks when none is a device block), with the
    columns used here."""
    b = trace.blocks
    in_pid = b["pid"].to_numpy() == pid
    dev = in_pid & b["counts_device"].to_numpy(bool)
    m = dev if dev.any() else in_pid
    if m.all():
        return b[_BLOCK_COLUMNS]
    # the rows by numpy's mask, not the frame's (pandas' take of every column: ~0.75 s at 100 M events)
    return pd.DataFrame({c: b[c].to_numpy()[m] for c in _BLOCK_COLUMNS}, copy=False)


class _Rows:
    """The process's blocks of :func:`_process_blocks` without copying them all at once: a column
    is copied (the process's rows of it) when it is read, and not kept; with every row selected, the
    table's own columns.  ``trace``/``mask`` let :func:`_t_at_seq` read the columns in pieces."""

    def __init__(self, blocks: pd.DataFrame, mask: np.ndarray | None):
        self.blocks, self.mask = blocks, mask
        self.n = len(blocks) if mask is None else int(np.count_nonzero(mask))
        self.span = None        # the selected rows as one range [lo, hi), when they are one
        if mask is not None and self.n:
            lo = int(np.argmax(mask))
            hi = len(mask) - int(np.argmax(mask[::-1]))
            if hi - lo == self.n:
                self.span = (lo, hi)

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, c: str) -> pd.Series:
        col = self.blocks[c]
        if self.mask is None:
            return col
        a = col.to_numpy()
        if self.span is not None:       # one range of rows: a view of the column (of its map), no copy
            return pd.Series(a[self.span[0]:self.span[1]], copy=False)
        out = pd.Series(a[self.mask], copy=False)
        release(a)                      # the mapped column's pages, once copied
        return out


def _process_rows(trace: Trace, pid: int) -> _Rows:
    """:func:`_process_blocks` as :class:`_Rows` (its columns copied one at a time, when read)."""
    b = trace.blocks
    in_pid = b["pid"].to_numpy() == pid
    dev = in_pid & b["counts_device"].to_numpy(bool)
    m = dev if dev.any() else in_pid
    release(b["pid"])
    release(b["counts_device"])
    return _Rows(b, None if m.all() else m)


def _allocations_in_order(blocks: pd.DataFrame):
    """(order, seq_alloc, t_alloc, size, freed, seq_free) of the allocations in (seq_alloc, block_id) order
    (``order`` a slice when they are in that order already)."""
    seq_a = blocks["seq_alloc"].to_numpy(np.int64)
    bid = blocks["block_id"].to_numpy(np.int64)
    if not _in_order(seq_a, bid):
        o = np.lexsort((bid, seq_a))
    else:
        o = slice(None)
    release(bid)
    return (o, seq_a[o], blocks["t_alloc"].to_numpy(np.int64)[o], blocks["size"].to_numpy(np.int64)[o],
            blocks["freed"].to_numpy(bool)[o], blocks["seq_free"].to_numpy(np.int64)[o])


def _in_order(seq_a: np.ndarray, bid: np.ndarray) -> bool:
    """Whether the rows are in (seq_alloc, block_id) order already: each row's pair at least the
    previous row's (ascending seq, ties by ascending id), checked a piece of rows at a time (each
    piece with the last row of the one before), the mapped pages of each piece given back."""
    n = len(seq_a)
    for a0, a1 in spans(n, piece_rows()):
        lo = max(a0 - 1, 0)
        s, b = seq_a[lo:a1], bid[lo:a1]
        ds = np.diff(s)
        ok = np.all((ds > 0) | ((ds == 0) & (np.diff(b) >= 0)))
        release(seq_a, lo, a1)
        release(bid, lo, a1)
        if not ok:
            return False
    return True


def _signature(blocks: pd.DataFrame, seq_range: tuple[int, int]) -> _Signature:
    """The signature of the process's allocations, computed a piece of allocations at a time from
    the frees in seq order (their seqs, cumulative sizes and times): no full-length event arrays.
    Each position is counted as in the merged alloc/free event sequence (frees before allocs at
    equal seq): an allocation's position is its index plus the frees at or before its seq, a
    free's the allocations before its seq plus its rank among the frees."""
    o, seq_a, t_a, size, freed, seq_f = _allocations_in_order(blocks)
    n = len(seq_a)
    # the frees' seqs, sorted (only their values are read: no order array)
    fs = seq_f[freed]
    fs.sort()
    if len(fs) > 1 and not (fs[1:] > fs[:-1]).all():       # two frees at one seq: ranks by sort order
        del fs
        return _signature_whole(blocks, seq_range)
    for a in (seq_f, freed):
        release(a)                      # views of a mapped column (the process's rows one range): its pages
    token = np.empty(n, np.uint64)
    # a piece holds ~15 arrays of its length: a sixteenth of chunk_rows() keeps it near one column's piece
    for a0, a1 in spans(n, max(1, chunk_rows() // 16)):
        sa = seq_a[a0:a1]
        sz = size[a0:a1]
        fr = freed[a0:a1]
        cf = np.searchsorted(fs, sa, side="right")           # frees at or before each allocation
        pos_a = cf + np.arange(a0, a1)
        sf = seq_f[a0:a1]
        life = np.full(a1 - a0, -1, np.int64)
        sff = sf[fr]
        life[fr] = np.searchsorted(seq_a, sff, side="left") + np.searchsorted(fs, sff, side="left") - pos_a[fr]
        del sff
        token[a0:a1] = _mix64(sz.astype(np.uint64)) ^ _mix64(life.astype(np.uint64) * np.uint64(3) + np.uint64(1))
        del life, cf, pos_a
        for a in (seq_a, size, freed, seq_f):
            release(a, a0, a1)
    del fs
    release(seq_a)                      # the searches' reads of it
    # live_before and gap_before are read for one step's allocations only: computed then (facts); the
    # step end for the last step's allocations only (step_end_at).  seq, t, size, freed and seq_free
    # are views of the mapped columns when the process's rows are one range (else copies)
    return _Signature(seq_a, t_a, size, token, None, None, None, seq_range, frees=_frees_of(blocks),
                      freed=freed, seq_free=seq_f)


def _frees_of(blocks):
    """A function yielding (seq_free, size, t_free) of the freed rows of ``blocks`` (a :class:`_Rows`
    or a table) a piece of the table at a time, in its order (the mapped pages given back)."""
    rows = blocks if isinstance(blocks, _Rows) else _Rows(blocks, None)
    b, m = rows.blocks, rows.mask

    def frees():
        cols = [b[c].to_numpy() for c in ("freed", "seq_free", "size", "t_free")]
        fr_, sf_, sz_, tf_ = cols
        for lo, hi in spans(len(b), piece_rows()):
            k = np.asarray(fr_[lo:hi], bool)
            if m is not None:
                k = k & m[lo:hi]
            yield (np.asarray(sf_[lo:hi], np.int64)[k], np.asarray(sz_[lo:hi], np.int64)[k],
                   np.asarray(tf_[lo:hi], np.int64)[k])
            for a in cols:
                release(a, lo, hi)
    return frees


def _facts_at(sig: _Signature, j: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(live_before[j], gap_before[j])`` of :func:`_signature`'s definition (every event in seq order,
    frees before allocations at an equal seq), for the ascending allocation indices ``j`` only: per
    allocation seq, the frees at or before it — their count, their sizes' sum and the time of the last
    of them — counted over the frees a piece at a time (their seqs are distinct: else the signature
    holds the arrays)."""
    if not len(j):
        z = np.zeros(0, np.int64)
        return z, z.copy()
    jp = np.maximum(j - 1, 0)
    q = np.unique(np.concatenate([sig.seq[j], sig.seq[jp]]))        # the seqs asked about, ascending
    cnt = np.zeros(len(q) + 1, np.int64)        # frees first counted at each query (by searchsorted)
    tot = np.zeros(len(q) + 1, np.int64)
    last_s = np.full(len(q), -1, np.int64)      # per query: the largest free seq at or before it, its time
    last_t = np.zeros(len(q), np.int64)
    found = np.zeros(len(q), bool)
    for sf, sz, tf in sig.frees():
        if not len(sf):
            continue
        k = np.searchsorted(q, sf, side="left")     # a free at seq s counts for every query >= s
        cnt += np.bincount(k, minlength=len(cnt))
        with np.errstate(over="ignore"):
            np.add.at(tot, k, sz)
        o = np.argsort(sf, kind="stable")
        sfs = sf[o]
        i = np.searchsorted(sfs, q, side="right") - 1
        ok = i >= 0
        better = ok & (~found | (sfs[np.maximum(i, 0)] > last_s))
        last_s[better] = sfs[i[better]]
        last_t[better] = tf[o][i[better]]
        found |= ok
    with np.errstate(over="ignore"):
        cf_q = np.cumsum(cnt)[:len(q)]
        fsum_q = np.cumsum(tot)[:len(q)]
        at = np.searchsorted(q, sig.seq[j])
        cf = cf_q[at]
        j0 = int(j[0])
        total = sig.size[:j0].sum(dtype=np.int64)                     # the allocations' bytes before j[0]
        release(sig.size, 0, j0)                                      # a mapped view's pages (else nothing)
        run = np.cumsum(sig.size[j0:int(j[-1]) + 1], dtype=np.int64)
        before = run[j - j0] - sig.size[j] + total
        live = before - np.where(cf > 0, fsum_q[at], 0)
    cf_prev = cf_q[np.searchsorted(q, sig.seq[jp])]
    by_free = np.where(j > 0, cf != cf_prev, True) & (cf > 0)
    t_prev = np.where(j > 0, sig.t[jp], 0)
    t_prev = np.where(by_free, last_t[at], t_prev)
    gap = sig.t[j] - t_prev
    gap[(cf + j) == 0] = 0                                           # the first event: no gap before it
    return live.astype(np.int64), gap.astype(np.int64)


def _signature_whole(blocks: pd.DataFrame, seq_range: tuple[int, int]) -> _Signature:
    """:func:`_signature` with every event sorted at once (the frees of two blocks at one seq)."""
    o, seq_a, t_a, size, freed, seq_f = _allocations_in_order(blocks)
    n = len(seq_a)
    t_f = blocks["t_free"].to_numpy(np.int64)[o]
    # alloc/free events in seq order (frees before allocs at equal seq, each kind in its order):
    # the allocations are in seq order already, the frees sorted, then both merged
    fidx = np.flatnonzero(freed)
    ev_t = np.concatenate([t_a, t_f[fidx]])
    ev_delta = np.concatenate([size, -size[fidx]])
    fs = seq_f[fidx]
    fo = np.argsort(fs, kind="stable")
    fs = fs[fo]
    pos = np.empty(n + len(fidx), dtype=np.int64)
    pos[:n] = np.searchsorted(fs, seq_a, side="right") + np.arange(n)
    pos[n + fo] = np.searchsorted(seq_a, fs, side="left") + np.arange(len(fidx))
    del fs, fo
    order = np.empty(len(pos), dtype=np.int64)
    order[pos] = np.arange(len(pos))
    alloc_pos = pos[:n]
    life = np.full(n, -1, dtype=np.int64)
    life[fidx] = pos[n:] - alloc_pos[fidx]
    token = _mix64(size.astype(np.uint64)) ^ _mix64(life.astype(np.uint64) * np.uint64(3) + np.uint64(1))
    cum = np.cumsum(ev_delta[order])
    live_before = (cum - ev_delta[order])[alloc_pos]
    t_sorted = ev_t[order]
    gap = np.diff(t_sorted, prepend=t_sorted[0] if len(t_sorted) else 0)[alloc_pos]
    step_end = np.where(freed, seq_f + 1, seq_a + 1)
    return _Signature(seq_a, t_a, size, token, live_before, gap, step_end, seq_range)


# ---------------------------------------------------------------------------------------
# period finding
# ---------------------------------------------------------------------------------------

def _gap_candidates(token: np.ndarray, max_period: int, k: int = 32) -> np.ndarray:
    """The ``k`` most common distances (<= ``max_period``) from each token to its previous occurrence."""
    hist = _gap_histogram(token, max_period)
    if not hist.any():
        return np.zeros(0, np.int64)
    nz = np.flatnonzero(hist)
    top = nz[np.argsort(-hist[nz], kind="stable")[:k]]
    return np.sort(top).astype(np.int64)


def _gap_histogram(token: np.ndarray, max_period: int) -> np.ndarray:
    """Count per distance ``d`` in ``1..max_period`` of the tokens whose previous occurrence is ``d``
    earlier (``np.bincount`` of those distances; index 0 is 0).  Read a piece of tokens at a time:
    the last index of each distinct token seen so far is carried between pieces (sorted by token), so
    no full-length sort is held."""
    hist = np.zeros(max(max_period, 0) + 1, np.int64)
    seen_t = np.zeros(0, token.dtype)           # distinct tokens so far, ascending
    seen_i = np.zeros(0, np.int64)              # the last index of each
    for a0, a1 in spans(len(token), max(1, chunk_rows() // 16)):
        t = token[a0:a1]
        o = np.argsort(t, kind="stable")
        ts, idx = t[o], o.astype(np.int64) + a0
        first = np.ones(len(ts), bool)
        first[1:] = ts[1:] != ts[:-1]
        prev = np.empty(len(ts), np.int64)
        prev[1:] = idx[:-1]
        # a token's first occurrence in the piece: its last index before the piece, if any
        j = np.searchsorted(seen_t, ts[first])
        j_ok = j < len(seen_t)
        hit = np.zeros(len(j), bool)
        hit[j_ok] = seen_t[j[j_ok]] == ts[first][j_ok]
        pf = np.full(len(j), -1, np.int64)
        pf[hit] = seen_i[j[hit]]
        prev[first] = pf
        gaps = idx - prev
        gaps = gaps[(prev >= 0) & (gaps <= max_period)]
        hist += np.bincount(gaps, minlength=len(hist))[:len(hist)]
        # carry: the last index of every token seen (the piece's last occurrences replace older ones)
        last = np.ones(len(ts), bool)
        last[:-1] = ts[1:] != ts[:-1]
        lt, li = ts[last], idx[last]
        keep = np.ones(len(seen_t), bool)
        keep[j[hit]] = False
        seen_t = np.concatenate([seen_t[keep], lt])
        seen_i = np.concatenate([seen_i[keep], li])
        so = np.argsort(seen_t, kind="stable")
        seen_t, seen_i = seen_t[so], seen_i[so]
    hist[0] = 0
    return hist


def _fft_candidates(token: np.ndarray, max_period: int, k: int = 32,
                    window: int = 1 << 20) -> np.ndarray:
    """Periods with the most matches T[i] == T[i+p], all p at once in O(n log n).

    Each token gets a pseudo-random unit phase w; the autocorrelation of w at lag p is
    the number of matching pairs plus O(sqrt n) noise from unequal pairs (random phases
    cancel).  Runs on the middle ``window`` tokens of long signatures."""
    n = len(token)
    if n > window:
        lo = (n - window) // 2
        token = token[lo:lo + window]
        n = window
    max_period = min(max_period, n - 1)
    if max_period < 1:
        return np.zeros(0, np.int64)
    theta = (_mix64(token) >> np.uint64(11)).astype(np.float64) * (2 * np.pi / float(1 << 53))
    w = np.exp(1j * theta).astype(np.complex128)
    size = 1 << int(np.ceil(np.log2(2 * n)))
    f = np.fft.fft(w, size)
    ac = np.fft.ifft(f * np.conj(f)).real[1:max_period + 1]
    est = ac / (n - np.arange(1, max_period + 1))
    top = np.argsort(-est, kind="stable")[:k] + 1
    return np.sort(top).astype(np.int64)


class _Scorer:
    """share of positions i with T[i] == T[i+p], on a fixed sample for long signatures."""

    def __init__(self, token: np.ndarray, sample: int = 400_000):
        self.token = token
        n = len(token)
        self.sample = None
        if n > sample:
            rng = np.random.default_rng(0x5EED)
            self.sample = np.sort(rng.integers(0, n, sample))
        self.cache: dict[int, float] = {}

    def __call__(self, p: int) -> float:
        if p in self.cache:
            return self.cache[p]
        t = self.token
        n = len(t)
        if p <= 0 or p >= n:
            s = 0.0
        elif self.sample is None:
            s = float(np.mean(t[:-p] == t[p:]))
        else:
            i = self.sample[self.sample < n - p]
            s = float(np.mean(t[i] == t[i + p])) if len(i) else 0.0
        self.cache[p] = s
        return s


def _divisors(p: int) -> list[int]:
    small, large = [], []
    d = 1
    while d * d <= p:
        if p % d == 0:
            small.append(d)
            if d * d != p:
                large.append(p // d)
        d += 1
    return small + large[::-1]


def _candidates(token: np.ndarray, max_period: int) -> np.ndarray:
    return np.union1d(_gap_candidates(token, max_period), _fft_candidates(token, max_period))


def find_period(token: np.ndarray, min_steps: int = 3, min_score: float = 0.5,
                tolerance: float = 0.05) -> tuple[int, float]:
    """(period in allocations, score) of an integer signature; (0, best score) if none."""
    n = len(token)
    if n < 2:
        return 0, 0.0
    max_period = max(1, n // max(2, min_steps - 1))
    cands = _candidates(token, max_period)
    if len(cands) == 0:
        return 0, 0.0
    score = _Scorer(token)
    scores = np.array([score(int(p)) for p in cands])
    best = float(scores.max())
    if best < min_score:
        return 0, best
    chosen = int(cands[np.flatnonzero(scores >= best - tolerance)[0]])
    for d in _divisors(chosen):
        if d < chosen and score(d) >= best - tolerance:
            chosen = d
            break
    return chosen, float(score(chosen))


def _longest_runs(token: np.ndarray, cands: np.ndarray) -> np.ndarray:
    """per candidate period p: the longest run of consecutive positions with T[i] == T[i+p]."""
    out = np.zeros(len(cands), np.int64)
    for k, p in enumerate(cands):
        p = int(p)
        if 0 < p < len(token):
            _, lens = _runs(token[:-p] == token[p:])
            out[k] = int(lens.max()) if len(lens) else 0
    return out


# ---------------------------------------------------------------------------------------
# step matching
# ---------------------------------------------------------------------------------------

def _window_hashes(values: np.ndarray, p: int) -> np.ndarray:
    """64-bit polynomial hash of every window values[k:k+p] (k = 0..n-p), O(n)."""
    n = len(values)
    if p > n:
        return np.zeros(0, np.uint64)
    base = np.uint64(0x100000001B3)      # odd => invertible mod 2**64
    inv = np.uint64(pow(int(base), -1, 1 << 64))
    with np.errstate(over="ignore"):
        pw = np.cumprod(np.full(n, base, dtype=np.uint64))           # base^(j+1)
        ipw = np.cumprod(np.full(n, inv, dtype=np.uint64))           # base^-(j+1)
        pre = np.concatenate([np.zeros(1, np.uint64), np.cumsum(_mix64(values) * pw, dtype=np.uint64)])
        win = pre[p:] - pre[:-p]                                     # base^(k+1) * h(k)
        return win * ipw[: n - p + 1]


_BASE = 0x100000001B3


def _hashes_of(values: np.ndarray, p: int, k0: int, k1: int) -> np.ndarray:
    """``_window_hashes(values, p)[k0:k1]``, computed from ``values[k0:k1 + p - 1]`` alone (the same
    uint64 arithmetic: the prefix sums differ by a constant that cancels, the powers start at
    ``base**(k0+1)``)."""
    m = 1 << 64
    v = values[k0:k1 + p - 1]
    L = len(v)
    base, inv = np.uint64(_BASE), np.uint64(pow(_BASE, -1, m))
    with np.errstate(over="ignore"):
        pw = np.full(L, base, dtype=np.uint64)
        pw[0] = np.uint64(pow(_BASE, k0 + 1, m))
        pw = np.cumprod(pw, dtype=np.uint64)                                   # base^(j+1), j = k0..
        pre = np.concatenate([np.zeros(1, np.uint64), np.cumsum(_mix64(v) * pw, dtype=np.uint64)])
        del pw
        ipw = np.full(k1 - k0, inv, dtype=np.uint64)
        ipw[0] = np.uint64(pow(pow(_BASE, -1, m), k0 + 1, m))
        ipw = np.cumprod(ipw, dtype=np.uint64)                                 # base^-(k+1), k = k0..
        return (pre[p:p + k1 - k0] - pre[:k1 - k0]) * ipw


def _window_matches(values: np.ndarray, p: int, ref: int) -> np.ndarray:
    """``h == h[ref]`` for ``h = _window_hashes(values, p)``, computed in pieces (no full-length hash)."""
    n = len(values)
    if p > n:
        return np.zeros(0, bool)
    nw = n - p + 1
    target = _hashes_of(values, p, ref, ref + 1)[0]
    out = np.empty(nw, bool)
    for k0, k1 in spans(nw, max(1, chunk_rows() // 16)):     # ~10 uint64 arrays of a piece
        out[k0:k1] = _hashes_of(values, p, k0, k1) == target
        release(values, k0, k1)         # a mapped view's pages (the sizes of one range of rows)
    return out


def _runs(mask: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """starts and lengths of runs of True."""
    m = np.concatenate([[False], mask, [False]]).astype(np.int8)
    d = np.diff(m)
    starts = np.flatnonzero(d == 1)
    ends = np.flatnonzero(d == -1)
    return starts, ends - starts


class _Matcher:
    def __init__(self, size: np.ndarray, ref: np.ndarray, exact_starts: set[int], max_extra: int):
        self.size = size
        self.ref = ref
        self.p = len(ref)
        self.exact_starts = exact_starts
        self.max_extra = max_extra
        self.n = len(size)

    def match(self, s: int) -> tuple[int, int] | None:
        """Match one step starting exactly at s: (end, extras) or None."""
        if s in self.exact_starts:
            return s + self.p, 0
        size, ref, n = self.size, self.ref, self.n
        if s >= n or size[s] != ref[0]:
            return None
        i, j, extra = s, 0, 0
        while j < self.p:
            if i >= n:
                return None
            if size[i] == ref[j]:
                j += 1
            else:
                extra += 1
                if extra > self.max_extra:
                    return None
            i += 1
        return i, extra

    def next_step(self, e: int) -> tuple[int, int, int] | None:
        """The step following a step that ended at e: (start, end, extras incl. leading)."""
        hi = min(self.n, e + self.max_extra + 1)
        for s in range(e, hi):
            if s in self.exact_starts:
                return s, s + self.p, s - e
        for s in range(e, hi):
            r = self.match(s)
            if r is not None and r[1] + (s - e) <= self.max_extra:
                return s, r[0], r[1] + (s - e)
        return None

    def prev_step(self, s: int) -> tuple[int, int, int] | None:
        """The step preceding a step that starts at s: (start, end, extras)."""
        lo = max(0, s - self.p - self.max_extra)
        for st in range(s - self.p, lo - 1, -1):
            if st >= 0 and st in self.exact_starts:
                return st, st + self.p, s - (st + self.p)
        for st in range(s - self.p, lo - 1, -1):
            if st < 0:
                break
            r = self.match(st)
            if r is not None and r[0] <= s and r[1] + (s - r[0]) <= self.max_extra:
                return st, r[0], r[1] + (s - r[0])
        return None


def _none(pid, seq_range, reason, score=0.0) -> Iterations:
    z = np.zeros(0, np.int64)
    return Iterations("none", pid, 0, 0, int(seq_range[0]), 0.0, z, z.copy(),
                      np.zeros(0, bool), z.copy(), float(score), seq_range, reason)


def _seq_range(trace: Trace, pid: int) -> tuple[int, int]:
    """The process's [first seq, last seq + 1) over its blocks, launches, accesses and markers,
    read in pieces (min and max of each piece)."""
    lo, hi = [], []

    def extent(tab, cols, plus):
        if not len(tab):
            return
        p = tab["pid"].to_numpy()
        arrs = [tab[c].to_numpy() for c in cols]
        for a0, a1 in spans(len(tab), piece_rows()):
            m = p[a0:a1] == pid
            if m.any():
                whole = m.all()
                for c, a, add in zip(cols, arrs, plus):
                    x = a[a0:a1] if whole else a[a0:a1][m]
                    if add is not None:
                        hi.append(int(x.max()) + add)
                    if c != "seq_free":
                        lo.append(int(x.min()))
            for a in [p, *arrs]:
                release(a, a0, a1)       # each piece's pages given back as it is read

    extent(trace.blocks, ("seq_alloc", "seq_free", "seq_alloc"), (None, 0, 1))
    for tab in (trace.launches, trace.accesses, trace.markers):
        extent(tab, ("seq",), (1,))
    return (min(lo), max(hi)) if lo else (0, 0)


def _from_markers(trace: Trace, pid: int, seq_range) -> Iterations | None:
    m = trace.markers
    m = m[m["pid"] == pid] if pid is not None else m
    if len(m) == 0:
        return None
    m = m.sort_values("seq")
    bseq = m["seq"].to_numpy(np.int64)
    bt = m["t"].to_numpy(np.int64)
    count = len(bseq) - 1
    b = _process_blocks(trace, pid)
    sa = np.sort(b["seq_alloc"].to_numpy(np.int64))
    if count < 1:
        it = _none(pid, seq_range, "only one marker: no complete iteration")
        it.source = "markers"
        return it
    per = np.diff(np.searchsorted(sa, bseq))
    # stability: the size sequence of each iteration equal to the most common one
    order = b.sort_values("seq_alloc")
    sizes = order["size"].to_numpy(np.int64)
    idx = np.searchsorted(sa, bseq)
    keys = [hash(sizes[idx[k]:idx[k + 1]].tobytes()) for k in range(count)]
    common = pd.Series(keys).value_counts().idxmax()
    exact = np.array([k == common for k in keys])
    period = int(np.median(per[exact])) if exact.any() else int(np.median(per))
    return Iterations("markers", pid, period, count, int(bseq[0]), float(exact.mean()),
                      bseq, bt, exact, (per - period).clip(min=0).astype(np.int64), 1.0, seq_range)


def find_iterations(trace: Trace, pid: int | None = None, *, use_markers: bool = True,
                    min_steps: int = 3, min_score: float = 0.5, tolerance: float = 0.05,
                    max_extra: int | None = None) -> Iterations:
    """Find the training loop's iterations in one process (default: the one with the most
    allocations).  See the module docstring for the method; ``max_extra`` (default
    ``max(3, period // 4)``) is how many unpredictable extra allocations a step may hold.

    Computed once per trace and arguments (``Trace.derived``): every analysis that needs the
    iterations shares one result, which must not be modified."""
    if pid is None:
        pid = trace.main_pid
    if pid is None:
        return _none(None, (0, 0), "the trace has no processes")
    pid = int(pid)
    key = ("iterations", pid, bool(use_markers), int(min_steps), float(min_score), float(tolerance),
           None if max_extra is None else int(max_extra))
    return trace.derived(key, lambda: _on_clock(trace, _found(trace, pid, use_markers, min_steps, min_score,
                                                              tolerance, max_extra)))


def _found(trace: Trace, *args) -> Iterations:
    """:func:`_find`, then (on a long trace: more blocks than a piece) the heap's free pages handed
    back (``heap.give_back``) and the cached columns' pages given back: the CLI keeps freed memory
    for the next arrays, so the signature and the period search's transient arrays (~0.5 GB at 100 M
    events) would otherwise stay resident under the clock, the JSON and the caller's next steps."""
    it = _find(trace, *args)
    if len(trace.blocks) > chunk_rows():
        release_tables(trace)
        give_back()
    return it


def _on_clock(trace: Trace, it: Iterations) -> Iterations:
    """``it`` with its boundaries' times on the process's clock (:mod:`.clock`): on the device
    clock a step starts where the GPU reached its first event, so durations are the GPU's."""

    c = clock_of(trace, it.pid)
    it.clock = c.as_dict()
    if c.device and len(it.boundaries):
        it.boundaries_t = c.host_times(it.boundaries, it.boundaries_t)
    return it


def _find(trace: Trace, pid: int, use_markers: bool, min_steps: int, min_score: float, tolerance: float,
          max_extra: int | None) -> Iterations:
    seq_range = _seq_range(trace, pid)
    if use_markers:
        it = _from_markers(trace, pid, seq_range)
        if it is not None:
            return it
    blocks = _process_rows(trace, pid)       # columns copied when read: the signature keeps seq, t and size
    if len(blocks) < 2 * min_steps:
        return _none(pid, seq_range, f"only {len(blocks)} allocations in process {pid}")
    sig = _signature(blocks, seq_range)
    release_tables(trace)        # the signature's reads of the cached columns: given back
    n = len(sig.token)
    p, score = find_period(sig.token, min_steps=min_steps, min_score=min_score, tolerance=tolerance)
    if p == 0:
        return _none(pid, seq_range, f"no repeating allocation pattern (best match {score:.0%})", score)
    best = _steps(trace, pid, blocks, sig, p, score, seq_range, min_steps, max_extra)
    if _coverage(best, sig) < n // 2:
        # The loop may be a short tail of a long trace (JAX: hundreds of autotuning allocations
        # with short repeating patterns before 20 steps of 3 buffers).  Try the periods with the
        # longest exact repeat and keep whichever explains the most allocations.
        max_period = max(1, n // max(2, min_steps - 1))
        cands = _candidates(sig.token, max_period)
        cands = cands[cands != p]
        runs = _longest_runs(sig.token, cands)
        ok = runs >= (min_steps - 1) * cands
        sc = _Scorer(sig.token)
        for q in cands[ok][np.argsort(-runs[ok], kind="stable")][:4]:
            alt = _steps(trace, pid, blocks, sig, int(q), sc(int(q)), seq_range, min_steps, max_extra,
                         longest_run=True)
            if _coverage(alt, sig) > _coverage(best, sig):
                best = alt
    return best


def _coverage(it: "Iterations", sig: "_Signature") -> int:
    """allocations inside the detected steps (0 when none)."""
    if it.count == 0:
        return 0
    return int(np.searchsorted(sig.seq, it.boundaries[-1]) - np.searchsorted(sig.seq, it.boundaries[0]))


def _steps(trace: Trace, pid: int, blocks: pd.DataFrame, sig: "_Signature", p: int, score: float,
           seq_range, min_steps: int, max_extra: int | None, longest_run: bool = False) -> "Iterations":
    """The run of regular steps of period ``p`` (see the module docstring, steps 3 and 4)."""
    n = len(sig.token)
    # steady start: first (or the longest) run of p consecutive signature matches at lag p
    starts, lens = _runs(sig.token[:-p] == sig.token[p:])
    ok = np.flatnonzero(lens >= p)
    if len(ok) == 0:   # noise in every step pair: fall back to sizes only
        starts, lens = _runs(sig.size[:-p] == sig.size[p:])
        ok = np.flatnonzero(lens >= p)
        if len(ok) == 0:
            return _none(pid, seq_range, f"period {p} never repeats cleanly", score)
    i0 = int(starts[ok[np.argmax(lens[ok])]] if longest_run else starts[ok[0]])
    # phase: the loop's low point (fewest live bytes before the allocation), then longest idle gap
    w = np.arange(i0, i0 + p)
    lb, gb = sig.facts(w)
    low = lb == lb.min()
    cand = w[low]
    b0 = int(cand[np.argmax(gb[low])])

    ref = sig.size[b0:b0 + p]
    size_exact = _window_matches(sig.size.view(np.uint64) if sig.size.dtype == np.int64
                                 else sig.size.astype(np.uint64), p, b0)
    exact_arr = np.flatnonzero(size_exact)
    del size_exact
    exact_starts = set(exact_arr.tolist())
    tok_exact = _window_matches(sig.token, p, b0)
    if max_extra is None:
        max_extra = max(3, p // 4)
    m = _Matcher(sig.size, ref, exact_starts, max_extra)

    # steps: extend backwards then forwards from the reference step
    starts_b = [b0]
    while True:
        r = m.prev_step(starts_b[-1])
        if r is None:
            break
        starts_b.append(r[0])
    starts_l, last_end = _forward(m, starts_b[::-1], m.match(b0)[0])
    best = (starts_l, last_end)
    # after a broken step, resume at the next exact step; keep the longest contiguous run
    e = last_end
    while True:
        k = int(np.searchsorted(exact_arr, e))
        if k >= len(exact_arr):
            break
        s0 = int(exact_arr[k])
        cur = _forward(m, [s0], s0 + p)
        if len(cur[0]) > len(best[0]):
            best = cur
        e = max(cur[1], s0 + 1)
    starts_l, last_end = best
    count = len(starts_l)
    if count < min_steps:
        return _none(pid, seq_range, f"period {p} repeats only {count} times (< {min_steps})", score)

    st = np.array(starts_l, dtype=np.int64)
    extras = np.append(np.diff(st) - p, last_end - st[-1] - p).astype(np.int64)
    en = np.append(st[1:], last_end)
    bseq = np.empty(count + 1, np.int64)
    bt = np.empty(count + 1, np.int64)
    release(sig.size)               # a mapped view (one range of rows): the matching's reads of it
    bseq[:count] = _take_sorted(sig.seq, st)
    bt[:count] = _take_sorted(sig.t, st)
    if last_end < n:                       # the next (irregular) allocation ends the run
        bseq[count] = sig.seq[last_end]
        bt[count] = sig.t[last_end]
    else:                                  # end of the last step: its own blocks' last free
        lo = int(st[-1])
        # only blocks that behave as their counterpart in the previous step (same size and
        # lifetime): a block kept to the end of the program or freed at teardown does not
        # stretch the last step to the end of the trace
        j = np.arange(lo, n)
        prev = j - (int(st[-1] - st[-2]) if count > 1 else p)
        like = (prev >= 0) & (sig.token[np.maximum(prev, 0)] == sig.token[j])
        end_seq = int(np.where(like, sig.step_end_at(j), sig.seq[j] + 1).max())
        bseq[count] = min(end_seq, seq_range[1])
        bt[count] = _t_at_seq(trace, pid, bseq[count] - 1, blocks)
    exact = (extras == 0) & tok_exact[np.minimum(st, len(tok_exact) - 1)]
    return Iterations("auto", pid, p, count, int(bseq[0]), float(exact.mean()), bseq, bt,
                      exact, extras, score, seq_range)


def _take_sorted(a: np.ndarray, idx: np.ndarray) -> np.ndarray:
    """``a[idx]`` for ascending ``idx``, read a piece of ``a`` at a time, the mapped pages of each
    piece given back (a view of a cached column: one step start every few dozen rows touches all
    its pages)."""
    out = np.empty(len(idx), a.dtype)
    for lo, hi in spans(len(a), piece_rows()):
        i0, i1 = np.searchsorted(idx, [lo, hi])
        out[i0:i1] = a[idx[i0:i1]]
        release(a, lo, hi)
    return out


def _forward(m: "_Matcher", starts: list[int], end: int) -> tuple[list[int], int]:
    """extend a run of steps forwards; returns (step starts, end of the last step's match)."""
    starts = list(starts)
    while True:
        r = m.next_step(end)
        if r is None:
            return starts, end
        starts.append(r[0])
        end = r[1]


def _t_at_seq(trace: Trace, pid: int, seq: int, blocks) -> int:
    """time of the last alloc/free event of ``blocks`` at or before ``seq`` (a :class:`_Rows`: read a
    piece of the table at a time, no copy of its columns)."""
    if not isinstance(blocks, _Rows):
        blocks = _Rows(blocks, None)
    b, m = blocks.blocks, blocks.mask
    ta_, sa_, tf_, fr_, sf_ = (b[c].to_numpy() for c in ("t_alloc", "seq_alloc", "t_free", "freed", "seq_free"))
    best = None
    for lo, hi in spans(len(b), piece_rows()):
        ka = sa_[lo:hi] <= seq
        kf = np.asarray(fr_[lo:hi], bool) & (sf_[lo:hi] <= seq)
        if m is not None:
            ka &= m[lo:hi]
            kf &= m[lo:hi]
        for t, k in ((ta_[lo:hi], ka), (tf_[lo:hi], kf)):
            if k.any():
                v = int(t[k].max())
                best = v if best is None or v > best else best
        for a in (ta_, sa_, tf_, fr_, sf_):
            release(a, lo, hi)
    return 0 if best is None else best


def require_loop(it: Iterations) -> Iterations:
    """Raise a user-facing error when no loop was found (for commands that need one)."""
    if it.count == 0:
        raise PyinterposeError(f"no training loop found in process {it.pid}: {it.reason}")
    return it
