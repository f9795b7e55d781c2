"""Live device memory by call stack, at one instant: the data of a flame graph.

A *moment* is an instant of the run and the device blocks live at it: the peak of live device
bytes (the instant the live device bytes curve (:mod:`pyinterpose.trace.live`) reaches its maximum, in the same
event order, so the bytes of a peak moment sum exactly to the trace's peak live bytes), and each
out-of-memory failure (the live set :func:`pyinterpose.analysis.oom.live_mask` gives: the failing
process's blocks by sequence number and the other processes' on that device by time).

Each live block is folded onto its call stack (``trace.blocks.stack_id``, the Python or native
stack the shim recorded, outermost frame first): :func:`fold` returns one row per distinct stack
with its bytes and blocks.  A block's bytes are those it adds to the live total
(:func:`pyinterpose.trace.model.counted_bytes`: a VMM mapping's own device bytes).  A block without a
stack (``--stacks none``, or a trace without call sites) is folded as ``<no call stack>`` above its
owner (the calling object), so every live byte is in the graph.  When the trace has more than one
process, each stack starts with a ``process PID`` frame.

Pure functions over the trace's tables; the report draws them (``report/flame.py``) and ``export
--format folded|speedscope`` writes them.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from ..trace.live import live_at_peak, scan
from ..trace.model import Trace, counted_bytes
from ..trace.stacks import frame_text
from ..trace.stacks import display_owner
from .oom import live_mask, oom_failures

NO_STACK = "<no call stack>"
UNKNOWN_OWNER = "<unknown object>"


@dataclass
class Moment:
    """The live set at one instant, folded by call stack."""
    name: str                 # "peak", "oom-1", "oom-2", ...
    title: str                # one line for people
    t_ns: int                 # the instant (trace clock)
    live_bytes: int           # sum of stacks.bytes
    stacks: pd.DataFrame      # frames (tuple of str, outermost first), bytes, blocks; largest first


def peak_bytes_per_block(trace: Trace) -> tuple[int, np.ndarray]:
    """(t of the peak, bytes each block holds at the peak): over the live events up to and
    including the event where live device bytes are highest; sums to the peak live bytes.  Read
    from the live-event order in pieces (:func:`pyinterpose.trace.live.scan`, ``live_at_peak``)."""
    best, k, t = scan(trace)
    if k < 0:
        return 0, np.zeros(len(trace.blocks), np.int64)
    if best <= 0:
        return t, np.zeros(len(trace.blocks), np.int64)
    return t, live_at_peak(trace, k)


def _frames_of_stacks(trace: Trace, stack_ids: np.ndarray) -> dict[int, tuple[str, ...]]:
    """Frames of each stack id, outermost first (each as one line of text)."""
    st = trace.stacks
    if len(st) == 0 or len(stack_ids) == 0:
        return {}
    parent = st["parent_id"].to_numpy(np.int64)
    frame = st["frame_id"].to_numpy(np.int64)
    texts = [frame_text(f).replace(";", ",") for f in trace.frames.to_dict("records")]
    memo: dict[int, tuple[str, ...]] = {-1: ()}

    def path(s: int) -> tuple[str, ...]:
        chain = []
        while s not in memo:
            chain.append(s)
            s = int(parent[s]) if 0 <= s < len(parent) else -1
        acc = memo[s]
        for node in reversed(chain):
            acc = acc + (texts[int(frame[node])],)
            memo[node] = acc
        return acc

    return {int(s): path(int(s)) for s in stack_ids.tolist() if 0 <= s < len(parent)}


def fold(trace: Trace, bytes_per_block: np.ndarray) -> pd.DataFrame:
    """The blocks with ``bytes_per_block > 0`` folded by call stack: columns ``frames`` (tuple of
    frame texts, outermost first), ``bytes``, ``blocks``; largest first, then by frames."""

    b = trace.blocks
    rows = np.flatnonzero(np.asarray(bytes_per_block) > 0)
    cols = {"frames": pd.Series([], dtype=object), "bytes": pd.Series([], dtype=np.int64),
            "blocks": pd.Series([], dtype=np.int64)}
    if len(rows) == 0:
        return pd.DataFrame(cols)
    # the rows live at the moment first, then their values (issue 30: not an int64 copy of every block's pid
    # and a string of every block's owner, ~0.2 GB at 100 M events, for the few thousand blocks folded)
    sid = (b["stack_id"].to_numpy()[rows].astype(np.int64) if "stack_id" in b else np.full(len(rows), -1, np.int64))
    owner = (b["owner"].iloc[rows].astype(str).to_numpy() if "owner" in b else np.full(len(rows), "", object))
    pids = b["pid"].to_numpy()
    pid = pids[rows].astype(np.int64)
    multi = bool(pids.min() != pids.max())        # more than one process
    del pids
    key = pd.DataFrame({"pid": pid if multi else 0, "sid": sid,
                        "owner": np.where(sid >= 0, "", owner), "bytes": np.asarray(bytes_per_block)[rows],
                        "one": 1})
    g = key.groupby(["pid", "sid", "owner"], sort=False).agg(bytes=("bytes", "sum"), blocks=("one", "sum"))
    g = g.reset_index()
    paths = _frames_of_stacks(trace, g["sid"].to_numpy(np.int64))
    frames = []
    for p, s, o in zip(g["pid"].tolist(), g["sid"].tolist(), g["owner"].tolist()):
        head = (f"process {p}",) if multi else ()
        f = paths.get(int(s)) if s >= 0 else None
        frames.append(head + (f if f else (NO_STACK, display_owner(o) if o else UNKNOWN_OWNER)))
    out = pd.DataFrame({"frames": frames, "bytes": g["bytes"].to_numpy(np.int64),
                        "blocks": g["blocks"].to_numpy(np.int64)})
    # distinct stack ids can print the same (a forked child's copy of a frame): merge them
    out = out.groupby("frames", sort=False, as_index=False).agg(bytes=("bytes", "sum"), blocks=("blocks", "sum"))
    out["_k"] = [";".join(f) for f in out["frames"]]
    out = out.sort_values(["bytes", "_k"], ascending=[False, True], kind="stable").drop(columns="_k")
    return out.reset_index(drop=True)


def at_peak(trace: Trace) -> Moment:
    t, per = peak_bytes_per_block(trace)
    st = fold(trace, per)
    total = int(st["bytes"].sum())
    return Moment("peak", f"peak of live device bytes, at {t / 1e9:.3f} s", t, total, st)


def at_ooms(trace: Trace, limit: int = 20) -> list[Moment]:
    """One moment per out-of-memory failure (the first ``limit``), in (pid, seq) order."""

    f = oom_failures(trace)
    out = []
    size = counted_bytes(trace.blocks)
    for k, row in enumerate(f.head(limit).to_dict("records"), 1):
        dev = int(row["device"]) if row.get("device") is not None else -1
        own, others = live_mask(trace, int(row["pid"]), int(row["seq"]), int(row["t"]), dev)
        st = fold(trace, np.where(own | others, size, 0))
        title = (f"out of memory {k} ({row['outcome']}): {int(row['size']):,} B requested by process "
                 f"{int(row['pid'])} at {int(row['t']) / 1e9:.3f} s")
        out.append(Moment(f"oom-{k}", title, int(row["t"]), int(st["bytes"].sum()), st))
    return out


def moments(trace: Trace) -> list[Moment]:
    """The peak, then each out-of-memory failure."""
    return [at_peak(trace)] + at_ooms(trace)


def folded_lines(m: Moment) -> list[str]:
    """Brendan Gregg's folded-stack text: ``outer;...;inner BYTES`` per stack."""
    return [f"{';'.join(f)} {int(v)}" for f, v in zip(m.stacks["frames"], m.stacks["bytes"])]
