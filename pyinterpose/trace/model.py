"""The Trace model: what every analysis reads.

A :class:`Trace` is a bundle of pandas tables built by the reader
(:mod:`pyinterpose.trace.reader`) from a trace file, or by hand with
:meth:`Trace.from_tables` (tests, synthetic workloads).  Times are int64
nanoseconds since the start of the run (``meta["t0_ns"]`` on the shim's
CLOCK_MONOTONIC); ``seq`` is the per-process record sequence number written by
the shim (ring ticket), so ``(pid, seq)`` orders a process's events exactly.

Tables (column: dtype — meaning)

``blocks`` — one row per successful allocation (keyed by allocation, not by
address: addresses are reused)
    block_id: int64      dense 0..n-1, in (t_alloc, pid, seq_alloc) order
    pid: int32
    device: int16
    api: category        e.g. "cudaMallocAsync", "cuMemAlloc_v2"
    kind: category       device|pitch|async|pool|managed|host|vmm|vmm_create|vmm_import|multicast|ipc
                         (vmm = one VMM buffer: reserve + create + map joined, see
                         pyinterpose.trace.vmm; vmm_create = a physical handle that
                         was never mapped; vmm_import = a map of another process's
                         memory, multicast = a map of a multicast object, ipc = a peer's
                         buffer opened with cudaIpcOpenMemHandle: none of these three counts)
    address: uint64      0 for vmm_create (physical handle, see ``handle``)
    size: int64          bytes (vmm: the physical bytes behind the mapping)
    handle: uint64       pool handle (pool), VMM handle (vmm/vmm_create), else 0
    t_alloc, t_free: int64 ns
    seq_alloc, seq_free: int64
    freed: bool          False = never freed in the trace; then t_free = trace end
                         and seq_free = the process's last seq + 1
    stream: uint64
    owner: category      basename of the shared object that made the call ("" unknown;
                         see pyinterpose.trace.stacks)
    stack_id: int64      the allocation's call stack in ``stacks`` (-1 none)
    device_bytes: int64  (only in traces with VMM blocks) the device bytes the block adds to the
                         live total: its size, 0 where counts_device is False, and for a mapping
                         partly overlapping a live mapping of its handle only the part not yet
                         counted (model.counted_bytes)
    counts_device: bool  True when the block holds device memory
                         (device/pitch/async/pool/managed/vmm/vmm_create): the rows
                         that add up to live device bytes.  host rows are False, and
                         so is a vmm mapping of physical bytes that another live
                         mapping of the same handle already counts (physical bytes
                         count once).
    handle_t_create, handle_t_release: int64  vmm/vmm_create: the physical handle's
                         own lifetime (cuMemCreate -> cuMemRelease; trace end when
                         never released); -1 for other kinds or when the create is
                         not in the trace.  A vmm block's t_alloc/t_free are its
                         map -> unmap.
    handle_types: int64  vmm/vmm_create/multicast: the shareable-handle types the handle was created with
                         (cuMemCreate's requestedHandleTypes: 1 POSIX fd, 8 fabric; 0 none or unknown):
                         non-zero = exportable to other processes (NCCL's buffers)
    reservation_id: int64  vmm: the row of ``reservations`` whose virtual range holds
                         the mapping; -1 otherwise
    graph: uint64        the CUDA graph this block belongs to (0 none): a memory node's block in one
                         replay, or memory allocated while the graph was being captured in that process
                         (PyTorch's private graph pool segments: cudaMalloc during torch.cuda.graph);
                         see pyinterpose.trace.graphs

``reservations`` — cuMemAddressReserve ranges (virtual address space, no memory;
not blocks): reservation_id (int64, dense), pid, device, api, address, size,
t_alloc, t_free, seq_alloc, seq_free, freed, maps (int64: vmm blocks mapped in it),
mapped_peak (int64: most physical bytes mapped in it at once — for PyTorch's
expandable segments, the segment's peak size)

``accesses`` — one row per (launch|copy|memset, block) pair
    block_id: int32 (a trace holds fewer than 2^31 blocks; the reader checks), pid: int32, seq: int64 (of the LAUNCH/COPY/MEMSET event),
    t: int64 ns, kernel: int32 (index into ``trace.kernels``; -1 for copies),
    op: category launch|copy|memset|tensormap|graph (a node of an expanded graph replay),
    flags: uint16 (pi_access_flags), node: int32 (the graph node id; -1 for an eager call)

``launches`` — one row per kernel launch (and graph launch), and per kernel node of each expanded
graph replay (``node`` >= 0: node k of the replay whose GRAPH_LAUNCH has seq ``seq - 1 - k`` when the
shim held node slots; pyinterpose.trace.graphs)
    pid, tid, seq, t, device, stream, api: category, kernel: int32,
    kernel_name: category, n_access: int32, graph: bool (a graph launch), node: int32 (-1: a call),
    dev_start, dev_end: int64   when the kernel ran on the GPU (device clock, CUPTI), aligned to
                         the trace's clock (ns since the start of the run); -1 when the trace has no
                         device time for it.  A graph launch: its first replayed node's start and
                         its last node's end (each node is a row of ``gpu_activity``).

``copies`` — cudaMemcpy*/cudaMemset*: pid, seq, t, api, op (copy|memset), dst, src, size, stream,
    dev_start, dev_end (int64, as in ``launches``; -1 = no device time), node (int32: -1, or the node id
    of a replayed memcpy/memset node, as in ``launches``)
``graph_nodes`` — what was captured into (or added to) each CUDA graph, in node order: pid, graph,
    capture_seq, node, kind (kernel|copy|memset|alloc|free), seq (of the captured call), stream, kernel,
    size, replays (pyinterpose.trace.graphs)
``graph_memory`` — the graph memory pool after each replay (cudaDeviceGetGraphMemAttribute): pid, seq
    (of the graph launch), t, device, reserved, reserved_high, used
``gpu_activity`` — one row per device activity record (CUPTI kernel, memcpy, memset), on the
    trace's clock: pid, seq (int64: the LAUNCH/GRAPH_LAUNCH/COPY/MEMSET event it belongs to, via the
    external correlation id; -1 when none matched), kind (category: kernel|memcpy|memset), start,
    end (int64 ns since the start of the run), device (int16), stream (int64: CUPTI's stream id),
    graph_node (uint64: 0 unless replayed from a CUDA graph), kernel (int32: index into ``kernels``,
    -1 none), bytes (int64: memcpy/memset size, 0 for kernels), captured_seq (int64: a node replayed from
    a graph captured in the trace: the seq of the LAUNCH / COPY / MEMSET captured into it that this node
    runs — the k-th node of a replay, in graph node id order, is the k-th call captured, when their
    numbers agree; -1 otherwise)
``hints`` — cudaMemAdvise/cudaMemPrefetchAsync: pid, seq, t, api, op (advise|prefetch), address, size, value
``failures`` — calls whose CUDA result was non-zero: pid, seq, t, api, op, size, result, stream (uint64: the
    stream of a stream-ordered allocation or free, else 0),
    device (int16: the device the shim queried at an out-of-memory failure, else the thread's last
    cudaSetDevice), kind (category: the allocation kind for alloc/free, "" otherwise), pool (uint64:
    the pool of a failed pool allocation, else 0), owner (category) and stack_id (int64, -1 none): the
    call site as for blocks; free_bytes, total_bytes (int64: cuMemGetInfo right after an out-of-memory
    allocation failure, -1 when not recorded — during stream capture, or older traces); see
    pyinterpose.trace.failures and pyinterpose.analysis.oom
``markers`` — pyinterpose.mark_step(): pid, seq, t, label
``swapped`` — the swap engine of ``run --apply`` with a ``plan --swap`` plan (native/shim/swap.c), one row
    per iteration: pid, seq, t, record (iteration | last), iteration, swaps_out, swaps_in, late, unforeseen,
    waits, managed, real (int64; docs/swap-run.md)
``applied`` — serving from a plan (``run --apply``, native/shim/apply.c), one row per record: pid, seq, t,
    record (category: arena|iteration|refused|last), iteration (int64, -1 before the first), result (int32:
    the arena's real allocation), arena (uint64: its base), capacity (int64), and the requests counted:
    served, no_key, occupied, bigger, capture, overlap, off, other (int64; pyinterpose.analysis.applied)
``processes`` — pid, ppid, exe, forked (bool), start_ns, written, lost, waits, unscanned_launches,
    context (object: JSON text of the rank variables of its environment, {NAME: value}: RANK, LOCAL_RANK,
    WORLD_SIZE, JAX_PROCESS_ID, TF_CONFIG, CUDA_VISIBLE_DEVICES, HOST, ...; pyinterpose.trace.context),
    devices (object: JSON text of [[ordinal, "GPU-<uuid>"], ...]: the devices it allocated on),
    clock (object: "cupti" when this process's device times were recorded, else "cpu"),
    clock_note (object: why not, or "" — "libcupti not found", "CUPTI busy: another subscriber
    (Nsight, torch.profiler)", "--gpu-clock off", ...), clock_error_ns (int64: bound of the
    CUPTI-to-trace clock alignment, -1 none), gpu_dropped (int64: activity records CUPTI dropped)
``nvml`` — samples taken while the target ran: t, device, used_bytes, pcie_tx_kbs, pcie_rx_kbs
``frames`` — frame_id, kind (python|native), filename, function, line, object
``stacks`` — stack_id, parent_id (-1 at the root), frame_id: a trie of call stacks
    (pyinterpose.trace.stacks: frames_of, call_site, top_call_sites)
``kernels`` — list[str]: kernel names, indexed by ``kernel`` columns
``meta`` — dict: header JSON (command, view, knobs set, t0_ns, host, gpus, nvml link info, ...)

Iterations contract (pyinterpose.analysis.iterations.find_iterations):
    find_iterations(trace, pid=None) -> Iterations with
        source: "auto" | "markers" | "none"
        pid: the process analysed
        period_allocs: int             allocations in one regular step
        count: int                     regular steps found
        first_steady_seq: int
        stable_fraction: float
        boundaries: np.ndarray[int64]  seq at which each regular step starts, plus
                                       one past the end of the last (len = count+1)
        boundaries_t: np.ndarray[int64] the same boundaries in ns
        steady_window() -> (seq_lo, seq_hi): one representative steady step
"""
from __future__ import annotations

