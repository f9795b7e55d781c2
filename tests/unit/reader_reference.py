"""The trace reader's former table builder (pure numpy, pyinterpose 839db96..bfcd0af), kept as the slow
reference that tests/unit/test_reader_native.py compares the native record pass against. Its call-site part
(SITE/FRAME/STACK/NOTE records) is written from docs/trace-format.md alone and numbers frames and stacks its own
way, so the test compares them by content. Not used by pyinterpose itself; imports neither trace/reader.py
nor trace/stacks.py."""
from __future__ import annotations

import os
import types

import numpy as np
import pandas as pd

from pyinterpose.trace import records
from pyinterpose.trace import graphs, vmm
from pyinterpose.trace.model import (ACCESS_COLUMNS, BLOCK_COLUMNS, COPY_COLUMNS, DEVICE_KINDS, FAILURE_COLUMNS,
                                     HINT_COLUMNS, LAUNCH_COLUMNS, MARKER_COLUMNS, NVML_COLUMNS, PROCESS_COLUMNS,
                                     FRAME_COLUMNS, STACK_COLUMNS, Trace, conform, empty_frames, empty_stacks,
                                     empty_table)


# --------------------------------------------------------------------------------------------
def _strings(ev: np.ndarray, op: np.ndarray) -> dict[int, str]:
    out = {}
    idx = np.flatnonzero(op == records.OP.STRING)
    if len(idx) == 0:
        return out
    raw = ev.view(np.uint8).reshape(len(ev), ev.dtype.itemsize)
    for i in idx:
        n = int(ev["size"][i])
        k = -(-n // records.STR_PAYLOAD)
        text = raw[i + 1:i + 1 + k, 16:48].tobytes()[:n]
        out[int(ev["aux"][i])] = text.decode(errors="replace")
    return out


def _family(kind: np.ndarray) -> np.ndarray:
    fam = np.zeros(len(kind), dtype=np.int64)  # device-like kinds share one address space
    fam[kind == 6] = 1
    fam[kind == 7] = 2
    fam[kind == 8] = 3
    fam[kind == 9] = 4
    return fam


def build_trace(raw: "RawTrace", path: str | None = None) -> Trace:
    meta = raw.meta
    apis = np.array(meta.get("apis") or records.api_names(), dtype=object)
    kinds = {int(k): v for k, v in (meta.get("kinds") or records.kinds()).items()}
    pids = sorted(raw.events)
    parts = [np.concatenate(raw.events[p]) if len(raw.events[p]) > 1 else raw.events[p][0] for p in pids]
    dtype = records.event_dtype()
    if raw.records is not None and sum(len(p) for p in parts) == len(raw.records):
        ev = raw.records                      # read_file already laid the pids out in one array
    else:
        ev = np.concatenate(parts) if parts else np.zeros(0, dtype=dtype)
    pid = np.repeat(np.array(pids, dtype=np.int32), [len(p) for p in parts]) if parts else np.zeros(0, np.int32)
    n = len(ev)
    # columns are views into the records (no copies) except op and t; gathers cast their rows
    op = ev["op"].astype(np.uint8) if n and int(ev["op"].max()) < 256 else ev["op"].astype(np.int64)
    seq = ev["seq"].view(np.int64)
    t_ns = ev["t_ns"].view(np.int64)
    t0 = int(meta.get("t0_ns") or (t_ns.min() if n else 0))
    t = t_ns - t0
    res = ev["result"]
    api = ev["api"]
    addr = ev["addr"]
    size = ev["size"].view(np.int64)
    aux = ev["aux"]
    flags = ev["flags"]
    O = records.OP
    end_t = int(t.max()) if n else 0

    # strings per process, then one global kernel-name list
    strings = {}
    offsets = np.concatenate([[0], np.cumsum([len(p) for p in parts])]) if parts else np.zeros(1, np.int64)
    for i, p in enumerate(pids):
        lo, hi = offsets[i], offsets[i + 1]
        strings[p] = _strings(ev[lo:hi], op[lo:hi])

    api_categories = pd.Index([a if a else "<none>" for a in apis])

    def api_name(a):
        return pd.Categorical.from_codes(np.clip(np.asarray(a), 0, len(apis) - 1), api_categories)

    def categorical(codes, names):
        """names[codes] as a Categorical without hashing strings row by row."""
        return pd.Categorical.from_codes(np.asarray(codes, dtype=np.int64), pd.Index(names))

    # ---- blocks: pair allocations with frees per (pid, address family, key) ----
    am = (op == O.ALLOC) & (res == 0)
    fm = (op == O.FREE) & (res == 0) & ((addr != 0) | (flags == 8))
    ai, fi = np.flatnonzero(am), np.flatnonzero(fm)
    kind_a, kind_f = flags[ai], flags[fi]
    key_a = np.where(kind_a == 8, aux[ai], addr[ai]).astype(np.uint64)
    key_f = np.where(kind_f == 8, aux[fi], addr[fi]).astype(np.uint64)
    rows = np.concatenate([ai, fi])
    is_free = np.concatenate([np.zeros(len(ai), bool), np.ones(len(fi), bool)])
    g_pid = pid[rows]
    g_fam = _family(np.concatenate([kind_a, kind_f]))
    g_key = np.concatenate([key_a, key_f])
    g_seq = seq[rows]
    order = np.lexsort((g_seq, g_key, g_fam, g_pid))
    rows, is_free, g_pid, g_fam, g_key = rows[order], is_free[order], g_pid[order], g_fam[order], g_key[order]
    same_next = np.zeros(len(rows), bool)
    if len(rows) > 1:
        same_next[:-1] = (g_pid[:-1] == g_pid[1:]) & (g_fam[:-1] == g_fam[1:]) & (g_key[:-1] == g_key[1:])
    nxt_free = np.zeros(len(rows), bool)
    nxt_free[:-1] = is_free[1:]
    alloc_pos = np.flatnonzero(~is_free)
    matched = same_next[alloc_pos] & nxt_free[alloc_pos]
    superseded = same_next[alloc_pos] & ~nxt_free[alloc_pos]
    prev_alloc = np.zeros(len(rows), bool)
    prev_alloc[1:] = same_next[:-1] & ~is_free[:-1]
    unmatched_free = int(np.count_nonzero(is_free & ~prev_alloc))
    a_rows = rows[alloc_pos]
    next_rows = rows[np.minimum(alloc_pos + 1, len(rows) - 1)] if len(rows) else a_rows
    last_seq = {p: int(seq[offsets[i + 1] - 1]) + 1 for i, p in enumerate(pids) if offsets[i + 1] > offsets[i]}
    t_free = np.where(matched | superseded, t[next_rows], end_t)
    seq_free = np.where(matched | superseded, seq[next_rows],
                        pd.Series(pid[a_rows]).map(last_seq).fillna(0).to_numpy(np.int64))
    kind_names = [kinds.get(k, f"kind{k}") for k in range(16)]
    bk = flags[a_rows]
    blocks = pd.DataFrame({
        "pid": pid[a_rows], "device": ev["device"][a_rows], "api": api_name(api[a_rows]),
        "kind": categorical(np.clip(bk, 0, 15), kind_names),
        "address": addr[a_rows], "size": size[a_rows],
        "handle": np.where((bk == 8) | (bk == 9) | (bk == 4), aux[a_rows], 0).astype(np.uint64),
        "t_alloc": t[a_rows], "t_free": t_free, "seq_alloc": seq[a_rows], "seq_free": seq_free,
        "freed": matched, "stream": ev["stream"][a_rows],
    }, copy=False)
    kind_cat = blocks["kind"].cat
    blocks["counts_device"] = kind_cat.categories.isin(DEVICE_KINDS)[kind_cat.codes.to_numpy()]
    blocks = blocks.sort_values(["t_alloc", "pid", "seq_alloc"], kind="stable").reset_index(drop=True)
    blocks.insert(0, "block_id", np.arange(len(blocks), dtype=np.int64))
    blocks = conform(blocks, BLOCK_COLUMNS)
    sites = read_sites(ev, op, offsets, pids, strings,  # owners, frames, stacks
                       int(meta.get("site_format") or SITE_FORMAT))
    attach_blocks(blocks, sites)

    never_freed = int((~matched).sum())
    # drop the pairing's intermediates now (the peak of a 10 M-event load is set by what is alive here)
    del rows, is_free, g_pid, g_fam, g_key, g_seq, order, same_next, nxt_free, alloc_pos, matched, superseded
    del prev_alloc, a_rows, next_rows, t_free, seq_free, key_a, key_f, kind_a, kind_f, ai, fi, bk

    # ---- kernels ----
    kernels: list[str] = []
    kindex: dict[tuple[int, int], int] = {}
    name_index: dict[str, int] = {}
    lm = (op == O.LAUNCH)
    lkey = np.unique((pid[lm].astype(np.int64) << 32) | aux[lm].astype(np.int64))   # (pid, string id)
    for p, sid in zip((lkey >> 32).tolist(), (lkey & 0xFFFFFFFF).tolist()):
        name = strings.get(p, {}).get(sid, "<unknown kernel>")
        if name not in name_index:
            name_index[name] = len(kernels)
            kernels.append(name)
        kindex[(p, sid)] = name_index[name]

    kkeys = np.array(sorted(kindex), dtype=np.int64).reshape(-1, 2)
    kcomb = (kkeys[:, 0] << 32) | kkeys[:, 1] if len(kkeys) else np.zeros(0, np.int64)
    korder_k = np.argsort(kcomb)
    kcomb_sorted = kcomb[korder_k]
    kvals = np.array([kindex[tuple(k)] for k in kkeys.tolist()], dtype=np.int32)[korder_k] if len(kkeys) \
        else np.zeros(0, np.int32)

    def kernel_ids_at(rows):
        """Global kernel index of the LAUNCH records at ``rows`` (-1 if unknown)."""
        if len(kcomb_sorted) == 0:
            return np.full(len(rows), -1, dtype=np.int32)
        q = (pid[rows].astype(np.int64) << 32) | aux[rows].astype(np.int64)
        pos = np.minimum(np.searchsorted(kcomb_sorted, q), len(kcomb_sorted) - 1)
        return np.where(kcomb_sorted[pos] == q, kvals[pos], -1).astype(np.int32)

    def kernel_ids(mask):
        return kernel_ids_at(np.flatnonzero(mask))

    launch_rows = np.flatnonzero(lm)
    launch_kid = kernel_ids_at(launch_rows)          # once per launch; accesses gather from it

    # ---- accesses: each ACCESS record follows its LAUNCH/COPY/MEMSET/TENSORMAP ----
    acc = op == O.ACCESS
    xi = np.flatnonzero(acc)
    non_acc = np.flatnonzero(~acc)
    # the record each ACCESS follows: the last non-ACCESS record before it (0 if none)
    before = np.cumsum(~acc)[xi] - 1
    owner_xi = np.where(before >= 0, non_acc[np.maximum(before, 0)] if len(non_acc) else 0, 0)
    del non_acc
    bkey = blocks["pid"].to_numpy(np.int64) << 40 | blocks["seq_alloc"].to_numpy(np.int64)
    korder = np.argsort(bkey, kind="stable")
    skey = bkey[korder]
    qkey = pid[xi].astype(np.int64) << 40 | aux[xi].astype(np.int64)
    pos = np.searchsorted(skey, qkey)
    pos_c = np.minimum(pos, max(len(skey) - 1, 0))
    ok = (pos < len(skey)) & (skey[pos_c] == qkey) if len(skey) else np.zeros(len(xi), bool)
    xi_ok = xi[ok]
    own = owner_xi[ok]
    own_op = op[own]
    op_names = {O.LAUNCH: "launch", O.COPY: "copy", O.MEMSET: "memset", O.TENSORMAP: "tensormap"}
    kern_at = np.full(n, -1, dtype=np.int32)        # kernel of each LAUNCH record, -1 elsewhere
    kern_at[launch_rows] = launch_kid
    kern_of_owner = kern_at[own]
    del kern_at
    accesses = pd.DataFrame({
        "block_id": blocks["block_id"].to_numpy()[korder[pos_c[ok]]] if len(skey) else np.zeros(0, np.int64),
        "pid": pid[xi_ok], "seq": seq[own], "t": t[own], "kernel": kern_of_owner,
        "op": categorical(np.clip(own_op, 0, 15), [op_names.get(o, f"op{o}") for o in range(16)]),
        "flags": flags[xi_ok].astype(np.uint16, copy=False),
    }, copy=False)
    accesses = conform(accesses, ACCESS_COLUMNS)

    unresolved_access = int(len(xi) - len(xi_ok))
    del xi, before, owner_xi, qkey, pos, pos_c, ok, xi_ok, korder, skey, bkey, own_op, kern_of_owner

    # ---- launches ----
    lmask = (op == O.LAUNCH) | (op == O.GRAPH_LAUNCH)
    li = np.flatnonzero(lmask)
    # accesses per launch: own is sorted (records in order), so count by binary search
    n_acc = np.searchsorted(own, li, side="right") - np.searchsorted(own, li, side="left")
    del own
    kid = np.full(len(li), -1, dtype=np.int32)
    kid[op[li] == O.LAUNCH] = launch_kid
    kn = list(dict.fromkeys(kernels + ["<graph>"]))
    launches = pd.DataFrame({
        "pid": pid[li], "tid": ev["tid"][li].astype(np.int64), "seq": seq[li], "t": t[li],
        "device": ev["device"][li], "stream": ev["stream"][li], "api": api_name(api[li]), "kernel": kid,
        "kernel_name": categorical(np.where(kid >= 0, kid, len(kernels)), kn),
        "n_access": n_acc.astype(np.int32), "graph": op[li] == O.GRAPH_LAUNCH,
    }, copy=False)
    launches = conform(launches, LAUNCH_COLUMNS)

    # ---- copies, hints, failures, markers ----
    ci = np.flatnonzero(((op == O.COPY) | (op == O.MEMSET)) & (res == 0))
    copies = conform(pd.DataFrame({
        "pid": pid[ci], "seq": seq[ci], "t": t[ci], "api": api_name(api[ci]),
        "op": categorical(np.where(op[ci] == O.COPY, 0, 1), ["copy", "memset"]), "dst": addr[ci],
        "src": np.where(op[ci] == O.COPY, aux[ci], 0).astype(np.uint64), "size": size[ci],
        "stream": ev["stream"][ci]}), COPY_COLUMNS)
    hi = np.flatnonzero(((op == O.ADVISE) | (op == O.PREFETCH)) & (res == 0))
    hints = conform(pd.DataFrame({
        "pid": pid[hi], "seq": seq[hi], "t": t[hi], "api": api_name(api[hi]),
        "op": categorical(np.where(op[hi] == O.ADVISE, 0, 1), ["advise", "prefetch"]), "address": addr[hi],
        "size": size[hi], "value": aux[hi].astype(np.int64)}), HINT_COLUMNS)
    call_ops = np.isin(op, [O.ALLOC, O.FREE, O.LAUNCH, O.COPY, O.MEMSET, O.ADVISE, O.PREFETCH,
                            O.GRAPH_LAUNCH, O.TENSORMAP])
    fail = np.flatnonzero(call_ops & (res != 0))
    opname = np.array([{v: k for k, v in records.ops().items()}.get(o, str(o)) for o in range(16)], dtype=object)
    # failure details, row by row: kind/pool/stream of failed allocations and frees, the SITE at seq+1,
    # the MEMINFO whose aux is the failure's seq
    kind_names = {0: "", 1: "device", 2: "pitch", 3: "async", 4: "pool", 5: "managed", 6: "host",
                  7: "vmm_reserve", 8: "vmm_create", 9: "vmm_map"}
    site_of = {k: v[:2] for k, v in sites.site_of.items()}
    meminfo = {}
    mop = getattr(O, "MEMINFO", -1)
    for i in np.flatnonzero(op == mop):
        meminfo[(int(pid[i]), int(aux[i]))] = (int(addr[i]), int(size[i]), int(ev["device"][i]))
    rows = []
    for i in fail:
        mem_op = op[i] in (O.ALLOC, O.FREE)
        k = int(ev["flags"][i]) if mem_op else 0
        own, sid = site_of.get((int(pid[i]), int(seq[i])), ("", -1))
        fb, tb, dev = meminfo.get((int(pid[i]), int(seq[i])), (-1, -1, -1))
        rows.append({"stream": int(ev["stream"][i]) if mem_op and k not in (8, 9) else 0,
                     "device": dev if dev >= 0 else int(ev["device"][i]), "kind": kind_names.get(k, ""),
                     "pool": int(aux[i]) if k == 4 else 0, "owner": own, "stack_id": sid,
                     "free_bytes": fb, "total_bytes": tb})
    det = pd.DataFrame(rows, columns=["stream", "device", "kind", "pool", "owner", "stack_id", "free_bytes",
                                      "total_bytes"])
    failures = conform(pd.DataFrame({
        "pid": pid[fail], "seq": seq[fail], "t": t[fail], "api": api_name(api[fail]),
        "op": pd.Categorical(opname[op[fail]]), "size": size[fail], "result": res[fail],
        "stream": det["stream"].to_numpy(np.uint64), "device": det["device"].to_numpy(np.int16),
        "kind": pd.Categorical(det["kind"].to_numpy(object), categories=list(kind_names.values())),
        "pool": det["pool"].to_numpy(np.uint64), "owner": det["owner"].astype(object).to_numpy(),
        "stack_id": det["stack_id"].to_numpy(np.int64), "free_bytes": det["free_bytes"].to_numpy(np.int64),
        "total_bytes": det["total_bytes"].to_numpy(np.int64)}), FAILURE_COLUMNS)
    mi = np.flatnonzero(op == O.MARKER)
    markers = conform(pd.DataFrame({
        "pid": pid[mi], "seq": seq[mi], "t": t[mi],
        "label": [strings.get(int(p), {}).get(int(s), "") for p, s in zip(pid[mi], aux[mi])]}), MARKER_COLUMNS)

    # ---- processes ----
    counters = {}
    for pr in (raw.trailer or {}).get("processes", []):
        counters[pr.get("ring")] = pr
    prow = []
    for pr in raw.processes:
        c = counters.get(pr.get("ring"), {})
        prow.append({"pid": pr["pid"], "ppid": pr.get("ppid", 0), "exe": pr.get("exe", ""),
                     "forked": bool(pr.get("forked")), "start_ns": int(pr.get("start_ns", t0)) - t0,
                     "written": c.get("written", -1), "lost": c.get("lost", -1), "waits": c.get("waits", 0),
                     "unscanned_launches": c.get("unscanned_launches", 0)})
    processes = conform(pd.DataFrame(prow), PROCESS_COLUMNS) if prow else empty_table(PROCESS_COLUMNS)

    # ---- NVML samples ----
    if raw.nvml:
        frames = [pd.DataFrame(c["rows"], columns=c["columns"]) for c in raw.nvml]
        nvml = conform(pd.concat(frames, ignore_index=True), NVML_COLUMNS)
    else:
        nvml = empty_table(NVML_COLUMNS)

    counts = {
        "events": n, "alloc": int(am.sum()), "free": int(fm.sum()), "access": int(len(accesses)),
        "launch": int((op == O.LAUNCH).sum()), "graph_launch": int((op == O.GRAPH_LAUNCH).sum()),
        "copy": int(((op == O.COPY) & (res == 0)).sum()), "memset": int(((op == O.MEMSET) & (res == 0)).sum()),
        "advise": int(((op == O.ADVISE) & (res == 0)).sum()),
        "prefetch": int(((op == O.PREFETCH) & (res == 0)).sum()), "marker": int(len(markers)),
        "failure": int(len(failures)), "unmatched_free": unmatched_free,
        "unresolved_access": unresolved_access, "never_freed": never_freed,
    }
    by_api_counts = np.bincount(api[call_ops], minlength=len(apis)) if n else np.zeros(len(apis), np.int64)
    counts["by_api"] = {str(apis[i]): int(c) for i, c in enumerate(by_api_counts) if c and i < len(apis)}
    meta = dict(meta)
    meta["trailer"] = raw.trailer
    meta["capture_notes"] = sites.notes
    tr = Trace(blocks=blocks, accesses=accesses, launches=launches, copies=copies, hints=hints,
               failures=failures, markers=markers, processes=processes, nvml=nvml, kernels=kernels,
               meta=meta, counts=counts, warnings=list(raw.warnings), path=path,
               frames=sites.frames, stacks=sites.stacks)
    tr = vmm.join(tr)  # one logical block per VMM buffer (reserve + create + map)
    # CUDA graph replays: the reader's shared post-pass over the built tables (not the record pass checked here)
    gl = np.flatnonzero(op == O.GRAPH_LAUNCH)
    graph_launches = pd.DataFrame({"pid": pid[gl], "seq": seq[gl], "exec": ev["addr"][gl]})
    return graphs.expand(tr, ev, pid, op, O.GRAPH_DEF, graph_launches)


# ---- call sites: SITE, FRAME, STACK, NOTE records, decoded from docs/trace-format.md ("Call sites") alone ----
# Written from the spec, not from pyinterpose/trace/stacks.py: ids are numbered here in an order of this file's
# own (every call stack resolved to its frames' contents first), so tests compare frames, stacks and the
# tables' stack_id by content (test_reader_native.canonical_*), never by id.
SITE_FORMAT = 1
PY_REQUESTED, NATIVE_REQUESTED = 1, 32                  # SITE flags
NO_PYTHON_FRAMES, NO_NATIVE_STACK = "<no Python frames>", "<no native stack>"
AUTOGRAD, AUTOGRAD_THREAD = "backward (autograd thread)", "pt_autograd_"


def _record_text(raw: np.ndarray, ev: np.ndarray, i: int) -> bytes:
    """The text of a FRAME (as of a STRING): ``size`` bytes in the addr..aux bytes of the STRDATA records after it."""
    n = int(ev["size"][i])
    return b"".join(raw[i + 1 + k, 16:48].tobytes() for k in range(-(-n // 32)))[:n]


def _elf_names(native: set) -> dict:
    """(path, offset) -> symbol, from the object files (the spec: "symbolises native frames from the object
    files' ELF symbol tables"); the ELF reader is shared, the record decoding below is not."""
    from pyinterpose.trace.elfsym import symbolize
    return symbolize(sorted(native)) if native else {}


def read_sites(ev: np.ndarray, op: np.ndarray, offsets: np.ndarray, pids: list[int],
               strings: dict[int, dict[int, str]], site_format: int) -> types.SimpleNamespace:
    """frames, stacks, notes, and ``site_of``: (pid, seq of the ALLOC) -> (owner, stack_id, caller, thread)."""
    out = types.SimpleNamespace(frames=empty_frames(), stacks=empty_stacks(), notes=[], site_of={})
    if site_format > SITE_FORMAT:
        out.notes = [{"pid": 0, "note": f"call sites skipped: site format {site_format} is newer than "
                                        f"this pyinterpose understands ({SITE_FORMAT})"}]
        return out
    O = records.OP
    if len(ev) == 0 or not np.any((op == O.SITE) | (op == O.NOTE)):
        return out
    raw = ev.view(np.uint8).reshape(len(ev), ev.dtype.itemsize)
    # frame content: python (filename, function, line); native (path, PC - load bias)
    # call stack: tuple of frame contents, innermost first
    all_frames: list[tuple] = []
    all_stacks: list[tuple] = []
    pending = []                                          # (pid, seq, owner, stack or None, caller, thread)
    for i, p in enumerate(pids):
        st = strings.get(p, {})
        frames: dict[int, tuple] = {}
        stack_defs: dict[int, tuple[int, int]] = {}       # id -> (parent id, frame id), first definition
        sites = []
        for r in range(int(offsets[i]), int(offsets[i + 1])):
            o = int(op[r])
            if o == O.NOTE:
                out.notes.append({"pid": int(p), "note": st.get(int(ev["aux"][r]), "")})
            elif o == O.FRAME:
                text = _record_text(raw, ev, r)
                if int(ev["flags"][r]) == 1:
                    filename, _, function = text.partition(b"\0")
                    f = ("python", filename.decode(errors="replace"), function.decode(errors="replace"),
                         int(ev["addr"][r].astype(np.int64)))
                else:
                    f = ("native", text.decode(errors="replace"), int(ev["stream"][r]))
                frames[int(ev["aux"][r])] = f
                all_frames.append(f)
            elif o == O.STACK:
                if int(ev["aux"][r]):                         # id 0 is the root, never a stack
                    stack_defs.setdefault(int(ev["aux"][r]), (int(ev["addr"][r]), int(ev["size"][r])))
            elif o == O.SITE:
                sites.append(r)
        resolved: dict[int, tuple | None] = {}

        def resolve(sid: int) -> tuple | None:
            """A stack's frames (innermost first); None where its frame is not defined. A parent that is not
            a defined stack with a smaller id (or names no frame) is the root. Parents resolve first (id order)."""
            if sid not in resolved:
                parent, frame = stack_defs[sid]
                up = resolve(parent) if parent in stack_defs and parent < sid else None
                resolved[sid] = (frames[frame],) + (up or ()) if frame in frames else None
            return resolved[sid]

        for sid in sorted(stack_defs):
            path = resolve(sid)
            if path is not None:
                all_stacks.append(path)
        for r in sites:
            flags = int(ev["flags"][r])
            owner = st.get(int(ev["stream"][r]), "")
            thread = st.get(int(ev["result"][r].astype(np.uint32)), "")
            sid = int(ev["aux"][r]) if flags & PY_REQUESTED else int(ev["size"][r]) if flags & NATIVE_REQUESTED else 0
            path = resolved.get(sid) if sid else None
            if path is None and flags & (PY_REQUESTED | NATIVE_REQUESTED):
                why = AUTOGRAD if thread.startswith(AUTOGRAD_THREAD) else \
                    NO_PYTHON_FRAMES if flags & PY_REQUESTED else NO_NATIVE_STACK
                path = (("label", why, owner),)
                all_frames.append(path[0])
                all_stacks.append(path)
            pending.append((int(p), int(ev["seq"][r]) - 1, owner, path, int(ev["addr"][r]), thread))
    # number frames and stacks: frames in order of first appearance; stacks shortest first, then by content
    frame_id: dict[tuple, int] = {}
    for f in all_frames:
        frame_id.setdefault(f, len(frame_id))
    stack_id: dict[tuple, int] = {}
    for path in sorted(set(all_stacks), key=lambda s: (len(s), repr(s))):
        stack_id[path] = len(stack_id)
    names = _elf_names({(f[1], f[2]) for f in frame_id if f[0] == "native" and f[1]})
    rows = []
    for f, i in frame_id.items():
        if f[0] == "python":
            rows.append((i, "python", f[1], f[2], f[3], ""))
        elif f[0] == "native":
            rows.append((i, "native", "", names.get((f[1], f[2])) or f"0x{f[2]:x}", 0, os.path.basename(f[1])))
        else:                                             # a stack that was requested but is not there
            rows.append((i, "native", "", f[1], 0, f[2]))
    if rows:
        out.frames = pd.DataFrame(rows, columns=list(FRAME_COLUMNS)).astype(FRAME_COLUMNS)
    if stack_id:
        out.stacks = pd.DataFrame([(i, stack_id[s[1:]] if len(s) > 1 else -1, frame_id[s[0]])
                                   for s, i in stack_id.items()], columns=list(STACK_COLUMNS)).astype(STACK_COLUMNS)
    for p, seq, owner, path, caller, thread in pending:
        out.site_of[(p, seq)] = (owner, stack_id[path] if path is not None else -1, caller, thread)
    return out


def attach_blocks(blocks: pd.DataFrame, sites: types.SimpleNamespace) -> None:
    """owner, stack_id, caller, thread of each block: those of the SITE that follows its ALLOC."""
    got = [sites.site_of.get((int(p), int(s)), ("", -1, 0, "")) for p, s in
           zip(blocks["pid"].to_numpy(), blocks["seq_alloc"].to_numpy())]
    blocks["owner"] = pd.Categorical(np.array([g[0] for g in got], dtype=object))
    blocks["stack_id"] = np.array([g[1] for g in got], dtype=np.int64)
    blocks["caller"] = np.array([g[2] for g in got], dtype=np.uint64)
    blocks["thread"] = pd.Categorical(np.array([g[3] for g in got], dtype=object))
