"""The live device bytes curve of a trace, in pieces: its events in order and the peaks read from it.

The curve is the running sum of one delta per event — ``+size`` when a device block is allocated,
``-size`` when it is freed — with the events in **the curve's order**: by time, frees before
allocations at the same instant, then by delta, then by row of ``trace.blocks`` (what
:func:`event_order` gives).  :mod:`.model` reads every peak of live bytes from it.

At 100 M events a trace has ~11 M blocks and ~23 M such events: sorting them all at once, and
holding their time, delta and row (``model.live_events``) as int64 arrays, took ~1.7 GB.  Here:

* :func:`live_order` — the events in order, one integer each (the block's row for an allocation,
  ``~row`` for a free: 4 bytes an event below 2**31 blocks), computed once per trace **in pieces**:
  the blocks are in allocation time order, so a piece of ``chunk_rows()`` blocks holds the
  allocations of one span of time; its frees join the frees still pending (those of blocks still
  live), and the frees before the next piece's first allocation are merged with the piece's
  allocations.  Only a piece and the live set are held at once.  Blocks not in allocation time order
  (tables built by hand), a free before its own allocation or a negative size: the whole sort at once,
  the same order.
* :func:`scan` — the running maximum of the curve (of any subset of the blocks: a mask) over
  :func:`live_order` in pieces: the peak, where it is first reached and when.
* :func:`live_at_peak` — the bytes each block holds at that peak.

Exact: the order is the one :func:`event_order` gives for the whole trace (same key, same ties), so
every peak, instant and live set equals the in-memory result.
"""
from __future__ import annotations

import numpy as np

from ..heap import give_back
from .chunking import chunk_rows, spans
from .pages import release
from .piecewise import piece_rows


# ---- the order of a set of events (also the in-memory path) -----------------------------------

def event_order(t: np.ndarray, d: np.ndarray, n_free: int) -> np.ndarray:
    """``np.lexsort((d, t))`` of alloc/free events whose first ``n_free`` are frees (d <= 0) and
    the rest allocations (d >= 0): time order, frees first at an equal time — the same order up to
    events with equal (t, d), which are interchangeable.  Sorts each kind (usually almost in order
    already: cheap) and merges them, instead of sorting them together."""
    t, d = np.asarray(t), np.asarray(d)
    tf, df, ta, da = t[:n_free], d[:n_free], t[n_free:], d[n_free:]
    if (df > 0).any() or (da < 0).any():
        return np.lexsort((d, t))
    of, oa = _by_t_then_d(tf, df), _by_t_then_d(ta, da)
    tfs, tas = tf[of], ta[oa]
    order = np.empty(len(t), np.int64)
    order[np.searchsorted(tas, tfs, side="left") + np.arange(len(tfs))] = of
    order[np.searchsorted(tfs, tas, side="right") + np.arange(len(tas))] = oa + n_free
    return order


def _by_t_then_d(t: np.ndarray, d: np.ndarray) -> np.ndarray:
    o = np.argsort(t, kind="stable")
    ts = t[o]
    tie = ts[1:] == ts[:-1]
    if tie.any():
        ds = d[o]
        if (ds[1:][tie] < ds[:-1][tie]).any():
            return np.lexsort((d, t))
    return o


def counted_bytes(blocks) -> np.ndarray:
    """The device bytes each block adds to the live total: its ``device_bytes`` where the VMM join
    set them (a mapping partly overlapping another live mapping of its handle adds only the part
    not covered yet; pyinterpose.trace.vmm), else its size."""
    if "device_bytes" in blocks:
        return blocks["device_bytes"].to_numpy(np.int64)
    return blocks["size"].to_numpy(np.int64)


# ---- the order, in pieces ------------------------------------------------------------------------

class _Whole(Exception):
    """The blocks do not allow the order in pieces: sort them all at once."""


def _columns(blocks):
    return (blocks["t_alloc"].to_numpy(), blocks["t_free"].to_numpy(), counted_bytes(blocks),
            blocks["freed"].to_numpy(), blocks["counts_device"].to_numpy())