import threading

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from .chunking import spans
from .pages import release
from .piecewise import maximum, piece_rows
from .live import _by_t_then_d, counted_bytes, event_order, live_order, peak_of   # noqa: F401 (names of this module)

KINDS = {1: "device", 2: "pitch", 3: "async", 4: "pool", 5: "managed", 6: "host",
         7: "vmm_reserve", 8: "vmm_create", 9: "vmm_map", 10: "ipc"}
DEVICE_KINDS = frozenset({"device", "pitch", "async", "pool", "managed", "vmm", "vmm_create"})

BLOCK_COLUMNS = {
    "block_id": "int64", "pid": "int32", "device": "int16", "api": "category", "kind": "category",
    "address": "uint64", "size": "int64", "handle": "uint64", "t_alloc": "int64", "t_free": "int64",
    "seq_alloc": "int64", "seq_free": "int64", "freed": "bool", "stream": "uint64",
    "counts_device": "bool", "handle_t_create": "int64", "handle_t_release": "int64", "reservation_id": "int64",
    "handle_types": "int64",
    "owner": "category", "stack_id": "int64", "graph": "uint64",
}
RESERVATION_COLUMNS = {"reservation_id": "int64", "pid": "int32", "device": "int16", "api": "category",
                       "address": "uint64", "size": "int64", "t_alloc": "int64", "t_free": "int64",
                       "seq_alloc": "int64", "seq_free": "int64", "freed": "bool", "maps": "int64",
                       "mapped_peak": "int64"}
