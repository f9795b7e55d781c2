"""The access intervals of one process, made piece by piece (issue 30: bounded memory).

:func:`pyinterpose.analysis.access.access_intervals` is one table with a row per interval between two
touches of a block: at 100 M events ~50 M rows of 13 columns, 3.4 GB.  The analyses that read it
(``access``, ``swap``, ``compare``) need it only a piece at a time, so it is made here in pieces:

1. :func:`touches` — one pass over the accesses, a range of rows at a time (``trace.chunking``): each
   access's block, then the touches grouped by block in seq order, one per seq (``pi_access_touches``
   in ``native/reader/intervals.c``).  16 bytes per access (its seq, and its CPU time or, on the device
   clock, its access row) plus 8 per block; the pages of the cached access columns read on the way are
   given back (:mod:`pyinterpose.trace.pages`).
2. :func:`pieces` — the intervals of a range of blocks at a time (about :func:`piece_rows` intervals,
   cut only where the block id changes), each piece exactly the rows the whole table holds for those
   blocks, in the same order and with the same columns and types: ``pd.concat(list(pieces(...)))``
   *is* ``access_intervals``.  On the device clock the touches' times are read from the clock for
   the piece's touches only (the clock's functions are element-wise).

The pieces come in block order; an analysis folds them into per-piece partial results and merges
those (``access.analyze``, ``swap.prepare``).
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass

import numpy as np
import pandas as pd

from ..heap import give_back
from ..trace import chunking, pages
from ..trace.model import Trace
from .clock import clock_of
from .spillfiles import Files

INTERVAL_KINDS = ["alloc_to_first", "between", "last_to_free", "unaccessed"]
INTERVAL_COLUMNS = ["block_id", "pid", "size", "start_t", "end_t", "start_seq", "end_seq",
                    "ati_ns", "kind", "block_kind", "api", "freed", "counts_device"]


@dataclass
class Touches:
    """The touches of one process's blocks, grouped by block (see the module docstring)."""

    rows: np.ndarray          # rows of trace.blocks of the process, in block_id order (int32 when they fit)
    bid: np.ndarray           # their block ids (ascending; int32 when they fit)
    off: np.ndarray           # len(rows) + 1: where each block's touches start in seq / t (int32 when it fits)
    seq: np.ndarray | None    # the touches' seq, grouped by block, ascending within a block (int32 when it fits;
                              # None once let go for a pass on the device clock: :func:`drop_seqs`)
    t: np.ndarray             # int64: the touches' CPU time, or their access row (``clocks`` not None; int32)
    clocks: dict | None       # {pid: Clock} of the processes concerned when one is on the device clock

    @property
    def cnt(self) -> np.ndarray:
        """int64: distinct touches of each block (rows order), made from ``off`` when asked."""
        return np.diff(self.off).astype(np.int64, copy=False)

    @property
    def n_intervals(self) -> int:
        return int(self.off[-1]) + len(self.rows)


def block_rows(trace: Trace, pid: int | None) -> np.ndarray:
    """Rows of ``trace.blocks`` of the process (all with ``pid`` None), in block_id order."""
    b = trace.blocks
    rows = np.flatnonzero(b["pid"].to_numpy() == pid) if pid is not None else np.arange(len(b))
    bid = b["block_id"].to_numpy(np.int64)[rows]
    if len(bid) > 1 and not (np.diff(bid) > 0).all():
        rows = rows[np.argsort(bid, kind="stable")]
    return rows


def _ptr(x):
    from .._core import ffi  # lazy: compiled cffi module, absent from an unbuilt tree
    return ffi.from_buffer({"<i8": "int64_t[]", "<i4": "int32_t[]", "|i1": "int8_t[]"}[x.dtype.str], x)


def _col(table: pd.DataFrame, name: str) -> np.ndarray:
    return np.ascontiguousarray(table[name].to_numpy(np.int64))


