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
        self._f = open(path, "wb")
        self._f.write(fmt.HEADER.pack(fmt.MAGIC, fmt.VERSION, 0))
        self._write(fmt.META, fmt.json_bytes(meta), compress=False)
        self.events_written = 0

    def _write(self, ctype: int, payload: bytes, compress: bool) -> None:
        data = fmt.encode_chunk(ctype, payload, compress)
        with self._lock:
            self._f.write(data)
            self._f.flush()

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

    def trailer(self, info: dict) -> None:
        self._write(fmt.TRAILER, fmt.json_bytes(info), False)

    def close(self) -> None:
        with self._lock:
            if not self._f.closed:
                self._f.flush()
                os.fsync(self._f.fileno())
                self._f.close()