# value of a column missing from a table given to ``conform`` (else False / "" / 0 by dtype)
COLUMN_DEFAULTS = {"handle_t_create": -1, "handle_t_release": -1, "reservation_id": -1, "stack_id": -1,
                   "dev_start": -1, "dev_end": -1, "clock": "cpu", "clock_error_ns": -1, "captured_seq": -1,
                   "free_bytes": -1, "total_bytes": -1, "context": "{}", "devices": "[]", "node": -1}
ACCESS_COLUMNS = {"block_id": "int32", "pid": "int32", "seq": "int64", "t": "int64",
                  "kernel": "int32", "op": "category", "flags": "uint16", "node": "int32"}
LAUNCH_COLUMNS = {"pid": "int32", "tid": "int64", "seq": "int64", "t": "int64", "device": "int16",
                  "stream": "uint64", "api": "category", "kernel": "int32",
                  "kernel_name": "category", "n_access": "int32", "graph": "bool",
                  "dev_start": "int64", "dev_end": "int64", "node": "int32"}
COPY_COLUMNS = {"pid": "int32", "seq": "int64", "t": "int64", "api": "category", "op": "category",
                "dst": "uint64", "src": "uint64", "size": "int64", "stream": "uint64",
                "dev_start": "int64", "dev_end": "int64", "node": "int32"}
