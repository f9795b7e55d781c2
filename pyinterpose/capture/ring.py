"""Consumer side of one process's event ring (producer: native/shim/shim.c)."""
from __future__ import annotations

import mmap
import os

import numpy as np

from . import records

SHM_DIR = "/dev/shm"
RING_MAGIC = 0x31474E4952495950


def ring_prefix(session: str) -> str:
    return f"pyinterpose-{session}-"


def list_rings(session: str) -> list[str]:
    """Names (in /dev/shm) of the rings of a capture session."""
    prefix = ring_prefix(session)
    try:
        return sorted(n for n in os.listdir(SHM_DIR) if n.startswith(prefix))
    except FileNotFoundError:
        return []


class Ring:
    """A mapped ring.  ``drain()`` copies committed records out and frees their slots."""

    def __init__(self, name: str):
        self.name = name
        self.path = os.path.join(SHM_DIR, name)
        fd = os.open(self.path, os.O_RDWR)
        try:
            size = os.fstat(fd).st_size
            self._mm = mmap.mmap(fd, size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        finally:
            os.close(fd)
        self._layout = records.header_layout()
        self.ready = self._field("magic") == RING_MAGIC
        self.capacity = self._field("capacity") if self.ready else 0
        from .. import _core

        self._ffi, self._lib = _core.ffi, _core.lib
        self._ptr = self._ffi.from_buffer(self._mm)
        self._lost = self._ffi.new("uint64_t *")
        self.lost_on_close = 0

    def _field(self, name: str):
        off, dt = self._layout[name]
        if dt.subdtype is not None:  # char array
            raw = self._mm[off:off + dt.itemsize]
            return raw.split(b"\0", 1)[0].decode(errors="replace")
        return int(np.frombuffer(self._mm, dtype=dt, count=1, offset=off)[0])

    def refresh(self) -> bool:
        if not self.ready:
            self.ready = self._field("magic") == RING_MAGIC
            if self.ready:
                self.capacity = self._field("capacity")
        return self.ready

    def header(self) -> dict:
        f = self._field
        return {"pid": f("pid"), "ppid": f("ppid"), "exe": f("exe"), "forked": bool(f("flags") & 1),
                "start_ns": f("start_ns"), "capacity": f("capacity"), "ring": self.name}

    def counters(self) -> dict:
        f = self._field
        return {"written": f("head") - 1, "consumed": f("tail") - 1, "waits": f("waits"),
                "lost": f("lost") + self.lost_on_close, "unscanned_launches": f("unscanned_launches"),
                "closed": bool(f("closed"))}

    @property
    def pending(self) -> int:
        return self._field("head") - self._field("tail")

    @property
    def closed(self) -> bool:
        return bool(self._field("closed"))

    def drain(self, out: np.ndarray, final: bool = False) -> np.ndarray:
        """Copy up to len(out) committed records into ``out``; returns the filled view."""
        if not self.ready:
            return out[:0]
        n = self._lib.pi_drain(self._ptr, self._ffi.from_buffer(out), len(out), int(final), self._lost)
        if final:
            self.lost_on_close += int(self._lost[0])
        return out[:n]

    def close(self, unlink: bool = True) -> None:
        try:
            self._ffi.release(self._ptr)
        except Exception:
            pass
        self._mm.close()
        if unlink:
            try:
                os.unlink(self.path)
            except FileNotFoundError:
                pass
