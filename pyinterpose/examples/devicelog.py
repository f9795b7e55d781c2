"""simcuda's device log (``SIMCUDA_DEVICE_LOG=FILE``) as a pandas table: the ground truth of what ran on
the simulated GPU and when, for tests of the device clock (format: docs/simcuda-device-clock.md).

    from pyinterpose.examples.devicelog import read_device_log
    ops = read_device_log("dev.log")   # one row per device op, every process that wrote to the file

Columns: op (kernel, memcpy_htod, memcpy_dtoh, memcpy_dtod, memcpy_htoh, memset), pid, tid, corr, device,
stream, enqueue_ns, start_ns, end_ns, start_cupti, end_cupti, graph_id, graph_node_id, bytes, name
(None for copies and memsets).  Integers are int64/uint64; rows in file order.
"""
from __future__ import annotations

import pandas as pd

COLUMNS = ("op", "pid", "tid", "corr", "device", "stream", "enqueue_ns", "start_ns", "end_ns", "start_cupti",
           "end_cupti", "graph_id", "graph_node_id", "bytes", "name")
_UINT64 = ("enqueue_ns", "start_ns", "end_ns", "start_cupti", "end_cupti", "graph_node_id", "bytes")


def read_device_log(path: str) -> pd.DataFrame:
    """The log's rows (``#`` header lines skipped); a line cut short by a crash is dropped."""
    rows = []
    with open(path) as f:
        for line in f:
            if line.startswith("#") or not line.endswith("\n"):
                continue
            parts = line.rstrip("\n").split("\t")
            if len(parts) != len(COLUMNS):
                continue
            rows.append(parts)
    df = pd.DataFrame(rows, columns=list(COLUMNS))
    for c in COLUMNS[1:-1]:
        df[c] = df[c].astype("uint64" if c in _UINT64 else "int64")
    df["name"] = df["name"].where(df["name"] != "-", None)
    return df
