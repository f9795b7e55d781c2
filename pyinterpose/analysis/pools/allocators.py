"""Simulated allocators replaying a request stream (alloc/free in time order).

Each simulator reports ``peak_reserved_bytes`` (the most memory it held from the
device at once), ``backing_allocations`` (device allocations it made; what counts as
one is said per allocator below) and ``peak_allocated_bytes`` (the most bytes handed
out, rounding included).  There is no capacity limit unless one is given; with one,
the allocator's own OOM path is modelled where it has one and a request that still
cannot be served stops the replay (``oom_at``).  ``details`` holds what else a
simulator counts (pages mapped, managers, steals, ...).

Rules (see /work/shared/research/allocators-and-planners.md §3; sources below are
pytorch/pytorch ``c10/cuda/CUDACachingAllocator.cpp`` at 001074d2 (the version §3.1
read) checked against a newer templated version, ``c10/core/AllocatorConfig.{h,cpp}``
and ``c10/cuda/CUDAAllocatorConfig.cpp``, and NVIDIA/cnmem ``src/cnmem.cpp``):

``cudamalloc``  one device allocation per request.  Decision (documented, not yet
    measured on hardware): requests below 2 MiB are rounded to 512 B (the driver
    sub-allocates small requests from shared 2 MiB pages, which we treat as
    perfectly packed), requests of 2 MiB and more are rounded up to whole 2 MiB pages.

``pytorch``     CUDA caching allocator, options as in PYTORCH_ALLOC_CONF (see
    :func:`parse_alloc_conf`): ``round_size`` (512 B, or the power-of-two divisions of
    ``roundup_power2_divisions``, one setting per 1 MiB..64 GiB interval), small pool
    (rounded size <= 1 MiB) and large pool, best fit per (pool, stream) with lowest
    address on ties (``BlockComparatorSize``), the ``max_split_size`` oversize rules of
    ``get_free_block`` (a request below it never takes a block at or above it; a
    request at or above it takes a block only below request + ``max_non_split_rounding``),
    coalescing with free neighbours of the same segment.

    *Classic segments* (default): a miss calls cudaMalloc with ``get_allocation_size``:
    2 MiB for the small pool, ``large_segment_size`` (20 MiB) below 10 MiB, else the
    request rounded to 2 MiB.  ``should_split``: small pool remainder >= 512 B, large
    pool request < max_split_size and remainder > 1 MiB.  ``backing_allocations`` =
    cudaMalloc calls.  With a capacity, a failed cudaMalloc runs
    ``release_available_cached_blocks`` (only with max_split_size: cudaFree the smallest
    cached oversize block >= max(request, max_split_size) of the stream, else the largest
    ones until that much is freed; only whole segments are freed, as they always are in
    practice) and then ``release_cached_blocks`` (cudaFree every fully free segment of
    both pools), retrying after each.

    *Expandable segments* (``expandable_segments=True``, PyTorch's
    ``expandable_segments:True``).  With the option on, every miss goes to
    ``try_allocate_expandable_block`` (``alloc_block``): no classic segment is made.
    Decisions, each from the real code:

    - One virtual range per (pool, stream) (``find_expandable_block`` creates a new
      ``ExpandableSegment`` only when no unmapped range of that pool and stream has room),
      reserving ``ceil(1.125 x capacity / page)`` pages (``totalGlobalMem +
      totalGlobalMem / 8``; the capacity stands for the GPU's memory; unbounded without
      one).  A new range is placed above every earlier one (the real address is the
      driver's choice; it only orders the search below).
    - Page size (``segment_size_``): 2 MiB (``kSmallBuffer``) in the small pool and
      ``large_segment_size`` (``kLargeBuffer`` = 20 MiB; ``large_segment_size_mb`` in
      newer versions) in the large pool: "we use 2MiB pages for our small pool and 20MiB
      pages for our large pool" (Note [Expandable Segments]), i.e. the large pool maps
      whole 20 MiB handles, not 2 MiB pages.  The small pool gets a growing range too,
      not separate 2 MiB segments.
    - ``get_free_block``: best fit by size, but a free block followed by unmapped space
      counts as its size plus that space ("expandable_size"), so a fitting block that is
      not at the end of the mapped range is preferred to the tail.
    - On a miss (``try_allocate_expandable_block``): the lowest address, over the pool's
      unmapped ranges of the stream in address order, where the free block before an
      unmapped range plus the unmapped (and following free) space holds the request;
      pages are mapped there on demand (``ExpandableSegment::map`` maps
      ``[segmentLeft(ptr), segmentRight(ptr + size))`` pages; ``map_block`` merges the
      newly mapped block with free mapped neighbours).  Mapping is all or nothing per
      ``map`` call (``cuMemCreate`` failing releases the pages created in that call).
    - ``should_split``: any remainder >= 512 B is split off, in both pools
      (``remaining >= kMinBlockSize`` when expandable segments are on).
    - On a failed map: ``release_available_cached_blocks`` releases nothing (newer
      versions skip expandable blocks, ``if (!(*cur)->expandable_segment_)``; 001074d2
      would trip the assertion in ``release_block``), then ``release_cached_blocks`` →
      ``release_blocks`` →
      ``unmap_block`` on every free block of both pools and all streams: the pages lying
      wholly inside a free block (``[segmentRight(ptr), segmentLeft(ptr + size))``) are
      unmapped, wherever they are in the range, and a range left with no mapped page is
      released; then one retry, then OOM.  ``empty_cache`` is the same
      ``release_cached_blocks``; a request stream has no empty_cache calls.
    - Reserved bytes = mapped bytes (``reserved_bytes`` rises in ``map_block`` and falls
      in ``unmap_block``).  ``backing_allocations`` = pages mapped, i.e. ``cuMemCreate``
      + ``cuMemMap`` calls (one per page), what a ``--view reserved`` capture of a real run
      records; ``details.segment_maps`` = ``map_block`` calls (PyTorch's
      ``num_device_alloc``, its SEGMENT_MAP trace entries), ``details.pages_unmapped``.

    Not modelled: CUDA-graph private pools, ``record_stream`` deferred frees, the
    garbage collector (``garbage_collection_threshold``, active only with a memory
    fraction) and ``per_process_memory_fraction``; those options are parsed and listed
    as not simulated.

``bfc``         TF/XLA BFC: 256 B rounding, global best fit (bins ordered by size then
    address amount to that), split only if the chunk is >= 2x the request or exceeds it
    by >= 128 MiB, coalescing within a region, growth with ``allow_growth``: regions of
    2 MiB doubling (the region size doubles whenever the previous one sufficed).
    Without allow_growth and with a capacity, one region of the whole capacity.

``cnmem``       NVIDIA CNMeM (``Manager`` in src/cnmem.cpp): 512 B rounding
    (``CNMEM_GRANULARITY``), best fit over a manager's address-ordered free list (the
    smallest block, the lowest address on ties: ``findBestBlockUnsafe``), allocation at
    the low end, a freed block merges with address neighbours except across a "head"
    (``releaseBlockUnsafe``), growth by a cudaMalloc of exactly the request
    (``allocateBlockUnsafe``); ``initial_bytes`` (default 0, i.e. everything by growth)
    models the up-front ``cnmemInit`` reservation.  Memory goes back to CUDA only at
    finalize.  ``backing_allocations`` = the root manager's cudaMallocs.

    *Streams* (``streams``; default: on when the request stream uses more than one
    stream).  Decision: the trace's streams are the ones the framework passed to its own
    allocation calls, so a single-stream trace (PyTorch's NULL stream, TensorFlow's one
    compute stream) is modelled as CNMeM used without registered streams, and a
    multi-stream trace as CNMeM with each stream registered.  With streams on, the NULL
    stream (0) is served by the root manager; every other stream by
    a child manager registered at its first use (``cnmemRegisterStream``; children are
    looked up by stream in ``cnmemMalloc``).  A child grows by borrowing a block of
    exactly the request from the root (``mParent->allocate``: best fit in the root, which
    grows by cudaMalloc if nothing fits); borrowed blocks are heads, so they never merge
    with each other, and the child keeps them until finalize: memory freed on one stream
    is not reused by another stream or by the root.  With ``streams=False`` every
    request goes to the root (CNMeM used with the NULL stream only).
    *Stealing* (``steal``, default True; ``CNMEM_FLAGS_CANNOT_STEAL``): when a manager
    is out of memory (only with a capacity: the root cannot cudaMalloc), ``cnmemMalloc``
    calls ``stealUnsafe``: the root asks its children in registration order
    (``stealBlockUnsafe``) for the best-fitting free block (``giveBlockUnsafe``), which
    is carved to exactly the request (the child's remainder becomes a head block) and
    moves to the requesting manager (a child, or the root) as a head block.  The root
    keeps the rest of the borrowed block it was cut from as lent.  Decision: when the
    stolen block does not start the root's lent block, ``stealBlockUnsafe`` as written
    overwrites its ``data``/``dataSize`` outputs with the range *after* the stolen block
    (a bug: the caller gets the wrong range); we model the evident intent (the stolen
    block).
"""
from __future__ import annotations

