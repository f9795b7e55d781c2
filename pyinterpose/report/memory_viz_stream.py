"""The memory-viz export's blocks and device traces, a piece at a time (issue 30).

:func:`pyinterpose.report.memory_viz.write_snapshot` writes the snapshot's device traces (five
dicts per block) from the columns; at 100 M events a trace has ~11 M device blocks, and the
time-ordered event list that :class:`memory_viz._Columns` builds (times, rows, alloc flags, their
sort keys, and the gathered columns of every event) is several GB.  Here nothing of event length is
built:

* :class:`SnapshotBlocks` holds the positions of the snapshot's blocks in ``trace.blocks`` and what
  one pass over their columns finds (devices, the addresses of physical handles, the blocks live
  at the end, the call stacks, the class of each block as a small code); columns are gathered for
  the rows a piece needs, and the mapped pages of the cache are given back after each pass
  (``pyinterpose.trace.pages``);
* :class:`DeviceEvents` orders one device's events without materialising them: the allocations
  sorted by time, the frees sorted by time, and each free's place in the merged list (the number of
  allocations strictly before it plus its own rank), so that any range of the merged list is found
  with two binary searches.  Frees come before allocations at the same instant, and equal times
  keep the block order: the order of ``memory_viz._Columns``, figure for figure.

Pieces: ``trace.chunking.chunk_rows()`` rows per pass step (``PYINTERPOSE_CHUNK_ROWS``); the bytes
written never depend on it (the pickle's own chunk of 65,536 rows is fixed by the format writer).
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from ..errors import PyinterposeError
from ..trace.chunking import chunk_rows, spans
from ..trace.pages import release
from ..trace.piecewise import piece_rows
from .class_lookup import ClassLookup

VMM_BASE = 0x7E00_0000_0000_0000  # synthetic addresses for physical handles (< 2**63); memory_viz's


class SnapshotBlocks:
    """The snapshot's blocks (positions ``pos`` into ``trace.blocks``, in block order) and the
    per-block facts the writer needs, found in one pass of ``chunk_rows()`` rows."""

    def __init__(self, trace, keep: np.ndarray, classes: pd.Series | None, use_categories: bool):
        self.trace = trace
        self.b = trace.blocks
        self.idx_dtype = np.int32 if len(self.b) < (1 << 31) else np.int64
        self.pos = _positions(keep, self.idx_dtype)
        self.n = n = len(self.pos)
        self.has_stacks = "stack_id" in self.b.columns
        self.ndev = 1
        self.live = np.zeros(0, np.int64)
        self.stack_ids = np.zeros(0, np.int64)
        self.cat_names: list[str] = []
        self._cat = None
        if n == 0:
            return
        addr_max = 0
        dev_max, dev_min = -1, 0
        zero_j, zero_size, live, sids = [], [], [], []
        for s, e in spans(n, piece_rows()):
            p = self.pos[s:e]
            a = self.col("address")[p]
            addr_max = max(addr_max, int(a.max()))
            z = np.flatnonzero(a == 0)
            if len(z):
                zero_j.append(z + s)
                zero_size.append(self.col("size")[p[z]].astype(np.int64))
            d = self.col("device")[p]
            dev_max, dev_min = max(dev_max, int(d.max())), min(dev_min, int(d.min()))
            live.append(np.flatnonzero(~self.col("freed")[p].astype(bool)) + s)
            if self.has_stacks:
                sids.append(np.unique(self.col("stack_id")[p].astype(np.int64)))
            self.release(s, e, ("address", "size", "device", "freed", "stack_id"))
        if addr_max >= 2 ** 63:
            raise PyinterposeError("an address does not fit in a signed 64-bit int; memory_viz cannot read it")
        self.ndev = max(dev_max + 1, 1)
        if dev_min < 0:
            raise PyinterposeError("device blocks with an unknown device (-1) cannot be placed in a snapshot")
        # physical handles (address 0): disjoint 2 MiB-aligned ranges above VMM_BASE, in block order
        self.zero_j = np.concatenate(zero_j) if zero_j else np.zeros(0, np.int64)
        sizes = np.concatenate(zero_size) if zero_size else np.zeros(0, np.int64)
        aligned = (sizes + (2 << 20) - 1) // (2 << 20) * (2 << 20)
        self.zero_addr = VMM_BASE + np.concatenate([[0], np.cumsum(aligned)[:-1]]).astype(np.int64) \
            if len(sizes) else np.zeros(0, np.int64)
        live_j = np.concatenate(live)
        self.live = live_j[np.argsort(self.addresses(live_j), kind="stable")]   # the final segments, by address
        self.stack_ids = np.unique(np.concatenate(sids)) if sids else np.zeros(0, np.int64)
        if use_categories:
            self._categories(classes)

    # -- columns ----------------------------------------------------------------------------
    def col(self, name: str) -> np.ndarray:
        return self.b[name].to_numpy()

    def release(self, s: int, e: int, names) -> None:
        """Give back the mapped pages of rows ``[s, e)`` (selected order) of these columns."""
        if e <= s:
            return
        lo, hi = int(self.pos[s]), int(self.pos[e - 1]) + 1
        for name in names:
            if name in self.b.columns:
                release(self.col(name), lo, hi)

    def release_all(self, names) -> None:
        for name in names:
            if name in self.b.columns:
                release(self.col(name))

    def gather(self, name: str, j: np.ndarray | None, dtype) -> np.ndarray:
        """``col(name)[pos[j]]`` as ``dtype`` for ascending ``j`` (None: every selected block), a piece at
        a time, the mapped pages of each piece's rows given back."""
        a = self.col(name)
        m = self.n if j is None else len(j)
        out = np.empty(m, dtype)
        for s, e in spans(m, piece_rows()):
            p = self.pos[s:e] if j is None else self.pos[j[s:e]]
            out[s:e] = a[p]
            release(a, int(p[0]), int(p[-1]) + 1)
        return out

    def addresses(self, j: np.ndarray) -> np.ndarray:
        """The snapshot address of selected blocks ``j`` (int64; physical handles get theirs)."""
        a = self.col("address")[self.pos[j]].astype(np.int64)
        if len(self.zero_j):
            k = np.searchsorted(self.zero_j, j)
            hit = (k < len(self.zero_j)) & (self.zero_j[np.minimum(k, len(self.zero_j) - 1)] == j)
            a[hit] = self.zero_addr[k[hit]]
        return a

    def streams(self, j: np.ndarray) -> np.ndarray:
        return (self.col("stream")[self.pos[j]].astype(np.uint64) & np.uint64(0x7FFF_FFFF_FFFF_FFFF)).astype(np.int64)

    def frame_index(self, j: np.ndarray) -> np.ndarray:
        """Per selected block, the index of its call stack in the frames list (0: none recorded)."""
        if not self.has_stacks or not (self.stack_ids >= 0).any():
            return np.zeros(len(j), np.int64)
        sid = self.col("stack_id")[self.pos[j]].astype(np.int64)
        first = int(np.searchsorted(self.stack_ids, 0))      # stack_ids[:first] are the negative ids
        return np.where(sid >= 0, np.searchsorted(self.stack_ids, sid) - first + 1, 0)

    # -- classes ----------------------------------------------------------------------------
    def _categories(self, classes: pd.Series) -> None:
        """Each block's class as a code into ``cat_names`` (the distinct classes in the order the
        blocks first show them, then "unknown" for a block without one): what ``pd.factorize`` of
        the classes reindexed on the blocks gives, without a string per block."""
        self._lookup = look = ClassLookup(classes)
        seen: dict[int, int] = {}
        for s, e in spans(self.n, piece_rows()):
            for v in pd.unique(self._value_codes(np.arange(s, e))).tolist():
                if v >= 0 and v not in seen:
                    seen[v] = len(seen)
            self.release(s, e, ("block_id",))
        names = [str(look.values[v]) for v in seen]
        self.cat_names = names + ["unknown"]
        remap = np.full(len(look.values) + 1, len(names), np.int64)     # -1 (no class) -> "unknown"
        for v, r in seen.items():
            remap[v] = r
        self._cat = remap

    def _value_codes(self, j: np.ndarray) -> np.ndarray:
        """Per selected block, its code among the classes' distinct values (-1: no class)."""
        return self._lookup.codes(self.col("block_id")[self.pos[j]])

    def category_codes(self, j: np.ndarray) -> np.ndarray:
        """Per selected block, the index of its class in ``cat_names``."""
        return self._cat[self._value_codes(j)]     # -1 indexes the last entry: "unknown"


