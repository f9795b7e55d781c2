"""The device clock end to end on simcuda: the shim's CUPTI records (simcuda's simulated libcupti) against
simcuda's own device log (SIMCUDA_DEVICE_LOG: when each op really ran), on every call path (PLT, dlsym,
cuGetProcAddress), graph replays, a fork() child; and the never-harm fallbacks (CUPTI absent, busy,
failing, --gpu-clock off): the program's output and exit status unchanged, the trace and `run` naming the
clock and why."""
from __future__ import annotations

import os

import numpy as np
import pytest

import pyinterpose
from conftest import last_json_line, run_cli

pytestmark = pytest.mark.slow   # every test here captures, replays or loads whole traces (> a few s)

LOG_COLUMNS = ["op", "pid", "tid", "corr", "device", "stream", "enqueue_ns", "start_ns", "end_ns", "start_cupti",
               "end_cupti", "graph_id", "graph_node", "bytes", "name"]
KIND = {"kernel": "kernel", "memset": "memset"}


def device_log(path: str) -> list[dict]:
    """simcuda's ground truth: one dict per device op (an independent parser of its documented format)."""
    out = []
    with open(path) as f:
        for line in f:
            if line.startswith("#") or not line.strip():
                continue
            row = dict(zip(LOG_COLUMNS, line.rstrip("\n").split("\t")))
            for k in LOG_COLUMNS[1:-1]:
                row[k] = int(row[k])
            row["kind"] = KIND.get(row["op"], "memcpy")
            out.append(row)
    return out


@pytest.fixture(scope="module")
def workload(cbuild):
    return cbuild("gpuclock_workload")


def _run(capture, tmp_path, prog, *args, opts=(), env=None, name="t.pit"):
    log = str(tmp_path / (name + ".log"))
    e = {"SIMCUDA_DEVICE_LOG": log}
    e.update(env or {})
    path, cp = capture([prog, *args], *opts, name=name, env=e)
    return path, cp, (device_log(log) if os.path.exists(log) else [])


def assert_matches_log(tr, log, pid):
    """Every device op simcuda ran in `pid` is one gpu_activity row with the same kind, stream, graph
    node and bytes, and start and end within the alignment bound the trace states."""
    t0 = int(tr.meta["t0_ns"])
    proc = tr.processes.set_index("pid").loc[pid]
    assert proc["clock"] == "cupti" and proc["clock_note"] == "", proc
    err = int(proc["clock_error_ns"])
    assert 0 <= err < 5000, err
    g = tr.gpu_activity[tr.gpu_activity["pid"] == pid]
    ops = [o for o in log if o["pid"] == pid]
    assert len(g) == len(ops) > 0
    ops.sort(key=lambda o: (o["stream"], o["start_ns"], o["end_ns"], o["graph_node"]))
    g = g.sort_values(["stream", "start", "end", "graph_node"], kind="stable")
    names = np.array(tr.kernels + [""], dtype=object)
    for o, r in zip(ops, g.itertuples()):
        assert r.kind == o["kind"] and r.stream == o["stream"] and r.graph_node == o["graph_node"], (o, r)
        assert abs(r.start - (o["start_ns"] - t0)) <= err, (o, r, err)
        assert abs(r.end - (o["end_ns"] - t0)) <= err, (o, r, err)
        if o["kind"] == "kernel":
            assert names[r.kernel] == o["name"], (o, r)
        else:
            assert r.bytes == o["bytes"], (o, r)
    return g, err