def _device_clocks(trace: Trace, pid: int | None, rows: np.ndarray) -> dict | None:
    b = trace.blocks
    pids = [pid] if pid is not None else sorted({int(x) for x in b["pid"].to_numpy()[rows]})
    clocks = {p: clock_of(trace, p) for p in pids}
    return clocks if any(c.device for c in clocks.values()) else None


_kept: set = set()      # ids of the traces whose touches are kept (inside shared())


@contextlib.contextmanager
def shared(trace: Trace):
    """Inside this block the touches of ``trace`` are made once and kept with it (``Trace.derived``),
    for analyses that each make the intervals (``compare`` runs access and swap on one trace); let go
    at the end."""
    _kept.add(id(trace))
    try:
        yield
    finally:
        _kept.discard(id(trace))
        trace.forget("access.touches")


def touches(trace: Trace, pid: int | None) -> Touches:
    """The touches of the process's blocks (all processes' with ``pid`` None).  Not kept with the
    trace (16 bytes an access; but see :func:`shared`): a pass over the pieces holds them while it runs."""
    if id(trace) in _kept:
        return trace.derived(("access.touches", None if pid is None else int(pid)), lambda: _touches(trace, pid))
    return _touches(trace, pid)


def touches_of(trace: Trace, pid: int | None, r0: int, r1: int) -> Touches:
    """The touches of the process's blocks ``block_rows(trace, pid)[r0:r1]`` only (a worker's range of
    blocks, :mod:`.access_fan`): the same pass over the accesses, those of other blocks ignored; the
    pieces of these touches are the rows the whole table holds for those blocks."""
    return _touches(trace, pid, (int(r0), int(r1)))


def _touches(trace: Trace, pid: int | None, part: tuple[int, int] | None = None) -> Touches:
    from .._core import ffi, lib  # lazy: compiled cffi module, absent from an unbuilt tree

    b = trace.blocks
    rows = block_rows(trace, pid)
    if part is not None:
        rows = rows[part[0]:part[1]]
    nb = len(rows)
    n_all = len(b)

    def read(name):         # a blocks column at the process's rows; its mapped pages given back (a copy taken)
        x = b[name].to_numpy(np.int64)[rows]
        pages.release(b[name])
        return x
    pages.release(b["pid"])
    bid = read("block_id")
    seq_alloc, seq_free = read("seq_alloc"), read("seq_free")
    rows = _narrow(rows, 0, len(b) - 1)
    a = trace.accesses
    na = len(a)
    # a long trace (more than two ranges of accesses): the blocks' windows as int32 when they fit (the C
    # reads either: half the bytes while the touches are made), the accesses' block rows made a range at
    # a time; a shorter one as before (its arrays are small, and its heap's layout sets the 10 M peak)
    long_trace = na > 2 * chunking.chunk_rows()
    if long_trace:
        seq_alloc, seq_free = _narrow_seqs(seq_alloc, seq_free)
    clocks = _device_clocks(trace, pid, rows) if nb else None
    if clocks is not None:       # the clock's ops (read by every piece) made now, before the touches' arrays
        for c in clocks.values():
            if c.device:
                c.ops
        release_tables(trace)
    # block row of each access, a range of accesses at a time: a direct table when block ids are
    # small (the reader's: dense), else a search
    row = None if long_trace else np.full(na, -1, np.int32)
    row_of = _access_rows(a["block_id"].to_numpy() if nb and na else None, bid, n_all + na)
    if row is not None:
        for s, e in chunking.spans(na):
            row_of(s, e, row[s:e])
        row_of = None           # its lookup table
        rows_in = (lambda s, e: row[s:])
    else:
        # the rows of a range made when the C reads it (twice: count, then scatter) rather than held for
        # every access (int32 an access: 168 MB at 100 M events)
        buf = np.empty(chunking.chunk_rows(), np.int32)

        def rows_in(s, e):
            row_of(s, e, buf[:e - s])
            return buf
    if nb:
        bid = _narrow(bid, int(bid[0]), int(bid[-1]))
    if row is None:
        give_back()     # a long trace: the heap's free pages (the clock's ops made, the lookups) handed back
                        # before the touches' arrays, which would not reuse every hole they left
    a_seq = _col(a, "seq")
    # on the device clock a touch keeps its access row (a_t NULL): its times are read from the clock per piece
    a_t = None if clocks is not None else _col(a, "t")
    # the touches' seqs (and, on the device clock, access rows) written as int32 when they fit (C says
    # when one does not: then int64, as the CPU clock's times always are)
    narrow = [True, clocks is not None]
    while True:
        t_seq = np.empty(na, np.int32 if narrow[0] else np.int64)
        t_t = np.empty(na, np.int32 if narrow[1] else np.int64)
        off = _scatter_in_ranges(lib, ffi, seq_alloc, seq_free, rows_in, na, a_seq, a_t, t_seq, t_t, narrow)
        if off is not None or not any(narrow):
            break
        narrow = [False, False]
    if off is None:
        raise MemoryError("out of memory building access intervals")   # not reached: int64 always fits
    del rows_in, row_of, a_t, seq_alloc, seq_free
    row = None
    pages.release_all(a_seq, a["t"].to_numpy())
    # off[r] is now where block r's touches end: the counts are its differences (in place)
    cnt = off[:nb]
    if nb > 1:
        cnt[1:] -= cnt[:-1].copy()
    del off
    n = lib.pi_access_touch_group(nb, _ptr(cnt), _ptr(t_seq), _ptr(t_t), *(int(x) for x in narrow))
    if n < 0:
        raise MemoryError("out of memory building access intervals")
    n = int(n)
    t_seq, t_t = _shrink(t_seq, n), _shrink(t_t, n)
    off = np.zeros(nb + 1, np.int64)
    np.cumsum(cnt, out=off[1:])
    del cnt
    off = _narrow(off, 0, int(off[-1]))
    return Touches(rows=rows, bid=bid, off=off, seq=t_seq, t=t_t, clocks=clocks)