import bisect
import re
import time

import numpy as np
import pandas as pd

from ...errors import PyinterposeError

MiB = 1 << 20
ALLOCATORS = ("cudamalloc", "pytorch", "bfc", "cnmem")

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


# ---------------------------------------------------------------------------------------
# PyTorch allocator configuration (PYTORCH_ALLOC_CONF / PYTORCH_CUDA_ALLOC_CONF)

ALLOC_CONF_VARS = ("PYTORCH_ALLOC_CONF", "PYTORCH_CUDA_ALLOC_CONF")  # PyTorch reads them in this order
_BOOL_KEYS_NOT_SIMULATED = ("release_lock_on_cudamalloc", "release_lock_on_hipmalloc",
                            "pinned_use_cuda_host_register", "pinned_use_hip_host_register",
                            "pinned_use_background_threads", "graph_capture_record_stream_reuse")
_CONF_KEYS = ("backend", "expandable_segments", "max_split_size_mb", "max_non_split_rounding_mb",
              "large_segment_size_mb", "roundup_power2_divisions", "garbage_collection_threshold",
              "per_process_memory_fraction", "pinned_num_register_threads",
              "pinned_reserve_segment_size_mb") + _BOOL_KEYS_NOT_SIMULATED


def _is_pow2(v: int) -> bool:
    return v > 0 and v & (v - 1) == 0