@pytest.mark.parametrize("drift", [0, 50], ids=["no-drift", "drift-50ppm"])
def test_device_times_equal_device_log_on_every_call_path(capture, tmp_path, workload, drift):
    path, cp, log = _run(capture, tmp_path, workload, "paths", "4",
                         env={"SIMCUPTI_CLOCK_DRIFT_PPM": str(drift), "SIMCUDA_H2D_GBPS": "8",
                              "SIMCUDA_D2H_GBPS": "4", "SIMCUDA_D2D_GBPS": "100", "SIMCUDA_MEMSET_GBPS": "50",
                              "PYINTERPOSE_GPU_FLUSH_MS": "1"})
    assert cp.returncode == 0, cp.stderr
    truth = last_json_line(cp.stdout)
    tr = pyinterpose.load(path)
    pid = int(tr.processes["pid"].iloc[0])
    g, err = assert_matches_log(tr, log, pid)
    assert (g["kind"] == "kernel").sum() == truth["kernels"]
    assert (g["kind"] == "memcpy").sum() == truth["copies"] and (g["kind"] == "memset").sum() == truth["memsets"]
    # each device op joined to the call that made it: the same kernel, the same bytes
    ev = tr.launches.set_index("seq")
    k = g[g["kind"] == "kernel"]
    assert (ev.loc[k["seq"], "kernel"].to_numpy() == k["kernel"].to_numpy()).all()
    cp_ = tr.copies.set_index("seq")
    c = g[g["kind"] != "kernel"]
    assert (cp_.loc[c["seq"], "size"].to_numpy() == c["bytes"].to_numpy()).all()
    assert (cp_.loc[c["seq"], "op"].astype(str).to_numpy() == np.where(c["kind"] == "memset", "memset", "copy")).all()
    # every launch and copy has its device time, equal to its one activity's
    for tab in (tr.launches, tr.copies):
        assert (tab["dev_start"] >= 0).all() and (tab["dev_end"] >= tab["dev_start"]).all()
        m = tab.merge(g, on=["pid", "seq"])
        assert len(m) == len(tab)
        assert (m["dev_start"] == m["start"]).all() and (m["dev_end"] == m["end"]).all()
    # on every path: runtime (PLT), driver by dlsym, driver by cuGetProcAddress
    apis = set(tr.launches["api"].astype(str)) | set(tr.copies["api"].astype(str))
    assert {"cudaLaunchKernel", "cuLaunchKernel", "cuLaunchKernelEx", "cudaMemcpy", "cudaMemcpyAsync",
            "cudaMemsetAsync", "cuMemcpyDtoDAsync_v2", "cuMemsetD8Async"} <= apis, apis
    # the device ran behind the host: no kernel started before its launch call
    assert (tr.launches["dev_start"] >= tr.launches["t"] - err).all()


def test_graph_replays_join_their_graph_launch(capture, tmp_path, workload):
    path, cp, log = _run(capture, tmp_path, workload, "graph", "5")
    assert cp.returncode == 0, cp.stderr
    truth = last_json_line(cp.stdout)
    tr = pyinterpose.load(path)
    pid = int(tr.processes["pid"].iloc[0])
    g, err = assert_matches_log(tr, log, pid)
    gl = tr.launches[tr.launches["graph"]]
    assert len(gl) == truth["graph_launches"]
    nodes = g[g["graph_node"] != 0]
    assert len(nodes) == truth["graph_launches"] * truth["nodes"]
    # every replayed node belongs to a graph launch; each graph launch has all its nodes
    assert set(nodes["seq"]) == set(gl["seq"])
    assert (nodes.groupby("seq").size() == truth["nodes"]).all()
    # a graph launch's device time: its first node's start to its last node's end
    span = nodes.groupby("seq").agg(s=("start", "min"), e=("end", "max"))
    gl = gl.set_index("seq")
    assert (gl.loc[span.index, "dev_start"] == span["s"]).all() and (gl.loc[span.index, "dev_end"] == span["e"]).all()
    # the launches captured into the graph never ran as such: they are graph nodes (trace/graphs.py), not
    # rows of launches; each replay's kernel nodes are rows of launches (node >= 0) with their device times
    captured = tr.graph_nodes[tr.graph_nodes["kind"] == "kernel"]
    assert len(captured) == 2
    assert int(((~tr.launches["graph"]) & (tr.launches["node"] < 0)).sum()) == truth["launches_outside"]
    replayed = tr.launches[tr.launches["node"] >= 0]
    assert len(replayed) == truth["graph_launches"] * 2 and (replayed["dev_start"] >= 0).all()
    # each replayed node names the call captured into the graph that it runs: the captured kernel
    # launches (same kernel) and memset, in capture order
    calls = tr.graph_nodes["seq"].tolist()
    assert len(calls) == truth["captured"]
    for seq, grp in nodes.groupby("seq"):
        grp = grp.sort_values("graph_node")
        assert grp["captured_seq"].tolist() == calls, (seq, grp)
    node_kernel = tr.graph_nodes.set_index("seq")["kernel"]
    kn = nodes[nodes["kind"] == "kernel"]
    assert (node_kernel.loc[kn["captured_seq"]].to_numpy() == kn["kernel"].to_numpy()).all()
    ms = nodes[nodes["kind"] == "memset"]
    assert (tr.graph_nodes.set_index("seq").loc[ms["captured_seq"], "kind"].astype(str) == "memset").all()
    assert (g[g["graph_node"] == 0]["captured_seq"] == -1).all()


