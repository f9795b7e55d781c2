"""Call sites: who made each allocation (owner object, Python or native stack).

The shim writes, per process (``native/shim/events.h``):

* ``SITE`` right after each ALLOC (seq + 1): caller PC, owner string id, Python
  stack id, native stack id, thread-name string id, flags;
* ``FRAME`` definitions (+ STRDATA text): python ``filename\\0function`` with the
  line and the function's first line; native: the object's path, the PC and the
  PC relative to the object's load bias;
* ``STACK`` definitions: trie nodes (parent stack id, innermost frame id);
* ``NOTE``: capture notes ("python stacks off: ...").

:func:`read_sites` turns them into global tables (ids dense from 0, identical
frames and stacks of different processes merged — a forked child replays its
parent's definitions) and the per-block columns; the reader attaches them:

``trace.frames``  frame_id, kind (python|native), filename, function, line, object
``trace.stacks``  stack_id, parent_id (-1 at the root), frame_id (innermost frame)
``trace.blocks``  owner (category: calling object's basename, "" unknown),
                  stack_id (int64, -1 none), caller (uint64 PC, 0 unknown),
                  thread (category: the allocating thread's name)

A block whose thread had no Python frames (a pthread, PyTorch's autograd engine)
gets a one-frame stack ``<no Python frames>`` (``backward (autograd thread)`` on a
thread PyTorch named ``pt_autograd_*``) whose object is the owner, so that
:func:`call_site` and :func:`top_call_sites` still say where it came from.
Native frames are symbolised here, after the run, from the object files
(:mod:`pyinterpose.trace.elfsym`); nothing is symbolised on the hot path.

Old traces (no SITE records): empty tables, ``owner`` all "", ``stack_id`` all -1.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from . import records
from .chunking import spans as _spans
from .live import live_at_peak, live_at_peak_by
from .pages import release
from .piecewise import piece_rows
from .model import FRAME_COLUMNS, empty_frames, empty_stacks
from .elfsym import symbolize

SITE_CHUNK = 1 << 20   # SITE records decoded at a time
SITE_FORMAT = 1  # version of the SITE/FRAME/STACK records this reader understands (meta "site_format")
SITE_PYTHON, SITE_NO_PYFRAMES, SITE_TRUNCATED, SITE_NO_GIL, SITE_PY_OFF, SITE_NATIVE = 1, 2, 4, 8, 16, 32
NO_PYTHON = "<no Python frames>"
BACKWARD = "backward (autograd thread)"
AUTOGRAD_THREAD_PREFIX = "pt_autograd_"
# shared objects that only forward a call (Python's foreign-function interfaces): never an owner
_TRAMPOLINES = ("libffi", "_ctypes", "_cffi_backend")


def is_trampoline(owner: str) -> bool:
    """True for a shared object that only forwards calls (libffi, ctypes, cffi)."""
    base = str(owner).rsplit("/", 1)[-1].lower()
    return any(base.startswith(p) for p in _TRAMPOLINES)


def display_owner(owner: str) -> str:
    """An owner as shown: a trampoline (libffi, ctypes, cffi) names the Python code behind it."""
    return f"python (through {owner})" if is_trampoline(owner) else str(owner)


@dataclass
class Sites:
    frames: pd.DataFrame = field(default_factory=empty_frames)
    stacks: pd.DataFrame = field(default_factory=empty_stacks)
    # one row per SITE record: pid, seq (of its ALLOC), owner, stack_id, caller, thread (owner and
    # thread: codes into names.names)
    per_alloc: pd.DataFrame | None = None
    notes: list = field(default_factory=list)
    names: "_Names | None" = None


def _texts(raw_rows: np.ndarray, ev: np.ndarray, idx: np.ndarray) -> list[bytes]:
    """Text that follows each record at ``idx`` (size = length, then STRDATA records)."""
    out = []
    for i in idx:
        n = int(ev["size"][i])
        k = -(-n // records.STR_PAYLOAD)
        out.append(raw_rows[i + 1:i + 1 + k, 16:48].tobytes()[:n])
    return out


class _Interner:
    """Global dense ids for frames and stack nodes, merged by content."""

    def __init__(self):
        self.frame_index: dict[tuple, int] = {}
        self.frames: list[tuple] = []     # (kind, filename, function, line, object, path, offset)
        self.stack_index: dict[tuple[int, int], int] = {}
        self.stacks: list[tuple[int, int]] = []  # (parent, frame)

    def frame(self, key: tuple) -> int:
        i = self.frame_index.get(key)
        if i is None:
            i = self.frame_index[key] = len(self.frames)
            self.frames.append(key)
        return i

    def stack(self, parent: int, frame: int) -> int:
        k = (parent, frame)
        i = self.stack_index.get(k)
        if i is None:
            i = self.stack_index[k] = len(self.stacks)
            self.stacks.append(k)
        return i


class _Names:
    """Global codes for the strings of every process (owner and thread names)."""

    def __init__(self):
        self.index: dict[str, int] = {}
        self.names: list[str] = []

    def codes(self, ids: np.ndarray, strings: dict[int, str]) -> np.ndarray:
        """The code of strings[id] ("" when unknown) for each id: one dict lookup per distinct id."""
        if len(ids) == 0:
            return np.zeros(0, np.int32)
        lo, hi = int(ids.min()), int(ids.max())
        if lo >= 0 and hi < 4 * len(ids) + 4096:       # small ids (the shim's): a dense table
            present = np.flatnonzero(np.bincount(ids, minlength=hi + 1))
            lut = np.zeros(hi + 1, np.int32)
            lut[present] = [self._code(strings.get(int(u), "")) for u in present.tolist()]
            return lut[ids]
        uniq, inv = np.unique(ids, return_inverse=True)
        return np.array([self._code(strings.get(int(u), "")) for u in uniq.tolist()], np.int32)[inv]

    def _code(self, name: str) -> int:
        c = self.index.get(name)
        if c is None:
            c = self.index[name] = len(self.names)
            self.names.append(name)
        return c

    def categorical(self, codes: np.ndarray) -> pd.Categorical:
        """names[codes] ("" where code < 0) as the Categorical pandas would make of those strings
        (categories sorted), without hashing a string per row."""
        used = np.flatnonzero(np.bincount(codes + 1, minlength=len(self.names) + 1))
        values = sorted({self.names[u - 1] if u else "" for u in used.tolist()})
        where = {v: i for i, v in enumerate(values)}
        lut = np.zeros(len(self.names) + 1, np.int32)
        for u in used.tolist():
            lut[u] = where[self.names[u - 1] if u else ""]
        return pd.Categorical.from_codes(lut[codes + 1], pd.Index(values))


def read_sites(ev: np.ndarray, pid: np.ndarray, op: np.ndarray, offsets: np.ndarray, pids: list[int],
               strings: dict[int, dict[int, str]], site_format: int = SITE_FORMAT) -> Sites:
    """Frames, stacks and per-allocation call sites from the concatenated records."""
    if site_format > SITE_FORMAT:
        return Sites(notes=[{"pid": 0, "note": f"call sites skipped: site format {site_format} is newer than "
                                               f"this pyinterpose understands ({SITE_FORMAT})"}])
    O = records.OP
    site = getattr(O, "SITE", None)
    if site is None or len(ev) == 0 or not np.any((op == site) | (op == O.NOTE)):
        return Sites()
    raw_rows = ev.view(np.uint8).reshape(len(ev), ev.dtype.itemsize)
    it = _Interner()
    names = _Names()
    notes = []
    per = []
    for i, p in enumerate(pids):
        lo, hi = int(offsets[i]), int(offsets[i + 1])
        pop = op[lo:hi]
        pev = ev[lo:hi]
        prow = raw_rows[lo:hi]
        st = strings.get(p, {})
        for j in np.flatnonzero(pop == O.NOTE):
            notes.append({"pid": int(p), "note": st.get(int(pev["aux"][j]), "")})
        # frames: local id -> global id
        fidx = np.flatnonzero(pop == O.FRAME)
        fmap: dict[int, int] = {}
        for j, text in zip(fidx, _texts(prow, pev, fidx)):
            kind = int(pev["flags"][j])
            if kind == 1:
                fname, _, func = text.partition(b"\0")
                key = ("python", fname.decode(errors="replace"), func.decode(errors="replace"),
                       int(np.int64(pev["addr"][j])), "", "", 0)
            else:
                path = text.decode(errors="replace")
                key = ("native", "", "", 0, os.path.basename(path), path, int(pev["stream"][j]))
            fmap[int(pev["aux"][j])] = it.frame(key)
        # stack nodes in id order (a parent always has a smaller id than its children)
        sidx = np.flatnonzero(pop == O.STACK)
        smap: dict[int, int] = {0: -1}
        if len(sidx):
            ids = pev["aux"][sidx].astype(np.int64)
            order = np.argsort(ids, kind="stable")
            for j in sidx[order]:
                local = int(pev["aux"][j])
                if local in smap:
                    continue
                parent = smap.get(int(pev["addr"][j]), -1)
                frame = fmap.get(int(pev["size"][j]))
                if frame is None:
                    continue
                smap[local] = it.stack(parent, frame)
        # per-allocation sites (vectorised: one lookup per distinct string / stack id)
        sidx = np.flatnonzero(pop == site)
        if len(sidx) == 0:
            continue
        keys = np.array(sorted(smap), dtype=np.int64)
        vals = np.array([smap[k] for k in keys.tolist()], dtype=np.int64)
        n = len(sidx)
        flags, stack_id = np.empty(n, np.uint16), np.empty(n, np.int64)
        owner, thread = np.empty(n, np.int32), np.empty(n, np.int32)
        seq, caller = np.empty(n, np.int64), np.empty(n, np.uint64)
        for lo in range(0, n, SITE_CHUNK):     # a piece at a time: one record per allocation, 11 M at 100 M events
            sj = sidx[lo:lo + SITE_CHUNK]
            hi = lo + len(sj)
            seq[lo:hi] = pev["seq"][sj].astype(np.int64) - 1
            caller[lo:hi] = pev["addr"][sj].astype(np.uint64)
            fl = pev["flags"][sj].astype(np.int64)
            owner[lo:hi] = names.codes(pev["stream"][sj].astype(np.int64), st)
            thread[lo:hi] = names.codes(pev["result"][sj].astype(np.uint32).astype(np.int64), st)
            local = np.where(fl & SITE_PYTHON, pev["aux"][sj].astype(np.int64),
                             np.where(fl & SITE_NATIVE, pev["size"][sj].astype(np.int64), 0))
            pos = np.minimum(np.searchsorted(keys, local), len(keys) - 1)
            stack_id[lo:hi] = np.where((keys[pos] == local) & (local > 0), vals[pos], -1)
            flags[lo:hi] = fl
            release(pev, int(sj[0]), int(sj[-1]) + 1)   # the records' pages, when mapped from a spill file
            del sj, fl, local, pos
        # no stack although one was requested: a one-frame stack naming why, with the owner
        miss = np.flatnonzero((stack_id < 0) & ((flags & (SITE_PYTHON | SITE_NATIVE)) != 0))
        if len(miss):
            text = np.array(names.names + [""], dtype=object)
            autograd = np.char.startswith(text[thread[miss]].astype(str), AUTOGRAD_THREAD_PREFIX)
            label = np.where(autograd, BACKWARD,
                             np.where(flags[miss] & SITE_PYTHON, NO_PYTHON, "<no native stack>"))
            ocode, onames = pd.factorize(pd.Series(text[owner[miss]], dtype=object))
            lcode, lnames = pd.factorize(pd.Series(label, dtype=object))
            combo = lcode.astype(np.int64) * max(len(onames), 1) + ocode
            uniq, inv = np.unique(combo, return_inverse=True)
            u_ids = np.array([it.stack(-1, it.frame(("native", "", str(lnames[u // max(len(onames), 1)]), 0,
                                                     str(onames[u % max(len(onames), 1)]), "", 0)))
                              for u in uniq.tolist()], dtype=np.int64)
            ids = u_ids[inv]
            stack_id[miss] = ids
        per.append(pd.DataFrame({"pid": np.full(len(sidx), p, np.int32), "seq": seq,
                                 "owner": owner, "stack_id": stack_id,  # owner, thread: codes into names
                                 "caller": caller, "thread": thread,
                                 "site_flags": flags}, copy=False))     # fresh arrays: not copied again
    frames = _frames_table(it.frames)
    stacks = pd.DataFrame({"stack_id": np.arange(len(it.stacks), dtype=np.int64),
                           "parent_id": np.array([s[0] for s in it.stacks], dtype=np.int64),
                           "frame_id": np.array([s[1] for s in it.stacks], dtype=np.int64)})
    per_alloc = None if not per else per[0] if len(per) == 1 else pd.concat(per, ignore_index=True)
    return Sites(frames=frames, stacks=stacks if len(stacks) else empty_stacks(), per_alloc=per_alloc, notes=notes,
                 names=names)


def _frames_table(frames: list[tuple]) -> pd.DataFrame:
    if not frames:
        return empty_frames()

    rows = []
    native = [(f[5], f[6]) for f in frames if f[0] == "native" and f[5]]
    names = symbolize(native) if native else {}
    for i, (kind, fname, func, line, obj, path, off) in enumerate(frames):
        if kind == "native" and path:
            func = names.get((path, off)) or f"0x{off:x}"
        rows.append((i, kind, fname, func, line, obj))
    df = pd.DataFrame(rows, columns=list(FRAME_COLUMNS))
    return df.astype(FRAME_COLUMNS)


def _aligned(bpid, bseq, spid, sseq) -> bool:
    """Whether the sites' (pid, seq) keys are the blocks' own, row for row, and strictly ascending
    (one site per block, in the blocks' order: the usual case); a piece of SITE_CHUNK rows at a time."""
    n = len(bpid)
    if len(spid) != n:
        return False
    for lo in range(0, n, SITE_CHUNK):
        hi = min(n, lo + SITE_CHUNK + 1)       # one row past the piece: the order across the cut
        bk = bpid[lo:hi].astype(np.int64) << 40 | bseq[lo:hi].astype(np.int64)
        sk = spid[lo:hi].astype(np.int64) << 40 | sseq[lo:hi].astype(np.int64)
        if not (bool((sk == bk).all()) and bool((sk[1:] > sk[:-1]).all())):
            return False
    return True


def attach_blocks(blocks: pd.DataFrame, sites: Sites) -> None:
    """Add owner, stack_id, caller and thread to ``blocks`` (in place), keyed by (pid, seq_alloc)."""
    n = len(blocks)
    pa = sites.per_alloc
    names = sites.names or _Names()
    aligned = False
    if pa is not None and len(pa) and n:
        aligned = _aligned(blocks["pid"].to_numpy(), blocks["seq_alloc"].to_numpy(), pa["pid"].to_numpy(),
                           pa["seq"].to_numpy())
        if not aligned:
            bkey = blocks["pid"].to_numpy(np.int64) << 40 | blocks["seq_alloc"].to_numpy(np.int64)
            skey = pa["pid"].to_numpy(np.int64) << 40 | pa["seq"].to_numpy(np.int64)
            order = np.argsort(skey, kind="stable")
            sk = skey[order]
            pos = np.minimum(np.searchsorted(sk, bkey), len(sk) - 1)
            ok = sk[pos] == bkey
            src = order[pos[ok]]
            del order, sk, pos, bkey, skey
    if aligned:     # one site per block, in the blocks' order (the usual case): its columns as they are
        owner, stack_id = pa["owner"].to_numpy(np.int32), pa["stack_id"].to_numpy(np.int64)
        caller, thread = pa["caller"].to_numpy(np.uint64), pa["thread"].to_numpy(np.int32)
    else:
        owner = np.full(n, -1, dtype=np.int32)
        stack_id = np.full(n, -1, dtype=np.int64)
        caller = np.zeros(n, dtype=np.uint64)
        thread = np.full(n, -1, dtype=np.int32)
        if pa is not None and len(pa) and n:
            owner[ok] = pa["owner"].to_numpy(np.int32)[src]
            stack_id[ok] = pa["stack_id"].to_numpy(np.int64)[src]
            caller[ok] = pa["caller"].to_numpy(np.uint64)[src]
            thread[ok] = pa["thread"].to_numpy(np.int32)[src]
    blocks["owner"] = names.categorical(owner)
    blocks["stack_id"] = stack_id
    blocks["caller"] = caller
    blocks["thread"] = names.categorical(thread)


# ---------------------------------------------------------------------------------- the API
def _index(trace):
    """(parent array, frame array, frame records), cached on the trace for these tables."""
    key = (id(trace.stacks), id(trace.frames), len(trace.stacks), len(trace.frames))
    got = getattr(trace, "_stack_index", None)
    if got is None or got[0] != key:
        got = (key, trace.stacks["parent_id"].to_numpy(np.int64), trace.stacks["frame_id"].to_numpy(np.int64),
               trace.frames.to_dict("records"))
        try:
            trace._stack_index = got
        except AttributeError:  # pragma: no cover - a frozen trace object
            pass
    return got[1:]


def frames_of(trace, stack_id: int) -> list[dict]:
    """The frames of ``stack_id``, innermost first (each a dict of the frames table's columns)."""
    if stack_id is None or stack_id < 0 or stack_id >= len(trace.stacks):
        return []
    parent, frame, recs = _index(trace)
    out = []
    s = int(stack_id)
    guard = 0
    while s >= 0 and guard <= len(parent):
        out.append(dict(recs[int(frame[s])]))
        s = int(parent[s])
        guard += 1
    return out


def frame_text(f: dict) -> str:
    """One frame (a row of the frames table as a dict) as one line: ``file.py:12 in fn``,
    ``symbol (libfoo.so)``."""
    if f["kind"] == "python":
        return f"{os.path.basename(f['filename'])}:{f['line']} in {f['function']}"
    if f["function"] in (NO_PYTHON, BACKWARD, "<no native stack>"):
        return f"{f['function']} {f['object']}".rstrip()
    return f"{f['function']} ({f['object']})" if f["object"] else f["function"]


_frame_text = frame_text


# ---- allocation helpers: the call site is the first frame outside them ------------------------
#
# When a program allocates through a helper of its own (``def cuda_malloc(n): ...``), every
# allocation's innermost frame is the helper's line, and grouping by it would put the whole program
# in one call site.  The call site of a block is therefore the first frame of its stack outside
# allocation helpers.  A helper is recognised automatically: a Python frame that is the innermost
# frame of nearly all (HELPER_SHARE) of the allocations with a stack while they come from at least
# two distinct call paths above it; it is peeled and the test repeats one level up (a helper
# calling a helper).  ``site_skip`` patterns (``pyinterpose summary/report/compare --site-skip``)
# override the detection: frames whose function, ``file:function`` or ``file`` matches one
# (fnmatch) are skipped instead; ``["none"]``: no frame is skipped (the innermost frame).  Each
# block keeps its own full stack (``stack_id``); only the grouping changes.

HELPER_SHARE = 0.9
SITE_SKIP_META = "site_skip"     # trace.meta key the CLI sets from --site-skip (None: automatic)


def set_site_skip(trace, patterns: list[str] | None) -> None:
    """Use ``patterns`` (``--site-skip``) instead of the automatic helper detection for this trace;
    None restores the automatic one, ``["none"]`` skips nothing."""
    if patterns:
        trace.meta[SITE_SKIP_META] = [str(p) for p in patterns]
    else:
        trace.meta.pop(SITE_SKIP_META, None)


def _matches(f: dict, patterns: list[str]) -> bool:
    from fnmatch import fnmatchcase

    base = os.path.basename(str(f.get("filename") or ""))
    names = [str(f.get("function") or ""), f"{base}:{f.get('function')}", base, str(f.get("filename") or "")]
    return any(fnmatchcase(n, p) for p in patterns for n in names)


def _site_nodes(trace) -> tuple[np.ndarray, list[int]]:
    """(site node per stack id, helper frame ids): the stack node whose frame is the call site of
    each stack (itself when no helper is skipped), and the frames skipped."""
    st = trace.stacks
    n = len(st)
    if n == 0:
        return np.zeros(0, np.int64), []
    patterns = trace.meta.get(SITE_SKIP_META)
    key = ("stacks", "sites", tuple(patterns) if patterns else None, n, len(trace.frames))
    derived = getattr(trace, "derived", None)
    compute = lambda: _compute_site_nodes(trace, patterns)   # noqa: E731
    return derived(key, compute) if derived is not None else compute()


def _compute_site_nodes(trace, patterns) -> tuple[np.ndarray, list[int]]:
    parent, frame, recs = _index(trace)
    n = len(parent)
    if patterns:
        if [p.lower() for p in patterns] == ["none"]:
            return np.arange(n, dtype=np.int64), []
        helpers = {i for i, f in enumerate(recs) if f["kind"] == "python" and _matches(f, patterns)}
    else:
        helpers = _detect_helpers(trace, parent, frame, recs)
    node = np.arange(n, dtype=np.int64)
    if helpers:
        is_helper = np.zeros(len(recs), bool)
        is_helper[list(helpers)] = True
        for _ in range(n):                       # walk up while the frame is a helper (never past the root)
            up = is_helper[frame[node]] & (parent[node] >= 0)
            if not up.any():
                break
            node[up] = parent[node[up]]
    return node, sorted(helpers)


def _detect_helpers(trace, parent: np.ndarray, frame: np.ndarray, recs: list[dict]) -> set[int]:
    b = trace.blocks
    if "stack_id" not in b or len(b) == 0:
        return set()
    # the blocks' stack ids counted per id (a piece of blocks at a time): every block of one id walks
    # up the same way, so the walk runs over the distinct ids, each weighing its blocks
    sid_col = b["stack_id"].to_numpy()
    per_id = np.zeros(len(parent), np.int64)
    for lo, hi in _spans(len(b), piece_rows()):
        sid = np.asarray(sid_col[lo:hi], np.int64)
        c = np.bincount(sid[sid >= 0])
        if len(c) > len(per_id):
            per_id = np.concatenate([per_id, np.zeros(len(c) - len(per_id), np.int64)])
        per_id[:len(c)] += c
        release(sid_col, lo, hi)
    cur = np.flatnonzero(per_id)
    weight = per_id[cur]
    total = int(weight.sum())
    helpers: set[int] = set()
    if total < 2:
        return helpers
    python = np.array([r["kind"] == "python" for r in recs], bool)
    for _ in range(64):
        fr = frame[cur]
        counts = np.bincount(fr, weights=weight, minlength=len(recs)).astype(np.int64)   # blocks per frame
        f = int(np.argmax(counts))
        sel = fr == f
        above = parent[cur[sel]]
        if counts[f] < HELPER_SHARE * total or not python[f] or (above < 0).any() \
                or not (above != above[0]).any():
            break
        helpers.add(f)
        cur = cur.copy()
        cur[sel] = above
    return helpers


def site_stack(trace, stack_id: int) -> int:
    """The stack node of ``stack_id``'s call site (the first frame outside allocation helpers)."""
    if stack_id is None or stack_id < 0 or stack_id >= len(trace.stacks):
        return -1
    return int(_site_nodes(trace)[0][int(stack_id)])


def helper_frames(trace) -> list[str]:
    """The frames skipped as allocation helpers, as text (``ct.py:8 in cuda_malloc``)."""
    _, helpers = _site_nodes(trace)
    recs = _index(trace)[2] if len(trace.stacks) else []
    return [_frame_text(recs[i]) for i in helpers]


def call_site(trace, stack_id: int) -> str:
    """One line for a stack: its call site, the first frame outside allocation helpers (the
    innermost one when there is none), e.g. ``train.py:123 in forward`` or ``<no Python frames>
    libfoo.so``; ``""`` for -1 (no stack recorded)."""
    node = site_stack(trace, stack_id)
    fr = frames_of(trace, node)
    return _frame_text(fr[0]) if fr else ""


def _call_site_texts(trace) -> np.ndarray:
    """call_site() of every stack id (vectorised over the site frames)."""
    st, fr = trace.stacks, trace.frames
    if len(st) == 0:
        return np.zeros(0, dtype=object)
    texts = np.array([_frame_text(r) for r in fr.to_dict("records")], dtype=object)
    return texts[st["frame_id"].to_numpy(np.int64)[_site_nodes(trace)[0]]]


def live_at_peak_bytes(trace) -> np.ndarray:
    """int64 per row of ``trace.blocks``: the device bytes the block holds at the event where the
    trace's live device bytes peak (model.live_events; 0 for blocks not live then).  The live set at
    the peak, exactly: it adds up to the peak (a block allocated at the peak's instant but after the
    peak event, and a double-mapped window's overlap, count nothing)."""

    return live_at_peak(trace)      # one pass over the live events in pieces (trace.live)


def _site_table(trace) -> pd.DataFrame | None:
    """Per call site (device blocks with a stack): call_site, blocks, bytes, peak_live_bytes, owner (the
    most common; ties: the first seen), stack_id (of its largest block; ties: the first) — read from the
    blocks a piece at a time, each piece's counts and sums merged; None when no such block."""
    b = trace.blocks
    sid_col = b["stack_id"].to_numpy()
    dev_col = b["counts_device"].to_numpy()
    size_col = b["size"].to_numpy()
    owner = b["owner"]
    if isinstance(owner.dtype, pd.CategoricalDtype):
        own_col = owner.cat.codes.to_numpy()
        own_names = np.array([str(x) for x in owner.cat.categories] + [str(np.nan)], dtype=object)
    else:
        own_col, names = pd.factorize(owner.astype(str).to_numpy(), use_na_sentinel=False)
        own_names = np.array(list(names) + [""], dtype=object)
    n_own = len(own_names)
    texts = _call_site_texts(trace)
    site_code, site_names = pd.factorize(pd.Series(texts, dtype=object), use_na_sentinel=False)
    n_site = len(site_names)
    def site_of(rows):      # the site of each device block with a stack, -1 for the others
        sid = np.asarray(sid_col[rows], np.int64)
        ok = (sid >= 0) & np.asarray(dev_col[rows], bool)
        return np.where(ok, site_code[np.where(ok, sid, 0)], -1)
    # the bytes each site holds at the peak: the live events up to it, summed per site in pieces
    peak = live_at_peak_by(trace, site_of, n_site) if n_site else np.zeros(0, np.int64)
    release(sid_col)
    release(dev_col)
    blocks = np.zeros(n_site, np.int64)
    nbytes = np.zeros(n_site, np.int64)
    first = np.full(n_site, -1, np.int64)            # first row of each site: the groups' order
    big = np.full(n_site, -1, np.int64)              # its largest block's size and row
    big_row = np.full(n_site, -1, np.int64)
    pairs: dict[int, list[int]] = {}                 # site * n_own + owner -> [count, first row]
    for lo, hi in _spans(len(b), piece_rows()):
        sid = np.asarray(sid_col[lo:hi], np.int64)
        r = np.flatnonzero((sid >= 0) & np.asarray(dev_col[lo:hi], bool))
        if not len(r):
            continue
        site = site_code[sid[r]].astype(np.int64)
        sz = np.asarray(size_col[lo:hi], np.int64)[r]
        row = r + lo
        np.add.at(blocks, site, 1)
        np.add.at(nbytes, site, sz)
        u, i = np.unique(site, return_index=True)
        new = first[u] < 0
        first[u[new]] = row[i[new]]
        o = np.lexsort((row, -sz, site))             # per site: largest first, then the first row
        so = site[o]
        head = np.flatnonzero(np.r_[True, so[1:] != so[:-1]])
        for st, z, rw in zip(so[head].tolist(), sz[o][head].tolist(), row[o][head].tolist()):
            if z > big[st] or big_row[st] < 0:
                big[st], big_row[st] = z, rw
        own = np.asarray(own_col[lo:hi], np.int64)[r]
        own = np.where(own < 0, n_own - 1, own)
        key = site * n_own + own
        ku, ki, kc = np.unique(key, return_index=True, return_counts=True)
        for k, fi, c in zip(ku.tolist(), row[ki].tolist(), kc.tolist()):
            e = pairs.get(k)
            if e is None:
                pairs[k] = [c, fi]
            else:
                e[0] += c
        for a in (sid_col, dev_col, size_col, own_col):
            release(a, lo, hi)
    seen = np.flatnonzero(first >= 0)
    if not len(seen):
        return None
    best: dict[int, tuple] = {}                      # site -> (count, -first row, owner)
    for k, (c, fi) in pairs.items():
        st, ow = divmod(k, n_own)
        cand = (c, -fi, ow)
        if st not in best or cand[:2] > best[st][:2]:
            best[st] = cand
    seen = seen[np.argsort(first[seen], kind="stable")]   # the order groupby(sort=False) gives
    out = pd.DataFrame({"blocks": blocks[seen], "bytes": nbytes[seen], "peak_live_bytes": peak[seen],
                        "owner": np.array([best[int(x)][2] for x in seen], np.int64),
                        "stack_id": np.asarray(sid_col[big_row[seen]], np.int64)})
    disp = np.array([display_owner(o) if o else o for o in own_names], dtype=object)
    out["owner"] = disp[out["owner"].to_numpy()]
    out.index = pd.Index(np.asarray(site_names, dtype=object)[seen], name="call_site")
    return out.reset_index()


def top_call_sites(trace, by: str = "peak", n: int = 10) -> pd.DataFrame:
    """The call sites (the first frame outside allocation helpers, see :func:`call_site`) that
    hold the most device bytes live at the peak (``by="peak"``) or make the most allocations
    (``by="count"``).

    Columns: call_site, stack_id (the stack of the site's largest block), owner (most
    common), blocks, bytes (allocated in total), peak_live_bytes (live at the instant of
    the trace's peak of live device bytes), frames (the stack, innermost first, as text)."""
    if by not in ("peak", "count"):
        raise ValueError(f"by must be 'peak' or 'count', not {by!r}")
    cols = ["call_site", "stack_id", "owner", "blocks", "bytes", "peak_live_bytes", "frames"]
    b = trace.blocks
    if "stack_id" not in b or len(b) == 0:
        return pd.DataFrame({c: [] for c in cols})
    key = ("stacks", "site_table", str(trace.meta.get(SITE_SKIP_META)), id(trace.stacks), id(trace.frames))
    out = trace.derived(key, lambda: _site_table(trace))
    if out is None:
        return pd.DataFrame({c: [] for c in cols})
    key = ["peak_live_bytes", "bytes"] if by == "peak" else ["blocks", "bytes"]
    out = out.sort_values(key + ["call_site"], ascending=[False, False, True]).head(n)
    if by == "peak":
        out = out[out["peak_live_bytes"] > 0]
    out["frames"] = [[_frame_text(f) for f in frames_of(trace, int(s))] for s in out["stack_id"]]
    return out[cols].reset_index(drop=True)


def top_call_sites_json(trace, n: int = 10) -> dict:
    """Both rankings as plain JSON (for ``summary --json`` and ``compare --json``), with the frames
    skipped as allocation helpers (``helpers``) and how they were chosen (``site_skip``: the
    ``--site-skip`` patterns, or "auto")."""
    def rows(df):
        return [{k: (v.item() if hasattr(v, "item") else v) for k, v in r.items()} for r in df.to_dict("records")]
    return {"by_peak": rows(top_call_sites(trace, "peak", n)), "by_count": rows(top_call_sites(trace, "count", n)),
            "helpers": helper_frames(trace), "site_skip": trace.meta.get(SITE_SKIP_META) or "auto",
            "stacks": trace.meta.get("stacks"), "notes": trace.meta.get("capture_notes", [])}
