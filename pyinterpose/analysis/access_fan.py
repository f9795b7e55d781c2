"""The access analysis' pass over the intervals fanned out per range of blocks (issue 30: one long process).

``access.analyze`` folds the pieces of the access intervals (:mod:`.intervals`) into per-row columns (ATI,
start, kind of each device interval) and per-segment ones (first row, block id and size of each block's
run of rows): :class:`.access._StreamedIntervals`.  A block's intervals depend on its own touches only, so
inside :func:`.fanout.using` a long process's blocks (in block-id order) are cut into ranges of whole
iterations (:func:`.fanout.row_ranges`), one or a few per worker.  A task (:func:`range_task`) gets
``(path, pid, r0, r1)``, loads the trace (memory-mapped from its cache), makes the touches of its blocks
only (:func:`.intervals.touches_of`: one pass over the accesses, the others' ignored) and their pieces, and
returns its rows' columns; the parent appends them in range order (to files above
:func:`.access_spill.spill_rows` rows, as the serial pass does), so every column, and every figure made
from them, is the serial pass's.

Fanned out only where it can pay and stay exact: :func:`.fanout.fannable` (a valid cache; on a local pool
at least :data:`MIN_BLOCKS` blocks, or ``PYINTERPOSE_FANOUT_MIN_BLOCKS``, and ``--workers N`` or at least
:data:`MIN_CORES` cores: see the figures beside MIN_BLOCKS), block ids unique among the
process's blocks (a segment is then one block: no rows of several sizes), and no swap problem reading the
same pass's rows (``intervals.for_swap``: the serial pass writes them).
"""
from __future__ import annotations

import numpy as np

from ..trace.reader import load
from . import access_spill, fanout, intervals
from .intervals import INTERVAL_KINDS

# On a local pool the pass is fanned out only for a process of at least MIN_BLOCKS blocks
# (``PYINTERPOSE_FANOUT_MIN_BLOCKS``) and, unless ``--workers`` asks for a number, on a machine of at least
# MIN_CORES cores.  Each task pays what the serial pass pays once: loading the trace's clock (its ops, ~2.4 s
# at 100 M events) and a pass over all the accesses (the touches, ~2 s), and the parent takes every
# row's columns back (~1 GB at 100 M events); only the pieces (~9 s there) divide.  On the 2-core VM that
# is a loss at 10 M (7.6 s against 6.2) and at 100 M (the pass 18.0 s against 11.4): docs/performance.md.
MIN_BLOCKS = 4_000_000
MIN_CORES = 4

_COLS = ("block_id", "size", "start_t", "ati_ns", "kind", "counts_device")


def _fits(lo: int, hi: int):
    return np.int32 if -(1 << 31) <= lo and hi < (1 << 31) else np.int64


def may_fan_out(trace) -> bool:
    """Whether the executor and the trace's size allow :func:`plan` to fan the pass out (its other
    conditions read the blocks); False: the pass is serial whatever else holds."""
    w = fanout.width()
    if w < 2 or not fanout.fannable(trace, w, MIN_BLOCKS):
        return False
    return fanout.asked() or w >= MIN_CORES      # the machine's cores on a local pool: too few to pay


def plan(trace, pid, iters=None):
    """``(ranges, ub_dtype)``: the ranges ``(r0, r1)`` of ``block_rows(trace, pid)`` the pass fans out
    over and the dtype of the block ids (the serial pass's), or None for the serial pass."""
    if intervals.swap_follows(trace) or not may_fan_out(trace):
        return None
    w = fanout.width()
    rows = intervals.block_rows(trace, pid)
    nb = len(rows)
    if nb < 2:
        return None
    bid = trace.blocks["block_id"].to_numpy(np.int64)[rows]
    if not bool((bid[1:] > bid[:-1]).all()):
        return None
    if bool((rows[1:] > rows[:-1]).all()):
        # the blocks table's ranges of whole iterations, as positions among the process's rows
        cuts = np.searchsorted(rows, [lo for lo, _ in fanout.row_ranges(trace, w, pid, iters)])
    else:
        cuts = [round(nb * k / w) for k in range(w)]
    bounds = sorted({0, nb, *(int(c) for c in cuts if 0 < c < nb)})
    ranges = list(zip(bounds, bounds[1:]))
    if len(ranges) < 2:
        return None
    return ranges, _fits(int(bid[0]), int(bid[-1]))