def test_fork_child_never_uses_the_parents_cupti(capture, tmp_path, workload):
    path, cp, log = _run(capture, tmp_path, workload, "fork", "3")
    assert cp.returncode == 0, cp.stderr
    truth = last_json_line(cp.stdout)
    tr = pyinterpose.load(path)
    procs = tr.processes.set_index("pid")
    parent, child = truth["parent"], truth["child"]
    assert_matches_log(tr, [o for o in log if o["pid"] == parent], parent)
    assert procs.loc[child, "clock"] == "cpu" and "fork() child" in procs.loc[child, "clock_note"]
    assert (tr.launches[tr.launches["pid"] == child]["dev_start"] == -1).all()
    assert len(tr.launches[tr.launches["pid"] == child]) == 3
    assert (tr.gpu_activity["pid"] == parent).all()


FALLBACKS = [
    ({"PYINTERPOSE_CUPTI": "/nonexistent/libcupti.so.13"}, (), "libcupti not found", "/nonexistent/libcupti.so.13"),
    ({"SIMCUPTI_BUSY": "1"}, (), "CUPTI busy", "another subscriber"),
    ({"CUDA_INJECTION64_PATH": "/opt/nsight/libToolsInjection64.so"}, (), "CUPTI busy",
     "CUDA_INJECTION64_PATH=/opt/nsight/libToolsInjection64.so"),
    ({"SIMCUPTI_FAIL": "cuptiActivityEnable"}, (), "CUPTI failed: cuptiActivityEnable", "cuptiActivityEnable"),
    ({"SIMCUPTI_FAIL": "cuptiGetTimestamp"}, (), "CUPTI failed: cuptiGetTimestamp", "cuptiGetTimestamp"),
    ({}, ("--gpu-clock", "off"), "--gpu-clock off", "--gpu-clock off"),
]


@pytest.mark.parametrize("env,opts,run_says,note_says", FALLBACKS,
                         ids=["absent", "busy", "injected", "enable-fails", "timestamp-fails", "off"])
def test_without_cupti_the_program_runs_unharmed(tmp_path, workload, native, env, opts, run_says, note_says):
    plain_env = dict(os.environ, LD_LIBRARY_PATH=os.path.join(native, "simcuda"))
    import subprocess
    plain = subprocess.run([workload, "paths", "2"], capture_output=True, text=True, env=plain_env)
    out = str(tmp_path / "t.pit")
    cp = run_cli("run", "--simulated-gpu", "-o", out, *opts, "--", workload, "paths", "2", env=env)
    assert cp.returncode == plain.returncode == 0, cp.stderr
    assert cp.stdout == plain.stdout                       # the program's own output, untouched
    assert f"device clock: off — {run_says}" in cp.stderr, cp.stderr
    tr = pyinterpose.load(out)
    p = tr.processes.iloc[0]
    assert p["clock"] == "cpu" and note_says in p["clock_note"], p["clock_note"]
    assert any(note_says in n["note"] for n in tr.meta["capture_notes"])
    assert len(tr.gpu_activity) == 0 and (tr.launches["dev_start"] == -1).all()
    assert len(tr.launches) == 6 and tr.counts["copy"] == 6


def test_gpu_clock_cupti_required_says_so_and_exits_4(tmp_path, workload):
    out = str(tmp_path / "t.pit")
    cp = run_cli("run", "--simulated-gpu", "--gpu-clock", "cupti", "-o", out, "--", workload, "paths", "1",
                 env={"SIMCUPTI_BUSY": "1"})
    assert cp.returncode == 4, cp.stderr
    assert "--gpu-clock cupti: NO device clock in 1 process" in cp.stderr
    assert pyinterpose.load(out).processes["clock"].iloc[0] == "cpu"
    ok = run_cli("run", "-q", "--simulated-gpu", "--gpu-clock", "cupti", "-f", "-o", out, "--", workload, "paths", "1")
    assert ok.returncode == 0, ok.stderr


