"""The shim's gate for a window that ``run`` decides (native/shim/window.c): ``--capture-range signal``.

``run`` keeps the window's state in one 8-byte word of a small file in its ring folder, which every
process's shim maps read-only ($PYINTERPOSE_WINDOW_GATE_FILE) at its first gated call: 1 closed, 2 open.
While it reads 1, the shim writes no launch, copy, memset or access record (the allocation stream, markers
and window edges still go to the ring).  The drain's cut (pyinterpose/capture/window.py: the first record
at or after the signal's time) stays the ground truth; the gate is open wherever that window is: on the
SIGUSR2 that opens the window the word is written *before* the signal's time is taken, and on the one that
closes it *after*, so every record the drain keeps was written.  A process that cannot map the file
records everything (the drain still cuts the window)."""
from __future__ import annotations

import mmap
import os
import struct
import time

CLOSED, OPEN = 1, 2
FILE_NAME = "window-gate"


class SignalGate:
    def __init__(self, folder: str):
        self.path = os.path.join(folder, FILE_NAME)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            os.ftruncate(fd, mmap.PAGESIZE)
            self._mm = mmap.mmap(fd, mmap.PAGESIZE, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        finally:
            os.close(fd)
        self.open = False
        self._store(CLOSED)

    def _store(self, state: int) -> None:
        self._mm[0:8] = struct.pack("<Q", state)     # an aligned 8-byte word: the shim never sees it torn

    def toggle(self) -> int:
        """SIGUSR2: flip the window; returns the signal's time (CLOCK_MONOTONIC ns) for the drain's cut."""
        if not self.open:
            self.open = True
            self._store(OPEN)            # the shims record from here ...
            return time.monotonic_ns()   # ... so every record at or after this time is in the rings
        t = time.monotonic_ns()          # the window holds every record before this time ...
        self.open = False
        self._store(CLOSED)              # ... and the shims stop only after it
        return t

    def environment(self) -> dict[str, str]:
        return {"PYINTERPOSE_WINDOW_GATE_FILE": self.path}

    def close(self) -> None:
        try:
            self._mm.close()
        except (BufferError, ValueError):
            pass