GRAPH_MEMORY_COLUMNS = {"pid": "int32", "seq": "int64", "t": "int64", "device": "int16", "reserved": "int64",
                        "reserved_high": "int64", "used": "int64"}
GRAPH_NODE_COLUMNS = {"pid": "int32", "graph": "uint64", "capture_seq": "int64", "node": "int32",
                      "kind": "category", "seq": "int64", "stream": "uint64", "kernel": "int32", "size": "int64",
                      "replays": "int64"}
GPU_ACTIVITY_COLUMNS = {"pid": "int32", "seq": "int64", "kind": "category", "start": "int64", "end": "int64",
                        "device": "int16", "stream": "int64", "graph_node": "uint64", "kernel": "int32",
                        "bytes": "int64", "captured_seq": "int64"}
HINT_COLUMNS = {"pid": "int32", "seq": "int64", "t": "int64", "api": "category", "op": "category",
                "address": "uint64", "size": "int64", "value": "int64"}
FAILURE_COLUMNS = {"pid": "int32", "seq": "int64", "t": "int64", "api": "category", "op": "category",
                   "size": "int64", "result": "int32", "stream": "uint64", "device": "int16", "kind": "category",
                   "pool": "uint64", "owner": "category", "stack_id": "int64", "free_bytes": "int64",
                   "total_bytes": "int64"}
MARKER_COLUMNS = {"pid": "int32", "seq": "int64", "t": "int64", "label": "object"}
APPLY_COUNTS = ("served", "no_key", "occupied", "bigger", "capture", "overlap", "off", "other")
SWAP_COUNTS = ("swaps_out", "swaps_in", "late", "unforeseen", "waits", "managed", "real")
SWAP_COLUMNS = {"pid": "int32", "seq": "int64", "t": "int64", "record": "category", "iteration": "int64",
                **{c: "int64" for c in SWAP_COUNTS}}
APPLY_COLUMNS = {"pid": "int32", "seq": "int64", "t": "int64", "record": "category", "iteration": "int64",
                 "result": "int32", "arena": "uint64", "capacity": "int64", **{c: "int64" for c in APPLY_COUNTS}}
PROCESS_COLUMNS = {"pid": "int32", "ppid": "int32", "exe": "object", "forked": "bool",
                   "start_ns": "int64", "written": "int64", "lost": "int64", "waits": "int64",
                   "unscanned_launches": "int64", "clock": "object", "clock_note": "object",
                   "clock_error_ns": "int64", "gpu_dropped": "int64", "context": "object", "devices": "object"}
NVML_COLUMNS = {"t": "int64", "device": "int16", "used_bytes": "int64", "pcie_tx_kbs": "float64",
                "pcie_rx_kbs": "float64"}


FRAME_COLUMNS = {"frame_id": "int64", "kind": "category", "filename": "object", "function": "object",
                 "line": "int64", "object": "object"}
STACK_COLUMNS = {"stack_id": "int64", "parent_id": "int64", "frame_id": "int64"}


def empty_frames() -> pd.DataFrame:
    return pd.DataFrame({c: pd.Series([], dtype=d) for c, d in FRAME_COLUMNS.items()})


def empty_stacks() -> pd.DataFrame:
    return pd.DataFrame({c: pd.Series([], dtype=d) for c, d in STACK_COLUMNS.items()})


def conform_frames(df) -> pd.DataFrame:
    if df is None or len(df) == 0:
        return empty_frames()
    return pd.DataFrame({c: df[c] for c in FRAME_COLUMNS}).astype(FRAME_COLUMNS).reset_index(drop=True)