def test_cupti_failing_mid_run_keeps_the_times_so_far(tmp_path, workload):
    out = str(tmp_path / "t.pit")
    cp = run_cli("run", "--simulated-gpu", "-o", out, "--", workload, "paths", "2",
                 env={"SIMCUPTI_FAIL": "cuptiActivityPushExternalCorrelationId"})
    assert cp.returncode == 0, cp.stderr
    p = pyinterpose.load(out).processes.iloc[0]
    assert "cuptiActivityPushExternalCorrelationId" in p["clock_note"] and "stopped" in p["clock_note"]


def test_dropped_records_are_counted(capture, tmp_path, workload):
    # buffers too small for a kernel record (216 bytes): CUPTI drops every one and counts it
    path, cp, log = _run(capture, tmp_path, workload, "many", "50", env={"PYINTERPOSE_CUPTI_BUFFER": "128"})
    assert cp.returncode == 0, cp.stderr
    tr = pyinterpose.load(path)
    p = tr.processes.iloc[0]
    kernels = sum(1 for o in log if o["kind"] == "kernel")
    assert kernels == 50
    assert p["clock"] == "cupti" and p["gpu_dropped"] == kernels - (tr.gpu_activity["kind"] == "kernel").sum()
    assert p["gpu_dropped"] > 0


def test_threads_each_launch_gets_its_own_device_record(capture, tmp_path, cbuild):
    """4 threads launching at once: every launch is joined 1:1 to the device record of its own kernel
    (the external correlation ids are per thread), times as simcuda ran them."""
    prog = cbuild("shim_workload")
    path, cp, log = _run(capture, tmp_path, prog, "stress", "4000", "4", env={"SIMCUDA_KERNEL_NS": "2000"})
    assert cp.returncode == 0, cp.stderr
    truth = last_json_line(cp.stdout)
    tr = pyinterpose.load(path)
    pid = int(tr.processes["pid"].iloc[0])
    g, _ = assert_matches_log(tr, log, pid)
    assert len(tr.launches) == truth["launches"] == len(g)
    assert g["seq"].is_unique and set(g["seq"]) == set(tr.launches["seq"])
    assert (tr.launches["dev_start"] >= 0).all()
    assert tr.launches["tid"].nunique() == 4


def test_small_buffers_and_a_small_ring_lose_no_device_record(capture, tmp_path, workload):
    """CUPTI's thread hands over many small buffers while the ring has little room: they are queued for
    the call path, parsed in the order CUPTI handed them over, and every record still arrives."""
    path, cp, log = _run(capture, tmp_path, workload, "many", "3000", opts=("--ring-records", "1024"),
                         env={"PYINTERPOSE_CUPTI_BUFFER": "2048", "SIMCUPTI_WORKER_MS": "1"})
    assert cp.returncode == 0, cp.stderr
    tr = pyinterpose.load(path)
    p = tr.processes.iloc[0]
    assert p["clock"] == "cupti" and p["gpu_dropped"] == 0 and p["lost"] == 0
    assert len(tr.launches) == 3000 and (tr.launches["dev_start"] >= 0).all()
    assert sum(1 for o in log if o["kind"] == "kernel") == 3000 == (tr.gpu_activity["seq"] >= 0).sum()


def test_exec_children_each_set_up_their_own(tmp_path, workload):
    out = str(tmp_path / "t.pit")
    log = str(tmp_path / "dev.log")
    cp = run_cli("run", "--simulated-gpu", "-o", out, "--", "sh", "-c", f"{workload} paths 1 && {workload} graph 2",
                 env={"SIMCUDA_DEVICE_LOG": log})
    assert cp.returncode == 0, cp.stderr
    assert "device clock: CUPTI (2 processes), alignment ±" in cp.stderr, cp.stderr
    tr = pyinterpose.load(out)
    ran = tr.processes[tr.processes["pid"].isin(tr.launches["pid"])]
    assert len(ran) == 2 and (ran["clock"] == "cupti").all()
    dl = device_log(log)
    for pid in ran["pid"]:
        assert_matches_log(tr, dl, int(pid))


