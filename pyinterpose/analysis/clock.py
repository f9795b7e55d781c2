"""Which clock a process's analyses run on, and the times they read from it.

The one place that decides: every analysis asks :func:`clock_of` and never applies a rule of
its own.

* **Device clock** (``"gpu (cupti)"``) when the process's launches or copies carry device times
  (``dev_start``/``dev_end`` >= 0, recorded through CUPTI and aligned to the trace's clock).
  An access then lasts from its kernel's device start to its device end; an access interval runs
  from the END of one accessing kernel to the START of the next on the GPU.
* **CPU clock** (``"cpu"``) otherwise: every time is the host's, taken when the call was made
  (a launch is *enqueued* then, not run), as analyses always did.  The clock's note says why
  (``"no device times: CPU clock (libcupti not found)"``).

Host events (allocations, frees, markers, iteration boundaries) have no device time of their
own.  On the device clock each is placed where the GPU reached that point of the program:
``max(t, latest device end of the process's launches and copies recorded before it)`` — the
host cannot act before it made the call, and the GPU has finished what was enqueued before it
no earlier than that.  (A stream-ordered free, ``cudaFreeAsync``, is released then; a
synchronous ``cudaFree`` waits for the device anyway, so both readings agree.)  A launch or copy
with no device time of its own (a record CUPTI dropped) is placed the same way, with a zero
duration, and the clock's note counts them.

:class:`Clock` gives:

* :meth:`Clock.host_times` — host events (seq, t) on the clock;
* :meth:`Clock.op_times` — accesses / launches / copies (seq, t) -> (start, end) on the clock
  (CPU: both are ``t``);
* :meth:`Clock.replay_ops` — the compute streams for the swap replay (start, duration, stream);
* :attr:`Clock.label`, :meth:`Clock.as_dict` — what JSON outputs name (``"clock"``).

:func:`launch_lag` is the launch-to-start lag (``dev_start - t``: how far the CPU ran ahead).
"""
from __future__ import annotations

import functools
import threading
import weakref
from dataclasses import dataclass, field

import numpy as np

from ..trace.chunking import chunk_rows, spans
from ..trace.pages import release
from ..trace.piecewise import ascending, extent, piece_rows, quantiles
from .search import searchsorted

CPU = "cpu"


@dataclass
class Ops:
    """The process's launches and copies in seq order (what the device clock is read from)."""

    seq: np.ndarray        # int64, ascending
    t: np.ndarray          # int64: CPU time of the call
    start: np.ndarray | None = None    # int64: device start (-1 none); None on the CPU clock
    end: np.ndarray | None = None      # int64: device end (-1 none)
    stream: np.ndarray | None = None   # int64: the call's stream handle
    frontier: np.ndarray = field(default=None)   # int64: latest device end among ops[0..i] (-1 none)

    def __post_init__(self):
        if self.frontier is None and self.start is not None:
            e = np.where((self.start >= 0) & (self.end >= self.start), self.end, -1)
            self.frontier = np.maximum.accumulate(e) if len(e) else e

    @functools.cached_property
    def timed(self) -> np.ndarray:
        """bool per op: it has a device start and end (made once: every piece of the access
        intervals reads it)."""
        if self.start is None:
            return np.zeros(len(self.seq), bool)
        n = len(self.start)
        if n <= chunk_rows():
            return (self.start >= 0) & (self.end >= self.start)
        # a long trace's ops in files: a piece at a time, each piece's mapped pages given back (not the
        # whole start and end columns resident at once)
        out = np.empty(n, bool)
        for lo, hi in spans(n, chunk_rows()):
            s_, e_ = self.start[lo:hi], self.end[lo:hi]
            np.greater_equal(e_, s_, out=out[lo:hi])
            out[lo:hi] &= s_ >= 0
            release(self.start, lo, hi)
            release(self.end, lo, hi)
        return out


def _none():
    return None


