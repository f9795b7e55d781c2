"""The Python allocator simulators: the reference that tests/unit/test_pools_allocsim.py compares the
native replay (native/allocsim, ``pyinterpose.analysis.pools.allocators.simulate``) against, request by
request. Written from the allocators' sources; the rules and every decision are those of the module
docstring of pyinterpose/analysis/pools/allocators.py. Not used by pyinterpose itself, and imports no part
of the code it checks."""
from __future__ import annotations

import bisect

import numpy as np
import pandas as pd

from pyinterpose.errors import PyinterposeError

MiB = 1 << 20

# PyTorch constants (CUDACachingAllocator.cpp, c10/core/AllocatorConfig.h)
kMinBlockSize = 512
kSmallSize = MiB
kSmallBuffer = 2 * MiB
kMinLargeAlloc = 10 * MiB
kLargeBuffer = 20 * MiB
kRoundLarge = 2 * MiB
_ROUNDUP_INTERVALS = 16  # roundup_power2_divisions: one setting per [2^k, 2^(k+1)) MiB, k = 0..15


def _round_up(x: int, m: int) -> int:
    return -(-x // m) * m


def _is_pow2(v: int) -> bool:
    return v > 0 and v & (v - 1) == 0

class _Block:
    __slots__ = ("addr", "size", "seg", "prev", "next", "free", "key")

    def __init__(self, addr, size, seg, key):
        self.addr, self.size, self.seg, self.key = addr, size, seg, key
        self.prev = self.next = None
        self.free = True


class _Heap:
    """Segments of device memory carved into blocks; best fit over sorted free lists
    (one list per key: pool and stream for PyTorch, a manager for CNMeM, a single one
    otherwise).  Blocks linked by prev/next are contiguous and may merge."""

    def __init__(self, capacity: int | None):
        self.capacity = capacity
        self.free_lists: dict = {}
        self.reserved = 0
        self.peak_reserved = 0
        self.step_peak = 0   # most reserved during the current request (the reserved curve)
        self.allocated = 0
        self.peak_allocated = 0
        self.backing = 0
        self.next_addr = 0
        self.segments: dict[int, list] = {}  # seg id -> [size, key, first block]
        self.live: dict = {}
        self.details: dict = {}

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
        self.step_peak = max(self.step_peak, self.reserved)
        self._insert(b)
        return b

    def release_segment(self, b: _Block) -> int:
        """cudaFree the whole free segment ``b`` (no prev, no next)."""
        self._remove(b)
        size = self.segments.pop(b.seg)[0]
        self.reserved -= size
        return size

    def release_free_segments(self) -> int:
        freed = 0
        for seg, (size, key, first) in list(self.segments.items()):
            if first.free and first.next is None and first.prev is None:
                freed += self.release_segment(first)
        return freed

    # -- blocks
    def take(self, b: _Block, size: int, split: bool, req_id, count: bool = True) -> _Block:
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
        if count:
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
        if b.prev is None and b.seg in self.segments:  # (CNMeM chains: only release_free_segments reads it)
            self.segments[b.seg][2] = b
        self._insert(b)




def _pytorch_round(size: int, divisions) -> int:
    """``round_size``: 512 B, or the next power-of-two division (``roundup_power2_divisions``,
    an int for all sizes or 16 per-interval values)."""
    if size < kMinBlockSize:
        return kMinBlockSize
    if isinstance(divisions, (list, tuple)):
        idx = min(max(size.bit_length() - 1 - 20, 0), _ROUNDUP_INTERVALS - 1)
        d = divisions[idx] if divisions else 0
    else:
        d = divisions or 0
    if d > 1 and size > kMinBlockSize * d:
        if _is_pow2(size):
            return size
        p = 1 << (size.bit_length() - 1)   # previous power of two
        step = p >> (d.bit_length() - 1)
        if step == 0:
            return p << 1
        return _round_up(size, step)
    return _round_up(size, kMinBlockSize)


def _recording(ops, series: list | None, h):
    """``ops``, appending to ``series`` the most bytes ``h`` (a _Heap or _Expandable)
    reserved during each request the replay finished (a request it stopped at is not
    recorded: see _simulate_python)."""
    if series is None:
        yield from ops
        return
    for k, op in enumerate(ops):
        if k:
            series.append(h.step_peak)
        h.step_peak = h.reserved
        yield op
    series.append(h.step_peak)


def _simulate_pytorch(ops, capacity, max_split_size=None, roundup_power2_divisions=0,
                      max_non_split_rounding=kLargeBuffer, large_segment_size=kLargeBuffer,
                      expandable_segments=False, series=None):
    if expandable_segments:
        return _simulate_pytorch_expandable(ops, capacity, max_split_size, roundup_power2_divisions,
                                            max_non_split_rounding, large_segment_size, series)
    h = _Heap(capacity)
    ops = _recording(ops, series, h)
    mss = max_split_size if max_split_size else 1 << 62
    for i, (is_alloc, bid, size, stream) in enumerate(ops):
        if not is_alloc:
            h.release(bid)
            continue
        rs = _pytorch_round(size, roundup_power2_divisions)
        small = rs <= kSmallSize
        key = (0 if small else 1, stream)
        b = h.best_fit(key, rs)
        if b is not None and max_split_size:
            if rs < mss and b.size >= mss:
                b = None
            elif rs >= mss and b.size >= rs + max_non_split_rounding:
                b = None
        if b is None:
            seg = (kSmallBuffer if small else
                   large_segment_size if rs < kMinLargeAlloc else _round_up(rs, kRoundLarge))
            b = h.new_segment(key, seg)
            if b is None and max_split_size and _release_available_cached_blocks(h, key, rs, mss):
                b = h.new_segment(key, seg)
            if b is None:
                h.release_free_segments()
                b = h.new_segment(key, seg)
            if b is None:
                return h, i
        rem = b.size - rs
        split = rem >= kMinBlockSize if small else (rs < mss and rem > kSmallSize)
        h.take(b, rs, split, bid)
    return h, None


def _release_available_cached_blocks(h: _Heap, key, rs: int, mss: int) -> bool:
    """PyTorch's ``release_available_cached_blocks`` (only with max_split_size set)."""
    lst = h.free_lists.get(key) or []
    target = max(rs, mss)
    i = bisect.bisect_left(lst, (target, -1))
    if i < len(lst):  # the smallest block that is large enough
        b = lst[i][2]
        if b.prev is None and b.next is None:
            h.release_segment(b)
            return True
        return False
    released = 0      # else the largest oversize blocks until enough is freed
    for _, _, b in reversed(list(lst)):
        if released >= target or b.size < mss:
            break
        if b.prev is None and b.next is None:
            released += h.release_segment(b)
    return released >= target


# -- expandable segments ------------------------------------------------------------------

class _EBlock:
    __slots__ = ("addr", "size", "seg", "key", "prev", "next", "mapped", "allocated")

    def __init__(self, addr, size, seg, key, mapped):
        self.addr, self.size, self.seg, self.key, self.mapped = addr, size, seg, key, mapped
        self.prev = self.next = None
        self.allocated = False


class _ExpandableSegment:
    __slots__ = ("base", "page", "pages", "key")

    def __init__(self, base, page, pages, key):
        self.base, self.page, self.pages, self.key = base, page, pages, key


class _Expandable:
    """The caching allocator with expandable_segments:True (see the module docstring)."""

    def __init__(self, capacity, large_segment_size):
        self.capacity = capacity
        self.large_page = large_segment_size
        self.free: dict = {}      # (pool, stream) -> sorted [(size, addr, block)] of mapped free blocks
        self.unmapped: dict = {}  # (pool, stream) -> sorted [(addr, block)]
        self.reserved = self.peak_reserved = self.step_peak = 0
        self.allocated = self.peak_allocated = 0
        self.pages_mapped = self.pages_unmapped = self.segment_maps = 0
        self.ranges = self.ranges_released = 0
        self.next_va = 0
        self.live: dict = {}

    # free-list helpers
    def _ins(self, b):
        bisect.insort(self.free.setdefault(b.key, []), (b.size, b.addr, b))

    def _rm(self, b):
        lst = self.free[b.key]
        del lst[bisect.bisect_left(lst, (b.size, b.addr))]

    def _ins_u(self, b):
        bisect.insort(self.unmapped.setdefault(b.key, []), (b.addr, b))

    def _rm_u(self, b):
        lst = self.unmapped[b.key]
        del lst[bisect.bisect_left(lst, (b.addr,))]

    @staticmethod
    def _splice_after(a, nb):
        nb.prev, nb.next = a, a.next
        if a.next is not None:
            a.next.prev = nb
        a.next = nb

    @staticmethod
    def _splice_before(a, nb):
        nb.next, nb.prev = a, a.prev
        if a.prev is not None:
            a.prev.next = nb
        a.prev = nb

    def _merge(self, dst, src):
        """``try_merge_blocks``: dst absorbs src when src is free and mapped like dst."""
        if src is None or src.allocated or src.mapped != dst.mapped:
            return
        if src.mapped:
            self._rm(src)
        else:
            self._rm_u(src)
        if dst.prev is src:
            dst.addr = src.addr
            dst.prev = src.prev
            if src.prev is not None:
                src.prev.next = dst
        else:
            dst.next = src.next
            if src.next is not None:
                src.next.prev = dst
        dst.size += src.size

    @staticmethod
    def _exp_size(b):
        return b.size + (b.next.size if b.next is not None and not b.next.mapped else 0)

    def get_free_block(self, key, rs, mss, max_non_split_rounding):
        lst = self.free.get(key)
        if not lst:
            return None
        i = bisect.bisect_left(lst, (rs, -1))
        if i == len(lst):
            return None
        while i + 1 < len(lst) and self._exp_size(lst[i + 1][2]) < self._exp_size(lst[i][2]):
            i += 1
        b = lst[i][2]
        if rs < mss and b.size >= mss:
            return None
        if rs >= mss and b.size >= rs + max_non_split_rounding:
            return None
        self._rm(b)
        return b

    def _find_expandable_block(self, key, rs):
        for _, u in self.unmapped.get(key, ()):
            c = u
            if c.prev is not None and not c.prev.allocated:
                c = c.prev
            got, x = 0, c
            while got < rs and x is not None and not x.allocated:
                got += x.size
                x = x.next
            if got >= rs:
                return c
        page = kSmallBuffer if key[0] == 0 else self.large_page
        if self.capacity is not None:
            pages = -(-(self.capacity + self.capacity // 8) // page)
        else:
            pages = (1 << 46) // page
        seg = _ExpandableSegment(self.next_va, page, pages, key)
        self.next_va += pages * page + page
        self.ranges += 1
        b = _EBlock(seg.base, pages * page, seg, key, mapped=False)
        self._ins_u(b)
        return b

    def _map_block(self, u, size):
        seg = u.seg
        begin = (u.addr - seg.base) // seg.page
        end = -(-(u.addr + size - seg.base) // seg.page)
        n = end - begin
        if self.capacity is not None and self.reserved + n * seg.page > self.capacity:
            return None
        mapped = n * seg.page
        self.reserved += mapped
        self.peak_reserved = max(self.peak_reserved, self.reserved)
        self.step_peak = max(self.step_peak, self.reserved)
        self.pages_mapped += n
        self.segment_maps += 1
        self._rm_u(u)
        u.mapped = True
        if mapped < u.size:
            rem = _EBlock(u.addr + mapped, u.size - mapped, seg, u.key, mapped=False)
            self._splice_after(u, rem)
            self._ins_u(rem)
            u.size = mapped
        self._merge(u, u.prev)
        self._merge(u, u.next)
        self._ins(u)
        return u

    def try_allocate(self, key, rs):
        c = self._find_expandable_block(key, rs)
        if not c.mapped:
            c = self._map_block(c, min(c.size, rs))
            if c is None:
                return None
        while c.size < rs:
            nxt = c.next
            c = self._map_block(nxt, min(rs - c.size, nxt.size))
            if c is None:
                return None
        self._rm(c)
        return c

    def _unmap_block(self, b):
        seg = b.seg
        begin = -(-(b.addr - seg.base) // seg.page)
        end = (b.addr + b.size - seg.base) // seg.page
        if begin >= end:
            return
        uptr, usize = seg.base + begin * seg.page, (end - begin) * seg.page
        self._rm(b)
        before = uptr - b.addr
        if before > 0:
            bf = _EBlock(b.addr, before, seg, b.key, mapped=True)
            self._splice_before(b, bf)
            self._ins(bf)
        after = b.size - before - usize
        if after > 0:
            af = _EBlock(uptr + usize, after, seg, b.key, mapped=True)
            self._splice_after(b, af)
            self._ins(af)
        b.addr, b.size, b.mapped = uptr, usize, False
        self._merge(b, b.prev)
        self._merge(b, b.next)
        self._ins_u(b)
        self.reserved -= usize
        self.pages_unmapped += end - begin

    def release_cached_blocks(self):
        """``release_cached_blocks`` → ``release_blocks`` (large pool, then small)."""
        for pool in (1, 0):
            todo = [e[2] for key in sorted(k for k in self.free if k[0] == pool) for e in self.free[key]]
            for b in todo:
                self._unmap_block(b)
                if not b.mapped and b.prev is None and b.next is None:
                    self._rm_u(b)  # release_expandable_segment
                    self.ranges_released += 1

    def take(self, b, rs, req_id):
        if b.size - rs >= kMinBlockSize:
            rest = _EBlock(b.addr + rs, b.size - rs, b.seg, b.key, mapped=True)
            self._splice_after(b, rest)
            self._ins(rest)
            b.size = rs
        b.allocated = True
        self.live[req_id] = b
        self.allocated += b.size
        self.peak_allocated = max(self.peak_allocated, self.allocated)

    def release(self, req_id):
        b = self.live.pop(req_id, None)
        if b is None:
            return
        self.allocated -= b.size
        b.allocated = False
        self._merge(b, b.prev)
        self._merge(b, b.next)
        self._ins(b)


def _simulate_pytorch_expandable(ops, capacity, max_split_size, roundup_power2_divisions,
                                 max_non_split_rounding, large_segment_size, series=None):
    e = _Expandable(capacity, large_segment_size)
    ops = _recording(ops, series, e)
    mss = max_split_size if max_split_size else 1 << 62
    oom = None
    for i, (is_alloc, bid, size, stream) in enumerate(ops):
        if not is_alloc:
            e.release(bid)
            continue
        rs = _pytorch_round(size, roundup_power2_divisions)
        key = (0 if rs <= kSmallSize else 1, stream)
        b = e.get_free_block(key, rs, mss, max_non_split_rounding)
        if b is None:
            b = e.try_allocate(key, rs)
            if b is None:  # release_available_cached_blocks frees nothing expandable
                e.release_cached_blocks()
                b = e.try_allocate(key, rs)
            if b is None:
                oom = i
                break
        e.take(b, rs, bid)
    e.backing = e.pages_mapped
    e.details = {"segment_maps": e.segment_maps, "pages_mapped": e.pages_mapped,
                 "pages_unmapped": e.pages_unmapped, "ranges": e.ranges,
                 "ranges_released": e.ranges_released,
                 "page_bytes": {"small": kSmallBuffer, "large": large_segment_size}}
    return e, oom


def _simulate_bfc(ops, capacity, allow_growth=True, max_internal_fragmentation=128 * MiB, series=None):
    h = _Heap(capacity)
    ops = _recording(ops, series, h)
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


# -- CNMeM --------------------------------------------------------------------------------

def _simulate_cnmem(ops, capacity, initial_bytes=0, streams=None, steal=True, series=None):
    """CNMeM with a root manager (key 0) and one child manager per non-NULL stream
    (keys 1, 2, ... in registration order); see the module docstring."""
    ROOT = 0
    if streams is None:
        streams = len({s for a, _, _, s in ops if a}) > 1
    h = _Heap(capacity)
    if initial_bytes:
        if h.new_segment(ROOT, _round_up(initial_bytes, 512)) is None:
            raise PyinterposeError(f"cnmem: initial_bytes {initial_bytes} exceed the capacity {capacity}")
    ops = _recording(ops, series, h)
    children: dict = {}   # stream -> key
    lent: dict = {}       # addr -> root block lent to a child (allocated in the root)
    allocated = peak_allocated = 0
    oom = None
    sizes: dict = {}
    counts = {"borrowed": 0, "steals": 0}
    chain_ids = iter(range(-1, -(1 << 62), -1))  # seg ids of child chains (not device segments)

    def root_alloc(rs):
        b = h.best_fit(ROOT, rs)
        if b is None:
            b = h.new_segment(ROOT, rs)   # exact-size cudaMalloc (None: the device is full)
        return b

    def allocate(key, rs):
        """Manager::allocate without taking the block: a free block of ``key`` >= rs."""
        b = h.best_fit(key, rs)
        if b is not None or key == ROOT:
            return b if b is not None else root_alloc(rs)
        pb = root_alloc(rs)           # child: borrow exactly rs from the root
        if pb is None:
            return None
        pb = h.take(pb, rs, True, ("lend", pb.addr), count=False)
        lent[pb.addr] = pb
        counts["borrowed"] += 1
        cb = _Block(pb.addr, rs, next(chain_ids), key)   # a head block of the child
        h._insert(cb)
        return cb

    def steal_block(key, rs):
        """stealUnsafe → stealBlockUnsafe → giveBlockUnsafe: carve rs from the first child
        (registration order) with a fitting free block; returns the block, owned by ``key``."""
        for ckey in children.values():
            g = h.best_fit(ckey, rs)
            if g is None:
                continue
            h._remove(g)
            if g.size > rs:   # extractBlockUnsafe(stolen=true): the remainder is a head
                rest = _Block(g.addr + rs, g.size - rs, next(chain_ids), ckey)
                rest.next = g.next
                if g.next is not None:
                    g.next.prev = rest
                h._insert(rest)
            elif g.next is not None:
                g.next.prev = None
            if g.prev is not None:
                g.prev.next = None
            addr = g.addr
            counts["steals"] += 1
            if key != ROOT:   # a child pushes the stolen block on its used list as a head
                return _Block(addr, rs, next(chain_ids), key)
            # the root: its lent block becomes [before][stolen][after]; the stolen part is a
            # head block of the root, the rest stays lent
            L = next(b for a, b in lent.items() if a <= addr < a + b.size)
            l_end, end, nxt = L.addr + L.size, addr + rs, L.next
            if addr > L.addr:
                s = _Block(addr, rs, L.seg, ROOT)
                L.size = addr - L.addr
                L.next = None
            else:
                s = L
                del lent[L.addr]
                s.size = rs
                if s.prev is not None:
                    s.prev.next = None
            s.prev = None
            if l_end > end:
                a = _Block(end, l_end - end, L.seg, ROOT)
                a.free = False
                lent[end] = a
                s.next, a.prev, a.next = a, s, nxt
                if nxt is not None:
                    nxt.prev = a
            else:
                s.next = nxt
                if nxt is not None:
                    nxt.prev = s
            return s
        return None

    for i, (is_alloc, bid, size, stream) in enumerate(ops):
        if not is_alloc:
            if bid in h.live:
                allocated -= sizes.pop(bid)
                h.release(bid)
            continue
        rs = max(512, _round_up(size, 512))
        if streams and stream != 0:
            key = children.setdefault(stream, len(children) + 1)
        else:
            key = ROOT
        b = allocate(key, rs)
        if b is not None:
            h.take(b, rs, True, bid, count=False)
        else:
            b = steal_block(key, rs) if steal and (key != ROOT or children) else None
            if b is None:
                oom = i
                break
            b.free = False
            h.live[bid] = b
        sizes[bid] = rs
        allocated += rs
        peak_allocated = max(peak_allocated, allocated)
    h.peak_allocated = peak_allocated  # bytes handed to requests (the root's lent blocks not counted)
    h.details = {"streams": bool(streams), "child_managers": len(children), **counts}
    return h, oom


# -- cudaMalloc ---------------------------------------------------------------------------

def cudamalloc_size(size: np.ndarray) -> np.ndarray:
    size = np.asarray(size, np.int64)
    small = _round_up_arr(np.maximum(size, 1), 512)
    large = _round_up_arr(size, 2 * MiB)
    return np.where(size >= 2 * MiB, large, small)


def _round_up_arr(x, m):
    return -(-np.asarray(x, np.int64) // m) * m


def _simulate_cudamalloc(is_alloc: np.ndarray, size: np.ndarray, capacity, series: bool = False):
    is_alloc = np.asarray(is_alloc, bool)
    size = np.asarray(size, np.int64)
    rounded = cudamalloc_size(size)
    live = np.cumsum(np.where(is_alloc, rounded, -rounded))
    peak = int(live.max()) if len(live) else 0
    raw = np.cumsum(np.where(is_alloc, size, -size))
    oom = None
    if capacity is not None and peak > capacity:
        oom = int(np.argmax(live > capacity))
        peak = int(live[:oom].max()) if oom else 0
    extra = {}
    if series:
        extra["reserved_after"] = live.copy()
        if oom is not None:
            extra["reserved_after"][oom:] = live[oom - 1] if oom else 0
    return {**extra, "peak_reserved_bytes": peak, "backing_allocations": int(is_alloc.sum() if oom is None else is_alloc[:oom].sum()),
            "peak_allocated_bytes": peak, "peak_requested_bytes": int(raw.max()) if len(raw) else 0,
            "oom_at": oom}


def simulate_reference(req: pd.DataFrame, allocator: str, capacity: int | None = None, *, series: bool = False,
                       **options) -> dict:
    """What ``allocators.simulate`` returns (less "seconds"), from the simulators above."""
    is_alloc = req["op"].to_numpy() == "alloc"
    if allocator == "cudamalloc":
        if options:
            raise PyinterposeError(f"cudamalloc: bad option ({', '.join(options)}): it takes none")
        out = _simulate_cudamalloc(is_alloc, req["size"].to_numpy(np.int64), capacity, series)
        out["details"] = {}
        return {**out, "allocator": allocator, "options": dict(options)}
    fn = {"pytorch": _simulate_pytorch, "bfc": _simulate_bfc, "cnmem": _simulate_cnmem}[allocator]
    if "series" in options:
        raise PyinterposeError(f"{allocator}: bad option (series)")
    ops = list(zip(is_alloc.tolist(), req["block_id"].tolist(), req["size"].tolist(), req["stream"].tolist()))
    curve: list | None = [] if series else None
    try:
        h, oom = fn(ops, capacity, **options, **({"series": curve} if series else {}))
    except TypeError as e:
        raise PyinterposeError(f"{allocator}: bad option ({e})")
    extra = {}
    if series:
        n = len(req)
        if len(curve) < n:   # stopped at request len(curve): its high point, then what stays
            curve += [max(h.step_peak, h.reserved)] + [h.reserved] * (n - len(curve) - 1)
        try:
            extra["reserved_after"] = np.asarray(curve, np.int64)
        except OverflowError:   # sizes beyond int64 (Python ints)
            extra["reserved_after"] = np.asarray(curve, object)
    return {**extra, "peak_reserved_bytes": int(h.peak_reserved), "backing_allocations": int(h.backing),
            "peak_allocated_bytes": int(h.peak_allocated), "oom_at": oom,
            "details": dict(getattr(h, "details", {}) or {}), "allocator": allocator, "options": dict(options)}
