"""Simulated allocators replaying a request stream (alloc/free in time order).

Each simulator reports ``peak_reserved_bytes`` (the most memory it held from the
device at once), ``backing_allocations`` (cudaMalloc-like calls it made) and
``peak_allocated_bytes`` (the most bytes handed out, rounding included).  There is
no capacity limit unless one is given; with one, the allocator's own OOM path is
modelled where it has one (PyTorch: free every fully free cached segment and retry)
and a request that still cannot be served stops the replay (``oom_at``).

Rules (see /work/shared/research/allocators-and-planners.md §3):

``cudamalloc``  one device allocation per request.  Decision (documented, not yet
    measured on hardware): requests below 2 MiB are rounded to 512 B (the driver
    sub-allocates small requests from shared 2 MiB pages, which we treat as
    perfectly packed), requests of 2 MiB and more are rounded up to whole 2 MiB pages.
``pytorch``     CUDA caching allocator: 512 B rounding (or ``roundup_power2_divisions``),
    small pool (<= 1 MiB, 2 MiB segments) and large pool (20 MiB segments below 10 MiB,
    else rounded to 2 MiB), best fit per (pool, stream) with lowest address on ties,
    ``max_split_size`` oversize rules, split rules (small: remainder >= 512 B; large:
    remainder > 1 MiB and size < max_split_size), coalescing with free neighbours in
    the same segment, segments never returned (except on OOM).
    ``expandable_segments`` is not modelled.
``bfc``         TF/XLA BFC: 256 B rounding, global best fit (bins ordered by size then
    address amount to that), split only if the chunk is >= 2x the request or exceeds it
    by >= 128 MiB, coalescing within a region, growth with ``allow_growth``: regions of
    2 MiB doubling (the region size doubles whenever the previous one sufficed).
    Without allow_growth and with a capacity, one region of the whole capacity.
``cnmem``       NVIDIA CNMeM: 512 B rounding, best fit (smallest, then lowest address)
    over the address-ordered free list, merging with neighbours of the same backing
    allocation, growth by an exact-size cudaMalloc; ``initial_bytes`` (default 0, i.e.
    everything by growth) models the up-front reservation.  Streams are ignored.
"""
from __future__ import annotations

import bisect
import time

import numpy as np
import pandas as pd

from ...errors import PyinterposeError

MiB = 1 << 20
ALLOCATORS = ("cudamalloc", "pytorch", "bfc", "cnmem")