def _access_rows(a_bid, bid: np.ndarray, dense_limit: int):
    """``f(s, e, out)``: the block row (index into ``bid``, ascending block ids; -1 none) of accesses
    ``[s, e)`` written into ``out`` (int32), their mapped pages of ``a_bid`` (the accesses' block ids:
    the column itself, int32 or int64, widened a range at a time) given back: a direct table when block
    ids are small (below ``dense_limit``: the reader's are dense), else a search."""
    nb = len(bid)
    if a_bid is None:
        def none(s, e, out):
            out[:] = -1
        return none
    hi = int(bid[-1])
    lut = None
    if 0 <= int(bid[0]) and hi < 4 * dense_limit + 1024:
        lut = np.full(hi + 2, -1, dtype=np.int32)
        lut[bid] = np.arange(nb, dtype=np.int32)
        bid = None                        # not kept by the closure (the caller narrows its own)
    else:
        bid = bid.astype(np.int64)        # a copy: the caller narrows its own

    def rows(s, e, out):
        x = a_bid[s:e].astype(np.int64)
        if lut is not None:
            out[:] = lut[np.clip(x, -1, hi + 1)]
        else:
            pos = np.searchsorted(bid, x)
            pos_c = np.minimum(pos, nb - 1)
            out[:] = np.where((pos < nb) & (bid[pos_c] == x), pos_c, -1)
        pages.release(a_bid, s, e)
    return rows


def drop_seqs(trace: Trace, tc: Touches) -> bool:
    """Let the touches' seqs go for a pass over the pieces (int32 an access: 168 MB at 100 M events) when
    they are on the device clock: a piece reads each touch's access there anyway (its row, ``tc.t``) and
    takes the seq from it (the same value: a touch is its access's seq).  Not for touches kept with the
    trace (:func:`shared`: another analysis reads them).  Whether they were let go."""
    if tc.clocks is None or id(trace) in _kept or tc.seq is None:
        return False
    tc.seq = None
    return True


