"""CUDA graphs on simcuda, end to end: captured calls are graph nodes (not eager work), every replay is
expanded into its nodes' accesses and its memory nodes' blocks (pyinterpose/trace/graphs.py).

Ground truth is the workloads' own: tests/c/graph_memnodes.c prints what it captured and replayed, and
the graph pool simcuda reported to it; simtrain --graphs writes its truth file; the same simtrain loop run
eagerly is the reference for the analyses (the same work, without graphs)."""
from __future__ import annotations

import json

import numpy as np
import pytest

import pyinterpose
from conftest import last_json_line, run_cli

ASYNC = {"PYTORCH_CUDA_ALLOC_CONF": "backend:cudaMallocAsync"}
STEPS, LAYERS, WARM = 12, 4, 2


@pytest.fixture(scope="module")
def memnodes(tmp_path_factory, cbuild):
    d = tmp_path_factory.mktemp("graphs")
    exe = cbuild("graph_memnodes")
    out = str(d / "g.pit")
    cp = run_cli("run", "-q", "--simulated-gpu", "-o", out, "--", exe, "10")
    assert cp.returncode == 0, cp.stderr
    return pyinterpose.load(out), last_json_line(cp.stdout)


def test_each_block_gets_its_eager_plus_n_times_in_graph_accesses(memnodes):
    tr, truth = memnodes
    b, a, n = tr.blocks, tr.accesses, truth["replays"]
    for name in ("a", "b"):
        rows = b[b["address"] == truth[name]]
        assert len(rows) == 1
        got = int((a["block_id"] == int(rows["block_id"].iloc[0])).sum())
        assert got == truth["eager_accesses"][name] + n * truth["graph_accesses"][name]


def test_the_memory_node_is_one_block_per_replay(memnodes):
    tr, truth = memnodes
    b, a = tr.blocks, tr.accesses
    t = b[b["address"] == truth["t"]]
    assert len(t) == truth["replays"]
    assert (t["size"] == truth["t_bytes"]).all() and t["freed"].all()
    assert (t["seq_free"] > t["seq_alloc"]).all() and (t["t_free"] > t["t_alloc"]).all()
    # one replay after the other: each block is freed before the next one is allocated
    assert (t["seq_alloc"].to_numpy()[1:] > t["seq_free"].to_numpy()[:-1]).all()
    per_block = a[a["block_id"].isin(t["block_id"])].groupby("block_id").size()
    assert per_block.tolist() == [truth["graph_accesses"]["t"]] * truth["replays"]
    # at most one memory node block live at a time: the graph's 4 MiB count once, not ten times
    live = b[b["address"] != truth["t"]]["size"].where(b["counts_device"]).sum()
    assert pyinterpose.trace.model.peak_live_bytes(b) == live + truth["t_bytes"]


def test_captured_launches_are_not_eager_work(memnodes):
    tr, truth = memnodes
    la = tr.launches
    calls = la[(la["node"] < 0) & ~la["graph"]]
    assert len(calls) == truth["eager_kernels"]
    nodes = la[la["node"] >= 0]
    assert len(nodes) == truth["replays"] * truth["graph_kernels"]
    assert (la["graph"].sum()) == truth["replays"]
    assert tr.counts["graph_launches_unexpanded"] == 0 and tr.counts["graph_replays"] == truth["replays"]
    kinds = tr.graph_nodes["kind"].astype(str).tolist()
    assert kinds == ["alloc", "kernel", "kernel", "kernel", "free"]
    # replayed accesses: op graph, the node's own seq (the launch's + 1 + node id), at the launch's time
    g = tr.accesses[tr.accesses["op"] == "graph"]
    assert len(g) == truth["replays"] * sum(truth["graph_accesses"].values())
    gl = la[la["graph"]].set_index("seq")
    launch_seq = g["seq"].to_numpy() - 1 - g["node"].to_numpy()
    assert np.isin(launch_seq, gl.index.to_numpy()).all()
    assert (g["t"].to_numpy() - gl.loc[launch_seq, "t"].to_numpy() == g["node"].to_numpy()).all()


def test_replayed_kernels_carry_their_own_device_times(memnodes):
    tr, truth = memnodes
    la = tr.launches
    nodes = la[la["node"] >= 0]
    assert (nodes["dev_start"] >= 0).all() and (nodes["dev_end"] >= nodes["dev_start"]).all()
    gpu = tr.gpu_activity
    replayed = gpu[gpu["graph_node"] != 0]
    assert sorted(nodes["dev_start"].tolist()) == sorted(replayed["start"].tolist())


