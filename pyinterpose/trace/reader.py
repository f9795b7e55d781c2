"""Read a trace file into a :class:`~pyinterpose.trace.model.Trace`.

Two steps: :func:`read_file` parses chunks (tolerating a file cut short by a
crash), :func:`build_trace` turns the raw records into the pandas tables
documented in :mod:`pyinterpose.trace.model`.  Everything is vectorised: a
10-million-event trace loads in seconds.
"""
from __future__ import annotations

import errno
import json
import mmap
import os
import zlib
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from . import records
from .pages import release
from ..errors import PyinterposeError, TraceError
from ..installation import NATIVE, not_built_message
from . import chunking
from . import colcache       # the memory-mapped columnar cache beside the trace (--no-cache: off)
from . import context
from . import failures as failure_details
from . import format as fmt
from . import gpuclock
from . import graphs
from . import progress as progress_bar   # a module: tests replace progress.bar
from . import stacks as site_tables
from . import vmm
from .model import (ACCESS_COLUMNS, APPLY_COLUMNS, BLOCK_COLUMNS, COPY_COLUMNS, DEVICE_KINDS, FAILURE_COLUMNS,
                    KINDS, HINT_COLUMNS, LAUNCH_COLUMNS, MARKER_COLUMNS, NVML_COLUMNS, PROCESS_COLUMNS,
                    SWAP_COLUMNS, COLUMN_DEFAULTS, Trace, conform, empty_table)


@dataclass
class RawTrace:
    meta: dict
    events: dict = field(default_factory=dict)      # pid -> list[np.ndarray of pi_event]
    processes: list = field(default_factory=list)
    nvml: list = field(default_factory=list)        # list of {"columns", "rows"}
    trailer: dict | None = None
    warnings: list = field(default_factory=list)
    records: np.ndarray | None = None               # every pid's events, pids ascending (events[p] are views)


def _open(path: str):
    try:
        return open(path, "rb")
    except FileNotFoundError:
        raise TraceError(f"{path}: no such file")
    except IsADirectoryError:
        raise TraceError(f"{path}: is a directory, not a trace file")
    except OSError as e:
        raise TraceError(f"{path}: cannot read ({e.strerror or e})")


