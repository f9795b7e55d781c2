"""Capture windows and the flight recorder: what of a run reaches the trace (``run --capture-range``,
``run --steps A:B``, ``run --flight-recorder N``), decided in the drain.

The shim records the allocation stream of the whole run whatever the window.  Per process, the drain
keeps:

- the definitions (strings, frames, stacks, context, device, clock records): always written;
- the live-block map (every allocation not yet freed, with its ALLOC and SITE records as the shim wrote
  them): when a window opens, the blocks live at that moment that the trace does not hold yet are
  written first, with their original records (address, size, stream, owner, call stack, original
  allocation time and sequence number), so lifetimes, peaks and the live set inside the window are
  exactly those of a full capture.  While a window is closed, the frees of blocks the trace holds are
  still written (their lifetimes stay exact) and nothing else is;
- the per-step history of the whole run (:class:`History`), a side table of the trace;
- with the flight recorder, the last N steps in full (records as they came) and the live map at the
  start of the oldest of them; nothing is written until a dump (:meth:`Windows.dump`).

Steps are the intervals between ``pyinterpose.mark_step()`` markers (the k-th marker of a process
begins its step k).  A process that writes no marker is cut into pseudo-steps of
``PSEUDO_STEP_RECORDS`` records (the flight recorder's memory stays bounded; the window metadata says
``steps_source: "records"``).
"""
from __future__ import annotations

import collections
import time

import numpy as np

from ..trace import records
from .window_gate import SignalGate

O = records.OP
KIND_VMM_RESERVE, KIND_VMM_CREATE, KIND_VMM_MAP, KIND_HOST = 7, 8, 9, 6
OOM_RESULT = 2             # cudaErrorMemoryAllocation == CUDA_ERROR_OUT_OF_MEMORY
PSEUDO_STEP_RECORDS = 1 << 16
HISTORY_ROWS = 4096        # rows of the per-step history before pairs of rows are merged
CAPTURE_RANGES = ("cudaProfilerApi", "markers", "signal")
WINDOW_START, WINDOW_STOP = 1, 2
SOURCE_PROFILER, SOURCE_MARKERS = 1, 2
GATE_SIGNAL, GATE_STEPS = 3, 4          # enum pi_window_source: gates of windows run decides

# records that define things other records refer to: written whatever the window
DEF_OPS = np.array(sorted({getattr(O, n) for n in ("STRING", "STRDATA", "FRAME", "STACK", "NOTE", "CLOCK",
                                                   "CONTEXT", "DEVICE", "GRAPH_DEF", "OBJECT", "APPLY")
                           if hasattr(O, n)}), dtype=np.uint16)
WATCH_OPS = np.array([O.ALLOC, O.FREE, O.SITE, O.MARKER, O.WINDOW], dtype=np.uint16)


def family(kind: int) -> int:
    """The address space a block's key lives in (native/reader: the same rule)."""
    return {KIND_HOST: 1, KIND_VMM_RESERVE: 2, KIND_VMM_CREATE: 3, KIND_VMM_MAP: 4}.get(kind, 0)


def live_kind(kind: int) -> bool:
    """Counted in live bytes: addressable device memory (not pinned host, not address reservations, not
    physical VMM handles: their mapping counts)."""
    return kind not in (KIND_HOST, KIND_VMM_RESERVE, KIND_VMM_CREATE)


def reserved_kind(kind: int) -> bool:
    """Counted in reserved bytes: device memory taken from CUDA (physical VMM handles, not mappings)."""
    return kind not in (KIND_HOST, KIND_VMM_RESERVE, KIND_VMM_MAP)


