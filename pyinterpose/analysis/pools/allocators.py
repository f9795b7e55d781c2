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


# -- native replay (native/allocsim) ----------------------------------------------------
#
# native/allocsim/allocsim.c replays a request stream with the rules above in one C call
# (no GIL).  Its reference, the Python simulators, lives beside the tests
# (tests/unit/allocators_reference.py); tests/unit/test_pools_allocsim.py checks that both
# give the same results on random request streams with every option and on the real GPU
# traces.  Inputs the C model does not take (requests above 32 TiB or beyond int64, a
# capacity or option value above 4 PiB, an option value that is not a whole number, an
# unknown option) are refused with a one-line PyinterposeError.

_OPTIONS = {
    "pytorch": ("expandable_segments", "max_split_size", "max_non_split_rounding", "large_segment_size",
                "roundup_power2_divisions"),
    "bfc": ("allow_growth", "max_internal_fragmentation"),
    "cnmem": ("initial_bytes", "streams", "steal"),
}


class _NotNative(PyinterposeError):
    """An input the native replay does not take (the message says why)."""


class RequestArrays:
    """A request stream as the columns the native replay reads (built once, replayed by
    several allocators): is_alloc (uint8), block_id, size (int64), stream (uint64, or
    int64 when ``signed``)."""

    def __init__(self, req: pd.DataFrame | None):
        self._req = req
        self.error = None
        self.req = None         # the by-block form (:meth:`by_block`), else None
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
    def of_columns(cls, is_alloc, block_id, size, stream) -> "RequestArrays":
        """From numpy columns (stream unsigned)."""
        self = cls(None)
        self.n = len(is_alloc)
        self.is_alloc = np.ascontiguousarray(is_alloc, dtype=np.uint8)
        self.bid = np.ascontiguousarray(block_id, np.int64)
        self.size = np.ascontiguousarray(size, np.int64)
        self.stream, self.signed = np.ascontiguousarray(stream, np.uint64), 0
        return self


    @classmethod
    def by_block(cls, req, bsize, bstream) -> "RequestArrays":
        """The requests by block (4 bytes a request; what :func:`pyinterpose.analysis.pools.evaluate`
        replays): ``req`` int32, ``s`` for an allocation of slot ``s`` and ``~s`` for its free;
        ``bsize`` (int64) and ``bstream`` (uint64): each slot's size and stream.  The same replay as
        the per-request columns with block id ``s``, size ``bsize[s]``, stream ``bstream[s]`` at
        each request (``native/allocsim/allocsim.h``)."""
        self = cls(None)
        self.req = np.ascontiguousarray(req, np.int32)
        self.n = len(self.req)
        self.bsize = np.ascontiguousarray(bsize, np.int64)
        self.signed = 0
        bstream = np.ascontiguousarray(bstream, np.uint64)
        if len(bstream) != len(self.bsize):
            raise ValueError("bsize and bstream differ in length")
        # the streams numbered once here (pi_as_stream_ids), not by each replay: 4 bytes a slot
        self.bsidx, self.svals, self.nstreams = np.zeros(len(bstream), np.int32), np.zeros(0, np.uint64), -2
        ffi, lib = _lib()
        if lib is not None:
            k = int(lib.pi_as_stream_ids(self.n, ffi.cast("int32_t *", self.req.ctypes.data), len(bstream),
                                         ffi.cast("uint64_t *", bstream.ctypes.data),
                                         ffi.cast("int32_t *", self.bsidx.ctypes.data)))
            if k == -1:
                raise MemoryError("simulators: out of memory")
            if k >= 0:
                self.svals = np.zeros(k, np.uint64)
                self.svals[self.bsidx] = bstream     # any slot of an index holds its value
                self.nstreams = k
        return self


def _int_column(col: pd.Series) -> np.ndarray:
    a = col.to_numpy()
    if a.dtype.kind == "i":
        return np.ascontiguousarray(a, np.int64)
    if a.dtype.kind == "u":
        if len(a) and int(a.max()) >= 1 << 63:
            raise _NotNative(f"{col.name} values beyond int64")
        return np.ascontiguousarray(a, np.int64)
    if a.dtype.kind == "b":
        return np.ascontiguousarray(a, np.int64)
    try:
        if not all(isinstance(v, (int, np.integer)) for v in a.tolist()):
            raise _NotNative(f"{col.name} values that are not integers")
        return np.ascontiguousarray(np.asarray(a.tolist(), dtype=np.int64))
    except OverflowError:
        raise _NotNative(f"{col.name} values beyond int64") from None