class Clock:
    """The clock of one process.  ``ops`` (the process's launches and copies in seq order, full
    length) is built on first use only: deciding the clock, its label and note, and placing a few
    host events (:meth:`host_times` of iteration boundaries) read the tables in pieces instead."""

    def __init__(self, pid: int | None, device: bool, source: str = CPU, note: str = "", ops=None, trace=None):
        self.pid, self.device, self.source, self.note = pid, device, source, note
        self._ops = ops if isinstance(ops, Ops) else None
        # where the ops are read from when first needed: a weak reference, since the clock is kept in the
        # trace's own derived results (a strong one would be a cycle keeping a dropped trace alive until gc)
        self._trace = weakref.ref(trace) if trace is not None else _none
        self._lock = threading.Lock()

    @property
    def ops(self) -> Ops:
        if self._ops is None:
            with self._lock:
                if self._ops is None:
                    trace = self._trace()
                    if trace is None:
                        raise RuntimeError("the trace of this clock is gone: keep the trace while using its clock")
                    self._ops = _ops(trace, self.pid, self.device)
        return self._ops

    def drop_ops(self) -> None:
        """Let the full-length ops go (a long trace's pass over them is done); made again if asked."""
        with self._lock:
            self._ops = None

    def __repr__(self) -> str:
        return f"Clock(pid={self.pid!r}, device={self.device!r}, source={self.source!r}, note={self.note!r})"

    @property
    def label(self) -> str:
        return f"gpu ({self.source})" if self.device else CPU

    def as_dict(self) -> dict:
        """The keys every JSON output carries: ``clock`` and, when there is one, ``clock_note``."""
        d = {"clock": self.label}
        if self.note:
            d["clock_note"] = self.note
        return d

    # ---- times -------------------------------------------------------------------------

    def host_times(self, seq, t) -> np.ndarray:
        """Host events (allocations, frees, boundaries) at ``seq``/``t`` on this clock (int64)."""
        t = np.asarray(t, dtype=np.int64)
        if not self.device:
            return t
        trace = self._trace()
        if self._ops is None and trace is not None and t.size <= chunk_rows():
            # up to a piece of events (iteration boundaries): the frontier read in pieces, no full-length ops
            return np.maximum(t, frontier_at(trace, self.pid, np.asarray(seq, dtype=np.int64)))
        seq = np.asarray(seq, dtype=np.int64)
        if t.ndim == 1 and len(t) > REPLAY_PIECE:
            # a piece at a time into the answer (issue 30: three temporaries of the events' length otherwise)
            out = np.empty(len(t), np.int64)
            for lo in range(0, len(t), REPLAY_PIECE):
                out[lo:lo + REPLAY_PIECE] = self._host_piece(seq[lo:lo + REPLAY_PIECE], t[lo:lo + REPLAY_PIECE])
            return out
        return self._host_piece(seq, t)

    def _host_piece(self, seq: np.ndarray, t: np.ndarray) -> np.ndarray:
        k = searchsorted(self.ops.seq, seq, side="left") - 1
        f = np.where(k >= 0, self.ops.frontier[np.maximum(k, 0)], -1) if len(self.ops.seq) else np.full(len(t), -1)
        return np.maximum(t, f)

    def op_times(self, seq, t) -> tuple[np.ndarray, np.ndarray]:
        """(start, end) on this clock of the launches/copies (or their accesses) at ``seq``/``t``:
        the device start and end; the host position (:meth:`host_times`) for both when the op
        has no device time; on the CPU clock ``t`` for both."""
        t = np.asarray(t, dtype=np.int64)
        if not self.device:
            return t, t
        seq = np.asarray(seq, dtype=np.int64)
        o = self.ops
        if not len(o.seq):
            h = self.host_times(seq, t)
            return h, h.copy()
        i = np.minimum(searchsorted(o.seq, seq, side="left"), len(o.seq) - 1)
        hit = (o.seq[i] == seq) & o.timed[i]
        start, end = o.start[i], o.end[i]
        if not hit.all():         # the host position of the others only
            miss = ~hit
            h = self.host_times(seq[miss], t[miss])
            start[miss] = h
            end[miss] = h
        return start, end

    def replay_ops(self) -> dict:
        """The compute streams for the swap replay (:mod:`.swap.replay`), in seq order:

        ``seq``; ``start`` (float64 ns: when the op started — the device start, or on the CPU
        clock the call's time); ``dur`` (how long it kept its stream: the device duration, or on
        the CPU clock the gap to the next call, so the CPU timeline is the stream); ``stream``
        (dense int32: the CPU clock is one stream, the device clock one per stream handle).
        An access lasts the op's duration on the device clock and is the instant of the call on
        the CPU clock; the candidates' interval ends already say so."""
        o = self.ops
        n = len(o.seq)
        if self.device:
            # a piece of ops at a time into the answer's arrays (issue 30: the whole-length temporaries were
            # ~0.65 GB at 100 M events, the swap preparation's peak); the streams numbered as np.unique's
            # inverse numbers them (the rank of each handle among the distinct ones), the same values
            start = np.empty(n, np.float64)
            dur = np.empty(n, np.float64)
            stream = np.empty(n, np.int32)
            handles = np.zeros(0, np.asarray(o.stream).dtype)
            for lo in range(0, n, REPLAY_PIECE):
                handles = np.union1d(handles, np.unique(o.stream[lo:lo + REPLAY_PIECE]))
            for lo in range(0, n, REPLAY_PIECE):
                sl = slice(lo, min(lo + REPLAY_PIECE, n))
                timed = o.timed[sl]
                h = self.host_times(o.seq[sl], o.t[sl])
                start[sl] = np.where(timed, o.start[sl], h)
                dur[sl] = np.where(timed, o.end[sl] - o.start[sl], 0)
                stream[sl] = np.searchsorted(handles, o.stream[sl])
                del timed, h
                for col in (o.t, o.start, o.end, o.stream):      # ops in files (a long trace): read once here
                    release(col, sl.start, sl.stop)
            return {"seq": o.seq, "start": start, "dur": dur, "stream": stream}
        else:
            start = o.t.astype(np.float64)
            dur = np.zeros(n, np.float64)
            if n > 1:
                dur[:-1] = np.maximum(np.diff(start), 0.0)
            stream = np.zeros(n, np.int64)
        return {"seq": o.seq, "start": start, "dur": dur, "stream": stream.astype(np.int32)}