@pytest.mark.parametrize("fw", ["torch", "jax", "tf"])
def test_simtrain_framework_paths_get_device_times(capture, tmp_path, fw):
    """simtrain's three framework call paths (cudart PLT; dlopen libcuda + dlsym; cuGetProcAddress) with
    H100-like device durations: every launch and copy has its device time, as simcuda ran it."""
    import sys
    path, cp, log = _run(capture, tmp_path, sys.executable, "-m", "pyinterpose.examples.simtrain", "--framework", fw,
                         "--steps", "12", "--device-time", "h100-like")
    assert cp.returncode == 0, cp.stderr
    tr = pyinterpose.load(path)
    pid = int(tr.launches["pid"].iloc[0])
    assert_matches_log(tr, log, pid)
    for tab in (tr.launches, tr.copies):
        assert len(tab) and (tab["dev_start"] >= 0).all()
    # the host runs ahead of the device: kernels start after their launch call
    assert (tr.launches["dev_start"] > tr.launches["t"]).mean() > 0.9


@pytest.mark.parametrize("per_buffer", [1, 3])
def test_buffers_are_parsed_in_the_order_cupti_handed_them_over(capture, tmp_path, workload, cbuild, per_buffer):
    """A stand-in libcupti (tests/c/cupti_order_fake.c) hands over, at each flush, the calls' pairings from
    its own thread while the ring has little room (the shim queues that buffer), then on the flushing thread
    each kernel record in a buffer of its own — far more buffers than an unpaired activity used to wait.
    Parsed in the order they were handed over, every kernel joins its launch."""
    fake = cbuild("cupti_order_fake", shared=True, link_cudart=False)
    log = str(tmp_path / "fake.log")
    path, cp, _ = _run(capture, tmp_path, workload, "many", "300", opts=("--ring-records", "1024"),
                       env={"PYINTERPOSE_CUPTI": fake, "FAKECUPTI_LOG": log, "FAKECUPTI_PER_BUFFER": str(per_buffer),
                            "PYINTERPOSE_CUPTI_BUFFER": "4096"})
    assert cp.returncode == 0, cp.stderr
    handed = [line.split() for line in open(log)]
    assert sum(int(h[3]) for h in handed) == 300 == sum(int(h[1]) for h in handed)
    tr = pyinterpose.load(path)
    p = tr.processes.iloc[0]
    assert p["clock"] == "cupti" and p["gpu_dropped"] == 0 and p["lost"] == 0
    assert len(tr.launches) == 300 and len(tr.gpu_activity) == 300
    unmatched = int((tr.gpu_activity["seq"] < 0).sum())
    assert unmatched == 0, f"{unmatched} of 300 kernels not joined to their launch"
    assert set(tr.gpu_activity["seq"]) == set(tr.launches["seq"]) and (tr.launches["dev_start"] >= 0).all()


def test_unpaired_activities_past_the_bound_are_counted_and_noted(capture, tmp_path, workload, cbuild):
    """70000 kernel records no pairing will ever name (more than the 65536 the shim keeps waiting): the
    oldest quarter of the waiting list goes out unmatched when it fills, the rest at the final flush; none
    is lost, the trace says how many went out at the bound, and the launches' own kernels still join."""
    fake = cbuild("cupti_order_fake", shared=True, link_cudart=False)
    log = str(tmp_path / "fake.log")
    path, cp, _ = _run(capture, tmp_path, workload, "many", "50",
                       env={"PYINTERPOSE_CUPTI": fake, "FAKECUPTI_LOG": log, "FAKECUPTI_UNPAIRED": "70000"})
    assert cp.returncode == 0, cp.stderr
    handed = [line.split() for line in open(log)]
    assert sum(int(h[3]) for h in handed) == 50 + 70000
    tr = pyinterpose.load(path)
    p = tr.processes.iloc[0]
    assert p["gpu_dropped"] == 0 and p["lost"] == 0
    g = tr.gpu_activity
    assert len(g) == 70050 and (g["seq"] < 0).sum() == 70000
    assert set(g[g["seq"] >= 0]["seq"]) == set(tr.launches["seq"]) and (tr.launches["dev_start"] >= 0).all()
    notes = [n["note"] for n in tr.meta["capture_notes"]]
    assert any(n.startswith(f"device clock: {65536 // 4} device records went out unmatched") for n in notes), notes