def _opt_int(v, name: str) -> int:
    """A byte count or count option: an integer, or a float holding a whole number (``1.5 * MiB``)."""
    if isinstance(v, (float, np.floating)) and float(v).is_integer():
        v = int(v)
    if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, np.integer)):
        raise _NotNative(f"{name} {v!r} is not a whole number")
    v = int(v)
    if not 0 <= v < 1 << 62:
        raise _NotNative(f"{name} {v} is out of range")
    return v


_RANGE = ("a request above 32 TiB, a capacity or option value above 4 PiB, or addresses beyond 2 EiB: "
          "outside what the simulators model")


_NOT_BUILT = "pyinterpose._core is not built with native/allocsim (pip install -e . builds it)"


def _lib():
    try:
        from ..._core import ffi, lib
        lib.pi_as_pytorch_b  # noqa: B018 - a build without the allocators (or without their by-block form)
    except (ImportError, AttributeError):
        return None, None
    return ffi, lib


def _simulate_native(arrs: RequestArrays, allocator: str, capacity, options: dict,
                     series: bool = False) -> dict:
    """The native replay of one allocator; raises _NotNative for an input it does not take."""
    ffi, lib = _lib()
    if lib is None:
        raise _NotNative(_NOT_BUILT)
    if arrs.error is not None:
        raise _NotNative(f"requests with {arrs.error}")
    bad = [k for k in options if k not in _OPTIONS[allocator]]
    if bad:
        raise _NotNative(f"bad option ({', '.join(map(str, bad))}): it takes {', '.join(_OPTIONS[allocator])}")
    cap = -1 if capacity is None else _opt_int(capacity, "capacity")
    res = ffi.new("pi_as_result *")
    n = arrs.n
    if arrs.req is not None:    # by block: the *_b entry points take (req, nslots, bsize[, bsidx, svals, nstreams])
        if arrs.nstreams < 0:
            raise _NotNative(_RANGE)
        pr4 = ffi.cast("int32_t *", arrs.req.ctypes.data)
        head = (pr4, len(arrs.bsize), ffi.cast("int64_t *", arrs.bsize.ctypes.data))
        pst = (ffi.cast("int32_t *", arrs.bsidx.ctypes.data), ffi.cast("uint64_t *", arrs.svals.ctypes.data),
               arrs.nstreams)
        f_pt, f_bfc, f_cn = lib.pi_as_pytorch_b, lib.pi_as_bfc_b, lib.pi_as_cnmem_b
    else:
        head = (ffi.cast("uint8_t *", arrs.is_alloc.ctypes.data), ffi.cast("int64_t *", arrs.bid.ctypes.data),
                ffi.cast("int64_t *", arrs.size.ctypes.data))
        pst = (ffi.cast("uint64_t *", arrs.stream.ctypes.data),)
        f_pt, f_bfc, f_cn = lib.pi_as_pytorch, lib.pi_as_bfc, lib.pi_as_cnmem
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
                raise _NotNative(f"roundup_power2_divisions: {len(divs)} values, not {_ROUNDUP_INTERVALS}")
            divs = [_opt_int(d or 0, "roundup_power2_divisions") for d in divs]
        else:
            divs = [_opt_int(divs or 0, "roundup_power2_divisions")] * _ROUNDUP_INTERVALS
        mnsr = _opt_int(options.get("max_non_split_rounding", kLargeBuffer), "max_non_split_rounding")
        lss = options.get("large_segment_size", kLargeBuffer)
        expandable = bool(options.get("expandable_segments", False))
        rc = f_pt(n, *head, *pst, arrs.signed, cap, mss, ffi.new("int64_t[16]", divs),
                               mnsr, _opt_int(lss, "large_segment_size"), 1 if expandable else 0, pr, res)
        if expandable:
            d = res.details
            details = {"segment_maps": int(d[0]), "pages_mapped": int(d[1]), "pages_unmapped": int(d[2]),
                       "ranges": int(d[3]), "ranges_released": int(d[4]),
                       "page_bytes": {"small": kSmallBuffer, "large": lss}}
    elif allocator == "bfc":
        mif = _opt_int(options.get("max_internal_fragmentation", 128 * MiB), "max_internal_fragmentation")
        rc = f_bfc(n, *head, cap, 1 if options.get("allow_growth", True) else 0, mif, pr, res)
    else:
        init = _opt_int(options.get("initial_bytes", 0), "initial_bytes")
        if init and capacity is not None and _round_up(init, 512) > capacity:
            raise PyinterposeError(f"cnmem: initial_bytes {init} exceed the capacity {capacity}")
        streams = options.get("streams")
        rc = f_cn(n, *head, *pst, cap, init, -1 if streams is None else (1 if streams else 0),
                             1 if options.get("steal", True) else 0, pr, res)
        if rc == 0:
            d = res.details
            details = {"streams": bool(d[0]), "child_managers": int(d[1]), "borrowed": int(d[2]),
                       "steals": int(d[3])}
    if rc == -1:
        raise MemoryError(f"{allocator} simulator: out of memory")
    if rc != 0:
        raise _NotNative(_RANGE)
    return {"peak_reserved_bytes": int(res.peak_reserved), "backing_allocations": int(res.backing),
            "peak_allocated_bytes": int(res.peak_allocated),
            "oom_at": None if res.oom_at < 0 else int(res.oom_at), "details": details,
            **({"reserved_after": curve} if series else {})}