class DeviceEvents:
    """One device's allocations and frees in time order (frees first at an equal time, then block
    order), as three arrays of block length: nothing per event is built until a range is asked."""

    def __init__(self, sb: SnapshotBlocks, d: int):
        self.sb = sb
        n = sb.n
        dt = sb.idx_dtype
        if sb.ndev > 1:
            parts = []
            for s, e in spans(n):
                parts.append((np.flatnonzero(sb.col("device")[sb.pos[s:e]] == d) + s).astype(dt))
                sb.release(s, e, ("device",))
            rows = np.concatenate(parts) if parts else np.zeros(0, dt)
        else:
            rows = None                                     # every selected block: made after the frees' sort
        # the frees first (their sort's order array is then the largest thing held), by time
        fr = sb.gather("freed", rows, bool)
        f_rows = _flatnonzero(fr, dt) if rows is None else rows[fr]
        del fr
        tf = sb.gather("t_free", f_rows, np.int64)
        self.f_rows = _sort_by_time(tf, f_rows)
        del f_rows
        if rows is None:
            rows = Span(0, n, dt)                           # every selected block, in block order
        # a free's place in the merged list: the allocations strictly before it, plus its rank.  When
        # the allocation times ascend in block order, the allocations are in time order already (a
        # stable sort of sorted times is the identity) and the count is made a piece of them at a time
        pos_dt = np.int32 if len(rows) + len(tf) < (1 << 31) else np.int64
        before = _before_ascending(sb, rows, tf, pos_dt)
        if before is not None:
            self.a_rows = rows
        else:
            ta = sb.gather("t_alloc", rows, np.int64)
            order = np.argsort(ta, kind="stable")
            self.a_rows = rows[order]
            del order
            ta.sort(kind="stable")                          # the allocation times, sorted
            before = np.empty(len(tf), pos_dt)
            for s, e in spans(len(tf), piece_rows()):
                before[s:e] = np.searchsorted(ta, tf[s:e], side="left")
            del ta
        del rows
        for s, e in spans(len(tf), piece_rows()):
            before[s:e] += np.arange(s, e, dtype=pos_dt)
        self.f_pos = before
        del tf
        sb.release_all(("t_alloc", "t_free", "freed", "device"))
        self.n_alloc, self.n_free = len(self.a_rows), len(self.f_rows)
        self.n = self.n_alloc + self.n_free

    def rows(self, c0: int, c1: int) -> tuple[np.ndarray, np.ndarray]:
        """Events ``[c0, c1)`` of the merged list: (selected block, is a free)."""
        i0, i1 = np.searchsorted(self.f_pos, [c0, c1], side="left")
        is_free = np.zeros(c1 - c0, bool)
        is_free[self.f_pos[i0:i1] - c0] = True
        j = np.empty(c1 - c0, self.a_rows.dtype)
        j[is_free] = self.f_rows[i0:i1]
        j[~is_free] = self.a_rows[c0 - i0:c1 - i1]
        return j, is_free

    def times(self, j: np.ndarray, is_free: np.ndarray) -> np.ndarray:
        sb = self.sb
        p = sb.pos[j]
        t = sb.col("t_alloc")[p].astype(np.int64)
        if is_free.any():
            t[is_free] = sb.col("t_free")[p[is_free]]
        return t