def parse_alloc_conf(text: str) -> tuple[dict, dict]:
    """Parse a PyTorch allocator config (``key:value,key:value``, as in PYTORCH_ALLOC_CONF).

    Returns ``(options, not_simulated)``: ``options`` are keyword arguments of the
    ``pytorch`` simulator (``expandable_segments``, ``max_split_size``,
    ``max_non_split_rounding``, ``large_segment_size`` in bytes, ``roundup_power2_divisions``
    as 16 per-interval values); ``not_simulated`` maps the keys that are valid but have no
    modelled effect on device memory to their values.  Validation follows PyTorch's
    parsers (``AcceleratorAllocatorConfig::parseArgs``, ``CUDAAllocatorConfig::parseArgs``),
    stricter where PyTorch is lax (numbers must be plain digits, unknown keys are errors as
    in current PyTorch).  Raises :class:`PyinterposeError` with a one-line reason."""
    src = text

    def bad(reason: str):
        raise PyinterposeError(f"bad PyTorch allocator config {src!r}: {reason}")

    tokens = []
    buf = ""
    for ch in text:
        if ch in ",:[]":
            if buf:
                tokens.append(buf)
                buf = ""
            tokens.append(ch)
        elif not ch.isspace():
            buf += ch
    if buf:
        tokens.append(buf)

    def at(i: int) -> str:
        if i >= len(tokens):
            bad("unexpected end")
        return tokens[i]

    def num(tok: str, key: str) -> int:
        if not re.fullmatch(r"\d+", tok):
            bad(f"{key} needs a whole number, got {tok!r}")
        return int(tok)

    def real(tok: str, key: str) -> float:
        try:
            return float(tok)
        except ValueError:
            bad(f"{key} needs a number, got {tok!r}")

    def boolean(tok: str, key: str) -> bool:
        if tok not in ("True", "False"):
            bad(f"{key} needs True or False, got {tok!r}")
        return tok == "True"

    opts: dict = {}
    ignored: dict = {}
    i = 0
    while i < len(tokens):
        key = tokens[i]
        if key in ",:[]":
            bad(f"expected a key, got {key!r}")
        if key not in _CONF_KEYS:
            bad(f"unrecognized key {key!r} (known: {', '.join(_CONF_KEYS[:8])}, ...)")
        if at(i + 1) != ":":
            bad(f"expected ':' after {key}")
        i += 2
        val = at(i)
        if key == "roundup_power2_divisions":
            divs = [0] * _ROUNDUP_INTERVALS
            if val == "[":
                last, first = 0, True
                i += 1
                while at(i) != "]":
                    bound = at(i)
                    if at(i + 1) != ":":
                        bad(f"expected ':' after {bound!r} in roundup_power2_divisions")
                    v = num(at(i + 2), "roundup_power2_divisions")
                    if v != 0 and not _is_pow2(v):
                        bad(f"roundup_power2_divisions values must be 0 or a power of 2, got {v}")
                    if bound == ">":
                        divs[last + 1:] = [v] * (_ROUNDUP_INTERVALS - last - 1)
                    else:
                        b = num(bound, "roundup_power2_divisions interval")
                        if not _is_pow2(b):
                            bad(f"roundup_power2_divisions intervals (MiB) must be powers of 2, got {b}")
                        idx = min(b.bit_length() - 1, _ROUNDUP_INTERVALS - 1)
                        if first:
                            divs[:idx] = [v] * idx
                            first = False
                        divs[idx] = v
                        last = idx
                    i += 3
                    if at(i) == ",":
                        i += 1
                    elif at(i) != "]":
                        bad(f"expected ',' or ']' in roundup_power2_divisions, got {at(i)!r}")
            else:
                v = num(val, key)
                if not _is_pow2(v):
                    bad(f"roundup_power2_divisions must be a power of 2, got {v}")
                divs = [v] * _ROUNDUP_INTERVALS
            opts["roundup_power2_divisions"] = divs
        elif val == "[":
            bad(f"{key} takes a single value")
        elif key == "backend":
            if val == "cudaMallocAsync":
                bad("backend:cudaMallocAsync bypasses the caching allocator; the pytorch simulator "
                    "models the native one (use backend:native or leave it out)")
            if val != "native":
                bad(f"unknown backend {val!r} (native or cudaMallocAsync)")
        elif key == "expandable_segments":
            opts["expandable_segments"] = boolean(val, key)
        elif key in ("max_split_size_mb", "max_non_split_rounding_mb"):
            v = num(val, key)
            if v < kLargeBuffer // MiB:
                bad(f"{key} must be >= {kLargeBuffer // MiB}, got {v}")
            opts["max_split_size" if key == "max_split_size_mb" else "max_non_split_rounding"] = v * MiB
        elif key == "large_segment_size_mb":
            v = num(val, key)
            if v <= kMinLargeAlloc // MiB:
                bad(f"{key} must be > {kMinLargeAlloc // MiB}, got {v}")
            opts["large_segment_size"] = v * MiB
        elif key == "garbage_collection_threshold":
            v = real(val, key)
            if not 0.0 < v < 1.0:
                bad(f"{key} must be in (0, 1), got {val}")
            ignored[key] = v
        elif key == "per_process_memory_fraction":
            v = real(val, key)
            if not 0.0 <= v <= 1.0:
                bad(f"{key} must be in [0, 1], got {val}")
            ignored[key] = v
        elif key == "pinned_num_register_threads":
            v = num(val, key)
            if not _is_pow2(v) or v > 128:
                bad(f"{key} must be a power of 2 <= 128, got {v}")
            ignored[key] = v
        elif key == "pinned_reserve_segment_size_mb":
            v = num(val, key)
            if v <= 0:
                bad(f"{key} must be > 0")
            ignored[key] = v
        else:  # boolean keys with no effect on device memory
            ignored[key] = boolean(val, key)
        i += 1
        if i < len(tokens):
            if tokens[i] != ",":
                bad(f"expected ',' after the value of {key}, got {tokens[i]!r}")
            i += 1
            if i == len(tokens):
                bad("trailing ','")
    return opts, ignored


