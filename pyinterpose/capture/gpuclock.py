"""The device clock as ``pyinterpose run`` sees it: each process's CLOCK records (native/shim/cupti.c),
tallied while the drain copies them out, and the line ``run`` prints about them.

``--gpu-clock`` reaches the shim as ``PYINTERPOSE_GPU_CLOCK``: ``auto`` (CUPTI when it can be loaded
and is free), ``cupti`` (the same in the shim; ``run`` then fails loudly, with exit status
:data:`GPU_CLOCK_MISSING_EXIT`, when a process that ran device work got no device clock) and ``off``
(libcupti is never loaded).  The trace itself holds the same records: the reader's
``processes.clock`` / ``clock_note`` columns are the authority, this is only the summary at the end
of the run.
"""
from __future__ import annotations

import numpy as np

from ..trace import records

MODES = ("auto", "cupti", "off")
GPU_CLOCK_MISSING_EXIT = 4   # --gpu-clock cupti and some process ran without the device clock
CLOCK_CUPTI = 1              # enum pi_clock_state
REASONS = {                  # enum pi_clock_reason
    1: "--gpu-clock off",
    2: "libcupti not found",
    3: "CUPTI busy (another subscriber holds it: Nsight, torch.profiler, a debugger)",
    4: "CUPTI failed",
    5: "fork() child (CUPTI belongs to the parent)",
    6: "libcupti lacks a function the shim needs",
}


class ClockTally:
    """One process's CLOCK records, folded as they are drained."""

    def __init__(self):
        self.seen = False
        self.cupti = False
        self.reason = 0
        self.note = ""               # the shim's own words, when the batch holding the note had its text
        self.error_ns = -1
        self.dropped = 0

    def update(self, got: np.ndarray) -> None:
        rec = got[got["op"] == records.OP.CLOCK]
        if len(rec) == 0:
            return
        self.seen = True
        on = rec["flags"] == CLOCK_CUPTI
        if on.any():
            self.cupti = True
            self.error_ns = max(self.error_ns, int(rec["size"][on].max()))
        res = rec["result"][rec["result"] != 0]
        if len(res):
            self.reason = int(res[-1])
        self.dropped = max(self.dropped, int(rec["stream"].max()))
        noted = rec["aux"][rec["aux"] != 0]
        if len(noted):
            self.note = _string(got, int(noted[-1])) or self.note

    def why(self) -> str:
        """Why the device clock is off (or stopped): the note without its "device clock ...:" lead and
        its "; analyses use the CPU clock" tail, else the reason's name."""
        note = self.note
        if note:
            head, sep, rest = note.partition(": ")
            note = (rest if sep and head.startswith("device clock") else note).split("; analyses use")[0]
        return note or REASONS.get(self.reason, "")

    def info(self) -> dict:
        """The trailer's per-process fields."""
        if not self.seen:
            return {"clock": None}
        return {"clock": "cupti" if self.cupti else "cpu", "clock_reason": self.why() if self.reason else "",
                "clock_error_ns": self.error_ns, "gpu_dropped": self.dropped}


def _string(got: np.ndarray, sid: int) -> str:
    """The text of string `sid` when its STRING record (and the STRDATA after it) is in `got`."""
    idx = np.flatnonzero((got["op"] == records.OP.STRING) & (got["aux"] == sid))
    if len(idx) == 0:
        return ""
    i, n = int(idx[-1]), int(got["size"][idx[-1]])
    k = -(-n // records.STR_PAYLOAD)
    if i + 1 + k > len(got):
        return ""
    raw = got[i + 1:i + 1 + k].view(np.uint8).reshape(k, got.dtype.itemsize)[:, 16:48].tobytes()[:n]
    return raw.decode(errors="replace")


def _ns(ns: int) -> str:
    return f"{ns} ns" if ns < 1000 else f"{ns / 1000:.1f} µs"


def missing(procs: list[dict]) -> list[dict]:
    """The processes that ran device work without the device clock."""
    return [p for p in procs if p.get("clock") == "cpu"]


def report_line(procs: list[dict]) -> str | None:
    """"device clock: CUPTI (2 processes), alignment ±0.4 µs" or "device clock: off — libcupti not found;
    analyses use the CPU clock"; None when no process ran device work."""
    seen = [p for p in procs if p.get("clock")]
    if not seen:
        return None
    on = [p for p in seen if p["clock"] == "cupti"]
    off = missing(seen)
    parts = []
    if on:
        err = max(p.get("clock_error_ns", -1) for p in on)
        n = len(on)
        parts.append(f"CUPTI ({n} process{'es' if n != 1 else ''})"
                     + (f", alignment ±{_ns(err)}" if err >= 0 else ""))
        stopped = [p for p in on if p.get("clock_reason")]
        if stopped:
            parts.append(f"stopped early in pid {stopped[0]['pid']}: {stopped[0]['clock_reason']}")
        dropped = sum(int(p.get("gpu_dropped") or 0) for p in on)
        if dropped:
            parts.append(f"{dropped} device records DROPPED by CUPTI (their device times are missing)")
    if off:
        why = off[0].get("clock_reason") or "unknown"
        if on:
            parts.append(f"CPU clock in {len(off)} process{'es' if len(off) != 1 else ''} "
                         f"(pid {off[0]['pid']}: {why})")
        else:
            parts.append(f"off — {why}; analyses use the CPU clock")
    return "device clock: " + "; ".join(parts)