def _before_ascending(sb: SnapshotBlocks, rows: np.ndarray, tf: np.ndarray, dtype) -> np.ndarray | None:
    """Per value of the ascending ``tf``, how many allocations of ``rows`` are at a strictly earlier
    time (``np.searchsorted(ta, tf, side="left")`` of their sorted times ``ta``), counted a piece of
    allocations at a time, without ``ta`` whole; None as soon as the allocation times do not ascend in
    ``rows``' order (then the caller sorts them)."""
    out = np.zeros(len(tf), dtype)
    last = None
    for s, e in spans(len(rows), piece_rows()):
        tp = sb.gather("t_alloc", rows[s:e], np.int64)
        if (len(tp) > 1 and not bool((tp[1:] >= tp[:-1]).all())) or (last is not None and tp[0] < last):
            return None
        last = tp[-1]
        i0 = int(np.searchsorted(tf, tp[0], side="right"))      # tf <= the piece's first: none before
        i1 = int(np.searchsorted(tf, tp[-1], side="right"))     # tf > the piece's last: all of it before
        out[i0:i1] += np.searchsorted(tp, tf[i0:i1], side="left").astype(dtype)
        out[i1:] += len(tp)
    return out


def _sort_by_time(t: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """Sort ``t`` (int64) in place and return ``rows[np.argsort(t, kind="stable")]`` (``rows`` ascending,
    distinct, non-negative).  When the times' range and the rows fit one int64 together, each pair is
    one key ``(t - min) << bits | row``, sorted in place (equal times by row: the stable order), then
    split back: no int64 order array (8 bytes a row at the sort)."""
    if len(t) < 2:
        return rows.copy()
    lo, hi = int(t.min()), int(t.max())
    bits = max(1, int(rows[-1]).bit_length())
    if (hi - lo).bit_length() + bits > 63:
        order = np.argsort(t, kind="stable")
        out = rows[order]
        del order
        t.sort(kind="stable")
        return out
    key = t                              # in place: t becomes the keys, then the sorted times
    key -= lo
    key <<= bits
    key |= rows
    key.sort()
    out = np.empty(len(key), rows.dtype)
    mask = np.int64((1 << bits) - 1)
    for s, e in spans(len(key), piece_rows()):      # no int64 temporary of the whole
        out[s:e] = key[s:e] & mask
    key >>= bits
    key += lo
    return out


class Span:
    """``np.arange(lo, lo + n, dtype=dtype)`` without the array: indexed as it is (an int, a slice of
    step 1 or more, an array of non-negative indices or a bool mask), each answer made when asked."""

    def __init__(self, lo: int, n: int, dtype):
        self.lo, self.n, self.dtype = int(lo), int(n), np.dtype(dtype)

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, k):
        if isinstance(k, slice):
            a, b, step = k.indices(self.n)
            if step < 1:
                raise IndexError("a Span is sliced forwards only")
            return np.arange(self.lo + a, self.lo + max(a, b), step, dtype=self.dtype)
        if isinstance(k, (int, np.integer)):
            k = int(k)
            if not -self.n <= k < self.n:
                raise IndexError(f"index {k} is out of bounds for a span of {self.n}")
            return self.dtype.type(self.lo + (k + self.n if k < 0 else k))
        k = np.asarray(k)
        if k.dtype == bool:
            if len(k) != self.n:
                raise IndexError("a mask of another length")
            return (np.flatnonzero(k) + self.lo).astype(self.dtype)
        if len(k) and (k.min() < 0 or k.max() >= self.n):
            raise IndexError(f"an index is out of bounds for a span of {self.n}")
        return (k.astype(np.int64) + self.lo).astype(self.dtype)


def _flatnonzero(mask: np.ndarray, dtype) -> np.ndarray:
    """``np.flatnonzero(mask)`` as ``dtype``, found a piece at a time (no int64 of the whole)."""
    out = np.empty(int(np.count_nonzero(mask)), dtype)
    k = 0
    for lo, hi in spans(len(mask), piece_rows()):
        f = np.flatnonzero(mask[lo:hi]) + lo
        out[k:k + len(f)] = f
        k += len(f)
    return out


def _positions(keep: np.ndarray, dtype):
    """``np.flatnonzero(keep)`` as ``dtype``, found a piece at a time (no int64 of the whole); a
    :class:`Span` when the kept rows are one range (no array at all)."""
    n = int(np.count_nonzero(keep))
    if n:
        lo = int(np.argmax(keep))
        if len(keep) - int(np.argmax(keep[::-1])) - lo == n:
            return Span(lo, n, dtype)
    return _flatnonzero(keep, dtype)


def release_every() -> int:
    """Events between two releases of the mapped pages a write has gathered from."""
    return max(piece_rows(), 1 << 16)
