"""The request stream by block: what :func:`pyinterpose.analysis.pools.evaluate` replays (issue 30).

The per-request columns (``_request_columns``: is_alloc, block_id, size, stream) cost 25 bytes a
request, and each native replay made 8 more of its own (a dense id of the block and of the stream per
request).  Here a request is 4 bytes: ``req[i] = s`` for the allocation of slot ``s`` (the
``s``-th selected block in table order), ``~s`` for its free; the size and the stream are held once
per slot (``bsize``, ``bstream``), and the native replays take this form as it is
(``native/allocsim/allocsim.h``: the ``pi_as_*_b`` entry points).

It is the same replay as the per-request columns when each block id names one block: the replays key
their live blocks by id, and slot ``s`` stands for block ``s``'s id (the stream of every request is its
block's, and so is a free's size).  :func:`by_block` checks that the selected blocks' ids are distinct
and answers None otherwise (the caller then builds the per-request columns).

The order is ``_request_columns``'s: the allocations and the frees each in seq order (stable), an
allocation after the frees at or before its seq, a free after the allocations before its seq.  The
selected blocks' columns are read a piece of the table at a time, each piece's mapped pages given back,
and the places are computed a piece of the requests at a time (no full-length position arrays).
"""
from __future__ import annotations

import numpy as np

from ...trace.chunking import spans
from ...trace.model import Trace, counted_bytes
from ...trace.pages import release
from ...trace.piecewise import ascending, piece_rows, running_peak
from .allocators import RequestArrays

_MAX_SLOTS = (1 << 31) - 1


def _distinct_ids(bid: np.ndarray, mask: np.ndarray) -> bool:
    """Whether the ids of the selected rows are distinct: ascending strictly (the loader's order), read a
    piece at a time; else by one sort of the selected ids."""
    last = None
    for lo, hi in spans(len(bid), piece_rows()):
        p = bid[lo:hi][np.asarray(mask[lo:hi], bool)]
        release(bid, lo, hi)
        if len(p) and ((last is not None and not p[0] > last) or not bool((p[1:] > p[:-1]).all())):
            break
        if len(p):
            last = p[-1]
    else:
        return True
    ids = bid[np.asarray(mask, bool)]
    return len(np.unique(ids)) == len(ids)


def by_block(trace: Trace, mask: np.ndarray, seq: bool = False) -> dict | None:
    """The request stream of the rows of ``trace.blocks`` selected by ``mask`` (bool per row) by block:
    {"arrays": :class:`RequestArrays` (by block), "n": the number of requests, "allocs": the number of
    allocations (= blocks), "peak": ``max(cumsum(±size))`` over the requests (0 for none)}, and with
    ``seq`` "seq": each request's sequence number (int64); None when two selected blocks share an id (or
    there are too many blocks for int32 slots)."""
    b = trace.blocks
    mask = np.asarray(mask, bool)
    nb = int(np.count_nonzero(mask))
    if nb >= _MAX_SLOTS or not _distinct_ids(b["block_id"].to_numpy(), mask):
        return None
    cols = {"seq_alloc": b["seq_alloc"].to_numpy(), "seq_free": b["seq_free"].to_numpy(),
            "freed": b["freed"].to_numpy()}
    nf = 0
    for lo, hi in spans(len(b), piece_rows()):
        nf += int(np.count_nonzero(np.asarray(cols["freed"][lo:hi], bool) & mask[lo:hi]))
    # the order first; the sizes and streams (read by slot) after it, when its arrays are gone
    sa = np.empty(nb, np.int64)
    sf = np.empty(nf, np.int64)
    fslot = np.empty(nf, np.int32)
    ka = kf = 0
    for lo, hi in spans(len(b), piece_rows()):
        m = mask[lo:hi]
        fr = np.asarray(cols["freed"][lo:hi], bool)[m]
        k = int(np.count_nonzero(m))
        sa[ka:ka + k] = cols["seq_alloc"][lo:hi][m]
        f = np.flatnonzero(fr)
        sf[kf:kf + len(f)] = cols["seq_free"][lo:hi][m][f]
        fslot[kf:kf + len(f)] = f + ka
        ka += k
        kf += len(f)
        for a in cols.values():
            release(a, lo, hi)
    del cols
    aslot = None
    if not ascending(sa):
        aslot = np.argsort(sa, kind="stable")
        sa = sa[aslot]
    if not ascending(sf):
        sf, fslot = _sort_frees(sf, fslot)
    n = nb + nf
    req = np.empty(n, np.int32)
    seqs = np.empty(n, np.int64) if seq else None
    for lo, hi in spans(nb, piece_rows()):
        pos = np.searchsorted(sf, sa[lo:hi], side="right")
        pos += np.arange(lo, hi)
        req[pos] = np.arange(lo, hi, dtype=np.int32) if aslot is None else aslot[lo:hi]
        if seq:
            seqs[pos] = sa[lo:hi]
    del aslot
    for lo, hi in spans(nf, piece_rows()):
        pos = np.searchsorted(sa, sf[lo:hi], side="left")
        pos += np.arange(lo, hi)
        req[pos] = ~fslot[lo:hi]
        if seq:
            seqs[pos] = sf[lo:hi]
    del sa, sf, fslot
    bsize = np.empty(nb, np.int64)
    bstream = np.empty(nb, np.uint64)
    ka = 0
    cols = {"size": counted_bytes(b), "stream": b["stream"].to_numpy()}
    for lo, hi in spans(len(b), piece_rows()):
        m = mask[lo:hi]
        k = int(np.count_nonzero(m))
        bsize[ka:ka + k] = cols["size"][lo:hi][m]
        bstream[ka:ka + k] = cols["stream"][lo:hi][m]
        ka += k
        for a in cols.values():
            release(a, lo, hi)
    del cols
    out = {"arrays": RequestArrays.by_block(req, bsize, bstream), "n": n, "allocs": nb,
           "peak": peak_by_block(req, bsize)}
    if seq:
        out["seq"] = seqs
    return out


def _sort_frees(sf: np.ndarray, fslot: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``sf`` sorted (stable) and ``fslot`` in the same order.  When the seqs leave room, each seq and
    its place are packed into one int64 and sorted in place (no int64 order array: 8 bytes a free
    less at the peak); else by a stable argsort."""
    n = len(sf)
    bits = max(1, int(n - 1).bit_length())
    if n and int(sf.min()) >= 0 and int(sf.max()) < (1 << (62 - bits)):
        key = sf                            # reused: the seqs become the keys
        for lo, hi in spans(n, piece_rows()):
            key[lo:hi] <<= bits
            key[lo:hi] |= np.arange(lo, hi, dtype=np.int64)
        key.sort(kind="stable")             # distinct keys: the seqs' stable order (timsort: the frees come nearly sorted)
        low = (1 << bits) - 1
        out = np.empty_like(fslot)
        for lo, hi in spans(n, piece_rows()):
            out[lo:hi] = fslot[key[lo:hi] & low]
        del fslot
        for lo, hi in spans(n):
            key[lo:hi] >>= bits
        return key, out
    of = np.argsort(sf, kind="stable")
    return sf[of], fslot[of]


def peak_by_block(req: np.ndarray, bsize: np.ndarray) -> int:
    """``max(cumsum(d))`` (0 for none), ``d`` = +``bsize[s]`` for ``req`` = s, -``bsize[s]`` for ~s; in
    pieces."""
    def deltas():
        for lo, hi in spans(len(req), piece_rows()):
            r = req[lo:hi]
            free = r < 0
            d = bsize[np.where(free, ~r, r)]
            np.negative(d, out=d, where=free)
            yield d
    return running_peak(deltas())