REPLAY_PIECE = 1 << 20      # ops at a time in Clock.replay_ops


def _ops(trace, pid: int | None, device: bool) -> Ops:
    """The process's launches and copies in seq order; only seq and t on the CPU clock."""
    srcs = []
    cols = ("seq", "t", "dev_start", "dev_end", "stream") if device else ("seq", "t")
    for tab in (trace.launches, trace.copies):
        if not len(tab):
            continue
        m = None if pid is None else tab["pid"].to_numpy() == pid
        if m is not None and m.all():     # one process: the columns themselves, not a copy of each
            m = None
        srcs.append((tab, m))
    if not srcs:
        z = np.zeros(0, np.int64)
        return Ops(z, z, *((z, z, z) if device else ()))
    if device and sum(len(t) if m is None else int(np.count_nonzero(m)) for t, m in srcs) > spill_ops():
        o = _ops_to_files(srcs, cols)
        if o is not None:
            return o
    parts = [{k: _part(src, k) for k in cols} for src in srcs]
    del srcs
    cat = {k: np.concatenate([p[k] for p in parts]) if len(parts) > 1 else parts[0][k] for k in cols}
    o = None if len(parts) == 1 and ascending(cat["seq"]) else np.argsort(cat["seq"], kind="stable")
    del parts

    def take(k, dtype):
        a = cat[k] if o is None else cat[k][o]
        return a.astype(dtype, copy=False)
    if not device:
        return Ops(take("seq", np.int64), take("t", np.int64))
    return Ops(take("seq", np.int64), take("t", np.int64), take("dev_start", np.int64), take("dev_end", np.int64),
               take("stream", np.uint64).view(np.int64))


SPILL_OPS: int | None = None     # tests: 0 writes every device clock's ops to files (None: spill_ops())