def test_memory_allocated_during_the_capture_is_the_graphs(memnodes):
    """a cudaMalloc while the capture is open (PyTorch's private graph pool) is attributed to the graph; the
    replays' memory node blocks too; eager blocks to none"""
    tr, truth = memnodes
    b = tr.blocks
    graph = int(tr.graph_nodes["graph"].iloc[0])
    pool = b[b["address"] == truth["pool"]]
    assert len(pool) == 1 and int(pool["graph"].iloc[0]) == graph and int(pool["size"].iloc[0]) == truth["pool_bytes"]
    assert (b.loc[b["address"] == truth["t"], "graph"] == graph).all()
    assert (b.loc[b["address"].isin([truth["a"], truth["b"]]), "graph"] == 0).all()


def test_graph_memory_pool_as_simcuda_reported_it(memnodes):
    tr, truth = memnodes
    gm = tr.graph_memory
    assert len(gm) == truth["replays"]
    assert (gm["reserved"] == truth["reserved"]).all() and (gm["reserved_high"] == truth["reserved_high"]).all()
    assert (gm["used"] == truth["used"]).all()
    # simcuda: memory taken at the launch, kept by the graph's pool until trimmed
    # (the capture itself took only the private pool segment: the memory node takes nothing until a replay)
    assert truth["free_before"] - truth["free_captured"] == truth["pool_bytes"]
    assert truth["free_captured"] - truth["free_replayed"] == truth["t_bytes"] == truth["reserved"]
    assert truth["free_trimmed"] == truth["free_captured"] and truth["reserved_trimmed"] == 0


@pytest.fixture(scope="module")
def simtrain_pair(tmp_path_factory):
    d = tmp_path_factory.mktemp("graphs_simtrain")
    out = {}
    for name, extra in (("graphs", ["--graphs", str(WARM)]), ("eager", [])):
        path, tpath = str(d / f"{name}.pit"), str(d / f"{name}.json")
        cp = run_cli("run", "-q", "--simulated-gpu", "-o", path, "--", "python", "-m",
                     "pyinterpose.examples.simtrain", "--framework", "torch", "--steps", str(STEPS), "--layers",
                     str(LAYERS), "--truth", tpath, *extra, env=ASYNC)
        assert cp.returncode == 0, cp.stderr
        with open(tpath) as f:
            out[name] = (path, json.load(f))
    return out


@pytest.mark.slow
def test_simtrain_graphs_totals_match_its_truth(simtrain_pair):
    path, truth = simtrain_pair["graphs"]
    tr = pyinterpose.load(path)
    g = truth["graphs"]
    assert g["replays"] == STEPS - WARM and g["allocs"] == truth["allocs_per_step"]
    assert len(tr.blocks) == truth["allocs"]
    assert len(tr.accesses) == truth["accesses"]
    assert int((~tr.launches["graph"]).sum()) == truth["launches"]
    assert int(tr.launches["graph"].sum()) == g["replays"] == truth["by_api"]["cudaGraphLaunch"]
    first_replay = int(tr.launches.loc[tr.launches["graph"], "seq"].min())
    assert int((tr.blocks["seq_alloc"] > first_replay).sum()) == g["replays"] * g["allocs"]
    # the persistent blocks (weights w, Adam moments m and v, allocated in that order per layer): w is read by
    # the forward, backward and optimizer kernels of every step; m and v are zeroed once, then used by the
    # optimizer of every step -- replays included
    dev = tr.blocks[tr.blocks["counts_device"]].sort_values("seq_alloc")
    per = tr.accesses.groupby("block_id").size()
    first = dev["block_id"].to_numpy()[:3 * LAYERS]
    for i, bid in enumerate(first):
        assert per.get(int(bid), 0) == (3 * STEPS if i % 3 == 0 else 1 + STEPS), (i, int(bid))