def pytorch_options(meta: dict | None, given=None) -> tuple[dict, dict]:
    """The ``pytorch`` simulator's options and where they came from.

    ``given``: a config string (PyTorch syntax) or an options dict; when None, the
    user's own PYTORCH_ALLOC_CONF / PYTORCH_CUDA_ALLOC_CONF recorded in the trace
    (``meta["user_env"]``; PyTorch reads PYTORCH_ALLOC_CONF first) is used.  Returns
    ``(options, info)`` with info = {"source", "alloc_conf", "not_simulated"[, "note"]}."""
    info: dict = {"alloc_conf": None, "not_simulated": {}}
    if given is not None:
        if isinstance(given, str):
            opts, ign = parse_alloc_conf(given)
            info.update(source="given", alloc_conf=given, not_simulated=ign)
            return opts, info
        info["source"] = "given"
        return dict(given), info
    meta = meta or {}
    user_env = meta.get("user_env")
    if user_env is None:
        info.update(source="default", note="the trace does not record the user's allocator settings")
        return {}, info
    for name in ALLOC_CONF_VARS:
        if name in user_env:
            value = user_env[name]
            info.update(source=f"trace {name}", alloc_conf=value)
            try:
                opts, ign = parse_alloc_conf(value)
            except PyinterposeError as e:
                info.update(source="default", note=f"{name} recorded in the trace not used: {e}")
                return {}, info
            info["not_simulated"] = ign
            return opts, info
    info["source"] = "default"
    return {}, info


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


