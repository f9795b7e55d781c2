"""The drain: finds every ring of a capture session, empties them into the trace."""
from __future__ import annotations

import threading
import time

import numpy as np

from . import records
from .ring import Ring, list_rings


class Drain:
    """Runs in a thread of ``pyinterpose run`` while the target runs.

    Each ring is drained in bulk (C copy loop, then one trace chunk per batch).
    ``finish()`` does the final pass once the target has exited: it reads every
    committed record left, counts slots reserved by a killed producer that
    never got filled as lost, writes the per-process counters, and unlinks the
    rings."""

    def __init__(self, session: str, writer, batch: int = 1 << 16, interval_s: float = 0.005):
        self.session = session
        self.writer = writer
        self.interval_s = interval_s
        self._buf = np.empty(batch, dtype=records.event_dtype())
        self._rings: dict[str, Ring] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="pyinterpose-drain", daemon=True)
        self._last_scan = 0.0
        self.error: BaseException | None = None

    def start(self) -> None:
        self._thread.start()

    def _discover(self) -> None:
        for name in list_rings(self.session):
            if name not in self._rings:
                try:
                    self._rings[name] = Ring(name)
                except (FileNotFoundError, ValueError):
                    continue
        for ring in self._rings.values():
            if ring.ready is not True or not getattr(ring, "_announced", False):
                if ring.refresh() and not getattr(ring, "_announced", False):
                    self.writer.process(ring.header())
                    ring._announced = True

    def _drain_ring(self, ring: Ring, final: bool) -> int:
        total = 0
        pid = ring.header()["pid"] if ring.ready else 0
        while True:
            got = ring.drain(self._buf, final=final)
            if len(got) == 0:
                break
            self.writer.events(pid, got)
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
        try:
            while not self._stop.is_set():
                if self.poll() == 0:
                    self._stop.wait(self.interval_s)
        except BaseException as e:  # surfaced by finish(); the target keeps running
            self.error = e

    def finish(self) -> list[dict]:
        """Stop the thread, drain everything left, close and unlink the rings."""
        self._stop.set()
        self._thread.join()
        self._discover()
        procs = []
        for ring in self._rings.values():
            if not ring.ready:
                ring.close()
                continue
            self._drain_ring(ring, final=False)
            self._drain_ring(ring, final=True)
            info = ring.header()
            info.update(ring.counters())
            procs.append(info)
            ring.close()
        if self.error:
            raise self.error
        return procs