@pytest.mark.slow
def test_simtrain_graphs_analyses_match_its_truth(simtrain_pair):
    path, truth = simtrain_pair["graphs"]
    epath, etruth = simtrain_pair["eager"]
    for k in ("allocs", "accesses", "launches", "peaks"):
        assert truth[k] == etruth[k]          # the same work with and without graphs
    it = json.loads(run_cli("iterations", path, "--json").stdout)
    assert it["count"] == STEPS and it["period_allocs"] == truth["allocs_per_step"]
    summ = json.loads(run_cli("summary", path, "--json").stdout)
    assert summ["per_process"][0]["peak_live_bytes"] == truth["peaks"][0]
    pools = json.loads(run_cli("pools", path, "--json").stdout)
    assert pools["bound_bytes"] == truth["peaks"][0]
    acc, eacc = (json.loads(run_cli("access", p, "--json").stdout) for p in (path, epath))
    assert acc["intervals"] == eacc["intervals"] and acc["accessed_blocks"] == eacc["accessed_blocks"]
    assert acc["graph_launches_unexpanded"] == 0 and acc["notes"] == []
    sw, esw = (json.loads(run_cli("swap", p, "--bandwidth", "25", "--json").stdout) for p in (path, epath))
    assert sw["peak_before"] == truth["peaks"][0] and sw["candidates"] == esw["candidates"] > 0


def _three_phases(tmp_path_factory, cbuild, name: str):
    """(trace, truth) of tests/c/NAME.c run with 4, 3 and 2 replays in its three phases"""
    out = str(tmp_path_factory.mktemp(name) / "t.pit")
    cp = run_cli("run", "-q", "--simulated-gpu", "-o", out, "--", cbuild(name), "4", "3", "2")
    assert cp.returncode == 0, cp.stderr
    return pyinterpose.load(out), last_json_line(cp.stdout)


@pytest.fixture(scope="module")
def explicit(tmp_path_factory, cbuild):
    return _three_phases(tmp_path_factory, cbuild, "graph_explicit")


def test_a_graph_built_node_by_node_is_expanded(explicit):
    """cudaGraphAdd{MemAlloc,Kernel,Memset,Memcpy1D,ChildGraph,MemFree}Node, cudaGraphExecKernelNodeSetParams
    and cudaGraphExecUpdate: each block gets exactly what the replays did, phase by phase."""
    tr, truth = explicit
    b, a = tr.blocks, tr.accesses
    per = a.groupby("block_id").size()

    def counts(addr):
        return [int(per.get(int(i), 0)) for i in b.loc[b["address"] == addr, "block_id"]]
    assert counts(truth["a"]) == [truth["a_accesses"]]
    assert counts(truth["b"]) == [truth["b_accesses"]]
    # one block per replay of each memory alloc node; the set parameters kept the node on T
    assert counts(truth["t"]) == [1] * (truth["n1"] + truth["n2"])
    assert counts(truth["t2"]) == [1] * truth["n3"]
    # the nodes never ran as calls: no eager launch, copy or memset, no construction-time block
    la = tr.launches
    assert int(((la["node"] < 0) & ~la["graph"]).sum()) == 0 and (tr.copies["node"] >= 0).all()
    assert tr.counts["graph_replays"] == truth["n1"] + truth["n2"] + truth["n3"]
    assert tr.counts["graph_launches_unexpanded"] == 0
    kinds = tr.graph_nodes.groupby("graph")["kind"].apply(lambda k: list(k.astype(str)))
    assert kinds.tolist() == [["alloc", "kernel", "kernel", "memset", "copy", "free"]] * 2
    # the shim held one slot per node: node k at the launch's seq + 1 + k
    g = a[a["op"] == "graph"]
    launch_seq = set(la.loc[la["graph"], "seq"].tolist())
    assert set((g["seq"] - 1 - g["node"]).tolist()) <= launch_seq


def test_a_graph_built_node_by_node_gets_its_nodes_device_times(explicit):
    """CUPTI numbers an executable graph's nodes with the top-level nodes first and a child graph's nodes after
    them (as an H100 did for XLA's command buffers: 30 kernels and 2 copies, then 11 captured child graphs'
    nodes), not in the order the child's nodes run in the graph: every replayed kernel, copy and memset node
    still gets the device times of its own record (same launch, same kernel), each record used once."""
    tr, truth = explicit
    gpu = tr.gpu_activity
    rec = gpu[gpu["graph_node"] != 0]
    assert len(rec) == (truth["n1"] + truth["n2"] + truth["n3"]) * 4      # k_at, memset, memcpy, child's k_ab
    for table, kinds in ((tr.launches, ("kernel",)), (tr.copies, ("memcpy", "memset"))):
        nodes = table[table["node"] >= 0]
        assert (nodes["dev_start"] >= 0).all() and (nodes["dev_end"] >= nodes["dev_start"]).all()
        mine = rec[rec["kind"].astype(str).isin(kinds)]
        got = sorted(zip(nodes["dev_start"].tolist(), nodes["dev_end"].tolist()))
        assert got == sorted(zip(mine["start"].tolist(), mine["end"].tolist()))
    la = tr.launches[tr.launches["node"] >= 0]
    by_start = rec.set_index("start")
    # the kernel the record names is the node's: the child's k_ab is not taken for the top-level k_at
    assert (by_start.loc[la["dev_start"].to_numpy(), "kernel"].to_numpy() == la["kernel"].to_numpy()).all()