def _scatter_in_ranges(lib, ffi, seq_alloc, seq_free, rows_in, na, a_seq, a_t, t_seq, t_t, narrow) -> np.ndarray | None:
    """Steps 1a and 1b of ``pi_access_touches`` (``native/reader/intervals.c``) with the accesses read a
    range of ``chunk_rows()`` at a time (count, then scatter), each range's mapped pages of ``a_seq`` /
    ``a_t`` given back once read: the accesses' seq column (337 MB at 100 M events) is never all
    resident.  One array of ``nb + 1`` int64 (no counts beside it): the counts, made into where each
    block's touches start, advanced by the scatter; returned (then ``off[r]`` is where block ``r``'s
    touches end), or None when a kept value does not fit the int32 asked for."""
    nb = len(seq_alloc)
    w32 = [int(x) for x in narrow]
    off = np.zeros(nb + 1, np.int64)
    ranges = list(chunking.spans(na))
    sa, sf = _ptr(seq_alloc), _ptr(seq_free)
    sa32 = int(seq_alloc.dtype == np.int32)
    assert seq_free.dtype == seq_alloc.dtype

    def args(s, e):
        return (nb, sa, sf, sa32, s, e - s, _ptr(rows_in(s, e)), _ptr(a_seq[s:]), ffi.NULL if a_t is None else _ptr(a_t[s:]))

    def given_back(s, e):
        pages.release(a_seq, s, e)
        if a_t is not None:
            pages.release(a_t, s, e)

    cnt = _ptr(off[1:])
    for s, e in ranges:
        rc = lib.pi_access_touch_count(*args(s, e), cnt, *w32)
        given_back(s, e)
        if rc < 0:
            return None
    np.cumsum(off, out=off)              # off[r]: where block r's touches start
    for s, e in ranges:
        lib.pi_access_touch_scatter(*args(s, e), _ptr(off), _ptr(t_seq), _ptr(t_t), *w32)
        given_back(s, e)
    return off


