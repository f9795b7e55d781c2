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
addresses as ints below 2**63 (the JS unpickler's limits).  :func:`snapshot` builds the
objects (tests, small traces); :func:`write_snapshot` streams the same pickle from the
columns (report.pickle_stream) without building one Python object per entry.
"""
from __future__ import annotations

import pickle
from typing import Any

import numpy as np
import pandas as pd

from ..errors import PyinterposeError
from ..analysis.owners import allocator_mask
from ..trace.model import Trace
from ..trace.stacks import frames_of
from . import pickle_stream as P
from ..outfile import atomic_output
from . import memory_viz_stream as S
from .pickle_stream import Const, Int, Ref, write_rows_from

VMM_BASE = S.VMM_BASE          # synthetic addresses for physical handles (< 2**63)
UNKNOWN = "unknown"               # the category of a block without a lifetime class (and one the viewer needs)


def _addresses(b: pd.DataFrame) -> np.ndarray:
    addr = b["address"].to_numpy(np.uint64).astype(np.int64, copy=True)
    zero = addr == 0
    if zero.any():
        sizes = b["size"].to_numpy(np.int64)[zero]
        # disjoint ranges, 2 MiB aligned, in block order
        aligned = (sizes + (2 << 20) - 1) // (2 << 20) * (2 << 20)
        addr[zero] = VMM_BASE + np.concatenate([[0], np.cumsum(aligned)[:-1]])
    return addr


class _Columns:
    """The per-block columns and the time-ordered event list shared by :func:`snapshot` and
    :func:`write_snapshot`."""

    def __init__(self, trace: Trace, classes: pd.Series | None):
        b = _allocator_blocks(trace, _COLUMNS)
        self.blocks = b
        self.classes = None
        self.reserved_view = str(trace.meta.get("view", "")) == "reserved"
        self.live = np.zeros(0, np.int64)
        epoch = trace.meta.get("start_time")
        self.epoch_us = int(round(float(epoch) * 1e6)) if isinstance(epoch, (int, float)) else 0
        self.end_us = max(0, int(trace.duration_ns) // 1000)
        if len(b) and int(b["address"].to_numpy(np.uint64).max()) >= 2 ** 63:
            raise PyinterposeError("an address does not fit in a signed 64-bit int; memory_viz cannot read it")
        ndev = int(b["device"].max()) + 1 if len(b) else 1
        self.ndev = max(ndev, 1)
        if len(b) == 0:
            return
        if (b["device"] < 0).any():
            raise PyinterposeError("device blocks with an unknown device (-1) cannot be placed in a snapshot")
        self.addr = _addresses(b)
        self.size = b["size"].to_numpy(np.int64)
        self.dev = b["device"].to_numpy(np.int64)
        stream = b["stream"].to_numpy(np.uint64)
        self.stream = (stream & np.uint64(0x7FFF_FFFF_FFFF_FFFF)).astype(np.int64)  # JS-safe
        self.freed = freed = b["freed"].to_numpy(bool)
        self.classes = classes
        n = len(b)
        rows = np.arange(n)
        t = np.concatenate([b["t_free"].to_numpy(np.int64)[freed], b["t_alloc"].to_numpy(np.int64)])
        is_alloc = np.concatenate([np.zeros(int(freed.sum()), bool), np.ones(n, bool)])
        r = np.concatenate([rows[freed], rows])
        # frees (False) before allocs at equal t; one int64 key sorts faster than a lexsort
        if len(t) and -(1 << 61) < int(t.min()) and int(t.max()) < (1 << 61):
            order = np.argsort(t * 2 + is_alloc, kind="stable")
        else:
            order = np.lexsort((is_alloc, t))
        # the events in time order: block row, time, alloc (True) or free
        self.ev_row, self.ev_t, self.ev_alloc = r[order], t[order], is_alloc[order]
        live = np.flatnonzero(~freed)
        self.live = live[np.argsort(self.addr[live], kind="stable")]

    @property
    def use_categories(self) -> bool:
        """Blocks view with classes: every block and its segment carry the block's class.  Otherwise no
        event has a category and the viewer gives each block (each segment) a colour of its own."""
        return self.classes is not None and not self.reserved_view

    def categories(self) -> np.ndarray | None:
        """Per block, its class name ("unknown" when it has none); None without classes."""
        if not self.use_categories:
            return None
        return self.classes.reindex(self.blocks["block_id"].to_numpy()).astype(object).fillna(UNKNOWN).astype(str).to_numpy()

    def category_codes(self) -> tuple[np.ndarray, list[str]]:
        """The same as codes into a list of names (equal names may repeat), without a string per block."""
        cls = self.classes.reindex(self.blocks["block_id"].to_numpy())
        codes, uniq = pd.factorize(cls, use_na_sentinel=True)
        names = [str(u) for u in pd.Series(uniq, dtype=object)] + [UNKNOWN]
        return np.where(codes < 0, len(names) - 1, codes).astype(np.int64), names

    def snapshot_event(self, d: int, frames: list) -> dict[str, Any]:
        return _snapshot_event(self.epoch_us + self.end_us, self.use_categories, frames)

    def segment(self, i: int, frames: list) -> dict[str, Any]:
        return _segment(int(self.dev[i]), int(self.addr[i]), int(self.size[i]), int(self.stream[i]), frames)


def _snapshot_event(time_us: int, categories: bool, frames: list) -> dict[str, Any]:
    """The device trace's last entry: the snapshot itself, at the trace's end (PyTorch records one when
    a snapshot is taken; the viewer draws nothing for it).  With categories it carries "unknown", which
    the viewer needs in its list (else it stops on a misspelt name, ``snapshot.categores.push``)."""
    ev = {"action": "snapshot", "addr": 0, "size": 0, "stream": 0, "time_us": time_us, "frames": frames}
    if categories:
        ev["category"] = UNKNOWN
    return ev


def _segment(dev: int, addr: int, sz: int, stream: int, frames: list) -> dict[str, Any]:
    """The final-state segment of a live block (one block fills it: in a reserved view that block is
    the segment itself, its frames say so)."""
    blk = {"size": sz, "requested_size": sz, "state": "active_allocated", "frames": frames}
    used = sz
    return {"device": dev, "address": addr, "total_size": sz,
            "stream": stream, "segment_type": "large" if sz > (1 << 20) else "small",
            "segment_pool_id": (0, 0), "allocated_size": used, "active_size": used,
            "requested_size": used, "is_expandable": False, "frames": frames,
            "blocks": [blk]}


def snapshot(trace: Trace, classes: pd.Series | None = None) -> dict[str, Any]:
    """The snapshot dict {"segments": [...], "device_traces": [[...], ...], "pyinterpose": {...}} as Python
    objects (:func:`write_snapshot` streams the same pickle without building them)."""
    c = _Columns(trace, classes)
    device_traces: list[list[dict]] = [[] for _ in range(c.ndev)]
    segments: list[dict] = []
    stacks, fidx = _stack_frames(trace, c.blocks)
    info = _about(trace, c)
    if len(c.blocks) == 0:
        return {"segments": segments, "device_traces": device_traces, "pyinterpose": info}
    addr, size, stream, dev, cat = c.addr, c.size, c.stream, c.dev, c.categories()
    frames = [stacks[j] for j in fidx.tolist()]
    for i, t, is_alloc in zip(c.ev_row.tolist(), c.ev_t.tolist(), c.ev_alloc.tolist()):
        d = int(dev[i])
        common = {"addr": int(addr[i]), "size": int(size[i]), "stream": int(stream[i]),
                  "time_us": c.epoch_us + int(t // 1000), "frames": frames[i]}
        tagged = dict(common, category=cat[i]) if cat is not None else common
        if is_alloc:
            device_traces[d].append(dict(tagged, action="segment_alloc"))
            device_traces[d].append(dict(tagged, action="alloc"))
        else:
            device_traces[d].append(dict(common, action="free_requested"))
            device_traces[d].append(dict(common, action="free_completed"))
            device_traces[d].append(dict(common, action="segment_free"))
    for d in range(c.ndev):
        if device_traces[d]:
            device_traces[d].append(c.snapshot_event(d, stacks[0]))
    for i in c.live.tolist():
        segments.append(c.segment(i, frames[i]))
    return {"segments": segments, "device_traces": device_traces, "pyinterpose": info}


_COLUMNS = ("block_id", "address", "size", "device", "stream", "freed", "t_alloc", "t_free", "stack_id")


def _allocator_blocks(trace: Trace, columns=None) -> pd.DataFrame:
    """The device blocks a PyTorch snapshot would hold: those of the framework's allocator
    (``pyinterpose.analysis.owners.allocator_mask``) when that analysis is present and finds
    them; else every device block.  ``columns``: only those (the ones present) are kept."""
    b = trace.blocks
    if columns is not None:
        b = b[[c for c in columns if c in b.columns]]
    return b[_snapshot_rows(trace)]


def _snapshot_rows(trace: Trace) -> np.ndarray:
    """Per row of ``trace.blocks``, whether the snapshot holds it (see :func:`_allocator_blocks`)."""
    dev = trace.blocks["counts_device"].to_numpy(bool)
    try:
        m = np.asarray(allocator_mask(trace), bool)
    except Exception:  # noqa: BLE001 - an owners-analysis failure: every device block
        return dev
    if len(m) != len(dev) or not m.any():
        return dev
    return dev & m


def _note_frame(where: str, what: str) -> dict[str, Any]:
    """A line of text where the viewer shows a call stack (it prints ``filename:line:name``)."""
    return {"filename": where, "line": 0, "name": what}


NO_STACKS = _note_frame("pyinterpose", "this trace has no call stacks (captured with --stacks none, or by a "
                                       "pyinterpose that recorded none): only the owner library is known")
NO_STACK = _note_frame("pyinterpose", "no call stack was recorded for this allocation")
RESERVED = _note_frame("pyinterpose", "reserved view: this block is the whole segment the framework's allocator "
                                      "reserved; the tensors inside it are not recorded in this view")


def _about(trace: Trace, c: "_Columns") -> dict[str, Any]:
    """The snapshot's ``pyinterpose`` item (the viewer ignores it; the frames say the same)."""
    complete = bool(trace.meta.get("complete", True))
    out: dict[str, Any] = {"generator": "pyinterpose", "view": str(trace.meta.get("view", "")), "complete": complete}
    if not complete:
        out["incomplete_reason"] = str(trace.meta.get("incomplete_reason") or "")
    return out


def _stack_frames(trace: Trace, b: pd.DataFrame) -> tuple[list[list[dict]], np.ndarray]:
    """The distinct call stacks of the blocks as the viewer's frames ({filename, line, name},
    innermost first) and, per block, the index of its stack in that list.  Index 0 is for blocks
    without a stack: a line saying why (the viewer would say "<block was allocated before
    _record_history was enabled>").  Every list starts with a line saying that the trace is
    incomplete when it is, and, in a reserved view, that each block is a whole segment."""
    head = _frames_head(trace)
    stacks, idx = _call_stacks(trace, b)
    return [head + s for s in stacks], idx


def _call_stacks(trace: Trace, b: pd.DataFrame) -> tuple[list[list[dict]], np.ndarray]:
    none = np.zeros(len(b), np.int64)
    if "stack_id" not in b.columns:
        return [[NO_STACKS]], none
    sid = b["stack_id"].to_numpy(np.int64)
    if not (sid >= 0).any():
        return [[NO_STACKS]], none
    uniq, inv = np.unique(sid, return_inverse=True)
    first = int(np.searchsorted(uniq, 0))      # uniq[:first] are the negative ids
    idx = np.where(sid >= 0, inv.reshape(-1) - first + 1, 0)
    return _stacks_of(trace, uniq), idx


def _stacks_of(trace: Trace, uniq: np.ndarray) -> list[list[dict]]:
    """The frames lists of the distinct stack ids ``uniq`` (sorted; negative ones skipped), after the
    list for a block without a stack: index ``k`` of a block's id among the non-negative ones is
    list ``k + 1``."""
    empty = [NO_STACK]
    stacks = [empty]
    for s in uniq.tolist():
        if s < 0:
            continue
        try:
            fr = frames_of(trace, int(s))
        except Exception:  # noqa: BLE001
            fr = []
        stacks.append([{"filename": str(f.get("filename") or f.get("object") or "??"),
                        "line": int(f.get("line") or 0),
                        "name": str(f.get("function") or "??")} for f in fr] or empty)
    return stacks


def _frames_head(trace: Trace) -> list[dict]:
    """The lines every frames list starts with: the trace is incomplete, a reserved view."""
    head: list[dict] = []
    if not trace.meta.get("complete", True):
        head.append(_note_frame("INCOMPLETE TRACE", str(trace.meta.get("incomplete_reason")
                                                        or "the capture did not record everything")))
    if str(trace.meta.get("view", "")) == "reserved":
        head.append(RESERVED)
    return head


_KEYS = ("addr", "size", "stream", "time_us", "frames", "category", "action")
_ACTIONS = ("segment_alloc", "alloc", "free_requested", "free_completed", "segment_free", "snapshot")


def write_snapshot(trace: Trace, path: str, classes: pd.Series | None = None, progress=None) -> dict[str, int]:
    """Write the snapshot pickle of :func:`snapshot` to ``path`` without building it: the
    device traces (five dicts per block) are written from the columns a piece at a time
    (report.memory_viz_stream, :func:`pyinterpose.report.pickle_stream.write_rows_from`): memory
    holds a few arrays of block length (the time order of the events), never one of event length.
    ``progress``: called with the fraction of the device traces written.

    Layout: the top-level dict's items are ``"segments"`` -> a *prelude* list (every key, action,
    category and frames list the rows refer to, each memoized once), then ``"segments"`` again ->
    the real final segments, which replaces the prelude (a dict keeps the last value of a
    repeated key, in Python's unpickler and in the viewer's), then ``"device_traces"``."""

    reserved_view = str(trace.meta.get("view", "")) == "reserved"
    use_categories = classes is not None and not reserved_view
    sb = S.SnapshotBlocks(trace, _snapshot_rows(trace), classes, use_categories)
    # the classes are read through the blocks' lookup from here on: let them go (issue 30: at 100 M events
    # 11 M object pointers held through the whole write; the caller hands them over without keeping them)
    del classes
    epoch = trace.meta.get("start_time")
    epoch_us = int(round(float(epoch) * 1e6)) if isinstance(epoch, (int, float)) else 0
    end_us = max(0, int(trace.duration_ns) // 1000)
    n = sb.n
    if n:
        stacks = [_frames_head(trace) + st for st in (_stacks_of(trace, sb.stack_ids)
                                                      if sb.has_stacks and (sb.stack_ids >= 0).any()
                                                      else [[NO_STACKS]])]
    else:
        stacks = [[]]
    cat_names = sb.cat_names if use_categories and n else []
    entries = 0
    done = [0]
    total = 2 * n                                     # events at most: an allocation and a free per block

    with atomic_output(path, "wb") as f:
        ps = P.PickleStream(f)
        ps.begin()
        ps.write(P.EMPTY_DICT + P.MARK)
        ps.obj("segments")
        ps.obj(list(_KEYS) + list(_ACTIONS) + [UNKNOWN] + cat_names + stacks)   # the prelude
        ps.obj("segments")
        live = sb.live
        if n:
            fr = sb.frame_index(live).tolist()
            segs = [_segment(d, a, sz, st, stacks[k]) for d, a, sz, st, k in zip(
                sb.col("device")[sb.pos[live]].astype(np.int64).tolist(), sb.addresses(live).tolist(),
                sb.col("size")[sb.pos[live]].astype(np.int64).tolist(), sb.streams(live).tolist(), fr)]
        else:
            segs = []
        ps.obj(segs)
        del segs
        ps.obj("device_traces")
        ps.write(P.EMPTY_LIST)
        for d0 in range(0, sb.ndev, P.BATCH):
            ps.write(P.MARK)
            for d in range(d0, min(sb.ndev, d0 + P.BATCH)):
                ps.write(P.EMPTY_LIST)
                if n:
                    k = _write_device(ps, sb, d, stacks, use_categories, epoch_us, progress, done, total)
                    if k:
                        ps.write(P.MARK)
                        ps.obj(_snapshot_event(epoch_us + end_us, use_categories, stacks[0]))
                        ps.write(P.APPENDS)
                        k += 1
                    entries += k
            ps.write(P.APPENDS)
        ps.obj("pyinterpose")
        ps.obj(_about(trace, None))
        ps.write(P.SETITEMS)
        ps.end()
    return {"segments": int(len(live)) if n else 0, "trace_entries": entries,
            "blocks": n, "device_blocks": int(trace.blocks["counts_device"].to_numpy(bool).sum())}


_GATHERED = ("address", "size", "stream", "t_alloc", "t_free", "stack_id", "block_id", "device", "freed")


def _write_device(ps, sb: "S.SnapshotBlocks", d: int, stacks, use_categories: bool, epoch_us: int,
                  progress, done: list, total: int) -> int:
    """Append device ``d``'s trace entries (the list is open); returns how many."""

    ev = S.DeviceEvents(sb, d)
    if ev.n == 0:
        return 0
    k = {name: ps.str_index(name) for name in _KEYS + _ACTIONS + (UNKNOWN,)}
    frame_memo = np.array([ps.list_index(s) for s in stacks], np.int64)
    common = [(k["addr"], Int("addr")), (k["size"], Int("size")), (k["stream"], Int("stream")),
              (k["time_us"], Int("time_us")), (k["frames"], Ref("frames"))]
    tagged = common
    ref_widths = {"frames": 1 if frame_memo.max() < 256 else 4}
    if use_categories:
        cat_memo = np.array([ps.str_index(x) for x in sb.cat_names], np.int64)
        tagged = common + [(k["category"], Ref("cat"))]
        ref_widths["cat"] = 1 if cat_memo.max() < 256 else 4
    every = S.release_every()
    since = [0]

    def fetch(c0: int, c1: int):
        j, is_free = ev.rows(c0, c1)
        p = sb.pos[j]
        columns = {"addr": sb.addresses(j), "size": sb.col("size")[p].astype(np.int64), "stream": sb.streams(j),
                   "time_us": epoch_us + ev.times(j, is_free) // 1000, "frames": frame_memo[sb.frame_index(j)]}
        if use_categories:
            columns["cat"] = cat_memo[sb.category_codes(j)]
        since[0] += c1 - c0
        if since[0] >= every:                     # give back the cache pages gathered from so far
            sb.release_all(_GATHERED)
            since[0] = 0
        done[0] += c1 - c0
        if progress is not None:
            progress(done[0] / max(total, 1))
        return is_free.astype(np.int64), columns

    def act(fields, action):
        return fields + [(k["action"], Const(k[action]))]

    shapes = [[act(tagged, "segment_alloc"), act(tagged, "alloc")],
              [act(common, "free_requested"), act(common, "free_completed"), act(common, "segment_free")]]
    n = write_rows_from(ps, shapes, ev.n, fetch, ref_widths)
    sb.release_all(_GATHERED)
    return n


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