def _round_up(x: int, m: int) -> int:
    return -(-x // m) * m


class _Block:
    __slots__ = ("addr", "size", "seg", "prev", "next", "free", "key")

    def __init__(self, addr, size, seg, key):
        self.addr, self.size, self.seg, self.key = addr, size, seg, key
        self.prev = self.next = None
        self.free = True


class _Heap:
    """Segments of device memory carved into blocks; best fit over sorted free lists
    (one list per key: pool and stream for PyTorch, a single one otherwise)."""

    def __init__(self, capacity: int | None):
        self.capacity = capacity
        self.free_lists: dict = {}
        self.reserved = 0
        self.peak_reserved = 0
        self.allocated = 0
        self.peak_allocated = 0
        self.backing = 0
        self.next_addr = 0
        self.segments: dict[int, list] = {}  # seg id -> [size, key, first block]
        self.live: dict[int, _Block] = {}

    # -- free lists
    def _insert(self, b: _Block):
        bisect.insort(self.free_lists.setdefault(b.key, []), (b.size, b.addr, b))

    def _remove(self, b: _Block):
        lst = self.free_lists[b.key]
        i = bisect.bisect_left(lst, (b.size, b.addr))
        del lst[i]

    def best_fit(self, key, size: int):
        lst = self.free_lists.get(key)
        if not lst:
            return None
        i = bisect.bisect_left(lst, (size, -1))
        return lst[i][2] if i < len(lst) else None

    # -- segments
    def new_segment(self, key, size: int) -> _Block | None:
        if self.capacity is not None and self.reserved + size > self.capacity:
            return None
        seg = self.backing
        self.backing += 1
        b = _Block(self.next_addr, size, seg, key)
        self.next_addr += size
        self.segments[seg] = [size, key, b]
        self.reserved += size
        self.peak_reserved = max(self.peak_reserved, self.reserved)
        self._insert(b)
        return b

    def release_free_segments(self) -> int:
        freed = 0
        for seg, (size, key, first) in list(self.segments.items()):
            if first.free and first.next is None and first.prev is None:
                self._remove(first)
                del self.segments[seg]
                self.reserved -= size
                freed += size
        return freed

    # -- blocks
    def take(self, b: _Block, size: int, split: bool, req_id) -> _Block:
        self._remove(b)
        if split and b.size > size:
            rest = _Block(b.addr + size, b.size - size, b.seg, b.key)
            rest.prev, rest.next = b, b.next
            if b.next is not None:
                b.next.prev = rest
            b.next = rest
            b.size = size
            self._insert(rest)
        b.free = False
        self.live[req_id] = b
        self.allocated += b.size
        self.peak_allocated = max(self.peak_allocated, self.allocated)
        return b

    def release(self, req_id):
        b = self.live.pop(req_id, None)
        if b is None:
            return
        self.allocated -= b.size
        b.free = True
        for nb in (b.prev, b.next):  # coalesce with free neighbours of the same segment
            if nb is not None and nb.free:
                self._remove(nb)
                if nb is b.prev:
                    nb.size += b.size
                    nb.next = b.next
                    if b.next is not None:
                        b.next.prev = nb
                    b = nb
                else:
                    b.size += nb.size
                    b.next = nb.next
                    if nb.next is not None:
                        nb.next.prev = b
        if b.prev is None:
            self.segments[b.seg][2] = b
        self._insert(b)


def _pytorch_round(size: int, divisions: int) -> int:
    if size < 512:
        return 512
    if divisions > 1 and size > 512 * divisions:
        p = 1 << (int(size - 1).bit_length() - 1)   # previous power of two
        step = max(p // divisions, 1)
        return _round_up(size, step)
    return _round_up(size, 512)


def _simulate_pytorch(ops, capacity, max_split_size=None, roundup_power2_divisions=0,
                      max_non_split_rounding=20 * MiB):
    h = _Heap(capacity)
    mss = max_split_size if max_split_size else 1 << 62
    for i, (is_alloc, bid, size, stream) in enumerate(ops):
        if not is_alloc:
            h.release(bid)
            continue
        rs = _pytorch_round(size, roundup_power2_divisions)
        small = rs <= MiB
        key = (0 if small else 1, stream)
        b = h.best_fit(key, rs)
        if b is not None and max_split_size:
            if rs < mss and b.size >= mss:
                b = None
            elif rs >= mss and b.size >= rs + max_non_split_rounding:
                b = None
        if b is None:
            seg = 2 * MiB if small else (20 * MiB if rs < 10 * MiB else _round_up(rs, 2 * MiB))
            b = h.new_segment(key, seg)
            if b is None:
                h.release_free_segments()
                b = h.new_segment(key, seg)
            if b is None:
                return h, i
        rem = b.size - rs
        split = rem >= 512 if small else (rs < mss and rem > MiB)
        h.take(b, rs, split, bid)
    return h, None


def _simulate_bfc(ops, capacity, allow_growth=True, max_internal_fragmentation=128 * MiB):
    h = _Heap(capacity)
    if not allow_growth and capacity is None:
        allow_growth = True
    region = 2 * MiB
    if not allow_growth:
        h.new_segment(0, capacity // 256 * 256)
    for i, (is_alloc, bid, size, stream) in enumerate(ops):
        if not is_alloc:
            h.release(bid)
            continue
        rs = max(256, _round_up(size, 256))
        b = h.best_fit(0, rs)
        if b is None and allow_growth:
            grew = False
            while rs > region:
                region *= 2
                grew = True
            want = region
            if capacity is not None:
                want = min(want, (capacity - h.reserved) // 256 * 256)
            if want >= rs:
                b = h.new_segment(0, want)
            if b is not None and not grew:
                region *= 2
        if b is None:
            return h, i
        split = b.size >= 2 * rs or b.size - rs >= max_internal_fragmentation
        h.take(b, rs, split, bid)
    return h, None


def _simulate_cnmem(ops, capacity, initial_bytes=0):
    h = _Heap(capacity)
    if initial_bytes:
        h.new_segment(0, _round_up(initial_bytes, 512))
    for i, (is_alloc, bid, size, stream) in enumerate(ops):
        if not is_alloc:
            h.release(bid)
            continue
        rs = max(512, _round_up(size, 512))
        b = h.best_fit(0, rs)
        if b is None:
            b = h.new_segment(0, rs)
        if b is None:
            return h, i
        h.take(b, rs, True, bid)
    return h, None


def cudamalloc_size(size: np.ndarray) -> np.ndarray:
    size = np.asarray(size, np.int64)
    small = _round_up_arr(np.maximum(size, 1), 512)
    large = _round_up_arr(size, 2 * MiB)
    return np.where(size >= 2 * MiB, large, small)


def _round_up_arr(x, m):
    return -(-np.asarray(x, np.int64) // m) * m


def _simulate_cudamalloc(req: pd.DataFrame, capacity):
    is_alloc = req["op"].to_numpy() == "alloc"
    rounded = cudamalloc_size(req["size"].to_numpy(np.int64))
    delta = np.where(is_alloc, rounded, -rounded)
    live = np.cumsum(delta)
    peak = int(live.max()) if len(live) else 0
    raw = np.cumsum(np.where(is_alloc, 1, -1) * req["size"].to_numpy(np.int64))
    oom = None
    if capacity is not None and peak > capacity:
        oom = int(np.argmax(live > capacity))
        peak = int(live[:oom].max()) if oom else 0
    return {"peak_reserved_bytes": peak, "backing_allocations": int(is_alloc.sum() if oom is None else is_alloc[:oom].sum()),
            "peak_allocated_bytes": peak, "peak_requested_bytes": int(raw.max()) if len(raw) else 0,
            "oom_at": oom}


def simulate(req: pd.DataFrame, allocator: str, capacity: int | None = None, **options) -> dict:
    """Replay ``req`` (see :func:`pyinterpose.analysis.pools.requests`) through one allocator.

    Returns {"allocator", "peak_reserved_bytes", "backing_allocations",
    "peak_allocated_bytes", "oom_at" (request index or None), "seconds", "options"}."""
    if allocator not in ALLOCATORS:
        raise PyinterposeError(f"unknown allocator {allocator!r} (choose from {', '.join(ALLOCATORS)})")
    t0 = time.perf_counter()
    if allocator == "cudamalloc":
        out = _simulate_cudamalloc(req, capacity)
    else:
        ops = list(zip((req["op"].to_numpy() == "alloc").tolist(), req["block_id"].tolist(),
                       req["size"].tolist(), req["stream"].tolist()))
        fn = {"pytorch": _simulate_pytorch, "bfc": _simulate_bfc, "cnmem": _simulate_cnmem}[allocator]
        try:
            h, oom = fn(ops, capacity, **options)
        except TypeError as e:
            raise PyinterposeError(f"{allocator}: bad option ({e})")
        out = {"peak_reserved_bytes": int(h.peak_reserved), "backing_allocations": int(h.backing),
               "peak_allocated_bytes": int(h.peak_allocated), "oom_at": oom}
    out.update(allocator=allocator, seconds=time.perf_counter() - t0, options=dict(options))
    return out