def test_a_zero_duration_kernel_holds_back_the_host_events_after_it(capture, tmp_path, workload):
    """Kernels that take no device time still move the device clock's frontier: an allocation called right
    after one (while the device had not reached it yet, launch latency 2 ms) is placed at that kernel's end,
    as simcuda's device log has it, never at its earlier CPU time."""
    from pyinterpose.analysis.clock import clock_of

    rounds = 4
    path, cp, log = _run(capture, tmp_path, workload, "zero", str(rounds),
                         env={"SIMCUDA_LAUNCH_LATENCY_NS": "2000000", "PYINTERPOSE_GPU_FLUSH_MS": "1"})
    assert cp.returncode == 0, cp.stderr
    truth = last_json_line(cp.stdout)
    tr = pyinterpose.load(path)
    pid = int(tr.processes["pid"].iloc[0])
    _, err = assert_matches_log(tr, log, pid)
    kernels = sorted((o for o in log if o["pid"] == pid and o["name"] == "k_zero"), key=lambda o: o["start_ns"])
    assert len(kernels) == rounds and all(o["end_ns"] == o["start_ns"] for o in kernels)   # zero duration
    t0 = int(tr.meta["t0_ns"])
    b = tr.blocks
    b = b[(b["pid"] == pid) & (b["size"] >= truth["first_size"])].sort_values("seq_alloc")
    assert len(b) == rounds
    clock = clock_of(tr, pid)
    assert clock.device
    placed = clock.host_times(b["seq_alloc"].to_numpy(), b["t_alloc"].to_numpy())
    for k, (o, t_call, at) in enumerate(zip(kernels, b["t_alloc"], placed)):
        assert o["end_ns"] - t0 > t_call + 1_000_000, (k, o, t_call)     # the device was behind the call
        assert abs(int(at) - (o["end_ns"] - t0)) <= err, (k, o, t_call, at)


@pytest.mark.parametrize("piece", [1, 3])
def test_device_records_read_a_piece_at_a_time_give_the_same_tables(capture, tmp_path, workload, monkeypatch, piece):
    """The reader makes the device activities (and copies every record table's fields out) a piece of
    records at a time, from spill files mapped and given back as it goes: with pieces of 1 and 3
    records (graph replays whose kernels CUPTI names cut across them) every table and the kernel list
    equal the read in one piece, and the activities still match simcuda's device log."""
    import pandas as pd

    from pyinterpose.trace import colcache, gpuclock, reader

    path, cp, log = _run(capture, tmp_path, workload, "graph", "5")
    assert cp.returncode == 0, cp.stderr
    whole = pyinterpose.load(path)
    named = whole.gpu_activity[(whole.gpu_activity["kind"] == "kernel") & (whole.gpu_activity["graph_node"] != 0)]
    assert len(named) > piece          # CUPTI-named kernels in more than one piece
    monkeypatch.setattr(gpuclock, "PIECE", piece)
    monkeypatch.setattr(reader, "RECORD_PIECE", piece)
    monkeypatch.setenv("PYINTERPOSE_NO_CACHE", "1")
    monkeypatch.setenv("PYINTERPOSE_SPILL_MIN_BYTES", "0")
    monkeypatch.setattr(colcache.Writer, "private", classmethod(lambda cls, p: None))   # spilled, in memory
    pieces = pyinterpose.load(path)
    for name in colcache.TABLES:
        pd.testing.assert_frame_equal(getattr(pieces, name), getattr(whole, name), check_exact=True, obj=name)
    assert pieces.kernels == whole.kernels
    assert_matches_log(pieces, log, int(pieces.processes["pid"].iloc[0]))