def conform_stacks(df) -> pd.DataFrame:
    if df is None or len(df) == 0:
        return empty_stacks()
    return pd.DataFrame({c: df[c] for c in STACK_COLUMNS}).astype(STACK_COLUMNS).reset_index(drop=True)


def empty_table(columns: dict[str, str]) -> pd.DataFrame:
    return pd.DataFrame({c: pd.Series([], dtype=d) for c, d in columns.items()})


def conform(df: pd.DataFrame | None, columns: dict[str, str]) -> pd.DataFrame:
    """Return ``df`` with exactly ``columns`` in order and dtype (missing ones filled)."""
    if df is None or len(df) == 0:
        out = empty_table(columns)
        if df is not None:
            for c in df.columns:
                if c not in out:
                    out[c] = df[c]
        return out
    df = df.copy(deep=False)   # columns already of the right dtype are shared, not copied
    for c, d in columns.items():
        if c not in df:
            df[c] = COLUMN_DEFAULTS.get(c, False if d == "bool" else ("" if d in ("object", "category") else 0))
        if str(df[c].dtype) != d:
            df[c] = df[c].astype(d)
    extra = [c for c in df.columns if c not in columns]
    order = list(columns) + extra
    if list(df.columns) != order:
        df = df[order]
    if not isinstance(df.index, pd.RangeIndex) or df.index.start != 0 or df.index.step != 1:
        df = df.reset_index(drop=True)
    return df


_DERIVED_FROM = ("blocks", "accesses", "launches", "copies", "markers", "processes", "reservations",
                 "gpu_activity")
_TABLES_KEY = ("model", "tables")   # the tables the memo was computed from
_OWNER_KEY = ("model", "owner")     # id() of the trace the memo belongs to
_MISSING = object()                 # derived(): no value held for a key
_LOCKS_KEY = ("model", "locks")     # {key: lock} of the keys being or once computed