# -- native replay (native/allocsim) ----------------------------------------------------
#
# The simulators above are the reference: native/allocsim/allocsim.c replays the same
# request stream with the same decisions in one C call (no GIL), and
# tests/unit/test_pools_allocsim.py checks that both give the same results on random
# request streams with every option and on the real GPU traces.  Inputs the C model does
# not take exactly (sizes above 32 TiB, options that are not plain integers, 64-bit
# overflow, an unknown option) run the reference instead.

_OPTIONS = {
    "pytorch": ("expandable_segments", "max_split_size", "max_non_split_rounding", "large_segment_size",
                "roundup_power2_divisions"),
    "bfc": ("allow_growth", "max_internal_fragmentation"),
    "cnmem": ("initial_bytes", "streams", "steal"),
}


class _NotNative(Exception):
    """This input is replayed by the Python reference."""


class RequestArrays:
    """A request stream as the columns the native replay reads (built once, replayed by
    several allocators): is_alloc (uint8), block_id, size (int64), stream (uint64, or
    int64 when ``signed``)."""

    def __init__(self, req: pd.DataFrame | None):
        self._req = req
        self._make_req = None
        self.error = None
        if req is None:
            return
        self.n = len(req)
        self.is_alloc = np.ascontiguousarray(req["op"].to_numpy() == "alloc", dtype=np.uint8)
        try:
            self.bid = _int_column(req["block_id"])
            self.size = _int_column(req["size"])
            stream = req["stream"].to_numpy()
            if stream.dtype.kind == "u":
                self.stream, self.signed = np.ascontiguousarray(stream, np.uint64), 0
            else:
                self.stream, self.signed = _int_column(req["stream"]).view(np.uint64), 1
        except _NotNative as e:
            self.error = str(e)

    @classmethod
    def of_columns(cls, is_alloc, block_id, size, stream, make_req) -> "RequestArrays":
        """From numpy columns (stream unsigned); ``make_req()`` builds the request table
        only if the Python reference needs it."""
        self = cls(None)
        self.n = len(is_alloc)
        self.is_alloc = np.ascontiguousarray(is_alloc, dtype=np.uint8)
        self.bid = np.ascontiguousarray(block_id, np.int64)
        self.size = np.ascontiguousarray(size, np.int64)
        self.stream, self.signed = np.ascontiguousarray(stream, np.uint64), 0
        self._make_req = make_req
        return self

    @property
    def req(self) -> pd.DataFrame:
        if self._req is None:
            self._req = self._make_req()
        return self._req

    def ops(self) -> list:
        """(is_alloc, block_id, size, stream) tuples for the Python reference."""
        req = self.req
        return list(zip((req["op"].to_numpy() == "alloc").tolist(), req["block_id"].tolist(),
                        req["size"].tolist(), req["stream"].tolist()))


