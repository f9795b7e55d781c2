"""What `run` says about the device clock (pyinterpose/capture/gpuclock.py): CLOCK records folded per
process while drained, the one-line report, and which processes count as missing the clock."""
from __future__ import annotations

import numpy as np

from pyinterpose.trace import records
from pyinterpose.capture.gpuclock import ClockTally, missing, report_line

O = records.OP


def clock_records(rows):
    """rows: (flags, result, size, stream) of CLOCK records, among other records."""
    ev = np.zeros(len(rows) + 2, dtype=records.event_dtype())
    ev["op"][0] = O.LAUNCH
    ev["op"][-1] = O.GPU
    ev["flags"][-1] = 1
    for i, (flags, result, size, stream) in enumerate(rows, start=1):
        ev["op"][i], ev["flags"][i], ev["result"][i], ev["size"][i], ev["stream"][i] = O.CLOCK, flags, result, size, stream
    return ev


def test_tally_folds_clock_records_across_batches():
    t = ClockTally()
    assert t.info() == {"clock": None}
    t.update(clock_records([(1, 0, 40, 0)]))
    t.update(clock_records([(1, 0, 25, 3), (1, 0, 60, 7)]))
    assert t.info() == {"clock": "cupti", "clock_reason": "", "clock_error_ns": 60, "gpu_dropped": 7}
    t.update(clock_records([(1, 4, 60, 7)]))           # a later failure: the times so far stay
    assert t.info()["clock"] == "cupti" and t.info()["clock_reason"] == "CUPTI failed"
    off = ClockTally()
    off.update(clock_records([(2, 3, 0, 0)]))
    assert off.info()["clock"] == "cpu" and "busy" in off.info()["clock_reason"]
    # the shim's note, when its text came in the same batch, says more than the reason's name
    from pyinterpose.capture.gpuclock import _string  # noqa: F401
    text = b"device clock off: CUPTI failed: cuptiGetTimestamp returned 999; analyses use the CPU clock"
    ev = clock_records([(2, 4, 0, 0)])
    ev["aux"][1] = 7
    strs = np.zeros(1 + -(-len(text) // 32), dtype=records.event_dtype())
    strs["op"][0], strs["aux"][0], strs["size"][0] = O.STRING, 7, len(text)
    raw = strs.view(np.uint8).reshape(len(strs), -1)
    for i in range(len(strs) - 1):
        chunk = text[32 * i:32 * i + 32]
        raw[1 + i, 16:16 + len(chunk)] = np.frombuffer(chunk, np.uint8)
        strs["op"][1 + i] = O.STRDATA
    noted = ClockTally()
    noted.update(np.concatenate([strs, ev]))
    assert noted.info()["clock_reason"] == "CUPTI failed: cuptiGetTimestamp returned 999"


def test_report_line():
    on = {"pid": 1, "clock": "cupti", "clock_reason": "", "clock_error_ns": 400, "gpu_dropped": 0}
    on2 = dict(on, pid=2, clock_error_ns=30)
    off = {"pid": 3, "clock": "cpu", "clock_reason": "libcupti not found", "clock_error_ns": -1, "gpu_dropped": 0}
    silent = {"pid": 4, "clock": None}
    assert report_line([silent]) is None
    assert report_line([on, on2, silent]) == "device clock: CUPTI (2 processes), alignment ±400 ns"
    assert report_line([off]) == "device clock: off — libcupti not found; analyses use the CPU clock"
    mixed = report_line([dict(on, clock_error_ns=1500, gpu_dropped=12), off])
    assert mixed.startswith("device clock: CUPTI (1 process), alignment ±1.5 µs")
    assert "12 device records DROPPED" in mixed and "CPU clock in 1 process (pid 3: libcupti not found)" in mixed
    assert [p["pid"] for p in missing([on, off, silent])] == [3]