@dataclass
class Trace:
    blocks: pd.DataFrame
    accesses: pd.DataFrame
    launches: pd.DataFrame
    copies: pd.DataFrame
    hints: pd.DataFrame
    failures: pd.DataFrame
    markers: pd.DataFrame
    processes: pd.DataFrame
    nvml: pd.DataFrame
    kernels: list = field(default_factory=list)
    meta: dict = field(default_factory=dict)
    counts: dict = field(default_factory=dict)   # op counts from the reader
    warnings: list = field(default_factory=list)  # e.g. "trace cut short ..."
    path: str | None = None
    reservations: pd.DataFrame = field(default_factory=lambda: empty_table(RESERVATION_COLUMNS))
    frames: pd.DataFrame = field(default_factory=empty_frames)
    stacks: pd.DataFrame = field(default_factory=empty_stacks)
    gpu_activity: pd.DataFrame = field(default_factory=lambda: empty_table(GPU_ACTIVITY_COLUMNS))
    applied: pd.DataFrame = field(default_factory=lambda: empty_table(APPLY_COLUMNS))
    graph_nodes: pd.DataFrame = field(default_factory=lambda: empty_table(GRAPH_NODE_COLUMNS))
    graph_memory: pd.DataFrame = field(default_factory=lambda: empty_table(GRAPH_MEMORY_COLUMNS))
    swapped: pd.DataFrame = field(default_factory=lambda: empty_table(SWAP_COLUMNS))
    _derived: dict = field(default_factory=dict, init=False, repr=False, compare=False)

    def derived(self, key, compute):
        """``compute()``, computed once per ``key`` on this trace (a derived table: iterations,
        access intervals, ...).  ``key`` is hashable and starts with the computing module's name,
        e.g. ``("iterations", pid, ...)``.  A trace is immutable once loaded; a table replaced
        afterwards (``trace.blocks = ...``) drops what was derived before.  The value is shared:
        callers must not modify it in place."""
        memo = self._derived
        if memo.get(_OWNER_KEY, id(self)) != id(self):     # a copy.copy() of a trace: a memo of its own
            memo = self._derived = {}
        seen = memo.get(_TABLES_KEY)
        if seen is None or any(t is not getattr(self, n) for t, n in zip(seen, _DERIVED_FROM)):
            memo.clear()
            memo[_OWNER_KEY] = id(self)
            memo[_TABLES_KEY] = tuple(getattr(self, n) for n in _DERIVED_FROM)
        value = memo.get(key, _MISSING)   # one read: a forget() on another thread may drop the key
        if value is not _MISSING:
            return value
        # threads (the report's side and swap threads) asking for one key compute it once: the
        # first computes, the others wait for its value (a lock per key: a computation that asks
        # for other keys never waits on itself, as their dependencies are never circular).  The
        # value returned is the one read or computed under the lock, never memo[key] read again
        # after it, which a concurrent forget() may have dropped meanwhile.
        lock = memo.setdefault(_LOCKS_KEY, {}).setdefault(key, threading.Lock())   # atomic setdefault
        with lock:
            value = memo.get(key, _MISSING)
            if value is _MISSING:
                value = memo[key] = compute()
        return value

    def forget(self, module: str) -> None:
        """Drop what ``module`` derived from this trace (the keys starting with that name), to
        give its memory back once no later step needs it; asked again, it is computed again."""
        for k in [k for k in list(self._derived) if isinstance(k, tuple) and k and k[0] == module]:
            self._derived.pop(k, None)

    def forget_all(self) -> None:
        """Drop everything derived from this trace (:meth:`forget` of every module): a command done
        with one trace before it reads the next (``diff A B``) gives that memory back."""
        for k in [k for k in list(self._derived) if isinstance(k, tuple) and k]:
            self._derived.pop(k, None)

    def process_view(self, pid: int | None) -> "Trace":
        """This trace restricted to one process's blocks (a shallow copy, with a memo of its
        own); the trace itself when ``pid`` is None or every block is that process's."""
        mine = self.blocks["pid"].to_numpy() == pid
        if pid is None or mine.all():
            return self
        import copy
        view = copy.copy(self)
        view.blocks = self.blocks[mine]
        return view

    @classmethod
    def from_tables(cls, blocks=None, accesses=None, launches=None, copies=None, hints=None,
                    failures=None, markers=None, processes=None, nvml=None, kernels=None,
                    meta=None, counts=None, reservations=None, frames=None, stacks=None,
                    gpu_activity=None) -> "Trace":
        """Build a Trace from (partial) tables; missing columns/tables are filled."""
        b = conform(blocks, BLOCK_COLUMNS) if blocks is not None else empty_table(BLOCK_COLUMNS)
        if blocks is not None and len(b) and "counts_device" not in blocks:
            b["counts_device"] = b["kind"].astype(str).isin(DEVICE_KINDS)
        if blocks is not None and len(b) and "freed" not in blocks:
            b["freed"] = True
        return cls(
            blocks=b,
            accesses=conform(accesses, ACCESS_COLUMNS),
            launches=conform(launches, LAUNCH_COLUMNS),
            copies=conform(copies, COPY_COLUMNS),
            hints=conform(hints, HINT_COLUMNS),
            failures=conform(failures, FAILURE_COLUMNS),
            markers=conform(markers, MARKER_COLUMNS),
            processes=conform(processes, PROCESS_COLUMNS),
            nvml=conform(nvml, NVML_COLUMNS),
            kernels=list(kernels or []),
            meta=dict(meta or {}),
            counts=dict(counts or {}),
            reservations=conform(reservations, RESERVATION_COLUMNS),
            frames=conform_frames(frames),
            stacks=conform_stacks(stacks),
            gpu_activity=conform(gpu_activity, GPU_ACTIVITY_COLUMNS),
        )

    # ---- small conveniences shared by analyses -------------------------------------------
    @property
    def pids(self) -> list[int]:
        pids = set(self.blocks["pid"].unique().tolist()) | set(self.processes["pid"].tolist())
        return sorted(int(p) for p in pids)

    @property
    def main_pid(self) -> int | None:
        """The process with the most allocations (the training loop, usually)."""
        if len(self.blocks) == 0:
            return self.pids[0] if self.pids else None
        col = self.blocks["pid"].to_numpy()       # blocks per process, a piece at a time
        counts: dict = {}
        for lo, hi in spans(len(col), piece_rows()):
            piece = col[lo:hi]
            if (piece == piece[0]).all():        # one process in the piece (the usual case): no sort
                u, c = piece[:1], np.array([len(piece)])
            else:
                u, c = np.unique(piece, return_counts=True)
            for p, k in zip(u.tolist(), c.tolist()):
                counts[p] = counts.get(p, 0) + k
            release(col, lo, hi)
        best = max(counts.values())
        top = [p for p, k in counts.items() if k == best]
        if len(top) == 1:
            return int(top[0])
        return int(self.blocks["pid"].value_counts().idxmax())     # a tie: pandas' own choice

    @property
    def device_blocks(self) -> pd.DataFrame:
        return self.blocks[self.blocks["counts_device"]]

    @property
    def end_ns(self) -> int:
        cols = [self.blocks["t_free"], self.blocks["t_alloc"], self.launches["t"], self.accesses["t"]]
        vals = [maximum(c.to_numpy()) for c in cols if len(c)]     # in pieces, the mapped pages given back
        return max(vals) if vals else 0

    @property
    def duration_ns(self) -> int:
        """How long the run took: from the start of capture (``t0``) to the program's end as the
        trailer recorded it; for a trace cut short (no trailer), to its last event.  The one
        duration every output shows (summary, report, compare)."""
        tr = self.meta.get("trailer") or {}
        end, t0 = tr.get("end_ns"), self.meta.get("t0_ns")
        if end is not None and t0 is not None:
            return max(int(end) - int(t0), self.end_ns)
        return self.end_ns

    def summary_line(self) -> str:
        return (f"{len(self.blocks)} blocks, {len(self.accesses)} accesses, "
                f"{len(self.launches)} launches, {len(self.processes)} processes")