def _int_column(col: pd.Series) -> np.ndarray:
    a = col.to_numpy()
    if a.dtype.kind == "i":
        return np.ascontiguousarray(a, np.int64)
    if a.dtype.kind == "u":
        if len(a) and int(a.max()) >= 1 << 63:
            raise _NotNative("values beyond int64")
        return np.ascontiguousarray(a, np.int64)
    if a.dtype.kind == "b":
        return np.ascontiguousarray(a, np.int64)
    try:
        if not all(isinstance(v, (int, np.integer)) for v in a.tolist()):
            raise _NotNative("not integers")
        return np.ascontiguousarray(np.asarray(a.tolist(), dtype=np.int64))
    except OverflowError:
        raise _NotNative("values beyond int64") from None


def _opt_int(v, name: str) -> int:
    if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, np.integer)):
        raise _NotNative(f"{name} is not an integer")
    v = int(v)
    if not 0 <= v < 1 << 62:
        raise _NotNative(f"{name} out of range")
    return v


def _lib():
    try:
        from ..._core import ffi, lib
        lib.pi_as_pytorch  # noqa: B018 - a build without the allocators
    except (ImportError, AttributeError):
        return None, None
    return ffi, lib


def _simulate_native(arrs: RequestArrays, allocator: str, capacity, options: dict,
                     series: bool = False) -> dict | None:
    """The native replay of one allocator; None when the Python reference must run."""
    ffi, lib = _lib()
    if lib is None or arrs.error is not None:
        return None
    try:
        if any(k not in _OPTIONS[allocator] for k in options):
            return None  # the reference reports the bad option
        cap = -1 if capacity is None else _opt_int(capacity, "capacity")
        res = ffi.new("pi_as_result *")
        n = arrs.n
        p8 = ffi.cast("uint8_t *", arrs.is_alloc.ctypes.data)
        pb = ffi.cast("int64_t *", arrs.bid.ctypes.data)
        ps = ffi.cast("int64_t *", arrs.size.ctypes.data)
        pst = ffi.cast("uint64_t *", arrs.stream.ctypes.data)
        details: dict = {}
        curve = np.empty(n if series else 0, np.int64)
        pr = ffi.cast("int64_t *", curve.ctypes.data) if series else ffi.NULL
        if allocator == "pytorch":
            mss = options.get("max_split_size")
            mss = _opt_int(mss, "max_split_size") if mss else 0
            divs = options.get("roundup_power2_divisions", 0)
            if isinstance(divs, (list, tuple)):
                divs = [0] * _ROUNDUP_INTERVALS if not divs else list(divs)
                if len(divs) != _ROUNDUP_INTERVALS:
                    return None
                divs = [_opt_int(d or 0, "roundup_power2_divisions") for d in divs]
            else:
                divs = [_opt_int(divs or 0, "roundup_power2_divisions")] * _ROUNDUP_INTERVALS
            mnsr = _opt_int(options.get("max_non_split_rounding", kLargeBuffer), "max_non_split_rounding")
            lss = options.get("large_segment_size", kLargeBuffer)
            expandable = bool(options.get("expandable_segments", False))
            rc = lib.pi_as_pytorch(n, p8, pb, ps, pst, arrs.signed, cap, mss, ffi.new("int64_t[16]", divs),
                                   mnsr, _opt_int(lss, "large_segment_size"), 1 if expandable else 0, pr, res)
            if expandable:
                d = res.details
                details = {"segment_maps": int(d[0]), "pages_mapped": int(d[1]), "pages_unmapped": int(d[2]),
                           "ranges": int(d[3]), "ranges_released": int(d[4]),
                           "page_bytes": {"small": kSmallBuffer, "large": lss}}
        elif allocator == "bfc":
            mif = _opt_int(options.get("max_internal_fragmentation", 128 * MiB), "max_internal_fragmentation")
            rc = lib.pi_as_bfc(n, p8, pb, ps, cap, 1 if options.get("allow_growth", True) else 0, mif, pr, res)
        else:
            init = _opt_int(options.get("initial_bytes", 0), "initial_bytes")
            if init and capacity is not None and _round_up(init, 512) > capacity:
                return None  # the reference reports it
            streams = options.get("streams")
            rc = lib.pi_as_cnmem(n, p8, pb, ps, pst, cap, init, -1 if streams is None else (1 if streams else 0),
                                 1 if options.get("steal", True) else 0, pr, res)
            if rc == 0:
                d = res.details
                details = {"streams": bool(d[0]), "child_managers": int(d[1]), "borrowed": int(d[2]),
                           "steals": int(d[3])}
    except _NotNative:
        return None
    if rc == -1:
        raise MemoryError(f"{allocator} simulator: out of memory")
    if rc != 0:
        return None
    return {"peak_reserved_bytes": int(res.peak_reserved), "backing_allocations": int(res.backing),
            "peak_allocated_bytes": int(res.peak_allocated),
            "oom_at": None if res.oom_at < 0 else int(res.oom_at), "details": details,
            **({"reserved_after": curve} if series else {})}


