"""The drain: finds every ring of a capture session, empties them into the trace."""
from __future__ import annotations

import os
import threading
import time

import numpy as np

from ..trace import records
from .gpuclock import ClockTally
from .ring import DEFAULT_LEASE_S, NotAllocated, Ring, list_rings

UNRECORDED_PREFIX = "unrecorded-"


class Drain:
    """Runs in a thread of ``pyinterpose run`` while the target runs.

    Each ring is drained in bulk (C copy loop, then one trace chunk per batch).
    A second thread beats the heartbeat of every attached ring (the producers'
    liveness lease), independent of how long a write takes.  When the trace
    cannot be written any more (disk full, file-size limit) the drain keeps
    emptying the rings — the program never stalls — and counts what it had to
    discard as lost.  ``finish()`` does the final pass once the target has
    exited: it reads every committed record left, counts slots reserved by a
    killed producer that never got filled as lost, writes the per-process
    counters, and releases the rings."""

    def __init__(self, session: str, writer, batch: int = 1 << 16, interval_s: float = 0.005,
                 ring_dir: str | None = None, lease_s: float = DEFAULT_LEASE_S):
        self.session = session
        self.writer = writer
        self.interval_s = interval_s
        self.ring_dir = ring_dir
        self.lease_s = lease_s
        self._buf = np.empty(batch, dtype=records.event_dtype())
        self._rings: dict[str, Ring] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="pyinterpose-drain", daemon=True)
        self._beat = threading.Thread(target=self._beat_loop, name="pyinterpose-heartbeat", daemon=True)
        self._last_scan = 0.0
        self.write_error: str | None = None  # why the trace stopped being written
        self.error: str | None = None        # an unexpected drain failure (the capture goes on discarding)
        self.windows = None                  # capture windows / flight recorder (window.Windows), or None
        self.dumper = None                   # flight recorder dumps (window_run.Dumper), or None

    def start(self) -> None:
        self._thread.start()
        self._beat.start()

    # -- writing, or discarding once the trace cannot be written -------------------------------------
    def _write(self, fn, *args) -> bool:
        if self.write_error is None:
            try:
                fn(*args)
                return True
            except OSError as e:
                self.write_error = f"cannot write the trace: {e.strerror or e}"
                try:
                    self.writer.rollback()
                except Exception:  # noqa: BLE001 - best effort: the reader stops at a partial chunk
                    pass
        return False

    def _discover(self) -> None:
        for path in list_rings(self.session, self.ring_dir):
            if path not in self._rings:
                try:
                    self._rings[path] = Ring(path, lease_s=self.lease_s)
                    self._rings[path].clock = ClockTally()   # the device clock's records, for run's report
                except (OSError, ValueError, NotAllocated):
                    continue
        for ring in self._rings.values():
            if not getattr(ring, "_announced", False) and ring.refresh():
                self._write(self.writer.process, ring.header())
                ring._announced = True

    def _drain_ring(self, ring: Ring, final: bool) -> int:
        total = 0
        pid = ring.header()["pid"] if ring.ready else 0
        while True:
            got = ring.drain(self._buf, final=final)
            if len(got) == 0:
                break
            if hasattr(ring, "clock"):
                ring.clock.update(got)
            if self.windows is None:
                if not self._write(self.writer.events, pid, got):
                    ring.discarded += len(got)
            else:   # capture windows (window.py): what of the batch the trace gets now
                for part in self.windows.feed(pid, got):
                    if not self._write(self.writer.events, pid, part):
                        ring.discarded += len(part)
                if self.dumper is not None:
                    self.dumper.after_batch(self)
            total += len(got)
            if len(got) < len(self._buf) and not final:
                break
        return total

    def poll(self) -> int:
        now = time.monotonic()
        if now - self._last_scan > 0.05:
            self._discover()
            self._last_scan = now
        n = 0
        for ring in list(self._rings.values()):
            if ring.ready:
                n += self._drain_ring(ring, final=False)
        return n

    def _loop(self) -> None:
        failures = 0
        while not self._stop.is_set():
            try:
                if self.dumper is not None:
                    self.dumper.poll(self)     # SIGUSR1: a dump, from this thread (no race with the feed)
                if self.poll() == 0:
                    self._stop.wait(self.interval_s)
                failures = 0
            except Exception as e:  # noqa: BLE001 - the target keeps running; reported by finish()
                self.error = self.error or f"{type(e).__name__}: {e}"
                failures += 1
                self._stop.wait(min(0.5, 0.01 * failures))

    def _beat_loop(self) -> None:
        period = max(0.005, min(0.1, self.lease_s / 20))
        while not self._stop.wait(period):
            now = time.monotonic_ns()
            for ring in list(self._rings.values()):
                if ring.attached:
                    try:
                        ring.beat(now)
                    except (ValueError, OSError):  # closed meanwhile
                        pass

    def unrecorded(self) -> list[dict]:
        """Processes that could not get a ring, from the status lines the shim left in the ring dir."""
        out = []
        if not self.ring_dir:
            return out
        try:
            names = sorted(os.listdir(self.ring_dir))
        except OSError:
            return out
        for n in names:
            if not n.startswith(UNRECORDED_PREFIX):
                continue
            try:
                with open(os.path.join(self.ring_dir, n), encoding="utf-8", errors="replace") as f:
                    line = f.readline().rstrip("\n")
                head, _, exe = line.partition("\t")
                pid, ppid, forked, reason = head.split(" ", 3)
                out.append({"pid": int(pid), "ppid": int(ppid), "forked": forked == "1", "exe": exe,
                            "reason": reason})
            except (OSError, ValueError):
                out.append({"pid": int(n[len(UNRECORDED_PREFIX):] or 0) if n[len(UNRECORDED_PREFIX):].isdigit()
                            else 0, "reason": "not recorded (status unreadable)"})
        return out

    def finish(self) -> list[dict]:
        """Stop the threads, drain everything left, release the rings."""
        self._stop.set()
        self._thread.join()
        self._beat.join()
        try:
            self._discover()
        except Exception as e:  # noqa: BLE001
            self.error = self.error or f"{type(e).__name__}: {e}"
        procs = []
        for ring in self._rings.values():
            try:
                if not ring.ready:
                    ring.close()
                    continue
                self._drain_ring(ring, final=False)
                self._drain_ring(ring, final=True)
                info = ring.header()
                info.update(ring.counters())
                info.update(ring.clock.info() if hasattr(ring, "clock") else {})
                procs.append(info)
            except Exception as e:  # noqa: BLE001
                self.error = self.error or f"{type(e).__name__}: {e}"
            finally:
                try:
                    ring.close()
                except Exception:  # noqa: BLE001
                    pass
        # names created after the last scan (their producers give up waiting after the attach grace)
        for path in list_rings(self.session, self.ring_dir):
            try:
                os.unlink(path)
            except OSError:
                pass
        return procs
