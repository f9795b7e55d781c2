"""The trace file format (version 1).  Documented in docs/trace-format.md.

    file    := header chunk*
    header  := MAGIC (8 bytes "PYINTRC\\0") | u32 version | u32 reserved
    chunk   := CHUNK_MAGIC (4 bytes "PIC1") | u32 type | u64 length | u32 crc32 | u32 flags | payload[length]

``crc32`` covers the stored payload; ``flags`` bit 0 = payload is zlib-compressed.
Chunk types:

    META     (1)  JSON object, the first chunk: command, view, knobs, t0_ns, host,
                  NVML link info, API names, record dtype description
    EVENTS   (2)  u32 pid | u32 count | count × 64-byte records (struct pi_event)
    PROCESS  (3)  JSON: one process's ring header (pid, ppid, exe, start_ns, forked)
    NVML     (4)  JSON: {"columns": [...], "rows": [[...], ...]} samples
    TRAILER  (5)  JSON: exit status, end time, per-process written/lost/waits
    WINDOW   (40) JSON: what part of the run the events cover (capture windows, flight recorder):
                  mode, steps in the run, each process's windows and the snapshot written at each start
    HISTORY  (41) JSON: one process's per-step history of the whole run (live/reserved bytes at step
                  boundaries, step peaks, allocations, live bytes per owner and per call site)

Chunks are appended while the target runs, each complete before the next
starts, so a file cut short by a crash reads back up to its last complete
chunk.  Nothing is pickled.
"""
from __future__ import annotations

import json
import struct
import zlib

MAGIC = b"PYINTRC\0"
VERSION = 1
HEADER = struct.Struct("<8sII")
CHUNK_MAGIC = b"PIC1"
CHUNK = struct.Struct("<4sIQII")
EVENTS_HEAD = struct.Struct("<II")

META, EVENTS, PROCESS, NVML, TRAILER = 1, 2, 3, 4, 5
WINDOW, HISTORY = 40, 41   # capture windows (pyinterpose/capture/window.py)
CHUNK_NAMES = {META: "meta", EVENTS: "events", PROCESS: "process", NVML: "nvml", TRAILER: "trailer",
               WINDOW: "window", HISTORY: "history"}
FLAG_ZLIB = 1


def encode_chunk(ctype: int, payload: bytes, compress: bool = False) -> bytes:
    flags = 0
    if compress:
        payload = zlib.compress(payload, 1)
        flags |= FLAG_ZLIB
    return CHUNK.pack(CHUNK_MAGIC, ctype, len(payload), zlib.crc32(payload), flags) + payload


def json_bytes(obj) -> bytes:
    return json.dumps(obj, separators=(",", ":"), default=str).encode()