def _cudamalloc_native(arrs: RequestArrays, capacity, series: bool = False) -> dict | None:
    ffi, lib = _lib()
    if lib is None or arrs.error is not None or not hasattr(lib, "pi_as_cudamalloc"):
        return None
    try:
        cap = -1 if capacity is None else _opt_int(capacity, "capacity")
    except _NotNative:
        return None
    res = ffi.new("pi_as_result *")
    curve = np.empty(arrs.n if series else 0, np.int64)
    rc = lib.pi_as_cudamalloc(arrs.n, ffi.cast("uint8_t *", arrs.is_alloc.ctypes.data),
                              ffi.cast("int64_t *", arrs.size.ctypes.data), cap,
                              ffi.cast("int64_t *", curve.ctypes.data) if series else ffi.NULL, res)
    if rc != 0:
        return None
    return {**({"reserved_after": curve} if series else {}), "peak_reserved_bytes": int(res.peak_reserved), "backing_allocations": int(res.backing),
            "peak_allocated_bytes": int(res.peak_allocated), "peak_requested_bytes": int(res.details[0]),
            "oom_at": None if res.oom_at < 0 else int(res.oom_at)}


def _simulate_python(arrs: RequestArrays, allocator: str, capacity, options: dict,
                     series: bool = False) -> dict:
    """The reference simulators (see the module docstring)."""
    fn = {"pytorch": _simulate_pytorch, "bfc": _simulate_bfc, "cnmem": _simulate_cnmem}[allocator]
    if "series" in options:
        raise PyinterposeError(f"{allocator}: bad option (series)")
    curve: list | None = [] if series else None
    try:
        h, oom = fn(arrs.ops(), capacity, **options, **({"series": curve} if series else {}))
    except TypeError as e:
        raise PyinterposeError(f"{allocator}: bad option ({e})")
    extra = {}
    if series:
        n = len(arrs.req)
        if len(curve) < n:   # stopped at request len(curve): its high point, then what stays
            curve += [max(h.step_peak, h.reserved)] + [h.reserved] * (n - len(curve) - 1)
        try:
            extra["reserved_after"] = np.asarray(curve, np.int64)
        except OverflowError:   # sizes beyond int64 (Python ints)
            extra["reserved_after"] = np.asarray(curve, object)
    return {**extra, "peak_reserved_bytes": int(h.peak_reserved), "backing_allocations": int(h.backing),
            "peak_allocated_bytes": int(h.peak_allocated), "oom_at": oom,
            "details": dict(getattr(h, "details", {}) or {})}