def spill_ops() -> int:
    """Ops above which a device clock's ops are written to files (:data:`SPILL_OPS`, else ``chunk_rows()``)."""
    return SPILL_OPS if SPILL_OPS is not None else chunk_rows()


def _part(src: tuple, k: str) -> np.ndarray:
    """Column ``k`` of one table's rows of the process (``src``: the table and its row mask, None all)."""
    tab, m = src
    x = tab[k].to_numpy()
    return x if m is None else x[m]


def _ops_to_files(srcs: list, cols) -> Ops | None:
    """A long trace's device-clock ops (issue 30: 7 columns of 8 bytes an op, ~0.6 GB at 100 M events,
    read by every piece of the access intervals): made a column at a time and written to files of this
    process's own (:class:`.spillfiles.Files`), mapped back; the frontier (a running maximum) made a
    piece at a time with the maximum carried.  The same values as the arrays :func:`_ops` makes; the
    passes give back the mapped pages a piece at a time.  None when the files cannot be made."""
    from .spillfiles import Files

    def column(k):          # one column of the ops in table order (the tables' rows of the process)
        return np.concatenate([_part(src, k) for src in srcs]) if len(srcs) > 1 else _part(srcs[0], k)

    seq = column("seq")
    o = None if len(srcs) == 1 and ascending(seq) else np.argsort(seq, kind="stable")
    del seq
    for tab, _ in srcs:
        release(tab["seq"])
    try:
        files = Files("pyinterpose-clock-")
    except OSError:
        return None
    try:
        # a column at a time, put in seq order a piece at a time (no second full-length copy)
        for k, name in zip(cols, ("seq", "t", "start", "end", "stream")):
            a = column(k)
            files.add_column(name, np.int64)
            for lo, hi in spans(len(a), piece_rows()):
                x = a[lo:hi] if o is None else a[o[lo:hi]]
                files.append(name, x.astype(np.uint64, copy=False).view(np.int64) if k == "stream"
                             else x.astype(np.int64, copy=False))
                del x
            for tab, _ in srcs:
                release(tab[k])
            del a
        del o
        m = files.finish()
        files = Files("pyinterpose-clock-")
        files.add_column("frontier", np.int64)
        carry = None
        for lo, hi in spans(len(m["seq"]), piece_rows()):
            s_, e_ = m["start"][lo:hi], m["end"][lo:hi]
            f = np.maximum.accumulate(np.where((s_ >= 0) & (e_ >= s_), e_, -1))
            if carry is not None:
                np.maximum(f, carry, out=f)
            carry = f[-1]
            files.append("frontier", f)
            for c in ("start", "end"):
                release(m[c], lo, hi)
        m["frontier"] = files.finish()["frontier"]
    except OSError:
        files.abort()
        return None
    return Ops(m["seq"], m["t"], m["start"], m["end"], m["stream"], frontier=m["frontier"])


def _timed_count(trace, pid: int | None) -> tuple[int, int]:
    """(launches and copies of the process with a device time, all of them), read in pieces."""
    n = timed = 0
    for tab in (trace.launches, trace.copies):
        if not len(tab):
            continue
        p, s_, e_ = (tab[c].to_numpy() for c in ("pid", "dev_start", "dev_end"))
        for lo, hi in spans(len(tab), piece_rows()):
            s, e = s_[lo:hi], e_[lo:hi]
            ok = (s >= 0) & (e >= s)
            if pid is None:
                n += hi - lo
            else:
                m = p[lo:hi] == pid
                n += int(np.count_nonzero(m))
                ok &= m
            timed += int(np.count_nonzero(ok))
            for a in (p, s_, e_):
                release(a, lo, hi)      # each piece's pages given back as it is read
    return timed, n