class History:
    """Per-step history of one process, bounded: one row per step until HISTORY_ROWS rows, then
    neighbouring rows are merged in pairs (a row then covers ``span`` steps; its peak is the highest of
    its steps', its counts their sums, its boundary values those at its end).  Live bytes per owner and
    per call site are kept as changes: (row, key, bytes at the row's end) when they differ from the
    previous row's end."""

    COLUMNS = ("step", "steps", "t_start", "t_end", "live_start", "live_end", "reserved_end", "peak",
               "allocs", "alloc_bytes", "frees")

    def __init__(self):
        self.span = 1
        self.rows: list[list[int]] = []
        self.site_changes: dict[tuple[int, int], int] = {}    # (row, site) -> bytes at the row's end
        self.owner_changes: dict[tuple[int, int], int] = {}   # (row, owner string id) -> bytes
        self.cur: list[int] | None = None                     # the row being filled
        self.cur_steps = 0
        self._site_last: dict[int, int] = {}
        self._owner_last: dict[int, int] = {}

    def begin(self, step: int, t: int, live: int) -> None:
        """A step begins (a row covering several steps goes on: its first step's values stay)."""
        if self.cur is None:
            self.cur = [step, 0, t, t, live, live, 0, live, 0, 0, 0]
        elif live > self.cur[7]:
            self.cur[7] = live

    def end_step(self, t: int, live: int, reserved: int, site_bytes: dict, owner_bytes: dict,
                 dirty_sites: set, dirty_owners: set) -> None:
        """Close the current step at time t (the values are those at the boundary)."""
        c = self.cur
        if c is None:
            return
        c[1] += 1
        c[3], c[5], c[6] = t, live, reserved
        self.cur_steps += 1
        if self.cur_steps < self.span:
            return                                          # this row covers more steps
        row = len(self.rows)
        self.rows.append(c)
        for s in dirty_sites:
            b = site_bytes.get(s, 0)
            if self._site_last.get(s, 0) != b:
                self.site_changes[(row, s)] = b
                self._site_last[s] = b
        for o in dirty_owners:
            b = owner_bytes.get(o, 0)
            if self._owner_last.get(o, 0) != b:
                self.owner_changes[(row, o)] = b
                self._owner_last[o] = b
        dirty_sites.clear()
        dirty_owners.clear()
        self.cur = None
        self.cur_steps = 0
        if len(self.rows) >= HISTORY_ROWS:
            self._merge()

    def _merge(self) -> None:
        out = []
        for i in range(0, len(self.rows) - 1, 2):
            a, b = self.rows[i], self.rows[i + 1]
            out.append([a[0], a[1] + b[1], a[2], b[3], a[4], b[5], b[6], max(a[7], b[7]), a[8] + b[8],
                        a[9] + b[9], a[10] + b[10]])
        for table in (self.site_changes, self.owner_changes):
            merged: dict[tuple[int, int], int] = {}
            for (row, k), v in sorted(table.items()):      # a row's later change wins
                merged[(row // 2, k)] = v
            table.clear()
            table.update(merged)
        self.rows = out
        self.span *= 2

    def note_alloc(self, size: int, live: int) -> None:
        c = self.cur
        if c is not None:
            c[8] += 1
            c[9] += size
            if live > c[7]:
                c[7] = live

    def note_free(self) -> None:
        if self.cur is not None:
            self.cur[10] += 1

    def to_json(self) -> dict:
        return {"span": self.span, "columns": list(self.COLUMNS), "rows": self.rows,
                "site_bytes": [[r, s, b] for (r, s), b in sorted(self.site_changes.items())],
                "owner_bytes": [[r, o, b] for (r, o), b in sorted(self.owner_changes.items())]}


class Block:
    __slots__ = ("alloc", "site", "size", "kind", "site_id", "owner", "in_trace", "seq")

    def __init__(self, alloc: bytes, size: int, kind: int, seq: int):
        self.alloc = alloc
        self.site: bytes | None = None
        self.size = size
        self.kind = kind
        self.site_id = -1
        self.owner = 0
        self.in_trace = False
        self.seq = seq


class Process:
    """The window state of one process (one ring)."""

    def __init__(self, pid: int, cfg: "Windows"):
        self.pid = pid
        self.cfg = cfg
        self.live: dict[tuple[int, int], Block] = {}
        self.last_alloc: Block | None = None     # the last ALLOC (its SITE comes next)
        self.live_bytes = 0
        self.reserved_bytes = 0
        self.peak = 0
        self.site_index: dict[tuple, int] = {}
        self.sites: list[list] = []              # [owner, py stack, native stack, pc, pid, latest alloc seq]
        self.site_bytes: dict[int, int] = collections.defaultdict(int)
        self.owner_bytes: dict[int, int] = collections.defaultdict(int)
        self.dirty_sites: set[int] = set()
        self.dirty_owners: set[int] = set()
        self.history = History()
        self.step = -1                           # the step the process is in (-1: before its first marker)
        self.work_since_marker = 0               # allocations and frees since the step's marker
        self.markers = 0
        self.steps_source = "markers"
        self.since_cut = 0                       # records since the last marker or pseudo-step cut
        self.pending_toggles: list[int] = []     # SIGUSR2 times not yet reached by this process's records
        self.strings: dict[int, str] = {}
        self.frame_defs: dict[int, str] = {}
        self.stack_defs: dict[int, tuple[int, int]] = {}
        # range windows
        self.open = False
        self.windows: list[dict] = []
        self.last_t = 0
        # the flight recorder
        self.defs: list[np.ndarray] = []
        self.chunks: collections.deque = collections.deque()   # [step, [arrays]]
        self.base: dict[tuple[int, int], list] = {}             # live at the oldest kept step's start
        self.base_last: list | None = None      # the last ALLOC moved into base (its SITE comes next)
        self.oom_seen = 0

    # ---- the live map and the history -----------------------------------------------------------
    def _alloc(self, seq: int, addr: int, size: int, aux: int, kind: int, raw: bytes) -> None:
        key = (family(kind), aux if kind == KIND_VMM_CREATE else addr)
        old = self.live.pop(key, None)
        if old is not None:
            self._account(old, -1)
        b = Block(raw, size, kind, seq)
        b.in_trace = self.open
        self.work_since_marker += 1
        self.live[key] = b
        self.last_alloc = b
        self._account(b, 1)
        self.history.note_alloc(size, self.live_bytes)

    def _site(self, seq: int, owner: int, py: int, native: int, pc: int, raw: bytes) -> None:
        b = self.last_alloc
        if b is None or b.seq != seq - 1 or b.site is not None:
            return
        b.site = raw
        sk = (owner, py, native, pc)
        sid = self.site_index.get(sk)
        if sid is None:
            sid = self.site_index[sk] = len(self.sites)
            self.sites.append([owner, py, native, pc, self.pid, b.seq])
        self.sites[sid][5] = b.seq
        if live_kind(b.kind):                    # move the block's bytes from "no site" to its site
            sb, ob = self.site_bytes, self.owner_bytes
            sb[b.site_id] -= b.size
            ob[b.owner] -= b.size
            sb[sid] += b.size
            ob[owner] += b.size
            ds, do = self.dirty_sites, self.dirty_owners
            ds.add(b.site_id)
            ds.add(sid)
            do.add(b.owner)
            do.add(owner)
        b.site_id, b.owner = sid, owner

    def _account(self, b: Block, sign: int) -> None:
        if live_kind(b.kind):
            self.live_bytes += sign * b.size
            self.site_bytes[b.site_id] += sign * b.size
            self.owner_bytes[b.owner] += sign * b.size
            self.dirty_sites.add(b.site_id)
            self.dirty_owners.add(b.owner)
            if self.live_bytes > self.peak:
                self.peak = self.live_bytes
        if reserved_kind(b.kind):
            self.reserved_bytes += sign * b.size

    def _free(self, addr: int, aux: int, kind: int) -> Block | None:
        b = self.live.pop((family(kind), aux if kind == KIND_VMM_CREATE else addr), None)
        self.work_since_marker += 1
        if b is not None:
            self._account(b, -1)
            self.history.note_free()
        return b

    def _marker(self, t: int) -> None:
        h = self.history
        if self.step >= 0 or h.cur is not None:
            h.end_step(t, self.live_bytes, self.reserved_bytes, self.site_bytes, self.owner_bytes,
                       self.dirty_sites, self.dirty_owners)
        self.step += 1
        self.markers += 1
        self.work_since_marker = 0
        self.since_cut = 0
        h.begin(self.step, t, self.live_bytes)

    def _string(self, batch: np.ndarray, i: int) -> None:
        rec = batch[i]
        n = int(rec["size"])
        k = -(-n // records.STR_PAYLOAD)
        rows = batch[i + 1:i + 1 + k]
        if len(rows) == k:
            text = rows.view(np.uint8).reshape(k, -1)[:, 16:48].tobytes()[:n]
            self.strings[int(rec["aux"])] = text.decode("utf-8", "replace")

    def _frame_or_stack(self, batch: np.ndarray, i: int) -> None:
        rec = batch[i]
        if int(rec["op"]) == O.STACK:
            self.stack_defs[int(rec["aux"])] = (int(rec["addr"]), int(rec["size"]))
            return
        n = int(rec["size"])
        k = -(-n // records.STR_PAYLOAD)
        rows = batch[i + 1:i + 1 + k]
        if len(rows) != k:
            return
        text = rows.view(np.uint8).reshape(k, -1)[:, 16:48].tobytes()[:n].decode("utf-8", "replace")
        if int(rec["flags"]) == 1:
            fname, _, func = text.partition("\0")
            self.frame_defs[int(rec["aux"])] = f"{fname.rsplit('/', 1)[-1]}:{int(rec['addr'])} in {func}"
        else:
            self.frame_defs[int(rec["aux"])] = f"{int(rec['stream']):#x} ({text.rsplit('/', 1)[-1]})"

    def site_frames(self, sid: int) -> list[str]:
        """The frames of a call site's Python (else native) stack, innermost first (run --live)."""
        owner, py, native, pc = self.sites[sid][:4]
        out, node, guard = [], py or native, 0
        while node and guard < 256:
            parent, frame = self.stack_defs.get(node, (0, 0))
            out.append(self.frame_defs.get(frame, "?"))
            node, guard = parent, guard + 1
        return out

    # ---- one batch of records, in ring order --------------------------------------------------------
    def feed(self, batch: np.ndarray) -> list[np.ndarray]:
        """Update the state with ``batch``; returns what to write now (range windows), in order."""
        op = batch["op"]
        out: list[np.ndarray] = []
        is_def = np.isin(op, DEF_OPS)
        for i in np.flatnonzero(op == O.STRING).tolist():
            self._string(batch, i)
        if self.cfg.names:      # frames and stacks, to name call sites while the run goes on (run --live)
            for i in np.flatnonzero((op == O.FRAME) | (op == O.STACK)).tolist():
                self._frame_or_stack(batch, i)
        watch = np.flatnonzero(np.isin(op, WATCH_OPS))
        mode = self.cfg.mode
        flight = mode == "flight"
        # keep[i]: written now whatever the window (range) or kept in the current step (flight)
        keep = (is_def | (op == O.WINDOW)) if not flight else ~is_def   # the program's window edges: always
        if flight and is_def.any():
            self.defs.append(batch[is_def].copy())
        raw_rows = batch.view(np.uint8).reshape(len(batch), batch.dtype.itemsize)
        if mode == "range" and self.cfg.range == "signal":
            self.pending_toggles += self.cfg.signal_toggles(self)
        # each SIGUSR2 acts at the first record at or after it (ring order); a signal later than every record
        # so far waits (records the program wrote before it may still be in the ring)
        toggle_at: list[int] = []
        start = 0
        for T in self.pending_toggles:
            idx = np.flatnonzero(batch["t_ns"][start:] >= T)
            if len(idx) == 0:
                break
            start += int(idx[0])
            toggle_at.append(start)
        del self.pending_toggles[:len(toggle_at)]
        ti = 0
        t_col = batch["t_ns"]
        seg = [0]                # first record not yet passed on

        def cut(at: int) -> None:
            s = seg[0]
            if at <= s:
                return
            if flight:
                self._flight_take(batch, keep, s, at)
            else:
                part = batch[s:at]
                sel = part if self.open else part[keep[s:at]]
                if len(sel):
                    out.append(sel.copy())
            seg[0] = at

        w_op = op[watch].tolist()
        w_res = batch["result"][watch].tolist()
        w_seq = batch["seq"][watch].tolist()
        w_addr = batch["addr"][watch].tolist()
        w_size = batch["size"][watch].tolist()
        w_aux = batch["aux"][watch].tolist()
        w_stream = batch["stream"][watch].tolist()
        w_flags = batch["flags"][watch].tolist()
        w_t = t_col[watch].tolist()
        OA, OF, OS, OM, OW = O.ALLOC, O.FREE, O.SITE, O.MARKER, O.WINDOW
        for j, i in enumerate(watch.tolist()):
            on_marker = False
            while ti < len(toggle_at) and toggle_at[ti] <= i:
                if toggle_at[ti] == i and w_op[j] == O.MARKER and not self.open:
                    # a window that opens at a step's marker begins with that step (as range "steps" opens
                    # after its marker): opened once the marker is counted, below
                    on_marker = True
                    break
                cut(toggle_at[ti])
                self._set_open(not self.open, int(t_col[toggle_at[ti]]), out, batch.dtype)
                ti += 1
            o = w_op[j]
            if o == OA:
                r = w_res[j]
                if r == 0:
                    self._alloc(w_seq[j], w_addr[j], w_size[j], w_aux[j], w_flags[j], raw_rows[i].tobytes())
                elif r == OOM_RESULT:
                    self.oom_seen += 1
            elif o == OS:
                self._site(w_seq[j], w_stream[j], w_aux[j], w_size[j], w_addr[j], raw_rows[i].tobytes())
            elif o == OF:
                if w_res[j] == 0:
                    b = self._free(w_addr[j], w_aux[j], w_flags[j])
                    if not flight and not self.open and b is not None and b.in_trace:
                        keep[i] = True        # the trace holds the block: its free too
            elif o == OM:
                cut(i)
                self._marker(w_t[j])
                if on_marker:
                    self._set_open(True, w_t[j], out, batch.dtype)
                    ti += 1
                if flight:
                    self._new_chunk()
                elif self.cfg.range == "steps":
                    a, b = self.cfg.steps
                    if self.step == a or (self.step == b and self.open):
                        self._set_open(self.step == a, w_t[j], out, batch.dtype)
            elif o == OW and mode == "range" and w_res[j] == 0:
                want = {"cudaProfilerApi": SOURCE_PROFILER, "markers": SOURCE_MARKERS}.get(self.cfg.range)
                if w_aux[j] == want:
                    on = w_flags[j] == WINDOW_START
                    if on != self.open:
                        cut(i + 1 if on else i)   # the start record outside, the stop record outside
                        self._set_open(on, w_t[j], out, batch.dtype)
        last_t = int(t_col[-1]) if len(batch) else self.last_t
        while ti < len(toggle_at):
            cut(toggle_at[ti])
            self._set_open(not self.open, int(t_col[toggle_at[ti]]), out, batch.dtype)
            ti += 1
        cut(len(batch))
        self.last_t = last_t
        if flight:
            self.since_cut += len(batch)
            if self.markers == 0 and self.since_cut >= PSEUDO_STEP_RECORDS:
                self.steps_source = "records"
                self._marker(self.last_t)
                self._new_chunk()
        return out

    def _set_open(self, on: bool, t: int, out: list, dtype: np.dtype) -> None:
        """Open (write the snapshot of the blocks live now that the trace lacks) or close the window."""
        if on == self.open:
            return
        if on:
            snap = sorted((b for b in self.live.values() if not b.in_trace), key=lambda b: b.seq)
            recs = []
            for b in snap:
                recs.append(b.alloc)
                if b.site is not None:
                    recs.append(b.site)
                b.in_trace = True
            if recs:
                out.append(np.frombuffer(b"".join(recs), dtype=dtype).copy())
            self.windows.append({"start_ns": t, "start_step": self.step, "snapshot_blocks": len(snap),
                                 "snapshot_bytes": sum(b.size for b in snap if live_kind(b.kind)),
                                 "live_at_start": self.live_bytes, "end_ns": None, "end_step": None})
        elif self.windows:
            self.windows[-1]["end_ns"] = t
            self.windows[-1]["end_step"] = self.step
            # the last step with allocations inside: a window closed before its step allocated anything
            # (at the step's marker, or right after it) ended with the step before
            self.windows[-1]["last_step"] = self.step - 1 if self.work_since_marker == 0 else self.step
        self.open = on

    # ---- the flight recorder ----------------------------------------------------------------------
    def _flight_take(self, batch: np.ndarray, keep: np.ndarray, s: int, e: int) -> None:
        if e <= s:
            return
        if not self.chunks:
            self.chunks.append([self.step, []])
        part = batch[s:e]
        m = keep[s:e]
        sel = part if m.all() else part[m]
        if len(sel):
            self.chunks[-1][1].append(sel.copy())

    def _new_chunk(self) -> None:
        self.chunks.append([self.step, []])
        while len(self.chunks) > self.cfg.flight_steps:
            _, arrays = self.chunks.popleft()
            for a in arrays:
                self._base_apply(a)

    def _base_apply(self, a: np.ndarray) -> None:
        """The live map at the oldest kept step's start, moved past a dropped step."""
        op = a["op"]
        idx = np.flatnonzero(((op == O.ALLOC) | (op == O.FREE)) & (a["result"] == 0) | (op == O.SITE))
        if len(idx) == 0:
            return
        raw = a.view(np.uint8).reshape(len(a), a.dtype.itemsize)
        ops, kinds = op[idx].tolist(), a["flags"][idx].tolist()
        seqs, addrs, auxs = a["seq"][idx].tolist(), a["addr"][idx].tolist(), a["aux"][idx].tolist()
        base = self.base
        for j, i in enumerate(idx.tolist()):
            o, kind = ops[j], kinds[j]
            if o == O.SITE:
                ent = self.base_last
                if ent is not None and ent[2] == seqs[j] - 1 and ent[1] is None:
                    ent[1] = raw[i].tobytes()
                continue
            key = (family(kind), auxs[j] if kind == KIND_VMM_CREATE else addrs[j])
            if o == O.ALLOC:
                ent = [raw[i].tobytes(), None, seqs[j]]
                base[key] = ent
                self.base_last = ent
            else:
                base.pop(key, None)

    def flight_records(self, dtype: np.dtype) -> tuple[list[np.ndarray], dict]:
        """(arrays to write in order: definitions, the snapshot, the kept steps; the window's metadata)."""
        snap = sorted(self.base.values(), key=lambda e: e[2])
        recs = []
        live0 = 0
        for alloc, site, _seq in snap:
            recs.append(alloc)
            if site is not None:
                recs.append(site)
            r = np.frombuffer(alloc, dtype=dtype)[0]
            if live_kind(int(r["flags"])):
                live0 += int(r["size"])
        out = list(self.defs)
        if recs:
            out.append(np.frombuffer(b"".join(recs), dtype=dtype).copy())
        first = None
        t0 = None
        for step, arrays in self.chunks:
            if arrays and first is None:
                first = step
                t0 = int(arrays[0]["t_ns"][0])
            out.extend(arrays)
        win = {"start_ns": t0, "start_step": first, "snapshot_blocks": len(snap), "snapshot_bytes": live0,
               "live_at_start": live0, "end_ns": self.last_t, "end_step": self.step, "last_step": self.step}
        return out, win

    def meta(self) -> dict:
        return {"pid": self.pid, "steps_in_run": self.step + 1, "steps_source": self.steps_source,
                "markers": self.markers, "peak_bytes": self.peak, "live_bytes_at_end": self.live_bytes,
                "oom_failures": self.oom_seen}

    def history_json(self) -> dict:
        h = self.history.to_json()
        h["pid"] = self.pid
        h["sites"] = [{"owner": self.strings.get(s[0], ""), "py_stack": s[1], "native_stack": s[2], "pc": s[3],
                       "pid": s[4], "last_seq": s[5]} for s in self.sites]
        h["owners"] = {str(k): self.strings.get(k, "") for k in {o for (_, o) in self.history.owner_changes}}
        # the row being filled (an unfinished step) is not a row: its live bytes are in the metadata
        return h


class Windows:
    """What of the run reaches the trace: ``mode`` "range" (``range``: cudaProfilerApi, markers, signal or
    steps with ``steps`` = (A, B)) or "flight" (``flight_steps`` = N)."""

    def __init__(self, mode: str, range: str | None = None, steps: tuple[int, int] | None = None,
                 flight_steps: int = 0):
        self.mode = mode
        self.range = range
        self.steps = steps
        self.flight_steps = flight_steps
        self.procs: dict[int, Process] = {}
        self.names = False                     # decode frames and stacks as they come (run --live)
        self._toggles: list[int] = []          # CLOCK_MONOTONIC ns of each SIGUSR2 (signal range)
        self._consumed: dict[int, int] = {}
        self.gate: SignalGate | None = None    # the shim's gate of a signal window (window_gate.py)

    def describe(self) -> dict:
        d = {"mode": self.mode}
        if self.mode == "range":
            d["capture_range"] = self.range
            if self.steps:
                d["steps"] = list(self.steps)
        else:
            d["flight_recorder_steps"] = self.flight_steps
        return d

    def shim_environment(self) -> dict[str, str]:
        """What the shim needs (native/shim/window.c): windows that the program opens itself are gated in
        the shim too (no launch, copy, memset or access record while closed)."""
        if self.mode != "range":
            return {}            # the flight recorder keeps every record of its last steps
        if self.range == "steps":   # the shim counts mark_step markers as the drain does
            a, b = self.steps
            return {"PYINTERPOSE_WINDOW_GATE": str(GATE_STEPS), "PYINTERPOSE_WINDOW_STEPS": f"{a}:{b}"}
        gate = {"cudaProfilerApi": SOURCE_PROFILER, "markers": SOURCE_MARKERS}.get(self.range or "")
        return {"PYINTERPOSE_WINDOW_GATE": str(gate)} if gate else {}

    def open_gate(self, folder: str | None) -> dict[str, str]:
        """A signal window: the shared word in ``folder`` (run's ring folder) that gates every shim; the
        environment that names it ({} when there is none: then only the drain cuts the window)."""
        if self.mode != "range" or self.range != "signal" or not folder:
            return {}
        try:
            self.gate = SignalGate(folder)
        except OSError:
            return {}
        return {"PYINTERPOSE_WINDOW_GATE": str(GATE_SIGNAL), **self.gate.environment()}

    def close_gate(self) -> None:
        if self.gate is not None:
            self.gate.close()

    def signal(self) -> None:
        """SIGUSR2 to ``run`` (its signal handler): the shim's gate flips around the signal's time."""
        self.toggle(self.gate.toggle() if self.gate is not None else time.monotonic_ns())

    def toggle(self, t_ns: int) -> None:
        """SIGUSR2 reached ``run`` at t_ns: the window of every process toggles there."""
        self._toggles.append(t_ns)

    def signal_toggles(self, proc: Process) -> list[int]:
        k = self._consumed.get(proc.pid, 0)
        new = self._toggles[k:]
        self._consumed[proc.pid] = len(self._toggles)
        return new

    def process(self, pid: int) -> Process:
        p = self.procs.get(pid)
        if p is None:
            p = self.procs[pid] = Process(pid, self)
        return p

    def feed(self, pid: int, batch: np.ndarray) -> list[np.ndarray]:
        return self.process(pid).feed(batch)

    def oom_failures(self) -> int:
        return sum(p.oom_seen for p in self.procs.values())

    def side_tables(self, procs: list[Process] | None = None) -> tuple[dict, list[dict]]:
        """(the WINDOW chunk, the HISTORY chunks) for the trace."""
        procs = list(self.procs.values()) if procs is None else procs
        win = dict(self.describe())
        win["processes"] = []
        for p in procs:
            m = p.meta()
            m["windows"] = p.windows
            win["processes"].append(m)
        return win, [p.history_json() for p in procs]

    def dump(self, writer, dtype: np.dtype) -> None:
        """Write the flight recorder's state (every process) to ``writer``: events, then the side tables."""
        win = dict(self.describe())
        win["processes"] = []
        for p in self.procs.values():
            arrays, w = p.flight_records(dtype)
            arrays = [a for a in arrays if len(a)]
            if arrays:
                allrec = np.concatenate(arrays)
                for k in range(0, len(allrec), 1 << 16):      # chunks of at most 4 MiB of records
                    writer.events(p.pid, allrec[k:k + (1 << 16)])
            m = p.meta()
            m["windows"] = [w]
            win["processes"].append(m)
        writer.window(win)
        for p in self.procs.values():
            writer.history(p.history_json())
