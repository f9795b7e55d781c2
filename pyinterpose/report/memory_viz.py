"""PyTorch memory snapshot (the pickle pytorch.org/memory_viz and
``python -m torch.cuda._memory_viz`` read), built from a trace's device blocks.

Mapping, blocks view (the default): every device block is both a *segment* (one
CUDA allocation) and the one *block* filling it:

* at ``t_alloc``: ``segment_alloc`` then ``alloc`` (same address and size);
* at ``t_free``:  ``free_requested``, ``free_completed``, ``segment_free``;
* ``segments`` (the final state) = blocks still live at the end of the trace, each
  with one ``active_allocated`` block of the segment's full size, so the viewer's
  backwards replay of ``device_traces`` from ``segments`` is consistent.

Reserved view (``trace.meta["view"] == "reserved"``): the device blocks *are* the
framework allocator's segments (PyTorch's ``cudaMalloc`` of its caching allocator),
so only ``segment_alloc`` / ``segment_free`` are written and each final segment
holds one ``inactive`` block: reserved bytes are real, allocated bytes are 0 (that
trace cannot see the tensors inside the segments).

Events are ordered by time (frees before allocs at the same instant, as in
live_bytes_curve).  ``time_us`` is absolute (microseconds since the epoch, from
the trace's ``start_time``), as PyTorch records it.  ``category`` is the block
class when given (the viewer colours by it); segment events carry ``"unknown"``,
so the category list always holds ``"unknown"``: PyTorch's viewer appends it
itself otherwise, through a misspelt name (``snapshot.categores.push``) that
throws and leaves the page blank.  ``frames`` come from the trace's call sites
(``pyinterpose.trace.stacks.frames_of``) when it has them, else ``[]``.  Physical VMM handles (``vmm_create``, address 0) get synthetic, disjoint
addresses above ``VMM_BASE`` so that address keys stay unique.

Written with pickle protocol 4 and built-in types only (dict/list/str/int/bool),
addresses as ints below 2**63 (the JS unpickler's limits).
"""
from __future__ import annotations

import pickle
from typing import Any

import numpy as np
import pandas as pd

from ..errors import PyinterposeError
from ..trace.model import Trace

VMM_BASE = 0x7E00_0000_0000_0000  # synthetic addresses for physical handles (< 2**63)


def _addresses(b: pd.DataFrame) -> np.ndarray:
    addr = b["address"].to_numpy(np.uint64).astype(np.int64, copy=True)
    zero = addr == 0
    if zero.any():
        sizes = b["size"].to_numpy(np.int64)[zero]
        # disjoint ranges, 2 MiB aligned, in block order
        aligned = (sizes + (2 << 20) - 1) // (2 << 20) * (2 << 20)
        addr[zero] = VMM_BASE + np.concatenate([[0], np.cumsum(aligned)[:-1]])
    return addr