def range_task(item: tuple) -> dict:
    """The device rows of the blocks ``block_rows(trace, pid)[r0:r1]`` of the trace at ``path`` (a
    worker's task): ``ati``, ``start``, ``kcode`` per row, ``seg`` (first row of each block's run, from
    the range's first row), ``ub`` and ``size`` per segment, ``n`` rows."""
    path, pid, r0, r1 = item
    trace = load(path)
    tc = intervals.touches_of(trace, pid, r0, r1)
    ati, start, kcode, seg, ub, size = [], [], [], [], [], []
    pos = 0
    for p in intervals.pieces(trace, pid, columns=_COLS, tc=tc):
        dev = p["counts_device"]
        sel = slice(None) if dev.all() else dev
        a, st = p["ati_ns"][sel], p["start_t"][sel]
        k, bid, sz = p["kind"][sel], p["block_id"][sel], p["size"][sel]
        m = len(a)
        if m:
            first = np.empty(m, bool)
            first[0] = True
            np.not_equal(bid[1:], bid[:-1], out=first[1:])
            s = np.flatnonzero(first)
            if not (sz[1:] == sz[:-1])[~first[1:]].all():        # not reached: ids unique (plan)
                raise AssertionError("a segment of one block id with rows of several sizes")
            ati.append(np.asarray(a, np.int64))
            start.append(np.asarray(st, np.int64))
            kcode.append(np.asarray(k, np.int8))
            seg.append((s + pos).astype(np.int64))
            ub.append(np.asarray(bid[s], np.int64))
            size.append(np.asarray(sz[s], np.int64))
        pos += m
    del tc

    def cat(x, t):
        return np.concatenate(x) if x else np.zeros(0, t)
    return {"n": pos, "ati": cat(ati, np.int64), "start": cat(start, np.int64), "kcode": cat(kcode, np.int8),
            "seg": cat(seg, np.int64), "ub": cat(ub, np.int64), "size": cat(size, np.int64)}


def run(iv, trace, pid, ranges, ub_t) -> None:
    """Fill ``iv`` (a :class:`.access._StreamedIntervals`) from the ranges' tasks, as its serial pass does."""
    items = [(trace.path, None if pid is None else int(pid), r0, r1) for r0, r1 in ranges]
    limit = access_spill.spill_rows()
    # the segments' first rows in files: int32 when every row number of the process fits (one an access
    # and a block at most; the total is known only at the end)
    seg_spill_t = _fits(0, len(trace.accesses) + len(trace.blocks))
    held: list[dict] = []                  # results before the rows are known to go to files
    files = segf = None
    tried = False
    segs: list[tuple] = []                 # per-segment columns kept in memory
    n_kind = np.zeros(len(INTERVAL_KINDS), np.int64)
    pos = 0

    def put(r):
        if files is not None:
            files.append("ati", r["ati"])
            files.append("start", r["start"])
            files.append("kcode", r["kcode"])
            n_kind[:] += np.bincount(r["kcode"], minlength=len(INTERVAL_KINDS))[:len(INTERVAL_KINDS)]
        else:
            held.append(r)
        if segf is not None:
            segf.append("seg", r["seg"])
            segf.append("ub", r["ub"])
            segf.append("size", r["size"])
        else:
            segs.append((r["seg"], r["ub"], r["size"]))

    try:
        for r in fanout.fan_imap(range_task, items):
            r["seg"] += pos
            pos += int(r["n"])
            if files is None and not tried and pos > limit:     # a long trace: the rows to files
                tried = True
                files = access_spill.Rows.wanted(pos)
                if files is not None:
                    segf = access_spill.Segments.wanted(files, np.zeros(0, np.int64), seg_spill_t, ub_t)
                    old, held[:] = list(held), []
                    for x in old:
                        put(x)
                    del old
                    if segf is not None:
                        segs_old, segs[:] = list(segs), []
                        for s, u, z in segs_old:
                            segf.append("seg", s)
                            segf.append("ub", u)
                            segf.append("size", z)
                        del segs_old
            put(r)
            del r
    except BaseException:
        for f in (files, segf):
            if f is not None:
                f.abort()
        raise
    n = pos
    iv.spilled = files is not None
    iv.row_size = None
    if files is not None:
        cols = files.finish()
        ati, start, kcode = cols["ati"], cols["start"], cols["kcode"]
        iv.n_kind = [int(x) for x in n_kind]
    else:
        ati = np.concatenate([r["ati"] for r in held]) if held else np.zeros(0, np.int64)
        start = np.concatenate([r["start"] for r in held]) if held else np.zeros(0, np.int64)
        kcode = np.concatenate([r["kcode"] for r in held]) if held else np.zeros(0, np.int8)
        iv.n_kind = [int(np.count_nonzero(kcode == i)) for i in range(len(INTERVAL_KINDS))]
    held.clear()
    if segf is not None:
        c = segf.finish()
        seg, ub, seg_size = c["seg"], c["ub"], c["size"]
    else:
        seg = (np.concatenate([s for s, _, _ in segs]) if segs else np.zeros(0, np.int64)).astype(_fits(0, n))
        ub = (np.concatenate([u for _, u, _ in segs]) if segs else np.zeros(0, np.int64)).astype(ub_t)
        seg_size = np.concatenate([z for _, _, z in segs]) if segs else np.zeros(0, np.int64)
    segs.clear()
    iv.n, iv.seg, iv.seg_size_i = n, seg, seg_size
    iv.ati_col, iv.kcode, iv.start = ati, kcode, start
    iv.ub = ub