def live_bytes_curve(blocks: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """Step curve of live device bytes over time: (t_ns, live_bytes) after each event.

    Frees at the same instant as allocs are applied first (an address reused at
    once does not count twice)."""
    b = blocks[blocks["counts_device"]] if "counts_device" in blocks else blocks
    if len(b) == 0:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    freed = b["freed"].to_numpy(bool)
    size = counted_bytes(b)
    t = np.concatenate([b["t_free"].to_numpy(np.int64)[freed], b["t_alloc"].to_numpy(np.int64)])
    d = np.concatenate([-size[freed], size])
    order = event_order(t, d, int(freed.sum()))  # at equal t, negative deltas first
    return t[order], np.cumsum(d[order])


def peak_live_bytes(blocks: pd.DataFrame) -> int:
    _, live = live_bytes_curve(blocks)
    return int(live.max()) if len(live) else 0


def live_events(trace: Trace) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(t, delta, block row) of the allocation and free of every device block of ``trace.blocks``,
    in :func:`live_bytes_curve`'s order (computed once per trace): ``cumsum(delta)`` is the live
    device bytes curve, and ``cumsum(delta * mask[row])`` that of any subset of the blocks.
    Full-length arrays (24 bytes an event): the streamed analyses read :func:`.live.live_order` in
    pieces instead (:func:`peak_live_bytes_of`, :func:`.live.scan`)."""
    def compute():
        code = live_order(trace)
        b = trace.blocks
        ta, tf, size = b["t_alloc"].to_numpy(), b["t_free"].to_numpy(), counted_bytes(b)
        n = len(code)
        t, d, r = np.empty(n, np.int64), np.empty(n, np.int64), np.empty(n, np.int64)
        for lo, hi in spans(n):
            c = code[lo:hi]
            free = c < 0
            rows = np.where(free, ~c, c)
            r[lo:hi] = rows
            t[lo:hi] = np.where(free, tf[rows], ta[rows])
            dd = d[lo:hi]
            np.take(size, rows, out=dd)
            np.negative(dd, out=dd, where=free)
        return t, d, r
    return trace.derived(("model", "live_events"), compute)


def peak_live_bytes_of(trace: Trace, mask: np.ndarray | None = None) -> int:
    """``peak_live_bytes(trace.blocks[mask])`` without sorting again: one pass over the trace's live
    events in pieces (:func:`.live.scan`)."""
    return peak_of(trace, mask)