@pytest.fixture(scope="module")
def addnode(tmp_path_factory, cbuild):
    return _three_phases(tmp_path_factory, cbuild, "graph_addnode")


def test_a_graph_built_with_the_generic_node_api_is_expanded(addnode):
    """cuGraphAddNode_v2 / cuGraphAddNode (through cuGetProcAddress, as XLA's command buffers) and
    cudaGraphAddNode(_v2): kernel (kernelParams and `extra`), memset, memcpy, child graph, empty, memory alloc
    and free nodes.  Every replay is expanded into the nodes the workload built (the empty node is none)."""
    tr, truth = addnode
    R = truth["n1"] + truth["n2"] + truth["n3"]
    assert tr.counts["graph_replays"] == R and tr.counts["graph_launches_unexpanded"] == 0
    kinds = tr.graph_nodes.groupby("graph")["kind"].apply(lambda k: list(k.astype(str)))
    assert kinds.tolist() == [truth["nodes"]]
    b, a = tr.blocks, tr.accesses
    per = a.groupby("block_id").size()

    def counts(addr):
        return [int(per.get(int(i), 0)) for i in b.loc[b["address"] == addr, "block_id"]]
    for x in ("a", "b", "c"):
        assert counts(truth[x]) == [truth["accesses"][x]], x
    for x in ("t", "u"):     # memory alloc nodes: one block per replay
        assert counts(truth[x]) == [truth["accesses"][x] // R] * R, x
    # no node ran as a call: every launch and copy row is a replayed node
    la, co = tr.launches, tr.copies
    assert int((la["node"] >= 0).sum()) == truth["kernel_nodes"] * R and not ((la["node"] < 0) & ~la["graph"]).any()
    assert int((co["node"] >= 0).sum()) == truth["copy_nodes"] * R and (co["node"] >= 0).all()
    assert (a["op"].astype(str) == "graph").all()
    # the shim held one slot per node: node k at the launch's seq + 1 + k
    launch_seq = sorted(la.loc[la["graph"], "seq"].tolist())
    assert set((a["seq"] - 1 - a["node"]).tolist()) <= set(launch_seq)


def _assert_touched_per_replay(tr, a, truth):
    """per replay (its phase: n1, n2, n3 replays), the addresses each node's accesses `a` named = the workload's
    truth["touched"][phase][node]"""
    b, la = tr.blocks, tr.launches
    launch_seq = sorted(la.loc[la["graph"], "seq"].tolist())
    addr = b["address"].to_numpy()[a["block_id"].to_numpy()]
    replay = np.searchsorted(launch_seq, (a["seq"] - 1 - a["node"]).to_numpy())
    got = {}
    for r, k, x in zip(replay.tolist(), a["node"].tolist(), addr.tolist()):
        got.setdefault((r, k), set()).add(int(x))
    phase = [0] * truth["n1"] + [1] * truth["n2"] + [2] * truth["n3"]
    for r, ph in enumerate(phase):
        want = truth["touched"][ph]
        assert [got.get((r, k), set()) for k in range(len(want))] == [set(w) for w in want], (r, ph)


def test_generic_node_replays_use_the_arguments_set_on_the_executable_graph(addnode):
    """The kernel nodes given new arguments (cuGraphExecKernelNodeSetParams on a node added by
    cuGraphAddNode_v2, cuGraphExecNodeSetParams, cudaGraphExecNodeSetParams) replay with them: per replay,
    the blocks each node touched are the ones the workload gave it in that phase."""
    tr, truth = addnode
    _assert_touched_per_replay(tr, tr.accesses, truth)


@pytest.fixture(scope="module")
def execset(tmp_path_factory, cbuild):
    return _three_phases(tmp_path_factory, cbuild, "graph_execset")


def test_replays_use_the_memcpy_memset_and_child_graph_set_on_the_executable_graph(execset):
    """XLA's command buffers give a replayed graph new buffers between executions (an H100, JAX 0.11.2: memcpy,
    memset and cuBLAS child graph nodes updated, whose replays named blocks already freed when the updates were
    not followed).  cuGraphExec{Memcpy,Memset,ChildGraph}NodeSetParams (through cuGetProcAddress), then
    cudaGraphExecNodeSetParams (memcpy), cudaGraphExecMemsetNodeSetParams and cuGraphExecNodeSetParams (child
    graph): per replay, the blocks each node touched are the ones the workload
    gave it in that phase, the child graph's kernel included."""
    tr, truth = execset
    R = truth["n1"] + truth["n2"] + truth["n3"]
    assert tr.counts["graph_replays"] == R and tr.counts["graph_launches_unexpanded"] == 0
    b, la = tr.blocks, tr.launches
    a = tr.accesses[tr.accesses["op"].astype(str) == "graph"]
    _assert_touched_per_replay(tr, a, truth)
    # each replayed copy / memset / kernel row is the node as updated: its addresses and kernel
    co = tr.copies[tr.copies["node"] >= 0]
    assert len(co) == 2 * R and len(la[la["node"] >= 0]) == R
    cp = co[co["op"].astype(str) == "copy"].sort_values("seq")
    phase = [0] * truth["n1"] + [1] * truth["n2"] + [2] * truth["n3"]
    assert cp["dst"].tolist() == [t[0][1] for t in (truth["touched"][ph] for ph in phase)]
    # every replayed access names a block alive at that replay
    bb = b.iloc[a["block_id"].to_numpy()]
    assert ((bb["seq_alloc"].to_numpy() < a["seq"].to_numpy()) &
            (~bb["freed"].to_numpy() | (bb["seq_free"].to_numpy() > a["seq"].to_numpy()))).all()


def test_summary_puts_graph_memory_beside_the_allocator(memnodes):
    tr, truth = memnodes
    from pyinterpose.analysis.summary import summarize

    g = summarize(tr)["cuda_graphs"]
    assert g["graph_launches"] == g["replays_expanded"] == truth["replays"] and g["replays_unexpanded"] == 0
    assert g["memory_node_blocks"] == truth["replays"]
    assert g["private_pool_blocks"] == 1 and g["private_pool_bytes"] == truth["pool_bytes"]
    assert g["graph_pool_reserved_high"] == truth["reserved_high"]
    assert g["nodes"] == {"kernel": 3, "alloc": 1, "free": 1}


def test_a_graph_launched_into_a_capture_is_its_child(tmp_path, cbuild):
    """graph_memnodes 4 2: the first graph replayed 4 times, then launched inside a second capture (with one more
    kernel), and that outer graph replayed twice: its replays run the child's nodes inline."""
    out = str(tmp_path / "child.pit")
    cp = run_cli("run", "-q", "--simulated-gpu", "-o", out, "--", cbuild("graph_memnodes"), "4", "2")
    assert cp.returncode == 0, cp.stderr
    truth = last_json_line(cp.stdout)
    tr = pyinterpose.load(out)
    n, m = truth["replays"], truth["outer_replays"]
    b, per = tr.blocks, tr.accesses.groupby("block_id").size()

    def counts(addr):
        return [int(per.get(int(i), 0)) for i in b.loc[b["address"] == addr, "block_id"]]
    ga = truth["graph_accesses"]
    assert counts(truth["a"]) == [truth["eager_accesses"]["a"] + (n + m) * ga["a"] + m]
    assert counts(truth["b"]) == [truth["eager_accesses"]["b"] + (n + m) * ga["b"] + m]
    assert counts(truth["t"]) == [ga["t"]] * (n + m)
    # the launch captured into the outer graph is a node of it, not a replay: every replay is expanded
    assert tr.counts["graph_replays"] == n + m and tr.counts["graph_launches_unexpanded"] == 0
    outer = tr.graph_nodes[tr.graph_nodes["replays"] == m]
    assert outer["kind"].astype(str).tolist() == ["alloc", "kernel", "kernel", "kernel", "free", "kernel"]