class _RecordBuffer:
    """Event records appended chunk by chunk into one growing byte buffer.  The buffer
    is reserved large (untouched pages cost nothing) and grown with realloc (mremap on
    Linux: no copy), so the records exist once in memory, never as a list of chunks."""

    def __init__(self, dtype: np.dtype, hint_bytes: int):
        self.dtype, self.item = dtype, dtype.itemsize
        self.buf = np.empty(max(hint_bytes, 1 << 16), np.uint8)
        self.used = 0
        self.chunks: list[tuple[int, int, int]] = []     # (pid, first record, count)

    def append(self, pid: int, data, count: int) -> None:
        n = count * self.item
        if self.used + n > len(self.buf):
            self.buf.resize(max(2 * len(self.buf), self.used + n), refcheck=False)
        self.buf[self.used:self.used + n] = np.frombuffer(data, np.uint8, count=n, offset=fmt.EVENTS_HEAD.size)
        self.chunks.append((pid, self.used // self.item, count))
        self.used += n

    def by_pid(self) -> tuple[np.ndarray, dict]:
        """(records with the pids ascending, file order within a pid; pid -> [its records])."""
        self.buf.resize(self.used, refcheck=False)
        recs = self.buf.view(self.dtype)
        pids = [c[0] for c in self.chunks]
        if any(b < a for a, b in zip(pids, pids[1:])):       # interleaved processes: regroup (one copy)
            order = sorted(range(len(self.chunks)), key=lambda i: (pids[i], i))
            recs = np.concatenate([recs[self.chunks[i][1]:self.chunks[i][1] + self.chunks[i][2]] for i in order])
            self.chunks = [(pids[i], 0, self.chunks[i][2]) for i in order]
        events, pos = {}, 0
        for p in sorted(set(pids)):
            n = sum(c[2] for c in self.chunks if c[0] == p)
            events[p] = [recs[pos:pos + n]]
            pos += n
        self.buf = None
        return recs, events


def read_file(path: str) -> RawTrace:
    """Parse the chunks in one pass over a read-only mapping of the file: each EVENTS
    chunk is checked and inflated straight into one record buffer, so neither the file
    nor a list of chunk arrays is ever held in memory beside the records.  (``load``
    does not keep the records: it streams them through the native record pass.)"""
    rb = None

    def sink(size):
        nonlocal rb
        rb = _RecordBuffer(records.event_dtype(), min(8 * size, 1 << 30))
        return rb.append

    raw = _read(path, sink, threads=False)
    if rb is not None:
        raw.records, raw.events = rb.by_pid()
    raw.meta["complete"], raw.meta["incomplete_reason"] = completeness(raw, path)
    return raw


def _map(path: str):
    with _open(path) as f:
        size = os.fstat(f.fileno()).st_size
        if size == 0:
            raise TraceError(f"{path}: empty file (not a pyinterpose trace)")
        try:
            mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        except (OSError, ValueError) as e:
            raise TraceError(f"{path}: cannot read ({e})")
    # the mapping goes away with the last view of it (never closed by hand: a view held by a
    # traceback would turn a clear TraceError into a BufferError)
    return memoryview(mm), size


def _scan(path: str, data: memoryview, size: int) -> tuple[list, str | None]:
    """The chunks of the file, (type, payload start, length, crc, flags) each, up to the first
    one that is cut short or not a chunk; and the warning saying so (None: none)."""
    if size < fmt.HEADER.size or data[:8] != fmt.MAGIC:
        raise TraceError(f"{path}: not a pyinterpose trace (bad magic)")
    _, version, _ = fmt.HEADER.unpack_from(data, 0)
    if version > fmt.VERSION:
        raise TraceError(f"{path}: trace format version {version} is newer than this pyinterpose "
                         f"understands ({fmt.VERSION}); upgrade pyinterpose")
    chunks = []
    pos = fmt.HEADER.size
    unpack, head, cmagic = fmt.CHUNK.unpack_from, fmt.CHUNK.size, fmt.CHUNK_MAGIC
    while pos < size:
        if pos + head > size:
            return chunks, (f"trace cut short at byte {pos} (partial chunk header): read up to the last "
                            "complete chunk")
        magic, ctype, length, crc, flags = unpack(data, pos)
        if magic != cmagic:
            return chunks, f"corrupt chunk at byte {pos}: read up to the last complete chunk"
        start = pos + head
        if start + length > size:
            return chunks, (f"trace cut short at byte {pos} (partial {fmt.CHUNK_NAMES.get(ctype, ctype)} "
                            "chunk): read up to the last complete chunk")
        chunks.append((ctype, start, length, crc, flags))
        pos = start + length
    return chunks, None


def _inflate_zlib(payload) -> bytes:
    """zlib.decompress(payload), less the Adler-32 check of the inflated bytes (the chunk's CRC-32
    already vouches for the stored ones): the zlib header is checked by hand, the deflate stream
    inflated raw.  A third faster on 640 MB of records."""
    if len(payload) < 2:
        raise zlib.error("no zlib header")
    cmf, flg = payload[0], payload[1]
    if cmf & 0x0F != 8 or cmf >> 4 > 7 or (cmf * 256 + flg) % 31 or flg & 0x20:
        raise zlib.error("bad zlib header")
    return zlib.decompress(payload[2:], -15)


def _inflate(data: memoryview, batch: list) -> tuple[list, str | None]:
    """Check and inflate a run of chunks: ([(type, payload)], the warning of the first bad one or None).
    Runs on worker threads (zlib releases the GIL)."""
    out = []
    for ctype, start, length, crc, flags in batch:
        payload = data[start:start + length]
        if zlib.crc32(payload) != crc:
            return out, (f"checksum mismatch in chunk at byte {start - fmt.CHUNK.size}: "
                         "read up to the last good chunk")
        if flags & fmt.FLAG_ZLIB:
            try:
                payload = _inflate_zlib(payload)
            except zlib.error:
                return out, (f"corrupt compressed chunk at byte {start - fmt.CHUNK.size}: "
                             "read up to the last good chunk")
        if ctype == fmt.EVENTS and (len(payload) < fmt.EVENTS_HEAD.size or len(payload) < fmt.EVENTS_HEAD.size
                                    + fmt.EVENTS_HEAD.unpack_from(payload, 0)[1] * RECORD_SIZE):
            return out, (f"corrupt events chunk at byte {start - fmt.CHUNK.size} (fewer records than it says): "
                         "read up to the last good chunk")
        out.append((ctype, payload))
    return out, None


RECORD_SIZE = 64          # struct pi_event (checked against the dtype at first use)
_BATCH_BYTES = 1 << 20    # compressed bytes a worker inflates at a time


def _batches(chunks: list):
    batch, nbytes = [], 0
    for c in chunks:
        batch.append(c)
        nbytes += c[2]
        if nbytes >= _BATCH_BYTES:
            yield batch
            batch, nbytes = [], 0
    if batch:
        yield batch


def _inflated(data: memoryview, chunks: list, threads: bool):
    """(type, payload) of each chunk in file order, then (None, warning) at the first bad one.
    With ``threads``, runs of chunks are checked and inflated on two worker threads while the
    caller consumes the previous ones."""
    if not threads or len(chunks) < 64 or (os.cpu_count() or 1) < 2:
        for batch in _batches(chunks):
            out, bad = _inflate(data, batch)
            yield from out
            if bad:
                yield None, bad
                return
        return
    from collections import deque
    from concurrent.futures import ThreadPoolExecutor

    pool = ThreadPoolExecutor(max_workers=2, thread_name_prefix="pyinterpose-inflate")
    pending: deque = deque()
    try:
        it = iter(_batches(chunks))
        for batch in it:
            pending.append(pool.submit(_inflate, data, batch))
            if len(pending) >= 4:
                break
        while pending:
            out, bad = pending.popleft().result()
            nxt = next(it, None)
            if nxt is not None:
                pending.append(pool.submit(_inflate, data, nxt))
            yield from out
            del out
            if bad:
                yield None, bad
                return
    finally:
        for f in pending:
            f.cancel()
        pool.shutdown(wait=True)


def _read(path: str, sink, threads: bool, on_progress=None) -> RawTrace:
    """Every chunk of the file in order: JSON chunks into a RawTrace, the records of each EVENTS
    chunk to ``feed(pid, payload, count)`` where ``feed = sink(file size)`` (called once the
    metadata chunk is read).  Stops at the first bad chunk, with a warning."""
    data, size = _map(path)
    chunks, scan_warning = _scan(path, data, size)
    raw = None
    feed = None
    warnings = []
    unpack_events = fmt.EVENTS_HEAD.unpack_from
    tick = _ticker(on_progress, chunks, size)
    drop = _page_dropper(data, chunks)
    for ctype, payload in _inflated(data, chunks, threads):
        tick()
        drop()
        if ctype is None:
            warnings.append(payload)
            break
        if raw is None:
            if ctype != fmt.META:
                raise TraceError(f"{path}: not a pyinterpose trace (no metadata chunk)")
            raw = RawTrace(meta=json.loads(bytes(payload)))
            feed = sink(size)
            continue
        if ctype == fmt.EVENTS:
            pid, count = unpack_events(payload, 0)
            feed(pid - (1 << 32) if pid >= 1 << 31 else pid, payload, count)   # the u32 pid as int32
        elif ctype == fmt.PROCESS:
            raw.processes.append(json.loads(bytes(payload)))
        elif ctype == fmt.NVML:
            raw.nvml.append(json.loads(bytes(payload)))
        elif ctype == fmt.TRAILER:
            raw.trailer = json.loads(bytes(payload))
        elif ctype in (fmt.WINDOW, fmt.HISTORY):   # capture windows: the trace's metadata (trace/window.py)
            raw.meta.setdefault("window" if ctype == fmt.WINDOW else "history", []).append(json.loads(bytes(payload)))
        # unknown chunk types from newer minor writers are skipped
        del payload
    else:
        if scan_warning:
            warnings.append(scan_warning)
    del data
    if raw is None:
        raise TraceError(f"{path}: not a pyinterpose trace (no metadata chunk)")
    raw.warnings = warnings
    return raw


def _page_dropper(data: memoryview, chunks: list, every: int = 1024):
    """A function to call once per chunk consumed: every ``every`` chunks it gives back the pages of
    the file mapping read so far (MADV_DONTNEED: they count in the reader's resident memory, the whole
    file by the end, 1 GB at 100 M events; a page touched again is read again from the file)."""
    mm = data.obj if isinstance(data.obj, mmap.mmap) else None
    if mm is None or not hasattr(mm, "madvise") or not hasattr(mmap, "MADV_DONTNEED"):
        return lambda: None
    state = [0, 0]        # chunks consumed, bytes given back
    try:                  # _scan read every chunk's header: that touched nearly every page of the file
        mm.madvise(mmap.MADV_DONTNEED, 0, len(mm) // mmap.PAGESIZE * mmap.PAGESIZE)
    except (OSError, ValueError):
        pass

    def drop():
        state[0] += 1
        n = state[0]
        if n % every == 0 and n < len(chunks):
            upto = chunks[n - 1][1] // mmap.PAGESIZE * mmap.PAGESIZE
            if upto > state[1]:
                try:
                    mm.madvise(mmap.MADV_DONTNEED, state[1], upto - state[1])
                except (OSError, ValueError):
                    return
                state[1] = upto
    return drop


def _ticker(on_progress, chunks: list, size: int):
    """A function to call once per chunk consumed: every 1024 chunks it tells ``on_progress`` the
    fraction of the file read (nothing without ``on_progress``)."""
    if on_progress is None or not chunks:
        return lambda: None
    n = [0]

    def tick():
        n[0] += 1
        if n[0] % 1024 == 0 and n[0] <= len(chunks):
            on_progress(chunks[n[0] - 1][1] / max(size, 1))
    return tick


def being_written(path: str) -> bool:
    """True while ``pyinterpose run`` still has the file open for writing (it holds an exclusive flock)."""
    import fcntl

    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    except OSError:
        return False
    finally:
        os.close(fd)
    return False


def completeness(raw: RawTrace, path: str | None) -> tuple[bool, str]:
    """(complete, reason): the trace holds every event of every process of the run, or why not.

    Adds a warning for each reason that the chunk parser did not already report."""
    reasons = []
    if raw.warnings:
        reasons.append(raw.warnings[0])
    tr = raw.trailer
    if tr is None:
        if path and being_written(path):
            why = "the trace is still being written (the capture is running): it holds what was recorded so far"
        else:
            why = ("trace has no trailer: the capture did not finish (crash, kill, or its disk filled); "
                   "everything recorded before that is here")
        reasons.append(why)
        if not raw.warnings:
            raw.warnings.append(why)
    else:
        extra = []
        unrec = tr.get("unrecorded") or []
        if unrec:
            first = unrec[0]
            extra.append(f"{len(unrec)} process{'es' if len(unrec) != 1 else ''} not recorded "
                         f"(pid {first.get('pid')}: {first.get('reason', '?')})")
        lost = int(tr.get("events_lost") or 0)
        if lost:
            extra.append(f"{lost} events lost")
        if tr.get("capture_error"):
            extra.append(f"capture error: {tr['capture_error']}")
        for e in extra:
            raw.warnings.append(e)
        reasons += extra
    return (not reasons), "; ".join(reasons)


# --------------------------------------------------------------------------------------------
def _strings(ev: np.ndarray, op: np.ndarray) -> dict[int, str]:
    out = {}
    idx = np.flatnonzero(op == records.OP.STRING)
    if len(idx) == 0:
        return out
    raw = ev.view(np.uint8).reshape(len(ev), ev.dtype.itemsize)
    for i in idx:
        n = int(ev["size"][i])
        k = -(-n // records.STR_PAYLOAD)
        text = raw[i + 1:i + 1 + k, 16:48].tobytes()[:n]
        out[int(ev["aux"][i])] = text.decode(errors="replace")
    return out


class _Split:
    """The native record pass (native/reader): records are fed chunk by chunk, in file order; the
    tables it keeps come back as numpy arrays over its own buffers (no copy)."""

    def __init__(self):
        try:
            from .._core import ffi, lib  # lazy: compiled cffi module, absent from an unbuilt tree
            lib.pi_split_new      # a _core built before the reader's C pass has none
        except (ImportError, AttributeError):
            raise PyinterposeError(not_built_message(os.path.join(os.path.dirname(NATIVE),
                                                                  "_core (cffi extension, with the trace reader)")))
        if records.event_dtype().itemsize != RECORD_SIZE:
            raise TraceError(f"record size {records.event_dtype().itemsize} != {RECORD_SIZE}")
        self.ffi, self.lib = ffi, lib
        self._run: list = []
        self.spill_dir: str | None = None
        s = lib.pi_split_new()
        if s == ffi.NULL:
            raise MemoryError("cannot allocate the reader's state")
        self.s = ffi.gc(s, lib.pi_split_free)
        if ffi.sizeof("pi_acc") != ACC_DTYPE.itemsize:
            raise TraceError(f"access record size {ffi.sizeof('pi_acc')} != {ACC_DTYPE.itemsize}")

    def spill(self, folder: str) -> bool:
        """Before the first feed: every record table but the allocations, and the accesses, go to
        files in ``folder`` during the pass (False: they could not be made; all stays in memory)."""
        if self.lib.pi_split_spill(self.s, os.fsencode(folder)) < 0:
            return False
        self.spill_dir = folder
        return True

    FEED_RUN = 256      # chunks handed to the C pass in one call

    def feed(self, pid: int, payload, count: int) -> None:
        """The records of one EVENTS chunk (kept, and passed on with the next ones by
        :meth:`flush`: one call into C, one release of the GIL, per run of chunks instead of
        per 14 kB chunk, which cost a thread handoff with the inflating threads each time)."""
        if count:
            self._run.append((payload, count, pid))
            if len(self._run) >= self.FEED_RUN:
                self.flush()

    def flush(self) -> None:
        """Pass the chunks kept by :meth:`feed` to the C pass, in the order they came."""
        run, self._run = self._run, []
        if not run:
            return
        ffi, head = self.ffi, fmt.EVENTS_HEAD.size
        k = len(run)
        ptrs, counts, pids = ffi.new("void *[]", k), ffi.new("int64_t[]", k), ffi.new("int32_t[]", k)
        held = []
        for i, (payload, count, pid) in enumerate(run):
            buf = ffi.from_buffer(payload)
            held.append(buf)
            ptrs[i], counts[i], pids[i] = buf + head, count, pid
        if self.lib.pi_split_feed_many(self.s, ptrs, counts, pids, k) < 0:
            self.failed()

    def failed(self):
        """The pass stopped: out of memory, or (spilling) a spill file could not be written."""
        err = self.ffi.errno
        if self.spill_dir and err and err != errno.ENOMEM:
            raise TraceError(f"cannot write the reader's temporary files in {self.spill_dir} "
                             f"({os.strerror(err)}); PYINTERPOSE_SPILL_MIN_BYTES sets the trace size from which "
                             "they are used, TMPDIR where they go without the cache")
        raise MemoryError("out of memory reading the trace")

    def feed_records(self, pid: int, recs: np.ndarray) -> None:
        self.flush()                            # file order: the chunks kept by feed() first
        if len(recs) and self.lib.pi_split_feed(self.s, self.ffi.from_buffer(np.ascontiguousarray(recs)),
                                                len(recs), pid) < 0:
            self.failed()

    def _take(self, owner, name: str, n: int, dtype) -> np.ndarray:
        """The C buffer ``owner.name`` as an array of n items; numpy owns it from now on."""
        dtype = np.dtype(dtype)
        p = getattr(owner, name)
        if n == 0 or p == self.ffi.NULL:
            return np.zeros(0, dtype)
        setattr(owner, name, self.ffi.NULL)
        g = self.ffi.gc(p, self.lib.pi_free)
        return np.frombuffer(self.ffi.buffer(g, n * dtype.itemsize), dtype)

    def table(self, name: str) -> tuple[np.ndarray, np.ndarray]:
        """(records, pid) of one of the record tables (read from its files when spilled: the files
        are removed)."""
        t = getattr(self.s, name)
        n = int(t.n)
        if self.spill_dir and t.rec == self.ffi.NULL:
            out = tuple(self._spilled(f"{name}.{ext}", dt, n)
                        for ext, dt in (("rec", records.event_dtype()), ("pid", np.int32)))
        else:
            out = (self._take(t, "rec", n, records.event_dtype()), self._take(t, "pid", n, np.int32))
        t.n = t.cap = 0
        return out

    def _spilled(self, fname: str, dtype, n: int) -> np.ndarray:
        """A spilled table's file, memory-mapped (copy-on-write) and removed (the map lives on): its
        pages are the file's, which the passes over it give back a piece at a time (:func:`_fields`)."""
        path = os.path.join(self.spill_dir, fname)
        dtype = np.dtype(dtype)
        try:
            size = os.path.getsize(path)
            if size < n * dtype.itemsize:
                raise TraceError(f"{path}: {size // dtype.itemsize} records of {n} read back")
            a = np.zeros(0, dtype)
            if n:
                with open(path, "rb") as f:
                    m = mmap.mmap(f.fileno(), n * dtype.itemsize, access=mmap.ACCESS_COPY)   # writable, private
                a = np.ndarray((n,), dtype, buffer=m)      # its base the map (pages.release finds it)
        finally:
            os.remove(path)
        return a

    def access_chunks(self, rows: int):
        """The pi_acc records, in file order, ``rows`` at a time (from the spill file, or from the
        pass's buffer, which numpy then owns and frees at the end)."""
        s = self.s
        n = int(s.a_n)
        if self.spill_dir and s.acc == self.ffi.NULL:
            path = os.path.join(self.spill_dir, "acc.bin")
            with open(path, "rb") as f:
                left = n
                while left:
                    a = np.fromfile(f, dtype=ACC_DTYPE, count=min(rows, left))
                    if not len(a):
                        raise TraceError(f"{path}: access records missing")
                    left -= len(a)
                    yield a
            os.remove(path)
        else:
            a = self._take(s, "acc", n, ACC_DTYPE)
            for lo in range(0, n, rows):
                yield a[lo:lo + rows]
        s.a_n = s.a_cap = 0


RECORD_PIECE = 1 << 20    # records copied out of a spilled (mapped) table at a time: 64 MiB of pages


class _Columns:
    """Fields of a record table copied out as contiguous arrays (:func:`_fields`): indexed by field
    name as the records are, ``len`` their rows; an index array or slice selects rows of every
    field (so :func:`_by_pid` reorders it as it does records)."""

    def __init__(self, cols: dict, n: int):
        self.cols, self.n = cols, n

    def __getitem__(self, k):
        if isinstance(k, str):
            return self.cols[k]
        cols = {c: a[k] for c, a in self.cols.items()}
        return _Columns(cols, len(next(iter(cols.values()))) if cols else 0)

    def __len__(self) -> int:
        return self.n


def _fields(T: np.ndarray, names) -> _Columns:
    """The fields ``names`` of the records ``T``, each copied out contiguous.  From a spilled table
    (a file map: :meth:`_Split._spilled`) a piece of RECORD_PIECE records at a time, each piece's
    pages given back once copied (``pages.release``), so that the 64-byte records are never all
    resident beside the columns made of them."""
    n = len(T)
    out = {k: np.empty(n, T.dtype[k]) for k in names}
    for lo in range(0, n, RECORD_PIECE):
        hi = min(n, lo + RECORD_PIECE)
        piece = T[lo:hi]
        for k in names:
            out[k][lo:hi] = piece[k]
        release(T, lo, hi)
    return _Columns(out, n)


_CTYPES = {"<i4": "int32_t[]", "<i8": "int64_t[]", "|i1": "int8_t[]", "<u2": "uint16_t[]"}
# struct pi_acc (native/reader/reader.h): an ACCESS record with what it needs from its owner
ACC_DTYPE = np.dtype([("ref", "<i8"), ("seq", "<i8"), ("t", "<i8"), ("pid", "<i4"), ("row", "<i4"),
                      ("launch", "<i4"), ("flags", "<u2"), ("op", "u1"), ("pad", "u1")])
ACC_CHUNK_ROWS = 1 << 20     # accesses resolved at a time (at most; trace/chunking.py's knob when smaller)


def _owning(df: pd.DataFrame) -> pd.DataFrame:
    """``df`` with each column that is a strided view into a record array (a field of the 64-byte
    records) copied out: the records are then freed once the table is built, not kept alive by its
    narrowest column.  In place; returns ``df``."""
    for c in df.columns:
        v = df[c].to_numpy() if isinstance(df[c].dtype, np.dtype) else None
        if v is not None and v.ndim == 1 and len(v) > 1 and v.strides[0] != v.itemsize:
            df[c] = np.ascontiguousarray(v)
    return df


def _in_block_order(t: np.ndarray, pid: np.ndarray, seq: np.ndarray) -> bool:
    """Whether rows are in (t, pid, seq) order (ties in seq kept): allocations come in almost that
    order, so the blocks' order is checked before sorting; a piece at a time (no diff arrays of the
    allocations' length)."""
    n = len(t)
    for lo in range(0, max(n - 1, 0), RECORD_PIECE):
        hi = min(n, lo + RECORD_PIECE + 1)
        dt, dp, ds = np.diff(t[lo:hi]), np.diff(pid[lo:hi]), np.diff(seq[lo:hi])
        if not bool(np.all((dt > 0) | ((dt == 0) & ((dp > 0) | ((dp == 0) & (ds >= 0)))))):
            return False
    return True


def _by_pid(pid: np.ndarray, *cols):
    """cols reordered by pid, file order within a pid (only needed when processes' chunks interleave)."""
    order = np.argsort(pid, kind="stable")
    return (pid[order],) + tuple(c[order] for c in cols)


def build_trace(raw: RawTrace, path: str | None = None) -> Trace:
    """The tables of a trace read whole by :func:`read_file` (``load`` streams instead)."""
    sp = _Split()
    for p in sorted(raw.events):
        for recs in raw.events[p]:
            sp.feed_records(p, recs)
    return _build(sp, raw, path)


class _Tables:
    """Where each table goes once built: kept in memory, or (``writer``: the first read of a trace
    whose cache is written) written to the cache and dropped, to be mapped back at the end.  So the
    first read never holds every table at once."""

    def __init__(self, writer=None):
        self.writer = writer
        self.kept: dict = {}

    def put(self, name: str, df: pd.DataFrame) -> None:
        if self.writer is not None and self.writer.table(name, df):
            return
        self.kept[name] = df           # no cache, or a table the cache cannot hold

    def put_mapped(self, name: str, df: pd.DataFrame) -> pd.DataFrame:
        """put(), then the table as it will be read: memory-mapped from the cache when written there."""
        self.put(name, df)
        return self.kept[name] if name in self.kept else self.writer.mapped(name)

    def update(self, name: str, df: pd.DataFrame, columns: list) -> None:
        """``columns`` of a table put before were set afresh in ``df`` (its put_mapped table)."""
        if name not in self.kept:
            self.writer.replace_columns(name, df, columns)

    def streamed(self, name: str, rows: int, columns: list) -> None:
        self.writer.streamed(name, rows, columns)

    def all(self) -> dict:
        """Every table put, the written ones memory-mapped from the cache being written."""
        out = dict(self.kept)
        if self.writer is not None:
            for name in self.writer.specs:
                if name not in out and self.writer.usable(name):
                    out[name] = self.writer.mapped(name)
        return out


class _TableColumns:
    """One table put a column at a time (the blocks: 24 columns, 1.5 GB at 100 M events, more than
    the read should hold at once).  With a writer (``out.writer``) each column is written to its
    file as it comes and dropped, and :meth:`finish` maps the table back; without one (or where a
    column cannot be cached) the columns are kept and made the DataFrame the in-memory read makes.
    ``columns``: the table's model (name -> dtype: each column is given its dtype as
    ``model.conform`` would); ``order``: every column's name, in the table's order."""

    def __init__(self, out: _Tables, name: str, n: int, columns: dict, order: list):
        self.out, self.name, self.n, self.columns, self.order = out, name, n, columns, list(order)
        self.writer = out.writer if n else None      # an empty table: conform()'s empty columns
        self.entries: dict = {}
        self.kept: dict = {}

    def add(self, c: str, values) -> None:
        d = self.columns.get(c)
        if d is not None and str(values.dtype) != d:
            values = pd.Series(values, copy=False).astype(d).array
            values = values.to_numpy() if d != "category" else values
        if self.writer is not None:
            try:
                e = self.writer.one_column(self.name, self.order.index(c), c, pd.Series(values, copy=False))
            except OSError:
                e = None
            if e is not None:
                self.entries[c] = e
                return
            self._in_memory()
        self.kept[c] = values

    def _in_memory(self) -> None:
        """A column the cache cannot hold: the table is kept in memory (those written read back),
        and the cache not finished (as ``Writer.table`` does for such a table)."""
        if self.entries:
            back = colcache._frame(self.writer.tmp, {"rows": self.n, "columns": list(self.entries.values())})
            for c in back.columns:
                self.kept[c] = np.array(back[c].to_numpy()) if isinstance(back[c].dtype, np.dtype) \
                    else back[c].array.copy()
            del back
            self.writer._unlink({"columns": list(self.entries.values())})
        self.writer.specs[self.name] = None
        self.writer, self.entries = None, {}

    def finish(self) -> pd.DataFrame:
        """The table: memory-mapped from its files, or in memory (then put as ``_Tables.put`` does)."""
        if self.writer is not None:
            self.out.streamed(self.name, self.n, [self.entries[c] for c in self.order])
            return self.out.writer.mapped(self.name)
        df = _owning(conform(pd.DataFrame({c: self.kept.pop(c) for c in self.order}, copy=False), self.columns))
        if self.out.writer is not None and self.out.writer.specs.get(self.name, 0) is None:
            self.out.kept[self.name] = df        # a column the cache could not hold
            return df
        self.out.put(self.name, df)
        return self.out.kept[self.name] if self.name in self.out.kept else self.out.writer.mapped(self.name)


class _AccessColumns:
    """The ``accesses`` table filled a chunk of rows at a time: into arrays of the table's dtypes
    (in memory), or appended to its column files in the cache being written (``out.writer``)."""

    NAMES = tuple(ACCESS_COLUMNS)      # block_id, pid, seq, t, kernel, op, flags, node

    def __init__(self, out: _Tables, n: int, op_cats: pd.Index, sorted_by_pid: bool):
        self.out, self.op_cats, self.sorted_by_pid, self.n = out, op_cats, sorted_by_pid, 0
        self.dtypes = {c: (np.dtype(np.int8) if d == "category" else np.dtype(d)) for c, d in ACCESS_COLUMNS.items()}
        self.writer = out.writer
        if self.writer is not None:
            self.files = {c: self.writer.column("accesses", i, self.dtypes[c]) for i, c in enumerate(self.NAMES)}
        else:
            self.arrays = {c: np.empty(n, self.dtypes[c]) for c in self.NAMES}

    def append(self, chunk: dict) -> None:
        k = len(chunk["pid"])
        chunk = dict(chunk, node=np.full(k, -1, self.dtypes["node"]))
        try:
            for c in self.NAMES:
                if self.writer is not None:
                    self.files[c].append(chunk[c])
                else:
                    self.arrays[c][self.n:self.n + k] = chunk[c]
        except OSError as e:
            raise _CacheWriteError(f"cannot write the table cache beside the trace ({e.strerror or e}); "
                             "--no-cache reads the trace without it")
        self.n += k

    def _entry(self, c: str, fname: str) -> dict:
        if ACCESS_COLUMNS[c] == "category":
            return {"name": c, "kind": "category", "file": fname, "categories": self.op_cats.tolist(),
                    "ordered": False, "cat_dtype": str(self.op_cats.dtype)}
        return {"name": c, "kind": "array", "file": fname}

    def finish(self) -> int:
        """The table is complete (regrouped by pid when processes' chunks interleave): kept in
        memory or recorded in the cache.  Returns its rows."""
        n = self.n
        if self.writer is not None:
            try:
                entries = [self._entry(c, self.files[c].close()) for c in self.NAMES]
                self.out.streamed("accesses", n, entries)
                if self.sorted_by_pid:
                    self._regroup_files(entries)
            except OSError as e:
                raise _CacheWriteError(f"cannot write the table cache beside the trace ({e.strerror or e}); "
                                 "--no-cache reads the trace without it")
            return n
        a = self.arrays
        for c in self.NAMES:
            a[c].resize(n, refcheck=False)
        if self.sorted_by_pid:
            order = np.argsort(a["pid"], kind="stable")
            for c in self.NAMES:
                a[c] = a[c][order]
            del order
        data = {c: a[c] for c in self.NAMES}
        data["op"] = pd.Categorical.from_codes(data["op"], self.op_cats)
        self.out.put("accesses", conform(pd.DataFrame(data, copy=False), ACCESS_COLUMNS))
        self.arrays = None
        return n

    def _regroup_files(self, entries: list) -> None:
        """Rewrite the column files in pid order (file order within a pid), one column at a time."""
        w = self.writer
        order = np.argsort(w.mapped("accesses")["pid"].to_numpy(), kind="stable")
        new = []
        for i, (c, e) in enumerate(zip(self.NAMES, entries)):
            col = colcache.load_npy(os.path.join(w.tmp, e["file"]), "r")
            f = w.column("accesses.g", i, self.dtypes[c])
            for lo in range(0, len(order), ACC_CHUNK_ROWS):
                f.append(col[order[lo:lo + ACC_CHUNK_ROWS]])
            del col
            new.append(self._entry(c, f.close()))
            os.remove(os.path.join(w.tmp, e["file"]))
        self.out.streamed("accesses", self.n, new)


def _build(sp: _Split, raw: RawTrace, path: str | None, writer=None) -> Trace:
    """The Trace from the native pass's tables: one step per table, each freeing its records and
    temporaries, and (``writer``) writing its table to the cache and dropping it."""
    if sp.lib.pi_split_finish(sp.s) < 0:
        sp.failed()
    out = _Tables(writer)
    b = _Builder(sp, raw)
    sites = site_tables.read_sites(b.side, b.side_pid, b.side_op, b.side_off, b.pids, b.strings,  # owners,
                                   int(b.meta.get("site_format") or site_tables.SITE_FORMAT))       # frames, stacks
    b.drop_sites()
    failures = b.failures()
    failure_details.attach(failures, b.side, b.side_pid, b.side_op, getattr(b.O, "MEMINFO", None), sites)
    blocks, row_block, never_freed = b.blocks(sites, out)   # with their call sites (then dropped: one row an
    blockmap = b.blockmap(blocks)                            # allocation); put in ``out``, mapped when written
    del blocks
    L, l_pid = sp.table("launch")
    L = _fields(L, ("op", "aux", "tid", "seq", "t_ns", "device", "stream", "api", "addr"))
    kernels, kid = b.kernels(L, l_pid)
    n_access, n_acc, unresolved_access = b.accesses(blockmap, row_block, kid, len(L), out)
    del row_block, blockmap
    launches, graph_launches, kid = b.launches(L, l_pid, kid, n_acc, kernels)
    del L, l_pid, n_acc
    launches = out.put_mapped("launches", launches)    # written (cache) before the device clock is read:
    copies = out.put_mapped("copies", b.copies())      # only their dev_start / dev_end are written again
    gpu_activity = b.gpu_activity(kernels, launches, copies, kid, graph_launches, out)
    del kid
    if len(gpu_activity):
        out.update("launches", launches, ["dev_start", "dev_end"])
        out.update("copies", copies, ["dev_start", "dev_end"])
    del gpu_activity, launches, copies
    out.put("hints", b.hints())
    markers = b.markers()
    out.put("failures", failures)
    out.put("markers", markers)
    out.put("applied", _applied(b.side, b.side_pid, b.side_op, b.col, b.tcol))
    out.put("swapped", _swapped(b.side, b.side_pid, b.side_op, b.col, b.tcol))
    out.put("processes", b.processes())
    out.put("graph_memory", graphs.graph_memory(b.side, b.side_pid, b.side_op, getattr(b.O, "GRAPH_MEM", None),
                                                b.t0))
    out.put("frames", sites.frames)
    out.put("stacks", sites.stacks)
    gd = np.flatnonzero(b.side_op == b.O.GRAPH_DEF)     # CUDA graphs' records, for the expansion below
    side, side_pid, side_op = b.side[gd], b.side_pid[gd], b.side_op[gd]
    b.side = b.side_pid = b.side_op = None
    del gd
    out.put("nvml", b.nvml())
    counts = b.counts(n_access, len(markers), len(failures), unresolved_access, never_freed)
    meta = dict(b.meta)
    meta["trailer"] = raw.trailer
    meta["capture_notes"] = sites.notes
    raw.warnings.extend(failure_details.interrupted_warnings(failures))
    del failures, markers
    tables = out.all()
    tr = Trace(kernels=kernels, meta=meta, counts=counts, warnings=list(raw.warnings), path=path,
               **{k: v for k, v in tables.items() if k not in ("reservations", "graph_nodes")})
    tr = vmm.join(tr)  # one logical block per VMM buffer (reserve + create + map)
    # CUDA graphs: captured calls out of the eager stream, every replay expanded (trace/graphs.py)
    tr = graphs.expand(tr, side, side_pid, side_op, b.O.GRAPH_DEF, graph_launches)
    if writer is not None:
        for name in colcache.TABLES:      # tables the expansions replaced (and the ones they made)
            df = getattr(tr, name)
            if df is not tables.get(name):
                writer.table(name, df)
    return tr


class _Builder:
    """What every table of :func:`_build` shares: the native pass (``sp``), the trace's metadata,
    its time origin, processes and strings, and the side records (strings, markers, call sites, ...)."""

    def __init__(self, sp: _Split, raw: RawTrace):
        self.sp, self.raw = sp, raw
        s = self.s = sp.s
        self.lib, self.ffi = sp.lib, sp.ffi
        self.meta = meta = raw.meta
        self.apis = np.array(meta.get("apis") or records.api_names(), dtype=object)
        self.kinds = {int(k): v for k, v in (meta.get("kinds") or records.kinds()).items()}
        self.O = records.OP
        self.n = n = int(s.n_events)
        self.t0 = int(meta.get("t0_ns") or (int(s.t_min) if n else 0))
        self.end_t = int(s.t_max) - self.t0 if n else 0
        self.interleaved = bool(s.interleaved)
        npid = int(s.n_pids)
        self.pp_pid = np.frombuffer(self.ffi.buffer(s.pp_pid, 4 * npid), np.int32).copy() if npid \
            else np.zeros(0, np.int32)
        self.pp_last = np.frombuffer(self.ffi.buffer(s.pp_last_seq, 8 * npid), np.int64).copy() if npid \
            else np.zeros(0, np.int64)
        self.pids = pids = sorted(self.pp_pid.tolist())
        self.op_count = list(s.op_count)
        self.op_ok = list(s.op_ok)
        self.api_categories = pd.Index([a if a else "<none>" for a in self.apis])
        # ---- side records: strings, markers, call sites (STRDATA follow their STRING/FRAME) ----
        side, side_pid = sp.table("side")
        if self.interleaved:
            side_pid, side = _by_pid(side_pid, side)
        self.side, self.side_pid = side, side_pid
        op = _fields(side, ("op",))["op"]        # a piece at a time: 11 M SITE records at 100 M events
        self.side_op = op.astype(np.uint8) if len(op) and int(op.max()) < 256 else op.astype(np.int64)
        del op
        self.side_off = np.searchsorted(side_pid, np.array(pids + [np.iinfo(np.int32).max], dtype=np.int64))
        if len(pids):
            self.side_off[-1] = len(side)
        self.strings = {}
        for i, p in enumerate(pids):
            lo, hi = self.side_off[i], self.side_off[i + 1]
            self.strings[p] = _strings(side[lo:hi], self.side_op[lo:hi])
        release(side)        # mapped from its spill file: the pages the strings were read from

    def drop_sites(self) -> None:
        """Once the call sites are read: the side records without the SITE records (one per
        allocation, most of the side records), which nothing else reads."""
        site = getattr(self.O, "SITE", None)
        if site is None or not len(self.side):
            return
        keep = np.flatnonzero(self.side_op != site)
        if len(keep) < len(self.side):
            self.side, self.side_pid, self.side_op = self.side[keep], self.side_pid[keep], self.side_op[keep]
        self.side_off = None       # offsets into the side records as read

    def ptr(self, a):
        return self.ffi.from_buffer(_CTYPES.get(a.dtype.str, "char[]"), a)

    @staticmethod
    def col(ev, name):
        c = ev[name]
        return c.view(np.int64) if name in ("seq", "t_ns", "size") else c

    def tcol(self, ev):
        return ev["t_ns"].view(np.int64) - self.t0

    def api_name(self, a):
        return pd.Categorical.from_codes(np.clip(np.asarray(a), 0, len(self.apis) - 1), self.api_categories)

    @staticmethod
    def categorical(codes, names):
        """names[codes] as a Categorical without hashing strings row by row."""
        return pd.Categorical.from_codes(np.asarray(codes, dtype=np.int64), pd.Index(names))

    def table(self, name: str, fields=None):
        """One of the native pass's record tables (records, pid), in pid order; ``fields``: only
        those, copied out of the records (:func:`_fields`)."""
        T, t_pid = self.sp.table(name)
        if fields is not None:
            T = _fields(T, fields)
        if self.interleaved:
            t_pid, T = _by_pid(t_pid, T)
        return T, t_pid

    def blocks(self, sites, out: _Tables) -> tuple[pd.DataFrame, np.ndarray, int]:
        """The blocks (the pass paired allocations with frees per (pid, address family, key), in seq
        order) with their call sites (``sites``: its per-allocation table is dropped once used), the
        block of each allocation record (file order), and how many were never freed."""
        sp, s, col = self.sp, self.s, self.col
        A, a_pid = sp.table("alloc")
        na = self.n_alloc = len(A)
        status = sp._take(s, "al_status", na, np.int8)
        end_tns = sp._take(s, "al_end_t", na, np.int64)
        end_seq = sp._take(s, "al_end_seq", na, np.int64)
        # blocks in (t_alloc, pid, seq_alloc) order, stable; rows of A (file order) -> pid order -> block order
        perm = np.argsort(a_pid, kind="stable") if self.interleaved else None
        if perm is not None:
            a_pid, status, end_tns, end_seq = a_pid[perm], status[perm], end_tns[perm], end_seq[perm]

        def fields(*names):
            """Fields of the records, copied out (in pid order) when their columns are made: the
            times and seqs first, the others once the call sites' columns are gone (a spilled
            table's pages given back as they are read)."""
            F = _fields(A, names).cols
            return F if perm is None else {k: v[perm] for k, v in F.items()}

        F = fields("t_ns", "seq")
        t_alloc = F.pop("t_ns").view(np.int64)
        t_alloc -= self.t0
        seq_alloc = F.pop("seq").view(np.int64)
        in_order = _in_block_order(t_alloc, a_pid, seq_alloc)
        bo = None if in_order else np.lexsort((seq_alloc, a_pid, t_alloc))

        def by_block(x):
            return x if bo is None else x[bo]

        # the table a column at a time (into the cache's files as they come, when it is written):
        # the call sites' first, by (pid, seq_alloc) in the blocks' order, so that the sites'
        # table (one row an allocation) goes first
        order = list(BLOCK_COLUMNS) + ["caller", "thread"]
        table = _TableColumns(out, "blocks", na, BLOCK_COLUMNS, order)
        site_cols = site_tables.site_columns(by_block(a_pid), by_block(seq_alloc), sites)
        sites.per_alloc = None
        for c in ("owner", "stack_id", "caller", "thread"):     # owner, stack_id: model columns; caller, thread after
            table.add(c, site_cols.pop(c))
        del site_cols
        table.add("t_alloc", by_block(t_alloc))
        table.add("seq_alloc", by_block(seq_alloc))
        del t_alloc, seq_alloc
        row_block = np.arange(na, dtype=np.int64)
        if bo is not None or perm is not None:
            src = perm if bo is None else (bo if perm is None else perm[bo])
            row_block[src] = np.arange(na, dtype=np.int64)
            del src
        matched = status == 1
        ended = status > 0
        del status
        last_seq = self.pp_last[np.argsort(self.pp_pid)] + 1
        pid_rank = np.searchsorted(np.sort(self.pp_pid), a_pid) if na else np.zeros(0, np.int64)
        table.add("seq_free", by_block(np.where(ended, end_seq, last_seq[pid_rank] if na else 0)))
        del pid_rank, end_seq
        table.add("t_free", by_block(np.where(ended, end_tns - self.t0, self.end_t)))
        del end_tns, ended
        table.add("block_id", np.arange(na, dtype=np.int64))
        table.add("pid", by_block(a_pid))
        F = fields("device", "api", "flags", "aux")     # in two passes: at most 4 fields beside the table's
        table.add("device", by_block(F.pop("device")))
        table.add("api", self.api_name(by_block(F.pop("api"))))
        kind_names = [self.kinds.get(k, f"kind{k}") for k in range(16)]
        bk = by_block(F.pop("flags"))
        kind = self.categorical(np.clip(bk, 0, 15), kind_names)
        table.add("counts_device", kind.categories.isin(DEVICE_KINDS)[kind.codes])
        table.add("kind", kind)
        del kind
        aux_a = by_block(F.pop("aux"))
        table.add("handle", np.where((bk == 8) | (bk == 9) | (bk == 4), aux_a, 0).astype(np.uint64))
        del aux_a, bk
        F = fields("addr", "size", "stream")
        del A
        table.add("address", by_block(F.pop("addr")))
        table.add("size", by_block(F.pop("size").view(np.int64)))
        table.add("stream", by_block(F.pop("stream")))
        del F
        table.add("freed", by_block(matched))
        never_freed = int((~matched).sum())
        del matched
        for c in ("handle_t_create", "handle_t_release", "reservation_id", "handle_types", "graph"):
            d = np.dtype(BLOCK_COLUMNS[c])
            table.add(c, np.full(na, COLUMN_DEFAULTS.get(c, 0), d))
        return table.finish(), row_block, never_freed

    def kernels(self, L: np.ndarray, l_pid: np.ndarray) -> tuple[list[str], np.ndarray]:
        """The kernel names (one entry per distinct name) and the kernel of each launch row (-1: graph
        or unknown)."""
        l_op, l_aux = L["op"], L["aux"]
        kernels: list[str] = []
        kindex: dict[tuple[int, int], int] = {}
        name_index: dict[str, int] = {}
        lm = l_op == self.O.LAUNCH
        lkey = np.unique((l_pid[lm].astype(np.int64) << 32) | l_aux[lm].astype(np.int64))   # (pid, string id)
        for p, sid in zip((lkey >> 32).tolist(), (lkey & 0xFFFFFFFF).tolist()):
            name = self.strings.get(p, {}).get(sid, "<unknown kernel>")
            if name not in name_index:
                name_index[name] = len(kernels)
                kernels.append(name)
            kindex[(p, sid)] = name_index[name]

        kkeys = np.array(sorted(kindex), dtype=np.int64).reshape(-1, 2)
        kcomb = (kkeys[:, 0] << 32) | kkeys[:, 1] if len(kkeys) else np.zeros(0, np.int64)
        korder_k = np.argsort(kcomb)
        kcomb_sorted = kcomb[korder_k]
        kvals = np.array([kindex[tuple(k)] for k in kkeys.tolist()], dtype=np.int32)[korder_k] if len(kkeys) \
            else np.zeros(0, np.int32)
        kid = np.full(len(L), -1, dtype=np.int32)        # kernel of each launch row (-1: graph or unknown)
        if len(kcomb_sorted) and lm.any():
            q = (l_pid[lm].astype(np.int64) << 32) | l_aux[lm].astype(np.int64)
            pos = np.minimum(np.searchsorted(kcomb_sorted, q), len(kcomb_sorted) - 1)
            kid[lm] = np.where(kcomb_sorted[pos] == q, kvals[pos], -1)
        return kernels, kid

    def blockmap(self, blocks: pd.DataFrame):
        """The blocks by (pid, seq of their ALLOC), for the accesses whose block was not live when
        they were recorded (or all of them when the file was not in seq order); None when no
        access needs it."""
        s, lib, ffi = self.s, self.lib, self.ffi
        if len(blocks) >= 1 << 31:
            raise TraceError(f"{len(blocks)} blocks: more than a trace can hold (2^31)")
        if not (s.seq_disorder or s.a_pending > 0):
            return None
        b_pid = np.ascontiguousarray(blocks["pid"].to_numpy(np.int32))
        b_seq = np.ascontiguousarray(blocks["seq_alloc"].to_numpy(np.int64))
        b_id = np.ascontiguousarray(blocks["block_id"].to_numpy(np.int64))
        m = lib.pi_blockmap_new(self.ptr(b_pid), self.ptr(b_seq), self.ptr(b_id), len(blocks))
        if m == ffi.NULL:
            raise MemoryError("out of memory resolving accesses")
        return ffi.gc(m, lib.pi_blockmap_free)

    ACCESS_OPS = {"launch": "LAUNCH", "copy": "COPY", "memset": "MEMSET", "tensormap": "TENSORMAP"}

    def accesses(self, blockmap, row_block: np.ndarray, kid: np.ndarray, n_launch: int,
                 out: _Tables) -> tuple[int, np.ndarray, int]:
        """Each ACCESS record belongs to the record it follows (in C: its owner).  Resolved a chunk at
        a time (pi_resolve_chunk) into the ``accesses`` table's columns, in memory or into the cache
        (``out``): (the accesses kept, the count per launch row, how many could not be resolved to
        a block)."""
        sp, s, ptr, O, ffi = self.sp, self.s, self.ptr, self.O, self.ffi
        n_records = int(s.a_n)
        n_acc = np.zeros(n_launch, np.int32)
        by_code = {getattr(O, v): k for k, v in self.ACCESS_OPS.items()}
        op_cats = pd.Index([by_code.get(o, f"op{o}") for o in range(16)])
        cols = _AccessColumns(out, n_records, op_cats, sorted_by_pid=self.interleaved)
        rows = max(1, min(chunking.chunk_rows(), ACC_CHUNK_ROWS))
        use_row = 0 if s.seq_disorder else 1
        kid = np.ascontiguousarray(kid, np.int32)
        row_block = np.ascontiguousarray(row_block, np.int64)
        bmap = blockmap if blockmap is not None else ffi.NULL
        buf = None
        for chunk in sp.access_chunks(rows):
            m = len(chunk)
            if buf is None or len(buf["pid"]) < m:
                buf = {"block_id": np.empty(m, np.int32), "pid": np.empty(m, np.int32), "seq": np.empty(m, np.int64),
                       "t": np.empty(m, np.int64), "kernel": np.empty(m, np.int32), "op": np.empty(m, np.int8),
                       "flags": np.empty(m, np.uint16)}
            k = self.lib.pi_resolve_chunk(ffi.from_buffer("pi_acc[]", chunk), m, use_row, ptr(row_block), bmap, ptr(kid),
                                          n_launch, ptr(n_acc), self.t0, ptr(buf["block_id"]), ptr(buf["pid"]),
                                          ptr(buf["seq"]), ptr(buf["t"]), ptr(buf["kernel"]), ptr(buf["op"]),
                                          ptr(buf["flags"]))
            cols.append({c: a[:k] for c, a in buf.items()})
            del chunk
        kept = cols.finish()
        return kept, n_acc, n_records - kept

    def launches(self, L, l_pid, kid, n_acc, kernels) -> tuple[pd.DataFrame, pd.DataFrame, np.ndarray]:
        """The launches, the graph launches (pid, seq, exec), and ``kid`` in the launches' order."""
        if self.interleaved:
            l_pid, L, kid, n_acc = _by_pid(l_pid, L, kid, n_acc)
        kn = list(dict.fromkeys(kernels + ["<graph>"]))
        launches = pd.DataFrame({
            "pid": l_pid, "tid": L["tid"].astype(np.int64), "seq": self.col(L, "seq"), "t": self.tcol(L),
            "device": L["device"], "stream": L["stream"], "api": self.api_name(L["api"]), "kernel": kid,
            "kernel_name": self.categorical(np.where(kid >= 0, kid, len(kernels)), kn),
            "n_access": n_acc, "graph": L["op"] == self.O.GRAPH_LAUNCH,
        }, copy=False)
        launches = _owning(conform(launches, LAUNCH_COLUMNS))
        gl_rows = np.flatnonzero(launches["graph"].to_numpy())
        graph_launches = pd.DataFrame({"pid": launches["pid"].to_numpy()[gl_rows],
                                       "seq": launches["seq"].to_numpy()[gl_rows], "exec": L["addr"][gl_rows]})
        return launches, graph_launches, kid

    def copies(self) -> pd.DataFrame:
        C, c_pid = self.table("copy", ("op", "seq", "t_ns", "api", "addr", "aux", "size", "stream"))
        c_copy = C["op"] == self.O.COPY
        return _owning(conform(pd.DataFrame({
            "pid": c_pid, "seq": self.col(C, "seq"), "t": self.tcol(C), "api": self.api_name(C["api"]),
            "op": self.categorical(np.where(c_copy, 0, 1), ["copy", "memset"]), "dst": C["addr"],
            "src": np.where(c_copy, C["aux"], 0).astype(np.uint64), "size": self.col(C, "size"),
            "stream": C["stream"]}), COPY_COLUMNS))

    def gpu_activity(self, kernels, launches, copies, kid, graph_launches, out: _Tables) -> pd.DataFrame:
        """The device clock: activities (put in ``out``: mapped back when written), and the device
        start/end of launches and copies (set in place)."""
        G, g_pid = self.table("gpu")
        gpu_activity = gpuclock.activity_table(G, g_pid, self.t0, self.strings, kernels, launches["pid"].to_numpy(),
                                               launches["seq"].to_numpy(), kid, copies["pid"].to_numpy(),
                                               copies["seq"].to_numpy())
        gpu_activity = _owning(gpu_activity)
        del G, g_pid
        if len(gpu_activity):
            O = self.O
            if len(graph_launches) and (self.side_op == O.GRAPH_DEF).any():
                calls = pd.concat([launches.loc[~launches["graph"], ["pid", "seq", "stream"]],
                                   copies[["pid", "seq", "stream"]]])
                gpu_activity["captured_seq"] = gpuclock.join_captured(gpu_activity, gpuclock.captured_calls(
                    self.side, self.side_pid, self.side_op, O.GRAPH_DEF, calls, graph_launches))
        gpu_activity = out.put_mapped("gpu_activity", gpu_activity)   # written before the spans are made
        if len(gpu_activity):
            spans = gpuclock.event_spans(gpu_activity)
            for c in ("pid", "seq", "start", "end"):     # mapped when written: the pages the spans read
                release(gpu_activity[c])
            for tab in (launches, copies):
                tab["dev_start"], tab["dev_end"] = gpuclock.event_times(spans, tab["pid"].to_numpy(),
                                                                        tab["seq"].to_numpy())
                release(tab["pid"])
                release(tab["seq"])
        return gpu_activity

    def hints(self) -> pd.DataFrame:
        H, h_pid = self.table("hint")
        return conform(pd.DataFrame({
            "pid": h_pid, "seq": self.col(H, "seq"), "t": self.tcol(H), "api": self.api_name(H["api"]),
            "op": self.categorical(np.where(H["op"] == self.O.ADVISE, 0, 1), ["advise", "prefetch"]),
            "address": H["addr"], "size": self.col(H, "size"), "value": H["aux"].astype(np.int64)}), HINT_COLUMNS)

    def failures(self) -> pd.DataFrame:
        X, x_pid = self.table("fail")
        O = self.O
        opname = np.array([{v: k for k, v in records.ops().items()}.get(o, str(o)) for o in range(16)], dtype=object)
        x_mem = np.isin(X["op"], [O.ALLOC, O.FREE])
        x_kind = np.where(x_mem, X["flags"], 0).astype(np.int64)
        return conform(pd.DataFrame({
            "pid": x_pid, "seq": self.col(X, "seq"), "t": self.tcol(X), "api": self.api_name(X["api"]),
            "op": pd.Categorical(opname[X["op"].astype(np.uint8)]), "size": self.col(X, "size"),
            "result": X["result"],
            "stream": np.where(x_mem & (x_kind != 8) & (x_kind != 9), X["stream"], 0).astype(np.uint64),
            "device": X["device"],
            "kind": self.categorical(np.clip(x_kind, 0, 9), [""] + [KINDS[k] for k in range(1, 10)]),
            "pool": np.where(x_kind == 4, X["aux"], 0).astype(np.uint64)}), FAILURE_COLUMNS)

    def markers(self) -> pd.DataFrame:
        side, side_pid = self.side, self.side_pid
        mi = np.flatnonzero(self.side_op == self.O.MARKER)
        return conform(pd.DataFrame({
            "pid": side_pid[mi], "seq": self.col(side, "seq")[mi], "t": self.tcol(side)[mi],
            "label": [self.strings.get(int(p), {}).get(int(sid), "") for p, sid in zip(side_pid[mi],
                                                                                      side["aux"][mi])]}),
            MARKER_COLUMNS)

    def processes(self) -> pd.DataFrame:
        O, t0, raw = self.O, self.t0, self.raw
        clocks = gpuclock.process_clocks(self.side, self.side_pid, self.side_op, O.CLOCK, self.strings)
        counters = {}
        for pr in (raw.trailer or {}).get("processes", []):
            counters[pr.get("ring")] = pr
        prow = []
        ctx = context.per_process(self.side, self.side_op, self.side_pid, self.strings, getattr(O, "CONTEXT", None),
                                  getattr(O, "DEVICE", None))
        for pr in raw.processes:
            c = counters.get(pr.get("ring"), {})
            cx, dv = ctx.get(int(pr["pid"]), ("{}", "[]"))
            prow.append({"pid": pr["pid"], "ppid": pr.get("ppid", 0), "exe": pr.get("exe", ""),
                         "forked": bool(pr.get("forked")), "start_ns": int(pr.get("start_ns", t0)) - t0,
                         "written": c.get("written", -1), "lost": c.get("lost", -1), "waits": c.get("waits", 0),
                         "unscanned_launches": c.get("unscanned_launches", 0), "context": cx, "devices": dv,
                         **clocks.get(pr["pid"], gpuclock.NO_RECORD)})
        return conform(pd.DataFrame(prow), PROCESS_COLUMNS) if prow else empty_table(PROCESS_COLUMNS)

    def nvml(self) -> pd.DataFrame:
        if self.raw.nvml:
            frames = [pd.DataFrame(c["rows"], columns=c["columns"]) for c in self.raw.nvml]
            return conform(pd.concat(frames, ignore_index=True), NVML_COLUMNS)
        return empty_table(NVML_COLUMNS)

    def counts(self, n_access: int, n_markers: int, n_failures: int, unresolved_access: int,
               never_freed: int) -> dict:
        s, O, op_count, op_ok, apis = self.s, self.O, self.op_count, self.op_ok, self.apis
        counts = {
            "events": self.n, "alloc": self.n_alloc, "free": int(s.n_free), "access": int(n_access),
            "launch": int(op_count[O.LAUNCH]), "graph_launch": int(op_count[O.GRAPH_LAUNCH]),
            "copy": int(op_ok[O.COPY]), "memset": int(op_ok[O.MEMSET]),
            "advise": int(op_ok[O.ADVISE]), "prefetch": int(op_ok[O.PREFETCH]), "marker": int(n_markers),
            "failure": int(n_failures), "unmatched_free": int(s.unmatched_free),
            "unresolved_access": unresolved_access, "never_freed": never_freed,
        }
        by_api = s.api_count
        counts["by_api"] = {str(apis[i]): int(by_api[i]) for i in range(min(len(apis), 65536)) if by_api[i]}
        return counts


def _swapped(side, side_pid, side_op, col, tcol) -> pd.DataFrame:
    """PI_OP_SWAP records (native/shim/swap.c) as the ``swapped`` table."""

    code = getattr(records.OP, "SWAP", None)
    si = np.flatnonzero(side_op == code) if code is not None and len(side) else np.zeros(0, np.int64)
    if len(si) == 0:
        return empty_table(SWAP_COLUMNS)
    S = side[si]
    lo32, hi32 = np.uint64(0xFFFFFFFF), np.uint64(32)

    def pair(f):
        v = S[f].astype(np.uint64)
        return (v & lo32).astype(np.int64), (v >> hi32).astype(np.int64)

    out, back = pair("addr")
    late, unforeseen = pair("size")
    waits, managed = pair("stream")
    return conform(pd.DataFrame({
        "pid": side_pid[si], "seq": col(side, "seq")[si], "t": tcol(side)[si],
        "record": pd.Categorical(["last" if int(k) == 4 else "iteration" for k in S["flags"]]),
        "iteration": S["result"].astype(np.int64), "swaps_out": out, "swaps_in": back, "late": late,
        "unforeseen": unforeseen, "waits": waits, "managed": managed,
        "real": S["aux"].astype(np.int64)}), SWAP_COLUMNS)


def _applied(side, side_pid, side_op, col, tcol) -> pd.DataFrame:
    """PI_OP_APPLY records (native/shim/apply.c) as the ``applied`` table."""

    code = getattr(records.OP, "APPLY", None)
    ai = np.flatnonzero(side_op == code) if code is not None and len(side) else np.zeros(0, np.int64)
    if len(ai) == 0:
        return empty_table(APPLY_COLUMNS)
    A = side[ai]
    kind = A["flags"].astype(np.int64)
    lo32, hi32 = np.uint64(0xFFFFFFFF), np.uint64(32)
    arena = kind == 1

    def pair(f):
        v = A[f].astype(np.uint64)
        return np.where(arena, 0, v & lo32).astype(np.int64), np.where(arena, 0, v >> hi32).astype(np.int64)

    served, no_key = pair("addr")
    occupied, bigger = pair("size")
    capture, overlap = pair("stream")
    off, other = pair("aux")
    names = {1: "arena", 2: "iteration", 3: "refused", 4: "last"}
    return conform(pd.DataFrame({
        "pid": side_pid[ai], "seq": col(side, "seq")[ai], "t": tcol(side)[ai],
        "record": pd.Categorical([names.get(int(k), str(int(k))) for k in kind]),
        "iteration": np.where(arena, -1, A["result"]).astype(np.int64),
        "result": np.where(arena, A["result"], 0).astype(np.int32),
        "arena": np.where(arena, A["addr"], 0).astype(np.uint64),
        "capacity": np.where(arena, A["size"].astype(np.int64), 0),
        "served": served, "no_key": no_key, "occupied": occupied, "bigger": bigger, "capture": capture,
        "overlap": overlap, "off": off, "other": other}), APPLY_COLUMNS)


def load(path: str, progress: bool = False) -> Trace:
    """Read a trace file into its tables: chunks are checked and inflated on two threads and
    streamed through the native record pass, so the records are never all in memory at once.
    From the columnar cache beside the trace when there is a valid one (pyinterpose.trace.colcache);
    ``progress``: a progress bar on stderr while the file is read (callers pass True on a terminal only)."""
    if os.path.isdir(path):
        raise TraceError(f"{path}: is a directory, not a trace file")

    cached = colcache.read(path) if os.path.isfile(path) else None
    if cached is not None:
        return cached

    writer = colcache.Writer.open(path) if colcache.wanted(path) and not being_written(path) else None
    if writer is None and _large(path):
        # no cache beside the trace (--no-cache, a read-only folder, a trace being written): its
        # tables through files of this process's own, mapped and removed (colcache.Writer.private)
        private = colcache.Writer.private(path)
        if private is not None:
            try:
                return _load(path, progress, private, private=True)
            except _CacheWriteError:
                pass                 # no room in TMPDIR: read into memory instead
    return _load(path, progress, writer)


def _large(path: str) -> bool:
    """A trace read through files even without its cache: from spill_min_bytes() on."""
    try:
        return os.path.getsize(path) >= spill_min_bytes()
    except OSError:
        return False


class _CacheWriteError(TraceError):
    """The tables' files could not be written (no room, no permission)."""


def _load(path: str, progress: bool, writer, private: bool = False) -> Trace:
    """:func:`load`'s read of the file: into memory, into the cache beside it (``writer``), or into
    a private folder of files (``private``: :meth:`colcache.Writer.private`)."""
    with progress_bar.bar(f"reading {os.path.basename(path)}", progress) as on_progress:
        spill = None
        try:
            sp = _Split()
            spill = _spill_folder(path, writer)
            if spill and not sp.spill(spill):
                spill = None
            raw = _read(path, lambda size: sp.feed, threads=True, on_progress=on_progress)
            sp.flush()
            raw.meta["complete"], raw.meta["incomplete_reason"] = completeness(raw, path)
            on_progress(1.0, "building the tables" if writer is None else "building the tables and their cache")
            trace = _build(sp, raw, path, writer)
            del sp
            if private:
                trace = writer.mapped_trace(trace)       # every table mapped from its file
            elif writer is not None and writer.finish(trace):
                trace = colcache.read(path) or trace     # every table mapped from the cache just written
        finally:
            if writer is not None:
                writer.abort()           # a cache not finished: gone (tables mapped from it stay readable)
            if spill:
                import shutil

                shutil.rmtree(spill, ignore_errors=True)
    return trace


SPILL = "spill"     # the folder of the reader's spilled records, inside the cache being written
SPILL_MIN_BYTES = 256 << 20


def spill_min_bytes() -> int:
    """Traces from this size on (``PYINTERPOSE_SPILL_MIN_BYTES``, default 256 MiB: about 25 M events)
    spill the record pass's tables to files; smaller ones keep them in memory (faster: no file I/O)."""
    try:
        return int(os.environ.get("PYINTERPOSE_SPILL_MIN_BYTES", SPILL_MIN_BYTES))
    except ValueError:
        return SPILL_MIN_BYTES


def _spill_folder(path: str, writer) -> str | None:
    """Where the record pass spills its tables (None: in memory): inside the cache being written, or
    for a trace read without the cache, a temporary folder (TMPDIR); traces under spill_min_bytes()
    stay in memory."""
    import tempfile

    try:
        if not _large(path):
            return None
        if writer is not None:
            folder = os.path.join(writer.tmp, SPILL)
            os.mkdir(folder)
            return folder
        return tempfile.mkdtemp(prefix="pyinterpose-read-")
    except OSError:
        pass
    return None