def _narrow_seqs(sa: np.ndarray, sf: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The blocks' allocation and free seqs (int64) both as int32 when every one fits, else both int64,
    contiguous.  A block's window only compares with the accesses' seqs, which the C reads in int64."""
    if len(sa) and -(1 << 31) <= min(int(sa.min()), int(sf.min())) and max(int(sa.max()), int(sf.max())) < (1 << 31):
        return sa.astype(np.int32), sf.astype(np.int32)
    return np.ascontiguousarray(sa, dtype=np.int64), np.ascontiguousarray(sf, dtype=np.int64)


def _narrow(x: np.ndarray, lo: int, hi: int) -> np.ndarray:
    """``x`` (values in [lo, hi]) as int32 when they fit (the same values, half the bytes), else itself."""
    return x.astype(np.int32) if -(1 << 31) <= lo and hi < (1 << 31) else x


def _shrink(x: np.ndarray, n: int) -> np.ndarray:
    """The first ``n`` values of ``x``: the array itself when that is most of it (a view: the heap keeps
    the rest anyway), else a copy.  int32 when seqs and access rows fit (4 bytes an access less); a
    piece reads its rows back as int64 (:func:`_wide`)."""
    return x[:n] if 2 * n >= len(x) else x[:n].copy()


def _wide(x: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(x, dtype=np.int64)


def piece_rows() -> int:
    """Intervals per piece: a quarter of ``chunk_rows()`` (at least 1).  Making a piece costs ~100 bytes
    an interval (its seqs and times, the touches' device times, the rows' block columns), so the default
    piece of 1 Mi intervals stays near 100 MB."""
    return max(1, chunking.chunk_rows() // 4)


def spans(tc: Touches, size: int | None = None) -> list[tuple[int, int]]:
    """Block ranges ``(r0, r1)`` (indices into ``tc.rows``) of about ``size`` (:func:`piece_rows`)
    intervals each, cut only between blocks of different ids (a run of one id stays in one piece)."""
    nb = len(tc.rows)
    if nb == 0:
        return []
    size = size or piece_rows()
    if tc.n_intervals <= size:
        return [(0, nb)]
    ends = tc.off[1:] + np.arange(1, nb + 1)         # intervals up to and including each block
    cuts, r0 = [], 0
    while r0 < nb:
        base = int(ends[r0 - 1]) if r0 else 0
        r1 = int(np.searchsorted(ends, base + size, side="right"))
        r1 = max(r1, r0 + 1)
        cuts.append((r0, min(r1, nb)))
        r0 = min(r1, nb)
    return _whole_ids(cuts, tc)


def _whole_ids(cuts: list, tc: Touches) -> list[tuple[int, int]]:
    """Merge the pieces that would split a run of rows of one block id (ids repeated in the blocks)."""
    ids = tc.bid
    if len(cuts) < 2 or bool((ids[1:] > ids[:-1]).all()):
        return cuts
    out = [list(cuts[0])]
    for r0, r1 in cuts[1:]:
        if ids[r0] == ids[r0 - 1]:
            out[-1][1] = r1
        else:
            out.append([r0, r1])
    return [(x, y) for x, y in out]


def pieces(trace: Trace, pid: int | None, size: int | None = None, columns=None, tc: Touches | None = None):
    """The rows of ``access_intervals(trace, pid)`` for a range of blocks at a time (DataFrames with
    its columns, in its order; see the module docstring); with ``columns``, dicts of those columns
    as numpy arrays (categoricals as their int8 codes).  ``tc``: the process's :func:`touches`, when
    the caller has them."""
    if tc is None:
        tc = touches(trace, pid)
    b, a = trace.blocks, trace.accesses
    read = [b[c].to_numpy() for c in ("block_id", "pid", "size", "seq_alloc", "seq_free", "t_alloc", "t_free",
                                       "freed", "counts_device")]
    if tc.clocks is not None:
        read += [a[c].to_numpy() for c in ("seq", "t", "pid")]
        for c in tc.clocks.values():
            o = c.ops if c.device else None
            if o is not None:
                read += [x for x in (o.seq, o.t, o.start, o.end, o.stream, o.frontier) if x is not None]
    for r0, r1 in spans(tc, size):
        p = piece(trace, tc, r0, r1, columns)
        pages.release_all(*read)          # the pages of the mapped columns this piece read
        yield p


def piece(trace: Trace, tc: Touches, r0: int, r1: int, columns=None):
    """The intervals of the blocks ``tc.rows[r0:r1]`` (a DataFrame, or a dict of ``columns``)."""
    from .._core import lib  # lazy: compiled cffi module, absent from an unbuilt tree

    b = trace.blocks
    rows = tc.rows[r0:r1]
    nb = len(rows)
    k0, k1 = int(tc.off[r0]), int(tc.off[r1])
    cnt = np.diff(tc.off[r0:r1 + 1]).astype(np.int64, copy=False)
    seq_alloc = np.ascontiguousarray(b["seq_alloc"].to_numpy(np.int64)[rows])
    seq_free = np.ascontiguousarray(b["seq_free"].to_numpy(np.int64)[rows])
    t_alloc = b["t_alloc"].to_numpy(np.int64)[rows]
    t_free = b["t_free"].to_numpy(np.int64)[rows]
    tseq = None if tc.seq is None else _wide(tc.seq[k0:k1])
    m = (k1 - k0) + nb
    start_seq, end_seq = np.empty(m, np.int64), np.empty(m, np.int64)
    start_t, end_t = np.empty(m, np.int64), np.empty(m, np.int64)
    code = np.empty(m, np.int8)
    if tc.clocks is None:
        t_alloc, t_free = np.ascontiguousarray(t_alloc), np.ascontiguousarray(t_free)
        lib.pi_access_intervals(nb, _ptr(seq_alloc), _ptr(seq_free), _ptr(t_alloc), _ptr(t_free), _ptr(cnt),
                                _ptr(tseq), _ptr(_wide(tc.t[k0:k1])), _ptr(start_seq), _ptr(end_seq), _ptr(start_t),
                                _ptr(end_t), _ptr(code))
    else:
        t_alloc, t_free, a_start, a_end, a_seq = _device_times(trace, tc, rows, _wide(tc.t[k0:k1]), seq_alloc,
                                                               seq_free, t_alloc, t_free)
        if tseq is None:          # the touches' seqs let go (drop_seqs): those of their accesses (the same)
            tseq = a_seq
        del a_seq
        # an interval starts where the touch before it ENDS (a kernel's device end) and ends where
        # the next touch STARTS (its device start): the intervals of the touches' ends give the
        # starts, those of their starts give the ends (alloc and free are the same in both)
        scratch = np.empty(m, np.int64)
        for times, out_start, out_end in ((a_end, start_t, scratch), (a_start, scratch, end_t)):
            lib.pi_access_intervals(nb, _ptr(seq_alloc), _ptr(seq_free), _ptr(t_alloc), _ptr(t_free), _ptr(cnt),
                                    _ptr(tseq), _ptr(times), _ptr(start_seq), _ptr(end_seq), _ptr(out_start),
                                    _ptr(out_end), _ptr(code))
        del scratch, a_start, a_end
        np.maximum(end_t, start_t, out=end_t)      # accesses overlapping on concurrent streams: 0
    rows_of_interval = np.repeat(rows.astype(np.int32 if len(b) < 1 << 31 else np.int64), cnt + 1)
    made = {
        "block_id": lambda: b["block_id"].to_numpy(np.int64)[rows_of_interval],
        "pid": lambda: b["pid"].to_numpy()[rows_of_interval].astype(np.int32, copy=False),
        "size": lambda: b["size"].to_numpy(np.int64)[rows_of_interval],
        "start_t": lambda: start_t,
        "end_t": lambda: end_t,
        "start_seq": lambda: start_seq,
        "end_seq": lambda: end_seq,
        "ati_ns": lambda: end_t - start_t,
        "kind": lambda: pd.Categorical.from_codes(code, categories=INTERVAL_KINDS),
        "block_kind": lambda: _take_category(b["kind"], rows_of_interval),
        "api": lambda: _take_category(b["api"], rows_of_interval),
        "freed": lambda: b["freed"].to_numpy(bool)[rows_of_interval],
        "counts_device": lambda: b["counts_device"].to_numpy(bool)[rows_of_interval],
    }
    if columns is not None:
        out = {}
        for c in columns:
            x = code if c == "kind" else made[c]()
            out[c] = x.codes if isinstance(x, pd.Categorical) else x
        return out
    return pd.DataFrame({c: made[c]() for c in INTERVAL_COLUMNS}, copy=False)   # fresh arrays: no copy


def _device_times(trace: Trace, tc: Touches, rows: np.ndarray, k: np.ndarray, seq_alloc, seq_free,
                  t_alloc, t_free):
    """On the device clock (:mod:`.clock`): the blocks' allocations and frees placed on it, the start and
    end of each touch (``k``: their access rows) and its seq (its access's), all contiguous int64."""
    b = trace.blocks
    a = trace.accesses
    clocks = tc.clocks
    a_seq, a_t, a_pid = _gather([a[c].to_numpy() for c in ("seq", "t", "pid")], k)
    a_seq, a_t = a_seq.astype(np.int64, copy=False), a_t.astype(np.int64, copy=False)
    a_start, a_end = a_t.copy(), a_t.copy()
    t_alloc, t_free = t_alloc.copy(), t_free.copy()
    one = len(clocks) == 1
    b_pid = None if one else b["pid"].to_numpy()[rows]
    for p, c in clocks.items():
        if not c.device:
            continue
        mb = slice(None) if one else b_pid == p
        t_alloc[mb] = c.host_times(seq_alloc[mb], t_alloc[mb])
        t_free[mb] = c.host_times(seq_free[mb], t_free[mb])
        ma = a_pid == p
        if ma.all():
            _op_times(c, a_seq, a_t, a_start, a_end, slice(None))
        else:
            _op_times(c, a_seq, a_t, a_start, a_end, ma)
    return (np.ascontiguousarray(t_alloc), np.ascontiguousarray(t_free), np.ascontiguousarray(a_start),
            np.ascontiguousarray(a_end), np.ascontiguousarray(a_seq))


def _op_times(c, a_seq, a_t, a_start, a_end, sel) -> None:
    """``a_start[sel], a_end[sel] = c.op_times(a_seq[sel], a_t[sel])``.  With the clock's ops longer than
    ``chunk_rows()``, the touches whose op lies in one range of ``chunk_rows()`` ops at a time (an op is
    found by ``searchsorted(side="left")``: the touches with seq in ``(seq[lo - 1], seq[hi - 1]]`` find
    theirs in ``[lo, hi)``, the last range takes the seqs past the end), each range's mapped pages of the
    ops given back once read: a piece's touches reach across all the ops (~0.3 GB resident at once at
    100 M events otherwise).  Only the ranges some touch falls in are visited (:func:`_by_range`).  The
    same values."""
    o = c.ops
    n = len(o.seq) if o is not None else 0
    step = chunking.chunk_rows()
    if n <= step:
        a_start[sel], a_end[sel] = c.op_times(a_seq[sel], a_t[sel])
        return
    idx = np.flatnonzero(sel) if not isinstance(sel, slice) else None
    seq = a_seq if idx is None else a_seq[idx]
    cols = [x for x in (o.seq, o.t, o.start, o.end, o.stream, o.frontier, getattr(o, "timed", None))
            if isinstance(x, np.ndarray)]
    for x in cols:      # what placing the piece's allocations and frees read (searches across all the ops)
        pages.release(x)
    edges = np.asarray(o.seq[step - 1:n - 1:step])      # seq[hi - 1] of every range but the last
    for j, k in _by_range(np.searchsorted(edges, seq, side="left"), len(edges) + 1):
        rows = k if idx is None else idx[k]
        a_start[rows], a_end[rows] = c.op_times(a_seq[rows], a_t[rows])
        for x in cols:
            pages.release(x, j * step, (j + 1) * step)


def _gather(cols: list, k: np.ndarray) -> list:
    """``[c[k] for c in cols]`` (columns of one length).  On a column longer than a piece, read a range of
    ``chunk_rows()`` rows at a time, each range's mapped pages given back once read: a piece's touches
    (those of long-lived blocks) reach across the whole column, whose pages would otherwise all be
    resident at once (~0.8 GB of the accesses' seq, t and pid at 100 M events).  Only the ranges some
    row of ``k`` falls in are visited (:func:`_by_range`)."""
    n = len(cols[0]) if cols else 0
    step = chunking.chunk_rows()
    if n <= step:
        return [c[k] for c in cols]
    out = [np.empty(len(k), c.dtype) for c in cols]
    for j, idx in _by_range(k // step, -(-n // step)):
        kk = k[idx]
        for c, o in zip(cols, out):
            o[idx] = c[kk]
        for c in cols:
            pages.release(c, j * step, (j + 1) * step)
    return out


def _by_range(r: np.ndarray, nr: int):
    """``(j, positions of r == j)`` for each range ``j`` in ``range(nr)`` that ``r`` holds, in order of
    ``j``, each one's positions increasing (a stable sort on ``r``: a radix sort when ``nr`` fits in 16
    bits).  One pass, not one mask over ``r`` per range (pieces of a few rows over long columns: the
    ranges outnumber a piece's rows)."""
    if len(r) == 0:
        return
    order = np.argsort(r.astype(np.uint16 if nr <= 1 << 16 else np.int64, copy=False), kind="stable")
    counts = np.bincount(r, minlength=nr)
    ends = np.cumsum(counts)
    for j in np.flatnonzero(counts):
        yield int(j), order[ends[j] - counts[j]:ends[j]]


def release_tables(trace: Trace) -> None:
    """Give back the resident pages of every mapped column of the trace's tables (:mod:`..trace.pages`)."""
    for name in ("blocks", "accesses", "launches", "copies", "markers", "nvml", "processes"):
        df = getattr(trace, name, None)
        if df is not None and hasattr(df, "columns"):
            pages.release_frame(df)


def _take_category(col: pd.Series, rows: np.ndarray) -> pd.Categorical:
    """col[rows] as a Categorical without materialising strings (fast on millions of rows)."""
    if not isinstance(col.dtype, pd.CategoricalDtype):
        col = col.astype("category")
    return pd.Categorical.from_codes(col.cat.codes.to_numpy()[rows], dtype=col.dtype)


def whole(trace: Trace, pid: int | None) -> pd.DataFrame:
    """All the intervals as one table (one piece of every block)."""
    tc = touches(trace, pid)
    if len(tc.rows) == 0:
        return piece(trace, tc, 0, 0)
    return piece(trace, tc, 0, len(tc.rows))


# ---- the rows swap's problem reads, written by access's pass (issue 30) ------------------------
#
# ``compare`` and the report run the access analysis and then swap's problem on one long trace: both
# make every piece of the access intervals (~12 s at 100 M events each).  Inside :func:`for_swap` the
# access pass also writes, as it goes, the rows ``swap.problem`` keeps (kind "between", size >= its
# min size, its columns) to files of this process's own, mapped back and removed when the pass ends
# (file-backed: nothing held on the heap between the two); the problem then reads them instead of a
# second pass.  The rows are those its own pass would give, in the same order (the same pieces of the
# same process's touches).

SWAP_ROWS_COLUMNS = ("block_id", "size", "start_t", "end_t", "start_seq", "end_seq")
SWAP_ROWS_KIND = "between"
_for_swap: dict = {}        # id(trace) -> {"pid", "min_size", "rows" (None until written)}


@contextlib.contextmanager
def for_swap(trace: Trace, pid: int | None, min_size: int):
    """Inside this block an access pass over ``pid``'s pieces (:class:`SwapRows`) writes the rows swap's
    problem for ``pid`` and ``min_size`` reads (:func:`swap_rows`); let go at the end."""
    _for_swap[id(trace)] = {"pid": pid, "min_size": int(min_size), "rows": None}
    try:
        yield
    finally:
        _for_swap.pop(id(trace), None)


def swap_follows(trace: Trace) -> bool:
    """Whether swap's problem runs next on ``trace`` (inside :func:`for_swap`): it reads the clock too."""
    return id(trace) in _for_swap


class SwapRows:
    """Fed every piece of one pass (with :attr:`columns`), in order: writes the kept rows."""

    columns = SWAP_ROWS_COLUMNS + ("kind",)

    def __init__(self, spec: dict):
        self.spec, self.code = spec, INTERVAL_KINDS.index(SWAP_ROWS_KIND)
        self.out = Files("pyinterpose-swaprows-")
        for c in SWAP_ROWS_COLUMNS:
            self.out.add_column(c, np.int64)

    @classmethod
    def wanted(cls, trace: Trace, pid: int | None) -> "SwapRows | None":
        """A writer when :func:`for_swap` asked for ``pid``'s rows (None otherwise, or when its files
        cannot be made: swap's problem then makes its own)."""
        spec = _for_swap.get(id(trace))
        if spec is None or spec["pid"] != pid or spec["rows"] is not None:
            return None
        try:
            return cls(spec)
        except OSError:
            return None

    def feed(self, p: dict) -> None:
        keep = p["kind"] == self.code
        keep &= p["size"] >= max(1, self.spec["min_size"])
        for c in SWAP_ROWS_COLUMNS:
            self.out.append(c, p[c][keep])

    def finish(self) -> None:
        """The rows written, mapped back (the files removed: they live on while mapped); none when they
        cannot be (swap's problem then makes its own)."""
        try:
            self.spec["rows"] = self.out.finish()
        except OSError:
            pass

    def abort(self) -> None:
        self.out.abort()


def swap_rows(trace: Trace, pid: int | None, min_size: int) -> pd.DataFrame | None:
    """The rows an access pass wrote for swap's problem (:func:`for_swap`), taken once; None when none
    were written for this process and min size."""
    spec = _for_swap.get(id(trace))
    if spec is None or spec["rows"] is None or spec["pid"] != pid or spec["min_size"] != int(min_size):
        return None
    rows, spec["rows"] = spec["rows"], None
    return pd.DataFrame({c: np.asarray(rows[c]) for c in SWAP_ROWS_COLUMNS}, copy=False)