def _whole_order(blocks) -> np.ndarray:
    """The events in the curve's order, sorted at once (int64 codes: row, ``~row`` for a free)."""
    ta, tf, size, freed, dev = _columns(blocks)
    rows = np.flatnonzero(np.asarray(dev, bool))
    fr = rows[np.asarray(freed, bool)[rows]]
    nf = len(fr)
    t = np.concatenate([np.asarray(tf, np.int64)[fr], np.asarray(ta, np.int64)[rows]])
    d = np.concatenate([-size[fr], size[rows]])
    order = event_order(t, d, nf)
    del t, d
    code = np.concatenate([~fr, rows])
    return code[order]


def _piece_order(blocks, step: int) -> np.ndarray:
    """The same order as :func:`_whole_order`, computed a piece of ``step`` blocks at a time."""
    ta, tf, size, freed, dev = _columns(blocks)
    n = len(ta)
    wide = n >= (1 << 31) - 1
    dt = np.int64 if wide else np.int32
    pend_t = np.zeros(0, np.int64)      # frees not emitted yet, in the curve's order
    pend_d = np.zeros(0, np.int64)
    pend_r = np.zeros(0, np.int64)
    total = 0          # the events: every device block's allocation and every freed one's free
    for lo, hi in spans(n, step):
        d_ = np.asarray(dev[lo:hi], bool)
        total += int(np.count_nonzero(d_)) + int(np.count_nonzero(d_ & np.asarray(freed[lo:hi], bool)))
    out = np.empty(total, dt)          # filled piece by piece (no list of pieces and copy at the end)
    pos = 0
    s = 0
    while s < n:
        e = min(n, s + step)
        if e < n and ta[e] == ta[e - 1]:         # never split the allocations of one instant
            e += int(np.searchsorted(ta[e:], ta[e - 1], side="right"))
        a = np.asarray(ta[s:e], np.int64)
        if (len(a) > 1 and (a[1:] < a[:-1]).any()) or (e < n and ta[e] <= a[-1]):
            raise _Whole
        rows = s + np.flatnonzero(np.asarray(dev[s:e], bool))
        sz = size[rows]
        if len(sz) and sz.min() < 0:
            raise _Whole
        ft_all = np.asarray(tf[s:e], np.int64)
        fr = rows[np.asarray(freed[s:e], bool)[rows - s]]
        ft = ft_all[fr - s]
        if len(ft) and ft.min() < a[0]:      # a free before this piece's first allocation
            raise _Whole
        fd = -size[fr]
        o = _by_t_then_d(ft, fd)
        t_all = np.concatenate([pend_t, ft[o]])
        d_all = np.concatenate([pend_d, fd[o]])
        r_all = np.concatenate([pend_r, fr[o]])
        o = _by_t_then_d(t_all, d_all)       # two runs in order; ties: pending (smaller rows) first
        t_all, d_all, r_all = t_all[o], d_all[o], r_all[o]
        cut = len(t_all) if e >= n else int(np.searchsorted(t_all, ta[e], side="left"))
        at = a[rows - s]
        order = event_order(np.concatenate([t_all[:cut], at]), np.concatenate([d_all[:cut], sz]), cut)
        code = np.concatenate([~r_all[:cut], rows])[order].astype(dt)
        pend_t, pend_d, pend_r = t_all[cut:], d_all[cut:], r_all[cut:]
        if pos + len(code) > total:
            raise _Whole
        out[pos:pos + len(code)] = code
        pos += len(code)
        for c in (ta, tf, size, freed, dev):
            release(c, s, e)
        s = e
    if pos != total:
        raise _Whole
    return out