def simulate(req, allocator: str, capacity: int | None = None, *, reference: bool = False,
             series: bool = False, **options) -> dict:
    """Replay ``req`` (see :func:`pyinterpose.analysis.pools.requests`, or its
    :class:`RequestArrays`) through one allocator.

    Returns {"allocator", "peak_reserved_bytes", "backing_allocations",
    "peak_allocated_bytes", "oom_at" (request index or None), "seconds", "options",
    "details"}.  Options: ``pytorch``: expandable_segments, max_split_size,
    max_non_split_rounding, large_segment_size, roundup_power2_divisions (see
    :func:`parse_alloc_conf`); ``bfc``: allow_growth, max_internal_fragmentation;
    ``cnmem``: initial_bytes, streams (None = auto), steal.  The replay runs in C
    (native/allocsim); ``reference=True`` runs the Python reference simulators instead
    (same results, ~50x slower).  ``series=True`` adds "reserved_after": an int64 array,
    one per request, of the allocator's reserved curve: the bytes reserved from the device
    after each request, except where the request grew and then released cached memory to
    retry (then the high point within it), so that its maximum is peak_reserved_bytes
    (cudamalloc: the live rounded bytes; after an out-of-memory stop at k, entry k is the
    high point while k was tried and k+1.. what stays reserved)."""
    if allocator not in ALLOCATORS:
        raise PyinterposeError(f"unknown allocator {allocator!r} (choose from {', '.join(ALLOCATORS)})")
    t0 = time.perf_counter()
    arrs = req if isinstance(req, RequestArrays) else None
    if allocator == "cudamalloc":
        if options:
            raise PyinterposeError(f"cudamalloc: bad option ({', '.join(options)}): it takes none")
        arrs = arrs if arrs is not None else RequestArrays(req)
        out = None if reference else _cudamalloc_native(arrs, capacity, series)
        if out is None:
            out = _simulate_cudamalloc(arrs.req["op"].to_numpy() == "alloc",
                                       arrs.req["size"].to_numpy(np.int64), capacity, series)
        out["details"] = {}
    else:
        arrs = arrs if arrs is not None else RequestArrays(req)
        out = None if reference else _simulate_native(arrs, allocator, capacity, options, series)
        if out is None:
            out = _simulate_python(arrs, allocator, capacity, options, series)
    out.update(allocator=allocator, seconds=time.perf_counter() - t0, options=dict(options))
    return out
