"""Consumer side of one process's event ring (producer: native/shim/shim.c).

A ring lives in /dev/shm (``shm_open``) or, when /dev/shm has no room, as a file in the session's ring
directory.  The drain maps a ring only once the producer has fully allocated it (so reading it can never
fault), then *attaches*: it sets the header's ``attached`` flag, starts the heartbeat lease and unlinks
the name — from then on only the two mappings hold the memory, and a crash of either side leaves
nothing behind in /dev/shm.
"""
from __future__ import annotations

import mmap
import os
import time

import numpy as np

from ..trace import records

SHM_DIR = "/dev/shm"
RING_MAGIC = 0x31474E4952495950
FLAG_FORKED, FLAG_FILE, FLAG_REDUCED = 1, 2, 4
DEFAULT_LEASE_S = 5.0


def ring_prefix(session: str) -> str:
    return f"pyinterpose-{session}-"


def list_rings(session: str, ring_dir: str | None = None) -> list[str]:
    """Paths of the rings of a capture session (in /dev/shm, then in the ring directory)."""
    prefix = ring_prefix(session)
    out = []
    for d in (SHM_DIR, ring_dir):
        if not d:
            continue
        try:
            out += [os.path.join(d, n) for n in sorted(os.listdir(d)) if n.startswith(prefix)]
        except OSError:
            continue
    return out


class NotAllocated(Exception):
    """The producer is still allocating the ring: try again later."""


class Ring:
    """A mapped ring.  ``drain()`` copies committed records out and frees their slots."""

    def __init__(self, path: str, lease_s: float = DEFAULT_LEASE_S):
        if os.sep not in path:  # a bare /dev/shm name
            path = os.path.join(SHM_DIR, path)
        self.path = path
        self.name = os.path.basename(path)
        self.lease_ns = int(lease_s * 1e9)
        fd = os.open(path, os.O_RDWR | os.O_CLOEXEC)
        try:
            st = os.fstat(fd)
            size = st.st_size
            # posix_fallocate in the producer allocates every block before the ring is used; a ring not
            # yet allocated could fault (SIGBUS) on a full tmpfs even when only read
            if size < records.header_size() or st.st_blocks * 512 < size:
                raise NotAllocated(path)
            self._mm = mmap.mmap(fd, size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        finally:
            os.close(fd)
        self._layout = records.header_layout()
        self.attached = False
        self.ready = False
        self.capacity = 0
        from .. import _core  # lazy: compiled cffi module, absent from an unbuilt tree

        self._ffi, self._lib = _core.ffi, _core.lib
        self._ptr = self._ffi.from_buffer(self._mm)
        self._lost = self._ffi.new("uint64_t *")
        self.lost_on_close = 0
        self.discarded = 0  # records drained but not written (the trace could not be written)
        self.refresh()

    def _field(self, name: str):
        off, dt = self._layout[name]
        if dt.subdtype is not None:  # char array
            raw = self._mm[off:off + dt.itemsize]
            return raw.split(b"\0", 1)[0].decode(errors="replace")
        return int(np.frombuffer(self._mm, dtype=dt, count=1, offset=off)[0])

    def _set(self, name: str, value: int) -> None:
        """One aligned 8-byte store (the producer reads these fields concurrently: never byte by byte)."""
        off, _ = self._layout[name]
        np.frombuffer(self._mm, dtype="<u8", count=1, offset=off)[0] = value

    def refresh(self) -> bool:
        """Ready once the producer published the header; then attach (lease, heartbeat, unlink)."""
        if not self.ready and self._field("magic") == RING_MAGIC:
            if self._field("version") != records.ring_version():
                raise ValueError(f"{self.path}: ring version {self._field('version')}, "
                                 f"this drain reads {records.ring_version()}")
            self.capacity = self._field("capacity")
            self.ready = True
        if self.ready and not self.attached:
            self._set("lease_ns", self.lease_ns)
            self.beat()
            self._set("attached", 1)
            self.attached = True
            self.unlink()
        return self.ready

    def beat(self, now_ns: int | None = None) -> None:
        """The drain's heartbeat (CLOCK_MONOTONIC, like the producer's clock)."""
        self._set("beat_ns", time.monotonic_ns() if now_ns is None else now_ns)

    def header(self) -> dict:
        f = self._field
        flags = f("flags")
        return {"pid": f("pid"), "ppid": f("ppid"), "exe": f("exe"), "forked": bool(flags & FLAG_FORKED),
                "start_ns": f("start_ns"), "capacity": f("capacity"), "ring": self.name,
                "ring_backing": "file" if flags & FLAG_FILE else "shm", "ring_reduced": bool(flags & FLAG_REDUCED)}

    def counters(self) -> dict:
        f = self._field
        return {"written": f("head") - 1, "consumed": f("tail") - 1, "waits": f("waits"),
                "lost": f("lost") + self.lost_on_close + self.discarded,
                "unscanned_launches": f("unscanned_launches"), "closed": bool(f("closed")),
                "oom_failures": f("oom_failures"),
                "abandoned": bool(f("abandoned"))}

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

    def unlink(self) -> None:
        try:
            os.unlink(self.path)
        except OSError:
            pass

    def close(self, unlink: bool = True) -> None:
        try:
            self._ffi.release(self._ptr)
        except Exception:
            pass
        self._mm.close()
        if unlink:
            self.unlink()