def compute_order(blocks, step: int | None = None) -> np.ndarray:
    """The live events of ``blocks`` in the curve's order: the row of each allocation, ``~row`` of
    each free (int32 when the rows fit, else int64), in pieces of ``step`` blocks (``chunk_rows() // 8``)."""
    if not len(blocks):
        return np.zeros(0, np.int32)
    try:
        # a piece's sort holds ~16 arrays of its length: an eighth of chunk_rows() keeps it near one
        # column's piece of memory
        return _piece_order(blocks, step or max(1, chunk_rows() // 8))
    except _Whole:
        code = _whole_order(blocks)
        return code.astype(np.int32) if len(blocks) < (1 << 31) - 1 else code


def live_order(trace) -> np.ndarray:
    """:func:`compute_order` of ``trace.blocks``, computed once per trace (read-only)."""
    return trace.derived(("model", "live_order"), lambda: _kept(compute_order(trace.blocks), len(trace.blocks)))


def _kept(order: np.ndarray, n_blocks: int) -> np.ndarray:
    """The order, with (on a long trace: more blocks than a piece) the heap's free pages handed back:
    the CLI keeps freed memory (``heap.keep_freed_memory``), so the pieces' sorts' temporaries
    (~0.1 GB at 100 M events) would stay resident under every pass over the order."""
    if n_blocks > chunk_rows():
        give_back()
    return order


# ---- reading the curve in pieces -------------------------------------------------------------

def _decode(code: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(rows, is_free) of encoded events."""
    free = code < 0
    rows = np.where(free, ~code, code).astype(np.int64, copy=False)
    return rows, free


def scan(trace, mask: np.ndarray | None = None) -> tuple[int, int, int]:
    """(peak, event index, time) of the live device bytes of the blocks in ``mask`` (bool per row of
    ``trace.blocks``; None: every device block): the curve's maximum (not clipped at 0), the first
    event reaching it (-1: no events) and that event's time (-1: none).  One pass over :func:`live_order` in pieces."""
    code = live_order(trace)
    if not len(code):
        return 0, -1, -1
    b = trace.blocks
    size = counted_bytes(b)
    mask = None if mask is None else np.asarray(mask, bool)
    if mask is not None and mask.all():
        mask = None
    carry, best, at = 0, None, -1
    for lo, hi in spans(len(code), piece_rows()):
        rows, free = _decode(code[lo:hi])
        d = size[rows]
        np.negative(d, out=d, where=free)
        if mask is not None:
            d *= mask[rows]
        cs = np.cumsum(d)
        cs += carry
        k = int(np.argmax(cs))
        if best is None or cs[k] > best:
            best, at = int(cs[k]), lo + k
        carry = int(cs[-1])
        alloc = rows[~free]
        if len(alloc):      # blocks come in time order: the sizes' pages before this piece's allocations
            release(size, 0, int(alloc.min()))      # are read again only by frees (mapped again then)
    release(size)
    r, f = _decode(code[at:at + 1])
    col = b["t_free"] if f[0] else b["t_alloc"]
    return best, at, int(col.to_numpy()[r[0]])


def peak_of(trace, mask: np.ndarray | None = None) -> int:
    """The peak live device bytes of the blocks in ``mask`` (None: all), 0 at least."""
    return max(scan(trace, mask)[0], 0)


def live_at_peak(trace, k: int | None = None) -> np.ndarray:
    """int64 per row of ``trace.blocks``: the sum of the deltas of the block's events up to and including
    the first event where the trace's live device bytes peak (its bytes live then; 0 for blocks not
    live; ``-size`` for a block freed at the peak's instant and allocated again after it).  ``k``: that
    event's index when the caller has it from :func:`scan`."""
    return live_at_peak_by(trace, lambda rows: rows, len(trace.blocks), k)     # each block its own group


def live_at_peak_by(trace, group_of, n_groups: int, k: int | None = None) -> np.ndarray:
    """int64 per group: the sum of :func:`live_at_peak` over the blocks of each group, without its
    full-length array.  ``group_of(rows)`` gives the group (``0 <= g < n_groups``; -1: none) of
    each row of ``trace.blocks`` in ``rows`` (int64); the events up to the peak are read a piece at a time."""
    out = np.zeros(n_groups, np.int64)
    code = live_order(trace)
    if not len(code):
        return out
    if k is None:
        _, k, _ = scan(trace)
    size = counted_bytes(trace.blocks)
    for lo, hi in spans(k + 1, piece_rows()):
        rows, free = _decode(code[lo:hi])
        g = np.asarray(group_of(rows), np.int64)
        d = size[rows]
        np.negative(d, out=d, where=free)
        keep = g >= 0
        np.add.at(out, g[keep], d[keep])
    release(size)
    return out