def _cudamalloc_native(arrs: RequestArrays, capacity, series: bool = False) -> dict:
    ffi, lib = _lib()
    if lib is None or not hasattr(lib, "pi_as_cudamalloc"):
        raise _NotNative(_NOT_BUILT)
    if arrs.error is not None:
        raise _NotNative(f"requests with {arrs.error}")
    cap = -1 if capacity is None else _opt_int(capacity, "capacity")
    res = ffi.new("pi_as_result *")
    curve = np.empty(arrs.n if series else 0, np.int64)
    pr = ffi.cast("int64_t *", curve.ctypes.data) if series else ffi.NULL
    if arrs.req is not None:
        if arrs.nstreams < 0:
            raise _NotNative(_RANGE)
        rc = lib.pi_as_cudamalloc_b(arrs.n, ffi.cast("int32_t *", arrs.req.ctypes.data), len(arrs.bsize),
                                    ffi.cast("int64_t *", arrs.bsize.ctypes.data), cap, pr, res)
    else:
        rc = lib.pi_as_cudamalloc(arrs.n, ffi.cast("uint8_t *", arrs.is_alloc.ctypes.data),
                                  ffi.cast("int64_t *", arrs.size.ctypes.data), cap, pr, res)
    if rc != 0:
        raise _NotNative(_RANGE)
    return {**({"reserved_after": curve} if series else {}), "peak_reserved_bytes": int(res.peak_reserved), "backing_allocations": int(res.backing),
            "peak_allocated_bytes": int(res.peak_allocated), "peak_requested_bytes": int(res.details[0]),
            "oom_at": None if res.oom_at < 0 else int(res.oom_at)}


def simulate(req, allocator: str, capacity: int | None = None, *, series: bool = False, **options) -> dict:
    """Replay ``req`` (see :func:`pyinterpose.analysis.pools.requests`, or its
    :class:`RequestArrays`) through one allocator.

    Returns {"allocator", "peak_reserved_bytes", "backing_allocations",
    "peak_allocated_bytes", "oom_at" (request index or None), "seconds", "options",
    "details"}.  Options: ``pytorch``: expandable_segments, max_split_size,
    max_non_split_rounding, large_segment_size, roundup_power2_divisions (see
    :func:`parse_alloc_conf`); ``bfc``: allow_growth, max_internal_fragmentation;
    ``cnmem``: initial_bytes, streams (None = auto), steal.  The replay runs in C
    (native/allocsim); an input it does not take raises PyinterposeError (one line: why).
    ``series=True`` adds "reserved_after": an int64 array,
    one per request, of the allocator's reserved curve: the bytes reserved from the device
    after each request, except where the request grew and then released cached memory to
    retry (then the high point within it), so that its maximum is peak_reserved_bytes
    (cudamalloc: the live rounded bytes; after an out-of-memory stop at k, entry k is the
    high point while k was tried and k+1.. what stays reserved)."""
    if allocator not in ALLOCATORS:
        raise PyinterposeError(f"unknown allocator {allocator!r} (choose from {', '.join(ALLOCATORS)})")
    t0 = time.perf_counter()
    arrs = req if isinstance(req, RequestArrays) else RequestArrays(req)
    try:
        if allocator == "cudamalloc":
            if options:
                raise PyinterposeError(f"cudamalloc: bad option ({', '.join(options)}): it takes none")
            out = _cudamalloc_native(arrs, capacity, series)
            out["details"] = {}
        else:
            out = _simulate_native(arrs, allocator, capacity, options, series)
    except _NotNative as e:
        raise PyinterposeError(f"{allocator} simulator: {e}") from None
    out.update(allocator=allocator, seconds=time.perf_counter() - t0, options=dict(options))
    return out