def test_driver_calls_inside_runtime_calls_the_shim_does_not_see_get_device_times(capture, tmp_path, workload, cbuild):
    """The real-GPU finding (H100, CUDA 13): a library with a runtime of its own linked in (cuBLAS's
    cudart; tests/c/staticrt_lib.c here) makes its launches, copies and memsets inside runtime calls the
    shim cannot interpose; only the driver calls inside them reach the shim, which pushes its id there.
    CUPTI gives each device record the OUTERMOST call's correlation id (the runtime call's) and pairs the
    shim's id with the inner driver call's only.  Every device op must still be joined to the call that
    made it, with the duration the program set (simcuSetKernelDuration) — independent ground truth."""
    lib = cbuild("staticrt_lib", shared=True, link_cudart=False)
    rounds = 6
    path, cp, log = _run(capture, tmp_path, workload, "staticrt", str(rounds), lib)
    assert cp.returncode == 0, cp.stderr
    truth = last_json_line(cp.stdout)
    tr = pyinterpose.load(path)
    pid = int(tr.processes["pid"].iloc[0])
    g, err = assert_matches_log(tr, log, pid)
    assert len(tr.launches) == truth["kernels"] == 3 * rounds
    assert len(tr.copies) == truth["copies"] + truth["memsets"] == 2 * rounds
    unmatched = int((g["seq"] < 0).sum())
    assert unmatched == 0, f"{unmatched} of {len(g)} device records not joined to their call"
    assert g["seq"].is_unique
    for tab in (tr.launches, tr.copies):
        assert (tab["dev_start"] >= 0).all(), tab[tab["dev_start"] < 0]
    # the driver entry points the library's runtime used, as the shim recorded them
    apis = set(tr.launches["api"].astype(str)) | set(tr.copies["api"].astype(str))
    assert {"cuLaunchKernelEx", "cuLaunchKernel", "cudaLaunchKernel", "cuMemsetD8Async",
            "cuMemcpyDtoDAsync_v2"} <= apis, apis
    # each launch's device time is its own kernel's: the duration the program set, in launch order
    names = np.array(tr.kernels + [""], dtype=object)
    la = tr.launches.sort_values("seq")
    for kernel in ("staticrt_gemm_ex", "staticrt_gemm"):
        mine = la[names[la["kernel"]] == kernel]
        dur = (mine["dev_end"] - mine["dev_start"]).to_numpy()
        assert len(dur) == rounds and (np.abs(dur - np.array(truth[kernel])) <= 2 * err + 2).all(), (kernel, dur)
    notes = [n["note"] for n in tr.meta["capture_notes"]]
    joined = [n for n in notes if "joined through the driver call nested" in n]
    # all but the first call: CUPTI is set up inside it (at the shim's first launch), after it began, so
    # CUPTI never saw that runtime call and its kernel carries the driver call's own correlation id
    assert joined and joined[0].startswith(f"device clock: {4 * rounds - 1} runtime API calls"), notes


def test_launches_as_nvcc_13_makes_them_are_runtime_launches_with_their_own_device_times(capture, tmp_path, workload):
    """CUDA 13's <<<>>> calls __cudaLaunchKernel with the stub's cudaKernel_t (crt/host_runtime.h), not
    cudaLaunchKernel.  On an H100 PyTorch 2.11+cu130's own kernels reached the shim only as the driver's
    cuLaunchKernel inside that call, and none of 6332 got a device time.  Each launch is now the runtime
    call itself: scanned (the buffer it names), and joined to its device record by its own correlation id."""
    n = 12
    path, cp, log = _run(capture, tmp_path, workload, "nvcc13", str(n))
    assert cp.returncode == 0, cp.stderr
    truth = last_json_line(cp.stdout)
    tr = pyinterpose.load(path)
    la = tr.launches
    assert len(la) == truth["launches"] == n
    assert set(la["api"].astype(str)) == {"__cudaLaunchKernel"}
    assert (la["dev_start"] >= 0).all() and (la["dev_end"] >= la["dev_start"]).all()
    b = tr.blocks
    bid = int(b.loc[b["address"] == truth["buffer"], "block_id"].iloc[0])
    assert sorted(tr.accesses.loc[tr.accesses["block_id"] == bid, "seq"].tolist()) == sorted(la["seq"].tolist())
    g, err = assert_matches_log(tr, log, int(tr.processes["pid"].iloc[0]))
    assert int((g["seq"] < 0).sum()) == 0
    # joined by its own id: no runtime call needed the nesting rule
    assert not [x for x in tr.meta.get("capture_notes", []) if "joined through the driver call nested" in x["note"]]
