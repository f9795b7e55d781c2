"""CUDA graphs: captured calls become graph nodes, and every replay is expanded into what its nodes did.

The one place every analysis gets graph replays from (called by the reader once the tables are built).

**Capture.**  A call recorded on a stream between its ``cudaStreamBeginCapture`` and
``cudaStreamEndCapture`` (GRAPH_DEF CAPTURE_BEGIN/END records, same process) did not run: it is a node of
the graph the capture ended in.  Its nodes, in call order (node id = that order, 0-based; a single-stream
capture is one chain, node k depends on node k-1): the launches (kernel nodes, with the accesses their
scanned arguments gave), copies and memsets, the stream-ordered allocations (memory alloc nodes: their
block) and frees (memory free nodes), and graph launches (child graphs: the child's nodes inlined).  They
leave ``launches``, ``copies``, ``accesses`` and ``blocks`` (not eager work) and are listed in
``Trace.graph_nodes``.

**Instantiation** (GRAPH_DEF INSTANTIATE) ties an executable graph to its graph: a graph launch runs the
graph last instantiated into that handle before it, whose nodes are those of the last capture that ended
in that graph handle before the instantiation (handles are reused after a destroy).

**Replays.**  Each graph launch of a known graph expands into its nodes, in node order:

* node k has seq ``launch seq + 1 + k`` (the shim reserved one NODE_SLOT ticket per node after the launch:
  native/shim/graphs.c; where it could not, the launch's seq) and, on the CPU clock, time
  ``launch t + k`` ns (at the launch's time, in node order);
* a kernel node is a row of ``launches`` (``node`` = k, ``graph`` False, ``api`` the graph launch's, its
  device start/end from the ``gpu_activity`` row CUPTI gave for that node: ``captured_seq``; in a graph built
  node by node, the replay's records matched to its nodes by kind and function: ``_NodeRecords``), a copy or
  memset node a row of ``copies``; their accesses are rows of ``accesses`` with ``op`` "graph" and
  ``node`` = k;
* a memory alloc node is a block of its own in each replay, at the address the capture fixed, alive from
  its alloc node to its free node (a node never freed in the graph: until the next replay of the same
  graph, or the end of the trace).

So iterations, access intervals, lifetimes, pools, swap, OOM and fit all read the expanded stream.  Graphs built
node by node (GRAPH_DEF CREATE / NODE_ADD / CHILD: the typed ``cuGraphAdd*Node`` and the generic
``cuGraphAddNode[_v2]`` / ``cudaGraphAddNode[_v2]`` alike) are expanded the same way; the generic API's other
node types (empty, host, event, semaphore, batch memory op, conditional) are no node, as the shim writes no
record for them.  An executable graph updated in place is followed: a kernel, memcpy or memset node given new
parameters (GRAPH_DEF EXEC_SET: ``cuGraphExec{Kernel,Memcpy,Memset}NodeSetParams``, the generic exec set) runs, in
the replays after it, as the call record that update wrote (its launches / copies row and accesses: ``sets``, the
per-replay template rows ``J`` / ``CS``); a child graph node given another graph (EXEC_CHILD:
``cuGraphExecChildGraphNodeSetParams``) inlines that graph's nodes in the replays after it (``child_sets``: such
replays are grouped by the child graphs they run).  ``cudaGraphExecUpdate`` is a new instantiation.  Graph launches whose graph is unknown (instantiated before recording started, or made by
calls the shim does not follow) stay single ``launches`` rows: ``counts["graph_launches_unexpanded"]``.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from .model import ACCESS_COLUMNS, GRAPH_MEMORY_COLUMNS, GRAPH_NODE_COLUMNS, conform, empty_table

# enum pi_graph_def (native/shim/events.h)
(CAPTURE_BEGIN, CAPTURE_END, INSTANTIATE, NODE_SLOT, NODE_ADD, CHILD, EXEC_SET, EXEC_UPDATE, CREATE,
 EXEC_CHILD) = range(1, 11)
CHILD_NODE = -1   # a node kind of its own while a graph is being assembled: a child graph added to it
STREAM_ORDERED = ("async", "pool")
NODE_KINDS = ["kernel", "copy", "memset", "alloc", "free"]
MAX_DEPTH = 8   # child graphs inside child graphs


@dataclass
class _Graph:
    """The nodes of one captured graph, in node order (parallel lists)."""
    kind: list = field(default_factory=list)       # index into NODE_KINDS
    cap_seq: list = field(default_factory=list)    # seq of the captured call
    row: list = field(default_factory=list)        # launches row / copies row / blocks row (child: its graph)
    handle: list = field(default_factory=list)     # the CUgraphNode of a node added explicitly (0: captured)
    stream: int = 0
    graph: int = 0
    end_seq: int = 0
    pid: int = 0


def _defs(side, side_pid, side_op, graph_def_op: int) -> tuple[dict[int, np.ndarray], dict[tuple[int, int], int]]:
    """The GRAPH_DEF rows of each process in seq order, NODE_SLOT records left out; and from those, the node
    slots each graph launch holds: (pid, launch seq) -> slots."""
    if not len(side):
        return {}, {}
    idx = np.flatnonzero(side_op == graph_def_op)
    flags = side["flags"][idx].astype(np.int64)
    sl = idx[flags == NODE_SLOT]
    slots: dict[tuple[int, int], int] = {}
    if len(sl):
        first = side["aux"][sl].astype(np.int64) == 0        # one per replay: its node 0
        sl = sl[first]
        launch = side["seq"][sl].astype(np.int64) - 1
        slots = dict(zip(zip(side_pid[sl].astype(np.int64).tolist(), launch.tolist()),
                         side["size"][sl].astype(np.int64).tolist()))
    idx = idx[flags != NODE_SLOT]
    out: dict[int, np.ndarray] = {}
    pid = side_pid[idx]
    for p in np.unique(pid).tolist():
        rows = idx[pid == p]
        out[int(p)] = rows[np.argsort(side["seq"][rows].astype(np.int64), kind="stable")]
    return out, slots


def graph_memory(side, side_pid, side_op, graph_mem_op: int | None, t0: int) -> pd.DataFrame:
    """GRAPH_MEM records: the device's graph memory pool after each replay (reserved current and high,
    used current; ``cudaDeviceGetGraphMemAttribute``)."""
    if graph_mem_op is None or not len(side):
        return empty_table(GRAPH_MEMORY_COLUMNS)
    i = np.flatnonzero((side_op == graph_mem_op) & (side["result"] == 0))
    if not len(i):
        return empty_table(GRAPH_MEMORY_COLUMNS)
    r = side[i]
    return conform(pd.DataFrame({
        "pid": side_pid[i], "seq": r["aux"].astype(np.int64), "t": r["t_ns"].view(np.int64) - t0,
        "device": r["device"], "reserved": r["addr"].astype(np.int64), "reserved_high": r["size"].view(np.int64),
        "used": r["stream"].astype(np.int64)}), GRAPH_MEMORY_COLUMNS)


def expand(tr, side, side_pid, side_op, graph_def_op: int, graph_launches: pd.DataFrame):
    """Move captured calls into ``tr.graph_nodes`` and expand every replay of a known graph (module
    docstring); ``graph_launches``: pid, seq, exec of every GRAPH_LAUNCH.  Returns ``tr`` (its tables
    replaced)."""
    launches, copies, blocks, acc = tr.launches, tr.copies, tr.blocks, tr.accesses
    defs, slots = _defs(side, side_pid, side_op, graph_def_op)
    n_graph_launch = int(launches["graph"].sum()) if len(launches) else 0
    tr.counts["graph_launches_unexpanded"] = n_graph_launch
    if not defs:
        return tr
    l_pid, l_seq = launches["pid"].to_numpy(np.int64), launches["seq"].to_numpy(np.int64)
    l_stream, l_graph = launches["stream"].to_numpy(np.uint64), launches["graph"].to_numpy(bool)
    c_pid, c_seq = copies["pid"].to_numpy(np.int64), copies["seq"].to_numpy(np.int64)
    c_stream = copies["stream"].to_numpy(np.uint64)
    b_pid, b_sa = blocks["pid"].to_numpy(np.int64), blocks["seq_alloc"].to_numpy(np.int64)
    b_sf, b_freed = blocks["seq_free"].to_numpy(np.int64), blocks["freed"].to_numpy(bool)
    b_stream = blocks["stream"].to_numpy(np.uint64)
    b_so = blocks["kind"].isin(STREAM_ORDERED).to_numpy()
    l_exec = np.zeros(len(launches), np.uint64)
    gl_rows = np.flatnonzero(l_graph)
    execs = {(int(p), int(q)): int(e) for p, q, e in zip(graph_launches["pid"].tolist(),
                                                           graph_launches["seq"].tolist(),
                                                           graph_launches["exec"].tolist())}
    for r in gl_rows.tolist():
        l_exec[r] = execs.get((int(l_pid[r]), int(l_seq[r])), 0)

    drop_l = np.zeros(len(launches), bool)
    drop_c = np.zeros(len(copies), bool)
    drop_b = np.zeros(len(blocks), bool)
    b_graph = blocks["graph"].to_numpy(np.uint64).copy() if "graph" in blocks else np.zeros(len(blocks), np.uint64)
    # (pid, seq) of a record -> its row: the records of explicitly added nodes and of exec updates name them
    # (only built when the trace has graphs built node by node or exec parameter changes)
    explicit = any(((side["flags"][rows] == NODE_ADD) | (side["flags"][rows] == EXEC_SET)).any()
                   for rows in defs.values())
    l_at = {(int(p), int(q)): j for j, (p, q) in enumerate(zip(l_pid.tolist(), l_seq.tolist()))} if explicit else {}
    c_at = {(int(p), int(q)): j for j, (p, q) in enumerate(zip(c_pid.tolist(), c_seq.tolist()))} if explicit else {}
    ba_at = {(int(p), int(q)): j for j, (p, q) in enumerate(zip(b_pid.tolist(), b_sa.tolist()))} if explicit else {}
    bf_at = {(int(p), int(q)): j for j, (p, q, f) in enumerate(zip(b_pid.tolist(), b_sf.tolist(), b_freed.tolist()))
             if f} if explicit else {}
    graphs: dict[tuple[int, int], list[_Graph]] = {}      # (pid, graph handle) -> captures ending in it
    added: dict[tuple[int, int], list] = {}               # (pid, graph) -> [(seq, kind, row, rec seq, handle, child)]
    created: dict[tuple[int, int], list] = {}             # (pid, graph) -> seqs of cuGraphCreate
    insts: dict[tuple[int, int], list] = {}               # (pid, exec) -> [(seq, graph)] (instantiate, update)
    sets: dict[tuple[int, int], list] = {}                # (pid, exec) -> [(seq, node handle, group, row)]
    child_sets: dict[tuple[int, int], list] = {}          # (pid, exec) -> [(seq, child graph node handle, graph)]
    captured_launch: dict[int, tuple[int, int]] = {}      # launches row of a captured graph launch -> (pid, seq)

    def node_of(p: int, rec: int):
        """(kind, row) of the record at (p, rec) an added node stands for, or None."""
        for at, kinds in ((l_at, None), (c_at, "copy"), (ba_at, 3), (bf_at, 4)):
            j = at.get((p, rec))
            if j is None:
                continue
            if kinds is None:
                drop_l[j] = True
                return 0, j
            if kinds == "copy":
                drop_c[j] = True
                return (1 if copies["op"].iat[j] == "copy" else 2), j
            if kinds == 3:
                drop_b[j] = True
            return kinds, j
        return None

    for p, rows in defs.items():
        open_at: dict[int, int] = {}
        for i in rows.tolist():
            r = side[i]
            kind, seq, ok = int(r["flags"]), int(r["seq"]), int(r["result"]) == 0
            if kind == CAPTURE_BEGIN and ok:
                open_at[int(r["stream"])] = seq
            elif kind == CAPTURE_END:
                begin = open_at.pop(int(r["stream"]), None)
                if begin is None:
                    continue
                s = np.uint64(int(r["stream"]))
                g = _Graph(stream=int(s), graph=int(r["aux"]), end_seq=seq, pid=p)
                lm = np.flatnonzero((l_pid == p) & (l_stream == s) & (l_seq > begin) & (l_seq < seq))
                cm = np.flatnonzero((c_pid == p) & (c_stream == s) & (c_seq > begin) & (c_seq < seq))
                am = np.flatnonzero((b_pid == p) & b_so & (b_stream == s) & (b_sa > begin) & (b_sa < seq))
                fm = am[b_freed[am] & (b_sf[am] < seq)]
                drop_l[lm], drop_c[cm], drop_b[am] = True, True, True
                items = [(int(l_seq[j]), 0, j) for j in lm.tolist()]
                items += [(int(c_seq[j]), 1 if copies["op"].iat[j] == "copy" else 2, j) for j in cm.tolist()]
                items += [(int(b_sa[j]), 3, j) for j in am.tolist()] + [(int(b_sf[j]), 4, j) for j in fm.tolist()]
                for sq, k, j in sorted(items):
                    g.cap_seq.append(sq)
                    g.kind.append(k)
                    g.row.append(j)
                    g.handle.append(0)
                    if k == 0 and l_graph[j]:
                        captured_launch[j] = (p, sq)
                if ok and g.graph:
                    graphs.setdefault((p, g.graph), []).append(g)
                    # memory allocated while the capture was open, not as a node: the graph's private pool
                    pm = np.flatnonzero((b_pid == p) & ~b_so & (b_sa > begin) & (b_sa < seq))
                    b_graph[pm] = np.uint64(g.graph)
            elif kind in (INSTANTIATE, EXEC_UPDATE) and ok and int(r["addr"]):
                insts.setdefault((p, int(r["addr"])), []).append((seq, int(r["aux"])))
            elif kind == NODE_ADD:
                nk = node_of(p, int(r["size"]))
                if ok and nk is not None:
                    added.setdefault((p, int(r["aux"])), []).append(
                        (seq, nk[0], nk[1], int(r["size"]), int(r["addr"]), 0))
            elif kind == CHILD and ok:
                added.setdefault((p, int(r["aux"])), []).append((seq, CHILD_NODE, -1, seq, int(r["addr"]),
                                                                 int(r["stream"])))
            elif kind == CREATE and ok:
                created.setdefault((p, int(r["aux"])), []).append(seq)
            elif kind == EXEC_SET:             # a kernel (group 0), memcpy or memset node's (1) new parameters
                j, grp = l_at.get((p, int(r["size"]))), 0
                if j is None:
                    j, grp = c_at.get((p, int(r["size"]))), 1
                if j is not None:
                    (drop_l if grp == 0 else drop_c)[j] = True
                    if ok:
                        sets.setdefault((p, int(r["addr"])), []).append((seq, int(r["aux"]), grp, j))
            elif kind == EXEC_CHILD and ok:    # a child graph node now runs another graph
                child_sets.setdefault((p, int(r["addr"])), []).append((seq, int(r["aux"]), int(r["stream"])))

    snapshots: dict[tuple[int, int, int], _Graph] = {}

    def graph_at(p: int, gh: int, at: int) -> _Graph | None:
        """The nodes of graph gh as they were at seq ``at``: its last capture before then, and the nodes
        added to it since (or since it was created)."""
        key = (p, gh, at)
        if key in snapshots:
            return snapshots[key]
        caps = [c for c in graphs.get((p, gh), []) if c.end_seq < at]
        since = max([s for s in created.get((p, gh), []) if s < at], default=-1)
        cap = caps[-1] if caps and caps[-1].end_seq > since else None
        lo = cap.end_seq if cap is not None else since
        adds = [a for a in added.get((p, gh), []) if lo < a[0] < at]
        if cap is None and not adds:
            snapshots[key] = None
            return None
        if not adds:
            snapshots[key] = cap
            return cap
        g = _Graph(stream=cap.stream if cap else 0, graph=gh, end_seq=at, pid=p)
        if cap is not None:
            g.kind, g.row, g.cap_seq, g.handle = list(cap.kind), list(cap.row), list(cap.cap_seq), list(cap.handle)
        for sq, k, j, rec, h, child in adds:
            g.kind.append(k)
            g.row.append(j if k != CHILD_NODE else child)
            g.cap_seq.append(rec)
            g.handle.append(h)
        snapshots[key] = g
        return g

    def graph_of(p: int, ex: int, seq: int) -> tuple[_Graph | None, int]:
        """The graph an executable graph runs at seq, and the seq of its instantiation (or update)."""
        inst = [(s, g) for s, g in insts.get((p, ex), []) if s < seq]
        if not inst:
            return None, -1
        s_i, gh = inst[-1]
        return graph_at(p, gh, s_i), s_i

    def flat(g: _Graph, p: int, depth: int = 0, over: dict | None = None) -> list[tuple[int, int, int, int]]:
        """(kind, row, cap_seq, handle) of every node of g, child graphs inlined; ``over``: child graph node
        handle -> (graph, seq) it runs instead (cuGraphExecChildGraphNodeSetParams: of g's own nodes)."""
        out = []
        for k, j, sq, h in zip(g.kind, g.row, g.cap_seq, g.handle):
            if k == CHILD_NODE:            # added as a child graph node: the child as it was then
                if over and h in over:
                    j, sq = over[h]
                child = graph_at(p, j, sq) if depth < MAX_DEPTH else None
                if child is not None:
                    out += flat(child, p, depth + 1)
                continue
            if k == 0 and l_graph[j]:      # a graph launched into a capture
                child = graph_of(int(l_pid[j]), int(l_exec[j]), int(l_seq[j]))[0] if depth < MAX_DEPTH else None
                if child is not None:
                    out += flat(child, p, depth + 1)
                continue
            out.append((k, j, sq, h))
        return out

    # ---- the graph nodes table, and the replays of each graph ----
    node_rows = []
    flats: dict[int, list] = {}
    replays: dict[tuple, list[int]] = {}      # (id(graph), child graph nodes replaced) -> launches rows
    graph_by_id: dict[int, _Graph] = {}
    inst_of: dict[int, int] = {}              # launches row of a replay -> seq of its instantiation
    by_exec: dict[tuple[int, int], list[int]] = {}
    for r in gl_rows.tolist():
        if drop_l[r]:
            continue                           # a child graph launched into a capture: expanded with its parent
        g, s_i = graph_of(int(l_pid[r]), int(l_exec[r]), int(l_seq[r]))
        if g is None:
            continue
        graph_by_id[id(g)] = g
        inst_of[r] = s_i
        by_exec.setdefault((int(l_pid[r]), int(l_exec[r])), []).append(r)
    for (p, ex), ex_rows in by_exec.items():
        # child graph nodes given another graph since the instantiation, as of each replay (the latest each):
        # the replays of one executable graph in seq order, its EXEC_CHILD records merged in
        cs = child_sets.get((p, ex), [])
        i, cur, cur_inst = 0, {}, None
        for r in sorted(ex_rows, key=lambda r: int(l_seq[r])):
            if inst_of[r] != cur_inst:
                cur, cur_inst = {}, inst_of[r]
            while i < len(cs) and cs[i][0] < int(l_seq[r]):
                sq, h, c = cs[i]
                if sq > cur_inst:
                    cur[h] = (c, sq)
                i += 1
            g = graph_of(p, ex, int(l_seq[r]))[0]
            replays.setdefault((id(g), ex, tuple(sorted(cur.items()))), []).append(r)
    listed = [g for gs in graphs.values() for g in gs]
    listed += [g for g in snapshots.values() if g is not None and all(g is not c for c in listed)]
    for g in listed:
        f = flats[id(g)] = flat(g, g.pid)
        for k, (kind, j, sq, h) in enumerate(f):
            node_rows.append({
                "pid": int(l_pid[j]) if kind == 0 else int(c_pid[j]) if kind in (1, 2) else int(b_pid[j]),
                "graph": g.graph, "capture_seq": g.end_seq, "node": k, "kind": NODE_KINDS[kind], "seq": sq,
                "stream": g.stream, "kernel": int(launches["kernel"].iat[j]) if kind == 0 else -1,
                "size": int(copies["size"].iat[j]) if kind in (1, 2) else
                int(blocks["size"].iat[j]) if kind in (3, 4) else 0,
                "replays": sum(len(v) for (gi, _, _), v in replays.items() if gi == id(g))})
    tr.graph_nodes = conform(pd.DataFrame(node_rows), GRAPH_NODE_COLUMNS) if node_rows \
        else empty_table(GRAPH_NODE_COLUMNS)
    tr.counts["captured"] = int(drop_l.sum() + drop_c.sum() + drop_b.sum())

    # ---- captured accesses: templates of their node, out of the eager stream ----
    a_pid, a_seq = acc["pid"].to_numpy(np.int64), acc["seq"].to_numpy(np.int64)
    cap_keys = np.concatenate([(l_pid[drop_l] << 40) ^ l_seq[drop_l], (c_pid[drop_c] << 40) ^ c_seq[drop_c]])
    a_key = (a_pid << 40) ^ a_seq
    a_cap = np.isin(a_key, cap_keys) if len(cap_keys) else np.zeros(len(acc), bool)
    a_bid = acc["block_id"].to_numpy(np.int64)
    a_cap |= drop_b[a_bid] if len(acc) else False     # any access of a memory node's capture-time block

    new_blocks, new_acc, new_l, new_c = [], [], [], []
    next_bid = len(blocks)
    dev = _device_times(tr.gpu_activity)
    node_records = _NodeRecords(tr.gpu_activity)
    l_kernel = launches["kernel"].to_numpy(np.int64)
    by_seq: dict[int, np.ndarray] = {}        # (pid << 40) ^ seq of a captured call -> its access rows
    if a_cap.any():
        ci = np.flatnonzero(a_cap)
        o = ci[np.argsort(a_key[ci], kind="stable")]
        ks = a_key[o]
        first = np.flatnonzero(np.r_[True, ks[1:] != ks[:-1]])
        for f, e in zip(first.tolist(), np.r_[first[1:], len(o)].tolist()):
            by_seq[int(ks[f])] = o[f:e]
    a_kernel, a_flags = acc["kernel"].to_numpy(), acc["flags"].to_numpy()
    l_t = launches["t"].to_numpy(np.int64)
    l_api, l_tid = launches["api"].to_numpy(), launches["tid"].to_numpy()
    b_t_free = blocks["t_free"].to_numpy(np.int64)
    end_t, end_seq = tr_end(tr), (int(b_sf.max()) + 1 if len(b_sf) else 0)
    n_expanded = 0
    for (gid, ex, over), rows in replays.items():
        g = graph_by_id[gid]
        f = flat(g, g.pid, 0, dict(over)) if over else flats[gid]
        if not f:
            continue
        p = g.pid
        rows = np.array(sorted(rows, key=lambda r: int(l_seq[r])), np.int64)
        R, n = len(rows), len(f)
        n_expanded += R
        kinds = np.array([x[0] for x in f], np.int64)
        jrow = np.array([x[1] for x in f], np.int64)
        capseq = np.array([x[2] for x in f], np.int64)
        handle = [x[3] for x in f]
        LS, LT = l_seq[rows], l_t[rows]
        NS = np.array([slots.get((p, int(q)), 0) for q in LS.tolist()], np.int64)
        kk = np.arange(n, dtype=np.int64)
        SEQ = np.where(kk[None, :] < NS[:, None], LS[:, None] + 1 + kk[None, :], LS[:, None])
        T = LT[:, None] + kk[None, :]
        # kernel, memcpy and memset nodes given new parameters since the instantiation
        # (cuGraphExec{Kernel,Memcpy,Memset}NodeSetParams, cuGraphExecNodeSetParams): that call's record
        J, CS = np.tile(jrow, (R, 1)), np.tile(capseq, (R, 1))
        ex_sets = sets.get((p, ex), [])       # in seq order, as the rows
        hk = [(k, 0 if kinds[k] == 0 else 1, handle[k]) for k in range(n) if handle[k] and kinds[k] in (0, 1, 2)]
        if ex_sets and hk:
            i, cur, cur_inst = 0, {}, None
            for ri, r in enumerate(rows.tolist()):
                if inst_of[r] != cur_inst:     # a new instantiation (or update): its own parameters again
                    cur, cur_inst = {}, inst_of[r]
                while i < len(ex_sets) and ex_sets[i][0] < int(l_seq[r]):
                    sq2, h, grp, j2 = ex_sets[i]
                    if sq2 > cur_inst:
                        cur[(grp, h)] = j2
                    i += 1
                if cur:
                    for k, grp, h in hk:
                        j2 = cur.get((grp, h))
                        if j2 is not None:
                            J[ri, k], CS[ri, k] = j2, (l_seq if grp == 0 else c_seq)[j2]
        # ---- memory alloc nodes: a block per replay ----
        alloc_k = np.flatnonzero(kinds == 3)
        A = len(alloc_k)
        new_id = {}                               # construction-time block row -> (R, ) new ids
        if A:
            brow = jrow[alloc_k]
            free_of = {int(jrow[k]): int(k) for k in np.flatnonzero(kinds == 4)}
            fk = np.array([free_of.get(int(j), -1) for j in brow], np.int64)
            ids = next_bid + np.arange(R * A, dtype=np.int64)
            next_bid += R * A
            for a_i, j in enumerate(brow.tolist()):
                new_id[j] = ids[a_i::A]
            has_f = np.tile(fk >= 0, R)
            nxt_seq = np.r_[LS[1:], -1]
            nxt_t = np.r_[LT[1:], -1]
            fkc = np.maximum(fk, 0)
            seq_f = np.where(has_f, SEQ[:, fkc].ravel(), np.repeat(nxt_seq, A))
            t_f = np.where(has_f, T[:, fkc].ravel(), np.repeat(nxt_t, A))
            freed = has_f | (seq_f >= 0)
            orig_f = np.tile(b_freed[brow], R)
            seq_f = np.where(freed, seq_f, np.where(orig_f, end_seq, np.tile(b_sf[brow], R)))
            t_f = np.where(freed, t_f, np.where(orig_f, end_t, np.tile(b_t_free[brow], R)))
            nb = blocks.iloc[np.tile(brow, R)].reset_index(drop=True)
            nb["block_id"] = ids
            nb["t_alloc"], nb["seq_alloc"] = T[:, alloc_k].ravel(), SEQ[:, alloc_k].ravel()
            nb["t_free"], nb["seq_free"], nb["freed"] = t_f, seq_f, freed
            nb["graph"] = np.uint64(g.graph)
            new_blocks.append(nb)
        # ---- kernel, copy and memset nodes: rows of launches / copies, and their accesses ----
        call_k = np.flatnonzero((kinds != 3) & (kinds != 4))
        if not len(call_k):
            continue
        # device times of the nodes whose records no captured call names (graphs built node by node)
        DS, DE = node_records.times(p, LS, kinds, J, l_kernel, call_k)
        variants, vof = np.unique(CS[:, call_k], axis=0, return_inverse=True)
        vof = np.asarray(vof).reshape(-1)
        for v in range(len(variants)):
            RI = np.flatnonzero(vof == v)
            src_parts, k_parts = [], []
            for k in call_k.tolist():
                src = by_seq.get((p << 40) ^ int(CS[RI[0], k]))
                if src is not None and len(src):
                    src_parts.append(src)
                    k_parts.append(np.full(len(src), k, np.int64))
            if src_parts:
                src = np.concatenate(src_parts)
                ka = np.concatenate(k_parts)
                m = len(src)
                bid = np.tile(a_bid[src], len(RI))
                ri_rep = np.repeat(RI, m)
                for j, ids_j in new_id.items():     # a memory node's block: this replay's
                    hit = bid == j
                    if hit.any():
                        bid[hit] = ids_j[ri_rep[hit]]
                keep = (bid >= len(blocks)) | ~drop_b[np.minimum(bid, len(blocks) - 1)]
                new_acc.append(pd.DataFrame({
                    "block_id": bid[keep], "pid": np.int32(p), "seq": SEQ[RI][:, ka].ravel()[keep],
                    "t": T[RI][:, ka].ravel()[keep], "kernel": np.tile(a_kernel[src], len(RI))[keep],
                    "op": "graph", "flags": np.tile(a_flags[src], len(RI))[keep],
                    "node": np.tile(ka, len(RI))[keep].astype(np.int32)}))
            for kind_set, out, table in (((0,), new_l, launches), ((1, 2), new_c, copies)):
                ks = call_k[np.isin(kinds[call_k], kind_set)]
                if not len(ks):
                    continue
                tmpl = J[RI][:, ks].ravel()
                nr = table.iloc[tmpl].reset_index(drop=True)
                rr = np.repeat(rows[RI], len(ks))
                nr["seq"], nr["t"] = SEQ[RI][:, ks].ravel(), T[RI][:, ks].ravel()
                nr["api"] = pd.Categorical(l_api[rr], categories=table["api"].cat.categories) \
                    if isinstance(table["api"].dtype, pd.CategoricalDtype) else l_api[rr]
                nr["stream"] = l_stream[rr]
                nr["node"] = np.tile(ks, len(RI)).astype(np.int32)
                ds, de = dev(p, l_seq[rr], CS[RI][:, ks].ravel())
                none = ds < 0
                ds = np.where(none, DS[RI][:, ks].ravel(), ds)
                de = np.where(none, DE[RI][:, ks].ravel(), de)
                nr["dev_start"], nr["dev_end"] = ds, de
                if table is launches:
                    nr["graph"] = False
                    nr["tid"] = l_tid[rr]
                out.append(nr)
    tr.counts["graph_launches_unexpanded"] = n_graph_launch - n_expanded - len(captured_launch)
    tr.counts["graph_replays"] = n_expanded

    # ---- the tables, replaced ----
    tr.launches = _concat(launches[~drop_l], new_l, launches)
    tr.copies = _concat(copies[~drop_c], new_c, copies)
    blocks = blocks.assign(graph=b_graph)
    kept_b = blocks[~drop_b]
    allb = pd.concat([kept_b] + new_blocks, ignore_index=True) if new_blocks else kept_b.reset_index(drop=True)
    for c in blocks.columns:
        if str(allb[c].dtype) != str(blocks[c].dtype):
            allb[c] = allb[c].astype(blocks[c].dtype)
    o = np.lexsort((allb["seq_alloc"].to_numpy(np.int64), allb["pid"].to_numpy(np.int64),
                    allb["t_alloc"].to_numpy(np.int64)))
    allb = allb.iloc[o].reset_index(drop=True)
    old_to_new = np.full(next_bid, -1, np.int64)
    old_to_new[allb["block_id"].to_numpy(np.int64)] = np.arange(len(allb))
    allb["block_id"] = np.arange(len(allb), dtype=np.int64)
    tr.blocks = allb
    eager = acc[~a_cap] if len(acc) else acc
    parts = [eager] + new_acc
    a = pd.concat(parts, ignore_index=True) if new_acc else eager.reset_index(drop=True)
    if new_acc:
        a["op"] = pd.Categorical(a["op"].astype(str), categories=list(dict.fromkeys(
            list(acc["op"].cat.categories) + ["graph"])))
    a["block_id"] = old_to_new[a["block_id"].to_numpy(np.int64)].astype(ACCESS_COLUMNS["block_id"])
    a = a[a["block_id"].to_numpy() >= 0]
    o = np.lexsort((a["seq"].to_numpy(np.int64), a["pid"].to_numpy(np.int64)))
    tr.accesses = a.iloc[o].reset_index(drop=True)
    tr.counts["access"] = int(len(tr.accesses))
    return tr


def tr_end(tr) -> int:
    b = tr.blocks
    return int(max(b["t_free"].max() if len(b) else 0, tr.launches["t"].max() if len(tr.launches) else 0))


def _device_times(gpu: pd.DataFrame):
    """dev(pid, launch seqs, captured seqs) -> (start, end) arrays: the device times CUPTI gave the node of a
    replay (``gpu_activity`` rows joined to their captured call: ``captured_seq``); -1 where none."""
    m = gpu["captured_seq"].to_numpy(np.int64) >= 0 if len(gpu) and "captured_seq" in gpu else np.zeros(0, bool)
    if not m.any():
        return lambda p, ls, cs: (np.full(len(ls), -1, np.int64), np.full(len(ls), -1, np.int64))
    key = pd.MultiIndex.from_arrays([gpu["pid"].to_numpy(np.int64)[m], gpu["seq"].to_numpy(np.int64)[m],
                                     gpu["captured_seq"].to_numpy(np.int64)[m]])
    st, en = gpu["start"].to_numpy(np.int64)[m], gpu["end"].to_numpy(np.int64)[m]
    first = ~key.duplicated()
    key, st, en = key[first], st[first], en[first]

    def dev(p, ls, cs):
        q = pd.MultiIndex.from_arrays([np.full(len(ls), p, np.int64), np.asarray(ls, np.int64),
                                       np.asarray(cs, np.int64)])
        i = key.get_indexer(q)
        return np.where(i >= 0, st[np.maximum(i, 0)], -1), np.where(i >= 0, en[np.maximum(i, 0)], -1)
    return dev


_GPU_KIND = {"kernel": 0, "memcpy": 1, "memset": 2}      # gpu_activity kind -> node kind (0 kernel, 1 copy, 2 memset)


class _NodeRecords:
    """The CUPTI records of graph replays that no captured call names (``captured_seq`` -1: graphs built node by
    node), by graph launch, in graph node id order.

    A real driver numbers an executable graph's nodes with the graph's own nodes first, in the order they were
    added, and the nodes of its child graphs after them (an H100 with XLA's command buffers: 30 kernels and 2
    copies, then the nodes of 11 child graphs captured from cuBLAS), which is not the order the expansion lists
    them in (a child's nodes where the child graph node is).  So a replay's records are matched to its nodes by
    what they are: the i-th record of a kind (and, for a kernel, of a function) in id order is the i-th node of
    that kind and function in node order; a replay whose records do not match its nodes one for one gets none."""

    def __init__(self, gpu: pd.DataFrame):
        self.key = np.zeros(0, np.int64)
        if len(gpu) == 0 or "graph_node" not in gpu:
            return
        node = gpu["graph_node"].to_numpy(np.uint64)
        m = np.flatnonzero(node != 0)                     # replayed records only: few of a long trace's
        if len(m) and "captured_seq" in gpu:
            m = m[gpu["captured_seq"].to_numpy(np.int64)[m] < 0]
        if len(m):
            m = m[gpu["seq"].to_numpy(np.int64)[m] >= 0]
        if not len(m):
            return
        k = gpu["kind"]
        if isinstance(k.dtype, pd.CategoricalDtype):
            lut = np.array([_GPU_KIND.get(str(c), -1) for c in k.cat.categories] + [-1], np.int64)
            kind = lut[k.cat.codes.to_numpy()[m]]          # code -1 (missing): the lut's last entry
        else:
            kind = k.iloc[m].astype(str).map(_GPU_KIND).fillna(-1).to_numpy(np.int64)
        m, kind = m[kind >= 0], kind[kind >= 0]
        def col(c):                                       # the rows' values only (columns may be mapped)
            return gpu[c].to_numpy()[m].astype(np.int64)
        key = (col("pid") << 40) ^ col("seq")
        o = np.lexsort((node[m], key))
        m, kind = m[o], kind[o]
        self.key = key[o]
        self.cls = _node_class(kind, col("kernel"))
        self.start, self.end = col("start"), col("end")

    def times(self, p: int, launch_seqs: np.ndarray, kinds: np.ndarray, J: np.ndarray, l_kernel: np.ndarray,
              call_k: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(R, n) device start and end of each replay's nodes (-1 where none); ``J``: each replay's template rows
        (a kernel node's: its launches row, whose function it runs)."""
        R, n = J.shape
        DS, DE = np.full((R, n), -1, np.int64), np.full((R, n), -1, np.int64)
        if not len(self.key) or not len(call_k):
            return DS, DE
        keys = (np.int64(p) << 40) ^ np.asarray(launch_seqs, np.int64)
        lo, hi = np.searchsorted(self.key, keys, "left"), np.searchsorted(self.key, keys, "right")
        nk = kinds[call_k]
        pairs: dict[tuple[bytes, bytes], np.ndarray | None] = {}
        for r in np.flatnonzero(hi - lo == len(call_k)).tolist():
            rc = self.cls[lo[r]:hi[r]]
            kern = np.full(len(nk), -1, np.int64)       # J of a copy or memset node is a copies row
            kern[nk == 0] = l_kernel[J[r, call_k][nk == 0]]
            ncls = _node_class(nk, kern)
            sig = (rc.tobytes(), ncls.tobytes())
            if sig not in pairs:
                i_r, i_n = np.argsort(rc, kind="stable"), np.argsort(ncls, kind="stable")
                pairs[sig] = (i_r, call_k[i_n]) if np.array_equal(rc[i_r], ncls[i_n]) else None
            pr = pairs[sig]
            if pr is None:
                continue
            i_r, ks = pr
            DS[r, ks] = self.start[lo[r] + i_r]
            DE[r, ks] = self.end[lo[r] + i_r]
        return DS, DE


def _node_class(kind: np.ndarray, kernel: np.ndarray) -> np.ndarray:
    """what a node or record is: its kind and, for a kernel, its function"""
    return (kind.astype(np.int64) << 40) + np.where(kind == 0, kernel.astype(np.int64) + 1, 0)


def _concat(kept: pd.DataFrame, new: list[pd.DataFrame], like: pd.DataFrame) -> pd.DataFrame:
    if not new:
        return kept.reset_index(drop=True)
    out = pd.concat([kept] + new, ignore_index=True)
    for c in like.columns:
        if isinstance(like[c].dtype, pd.CategoricalDtype):
            out[c] = pd.Categorical(out[c].astype(str) if out[c].dtype == object else out[c],
                                    categories=like[c].cat.categories)
        elif str(out[c].dtype) != str(like[c].dtype):
            out[c] = out[c].astype(like[c].dtype)
    o = np.lexsort((out["seq"].to_numpy(np.int64), out["pid"].to_numpy(np.int64)))
    return out.iloc[o].reset_index(drop=True)