def snapshot(trace: Trace, classes: pd.Series | None = None) -> dict[str, Any]:
    """The snapshot dict {"segments": [...], "device_traces": [[...], ...]}."""
    b = _allocator_blocks(trace)
    if len(b) and int(b["address"].to_numpy(np.uint64).max()) >= 2 ** 63:
        raise PyinterposeError("an address does not fit in a signed 64-bit int; memory_viz cannot read it")
    ndev = int(b["device"].max()) + 1 if len(b) else 1
    ndev = max(ndev, 1)
    device_traces: list[list[dict]] = [[] for _ in range(ndev)]
    segments: list[dict] = []
    if len(b) == 0:
        return {"segments": segments, "device_traces": device_traces}
    if (b["device"] < 0).any():
        raise PyinterposeError("device blocks with an unknown device (-1) cannot be placed in a snapshot")

    addr = _addresses(b)
    size = b["size"].to_numpy(np.int64)
    dev = b["device"].to_numpy(np.int64)
    stream = b["stream"].to_numpy(np.uint64)
    stream = (stream & np.uint64(0x7FFF_FFFF_FFFF_FFFF)).astype(np.int64)  # JS-safe
    freed = b["freed"].to_numpy(bool)
    if classes is not None:
        cat = classes.reindex(b["block_id"].to_numpy()).astype(object).fillna("other").astype(str).to_numpy()
    else:
        cat = None

    reserved_view = str(trace.meta.get("view", "")) == "reserved"
    epoch = trace.meta.get("start_time")
    epoch_us = int(round(float(epoch) * 1e6)) if isinstance(epoch, (int, float)) else 0
    frames = _frames(trace, b)

    n = len(b)
    rows = np.arange(n)
    t = np.concatenate([b["t_free"].to_numpy(np.int64)[freed], b["t_alloc"].to_numpy(np.int64)])
    is_alloc = np.concatenate([np.zeros(int(freed.sum()), bool), np.ones(n, bool)])
    r = np.concatenate([rows[freed], rows])
    order = np.lexsort((is_alloc, t))  # frees (False) before allocs at equal t

    for ev in order.tolist():
        i = int(r[ev])
        d = int(dev[i])
        common = {"addr": int(addr[i]), "size": int(size[i]), "stream": int(stream[i]),
                  "time_us": epoch_us + int(t[ev] // 1000), "frames": frames[i]}
        seg_ev = dict(common, category="unknown")
        if is_alloc[ev]:
            device_traces[d].append(dict(seg_ev, action="segment_alloc"))
            if not reserved_view:
                blk = dict(common, action="alloc")
                if cat is not None:
                    blk["category"] = cat[i]
                device_traces[d].append(blk)
        else:
            if not reserved_view:
                device_traces[d].append(dict(common, action="free_requested"))
                device_traces[d].append(dict(common, action="free_completed"))
            device_traces[d].append(dict(seg_ev, action="segment_free"))

    live = np.flatnonzero(~freed)
    live = live[np.argsort(addr[live], kind="stable")]
    for i in live.tolist():
        sz = int(size[i])
        if reserved_view:
            blk = {"size": sz, "requested_size": 0, "state": "inactive", "frames": []}
            used = 0
        else:
            blk = {"size": sz, "requested_size": sz, "state": "active_allocated", "frames": frames[i]}
            used = sz
        segments.append({"device": int(dev[i]), "address": int(addr[i]), "total_size": sz,
                         "stream": int(stream[i]), "segment_type": "large" if sz > (1 << 20) else "small",
                         "segment_pool_id": (0, 0), "allocated_size": used, "active_size": used,
                         "requested_size": used, "is_expandable": False, "frames": frames[i],
                         "blocks": [blk]})
    return {"segments": segments, "device_traces": device_traces}


def _allocator_blocks(trace: Trace) -> pd.DataFrame:
    """The device blocks a PyTorch snapshot would hold: those of the framework's allocator
    (``pyinterpose.analysis.owners.allocator_mask``) when that analysis is present and finds
    them; else every device block."""
    b = trace.device_blocks
    try:
        from ..analysis.owners import allocator_mask  # type: ignore[import-not-found]

        m = np.asarray(allocator_mask(trace), bool)
    except Exception:  # noqa: BLE001 - owners analysis not in this build
        return b
    if len(m) != len(trace.blocks) or not m.any():
        return b
    keep = pd.Series(m, index=trace.blocks.index).reindex(b.index).fillna(False).to_numpy(bool)
    return b[keep]


def _frames(trace: Trace, b: pd.DataFrame) -> list[list[dict]]:
    """Per block, its call stack as the viewer's frames ({filename, line, name}),
    innermost first; [] when the trace has no call sites (or no stacks API)."""
    empty: list[dict] = []
    out = [empty] * len(b)
    if "stack_id" not in b.columns:
        return out
    sid = b["stack_id"].to_numpy(np.int64)
    if not (sid >= 0).any():
        return out
    try:
        from ..trace.stacks import frames_of  # type: ignore[import-not-found]
    except Exception:  # noqa: BLE001 - no stacks API in this build
        return out
    cache: dict[int, list[dict]] = {}
    for j, s in enumerate(sid.tolist()):
        if s < 0:
            continue
        if s not in cache:
            try:
                fr = frames_of(trace, int(s))
            except Exception:  # noqa: BLE001
                fr = []
            cache[s] = [{"filename": str(f.get("filename") or f.get("object") or "??"),
                         "line": int(f.get("line") or 0),
                         "name": str(f.get("function") or "??")} for f in fr]
        out[j] = cache[s]
    return out


def write_snapshot(trace: Trace, path: str, classes: pd.Series | None = None) -> dict[str, int]:
    snap = snapshot(trace, classes=classes)
    with open(path, "wb") as f:
        pickle.dump(snap, f, protocol=4)
    return {"segments": len(snap["segments"]),
            "trace_entries": sum(len(d) for d in snap["device_traces"]),
            "blocks": len(_allocator_blocks(trace)), "device_blocks": len(trace.device_blocks)}


def check_consistency(snap: dict[str, Any]) -> None:
    """Replay ``device_traces`` forward and check the result equals ``segments``
    (what the viewer's backwards replay relies on).  Raises AssertionError."""
    for d, entries in enumerate(snap["device_traces"]):
        segs: dict[int, int] = {}
        blocks: dict[int, int] = {}
        for e in entries:
            a, s, act = e["addr"], e["size"], e["action"]
            if act == "segment_alloc":
                assert a not in segs, f"segment {a:#x} allocated twice"
                segs[a] = s
            elif act == "alloc":
                assert a in segs and segs[a] >= s, f"alloc {a:#x} outside any segment"
                assert a not in blocks, f"block {a:#x} allocated twice"
                blocks[a] = s
            elif act == "free_requested":
                assert blocks.get(a) == s, f"free of unknown block {a:#x}"
            elif act == "free_completed":
                assert blocks.pop(a, None) == s, f"free_completed of unknown block {a:#x}"
            elif act == "segment_free":
                assert segs.pop(a, None) == s, f"segment_free of unknown segment {a:#x}"
                assert a not in blocks, f"segment {a:#x} freed with a live block"
        final = {sg["address"]: sg["total_size"] for sg in snap["segments"] if sg["device"] == d}
        assert final == segs, f"device {d}: final segments differ from the replayed trace"
        for sg in snap["segments"]:
            assert sum(bk["size"] for bk in sg["blocks"]) == sg["total_size"]
        cats = {e["category"] for e in entries if "category" in e}
        assert not cats or "unknown" in cats, "categories without 'unknown' crash PyTorch's viewer"
