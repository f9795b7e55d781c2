"""Append-only trace writer (used by ``pyinterpose run``'s drain)."""
from __future__ import annotations

import os
import threading

import numpy as np

from . import format as fmt


class TraceWriter:
    """Writes chunks as they come; every chunk is flushed whole, so the file is
    always readable up to its last complete chunk."""

    def __init__(self, path: str, meta: dict, compress: bool = True):
        self.path = path
        self.compress = compress
        self._lock = threading.Lock()
        self._f = open(path, "wb", buffering=0)  # every chunk goes out whole (no buffer left to flush)
        self._good = 0  # bytes up to the end of the last chunk written whole
        try:  # readers see "still being written" while this lock is held (released when the file closes)
            import fcntl

            fcntl.flock(self._f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            pass
        try:
            self._put(fmt.HEADER.pack(fmt.MAGIC, fmt.VERSION, 0))
            self._write(fmt.META, fmt.json_bytes(meta), compress=False)
        except OSError:
            self._f.close()
            raise
        self.events_written = 0

    def _put(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            n = self._f.write(view)
            view = view[n:]
        self._good += len(data)

    def _write(self, ctype: int, payload: bytes, compress: bool) -> None:
        data = fmt.encode_chunk(ctype, payload, compress)
        with self._lock:
            self._put(data)

    def rollback(self) -> None:
        """After a failed write (disk full, file-size limit): cut the partial chunk off, so the file ends
        at its last complete chunk (and a later small chunk, e.g. the trailer, may still fit)."""
        with self._lock:
            if not self._f.closed:
                os.ftruncate(self._f.fileno(), self._good)
                self._f.seek(self._good)

    def events(self, pid: int, records: np.ndarray) -> None:
        if len(records) == 0:
            return
        payload = fmt.EVENTS_HEAD.pack(pid & 0xFFFFFFFF, len(records)) + records.tobytes()
        self._write(fmt.EVENTS, payload, self.compress)
        self.events_written += len(records)

    def process(self, info: dict) -> None:
        self._write(fmt.PROCESS, fmt.json_bytes(info), False)

    def nvml(self, columns: list[str], rows: list[list]) -> None:
        self._write(fmt.NVML, fmt.json_bytes({"columns": columns, "rows": rows}), self.compress)

    def window(self, info: dict) -> None:
        self._write(fmt.WINDOW, fmt.json_bytes(info), False)

    def history(self, table: dict) -> None:
        self._write(fmt.HISTORY, fmt.json_bytes(table), self.compress)

    def trailer(self, info: dict) -> None:
        self._write(fmt.TRAILER, fmt.json_bytes(info), False)

    def close(self) -> None:
        with self._lock:
            if not self._f.closed:
                try:
                    os.fsync(self._f.fileno())
                except OSError:
                    pass
                self._f.close()