def frontier_at(trace, pid: int | None, seq: np.ndarray) -> np.ndarray:
    """``Ops.frontier`` read at ``seq`` as :meth:`Clock.host_times` reads it — per query, the latest
    device end among the process's launches and copies with a smaller seq (-1 none) — computed over
    the tables in pieces, without building the full-length ops (for a few queries)."""
    seq = np.asarray(seq, dtype=np.int64)
    out = np.full(seq.shape, -1, np.int64)
    if not seq.size:
        return out
    for tab in (trace.launches, trace.copies):
        if not len(tab):
            continue
        cols = [tab[c].to_numpy() for c in ("pid", "seq", "dev_start", "dev_end")]
        p_, q_, s_, e_ = cols
        # a quarter piece of rows at a time: each makes a few int64 temporaries of its length
        for lo, hi in spans(len(tab), max(1, chunk_rows() // 4)):
            q, s, e = q_[lo:hi], s_[lo:hi], e_[lo:hi]
            if pid is not None:
                m = p_[lo:hi] == pid
                if not m.all():
                    q, s, e = q[m], s[m], e[m]
            if not len(q):
                continue
            e = np.where((s >= 0) & (e >= s), e, -1).astype(np.int64, copy=False)
            q = q.astype(np.int64, copy=False)
            if not ascending(q):
                o = np.argsort(q, kind="stable")
                q, e = q[o], e[o]
            run = np.maximum.accumulate(e)
            # a query at or before the piece's first seq sees none of it, one after its last sees
            # all of it (run[-1]): only those between are searched for
            after = seq > q[-1]
            np.maximum(out, np.where(after, run[-1], -1), out=out)
            mid = np.flatnonzero((seq > q[0]) & ~after)
            if len(mid):
                k = np.searchsorted(q, seq[mid], side="left") - 1
                out[mid] = np.maximum(out[mid], run[k])
            for a in cols:              # the piece's pages (issue 30: the whole table's were ~0.25 GB at 100 M)
                release(a, lo, hi)
    return out


def _process_row(trace, pid):
    p = trace.processes
    if pid is None or not len(p):
        return None
    r = p[p["pid"].to_numpy() == pid]
    return r.iloc[0] if len(r) else None


def clock_of(trace, pid: int | None = None) -> Clock:
    """The clock of one process of ``trace`` (default: the main process), computed once per trace."""
    if pid is None:
        pid = trace.main_pid
    pid = None if pid is None else int(pid)
    derived = getattr(trace, "derived", None)
    if derived is None:
        return _decide(trace, pid)
    return derived(("clock", pid), lambda: _decide(trace, pid))


def _decide(trace, pid: int | None) -> Clock:
    row = _process_row(trace, pid)
    declared = str(row["clock"]) if row is not None and "clock" in row and row["clock"] else CPU
    why = str(row["clock_note"]) if row is not None and "clock_note" in row and row["clock_note"] else ""
    n_timed, n_ops = _timed_count(trace, pid)
    if n_timed == 0:
        if not why:
            why = ("the trace has no device timestamps" if n_ops else "the process launched nothing")
        return Clock(pid, False, CPU, f"no device times: CPU clock ({why})", trace=trace)
    source = declared if declared not in ("", CPU) else "cupti"
    notes = []
    if n_timed < n_ops:
        notes.append(f"{n_ops - n_timed} of {n_ops} launches/copies have no device time: "
                     "placed where the GPU reached them in program order")
    if row is not None and "gpu_dropped" in row and int(row["gpu_dropped"]) > 0:
        notes.append(f"{int(row['gpu_dropped'])} device activity records dropped by CUPTI")
    if why:
        notes.append(why)
    return Clock(pid, True, source, "; ".join(notes), trace=trace)


def clock_dict(trace, pid: int | None = None) -> dict:
    """``clock_of(trace, pid).as_dict()``: the ``clock`` (and ``clock_note``) keys of a JSON output."""
    return clock_of(trace, pid).as_dict()


def launch_lag(trace, pid: int | None = None) -> dict | None:
    """The launch-to-start lag of a process's launches (``dev_start - t``, ns: how far the CPU ran
    ahead of the GPU): count, median, p90, p99, max; None on the CPU clock."""
    c = clock_of(trace, pid)
    if not c.device:
        return None
    la = trace.launches
    if len(la) > piece_rows():     # a long trace: the lags a piece at a time (no full-length copies)
        return _launch_lag_pieces(la, c.pid)
    m = la["dev_start"].to_numpy() >= 0
    if c.pid is not None:
        m &= la["pid"].to_numpy() == c.pid
    lag = (la["dev_start"].to_numpy(np.int64)[m] - la["t"].to_numpy(np.int64)[m]).astype(np.float64)
    if not len(lag):
        return None
    q = np.quantile(lag, [0.5, 0.9, 0.99])
    return {"launches": int(len(lag)), "median_ns": float(q[0]), "p90_ns": float(q[1]), "p99_ns": float(q[2]),
            "max_ns": float(lag.max())}


def _launch_lag_pieces(la, pid: int | None) -> dict | None:
    """:func:`launch_lag`'s figures from the lags read a piece of launches at a time: the same
    quantiles (order statistics of the int64 lags, numpy's interpolation: trace.piecewise.quantiles)."""
    start, t = la["dev_start"].to_numpy(), la["t"].to_numpy()
    p = None if pid is None else la["pid"].to_numpy()

    def lags():
        for lo, hi in spans(len(start), piece_rows()):
            s = np.asarray(start[lo:hi], np.int64)
            m = s >= 0
            if p is not None:
                m &= p[lo:hi] == pid
            yield s[m] - np.asarray(t[lo:hi], np.int64)[m]
            for a in (start, t) + ((p,) if p is not None else ()):
                release(a, lo, hi)
    ext = extent(lags)
    n, q = quantiles(lags, [0.5, 0.9, 0.99], ext)
    if not n:
        return None
    top = ext[2]
    return {"launches": int(n), "median_ns": float(q[0]), "p90_ns": float(q[1]), "p99_ns": float(q[2]),
            "max_ns": float(np.float64(top))}


def _has_device_time(tab) -> bool:
    col = tab["dev_start"].to_numpy()
    out = bool((col >= 0).any())
    release(col)                    # a streamed pass asks for a piece of blocks at a time
    return out


def _any_device_time(trace) -> bool:
    """Whether any launch or copy has a device start (once per trace: the column's pages given back)."""
    def compute():
        return _has_device_time(trace.launches) or _has_device_time(trace.copies)

    derived = getattr(trace, "derived", None)
    return compute() if derived is None else derived(("clock", "any device time"), compute)


def block_times(trace, blocks) -> tuple[np.ndarray, np.ndarray]:
    """(t_alloc, t_free) of ``blocks`` (rows of ``trace.blocks``) on each block's process clock:
    the axis the report's timeline and the live-bytes curves are drawn on."""
    t_alloc = blocks["t_alloc"].to_numpy(np.int64)
    t_free = blocks["t_free"].to_numpy(np.int64)
    if not len(blocks) or not _any_device_time(trace):
        return t_alloc, t_free
    pid = blocks["pid"].to_numpy()
    p0 = pid[0]
    if all(bool((pid[lo:hi] == p0).all()) for lo, hi in spans(len(pid))):
        # one process (a training run's every block): its clock's times straight from the columns, not
        # from copies of them (issue 30: four arrays of every block less, ~0.35 GB at 100 M events)
        c = clock_of(trace, int(p0))
        if not c.device:
            return t_alloc, t_free
        return (c.host_times(blocks["seq_alloc"].to_numpy(np.int64), t_alloc),
                c.host_times(blocks["seq_free"].to_numpy(np.int64), t_free))
    t_alloc, t_free = t_alloc.copy(), t_free.copy()
    for p in np.unique(pid):
        c = clock_of(trace, int(p))
        if not c.device:
            continue
        m = pid == p
        sa, sf = blocks["seq_alloc"].to_numpy(np.int64)[m], blocks["seq_free"].to_numpy(np.int64)[m]
        if 2 * len(sa) <= chunk_rows():     # one pass over the process's ops for both (elementwise)
            k = len(sa)
            both = c.host_times(np.concatenate([sa, sf]), np.concatenate([t_alloc[m], t_free[m]]))
            t_alloc[m], t_free[m] = both[:k], both[k:]
        else:
            t_alloc[m] = c.host_times(sa, t_alloc[m])
            t_free[m] = c.host_times(sf, t_free[m])
    return t_alloc, t_free
