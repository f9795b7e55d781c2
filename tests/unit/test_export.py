"""Exports: Perfetto Chrome trace, PyTorch memory snapshot, blocks CSV, MiniMalloc CSV."""
from __future__ import annotations

import json
import pickle
import pickletools

import numpy as np
import pandas as pd
import pytest

from pyinterpose.cli import main
from pyinterpose.errors import PyinterposeError
from pyinterpose.report import exports, memory_viz, perfetto
from pyinterpose.report.synthetic import training_trace
from pyinterpose.trace.model import Trace
from conftest import fake_trace_files, gpu_trace

MiB = 1 << 20


def brute_live(blocks: pd.DataFrame, t: int) -> int:
    b = blocks[blocks["counts_device"]]
    alive = (b["t_alloc"] <= t) & (~b["freed"] | (b["t_free"] > t))
    return int(b.loc[alive, "size"].sum())


def two_device_trace() -> Trace:
    """Blocks on GPUs 0 and 1, a host block, a VMM physical handle (address 0) and a reused address."""
    rows = [
        # block_id, device, kind, address, size, t_alloc, t_free, freed
        (0, 0, "device", 0x1000_0000, 4 * MiB, 1000, 9000, True),
        (1, 0, "device", 0x1000_0000, 2 * MiB, 9000, 12000, True),   # same address reused at once
        (2, 1, "async", 0x2000_0000, 8 * MiB, 2000, 20000, False),
        (3, 0, "host", 0x3000_0000, 16 * MiB, 3000, 5000, True),      # pinned host: not device memory
        (4, 0, "vmm_create", 0, 2 * MiB, 4000, 20000, False),
        (5, 0, "vmm_create", 0, 6 * MiB, 4500, 8000, True),
    ]
    df = pd.DataFrame(rows, columns=["block_id", "device", "kind", "address", "size", "t_alloc", "t_free", "freed"])
    df["pid"] = 42
    df["api"] = "cudaMalloc"
    df["seq_alloc"] = df["t_alloc"] // 100
    df["seq_free"] = df["t_free"] // 100
    nv = pd.DataFrame({"t": [0, 10000], "device": [0, 0], "used_bytes": [100 * MiB, 140 * MiB]})
    return Trace.from_tables(blocks=df, nvml=nv, meta={"view": "blocks"},
                             processes=pd.DataFrame([{"pid": 42, "exe": "/usr/bin/python3"}]))


# ---- perfetto ---------------------------------------------------------------------------------

def test_perfetto_counters_equal_live_bytes_per_device():
    tr = two_device_trace()
    doc = perfetto.chrome_trace(tr, large=0)
    json.dumps(doc)
    ev = doc["traceEvents"]
    counters = [e for e in ev if e["ph"] == "C"]
    for dev in (0, 1):
        pid = perfetto.GPU_PID_BASE + dev
        live = [e for e in counters if e["pid"] == pid and "live_bytes" in e["args"]]
        assert live, dev
        bd = tr.blocks[tr.blocks["device"] == dev]
        for e in live:
            t_ns = round(e["ts"] * 1000)
            assert e["args"]["live_bytes"] == brute_live(bd, t_ns)
        # one counter per distinct instant, the last at the device's final state
        final = int(bd.loc[bd["counts_device"] & ~bd["freed"], "size"].sum())
        assert live[-1]["args"]["live_bytes"] == final
    nvml = [e for e in counters if "nvml_used_bytes" in e["args"]]
    assert [e["args"]["nvml_used_bytes"] for e in nvml] == [100 * MiB, 140 * MiB]
    names = {(e["pid"], e["args"]["name"]) for e in ev if e["ph"] == "M" and e["name"] == "process_name"}
    assert (perfetto.GPU_PID_BASE, "GPU 0") in names and (perfetto.GPU_PID_BASE + 1, "GPU 1") in names
    assert (42, "/usr/bin/python3 (pid 42)") in names


def test_perfetto_instants_and_iterations():
    tr = training_trace(iterations=5)
    from pyinterpose.analysis.iterations import find_iterations

    it = find_iterations(tr)
    doc = perfetto.chrome_trace(tr, iterations=it, large=8 * MiB)
    ev = doc["traceEvents"]
    inst = [e for e in ev if e["ph"] == "i" and e.get("cat") == "allocation"]
    big = tr.blocks[tr.blocks["size"] >= 8 * MiB]
    assert sorted(e["args"]["block_id"] for e in inst) == sorted(big["block_id"].tolist())
    assert all(e["args"]["size"] >= 8 * MiB and e["s"] == "t" for e in inst)
    slices = [e for e in ev if e["ph"] == "X"]
    assert len(slices) == it.count == 4
    for i, s in enumerate(slices):
        assert s["ts"] == it.boundaries_t[i] / 1000 and s["dur"] == (it.boundaries_t[i + 1] - it.boundaries_t[i]) / 1000
        assert s["pid"] == 100


def test_perfetto_downsampling_keeps_peak():
    rng = np.random.default_rng(0)
    n = 5000
    t = np.sort(rng.integers(0, 10**9, n))
    df = pd.DataFrame({"block_id": np.arange(n), "pid": 1, "device": 0, "kind": "device", "api": "cudaMalloc",
                       "address": np.arange(n) * 4096 + 4096, "size": rng.integers(1, MiB, n),
                       "t_alloc": t, "t_free": t + rng.integers(1, 10**7, n), "seq_alloc": np.arange(n),
                       "seq_free": np.arange(n) + 10})
    tr = Trace.from_tables(blocks=df)
    full = perfetto.chrome_trace(tr, max_points=10**9)
    small = perfetto.chrome_trace(tr, max_points=200)
    vals = lambda d: [e["args"]["live_bytes"] for e in d["traceEvents"] if e["ph"] == "C" and e["name"] == "memory"]
    assert len(vals(small)) <= 200 < len(vals(full))
    assert max(vals(small)) == max(vals(full))


def test_perfetto_reserved_view_series_name():
    tr = training_trace(iterations=3, view="reserved", nvml=False)
    doc = perfetto.chrome_trace(tr)
    keys = {k for e in doc["traceEvents"] if e["ph"] == "C" and e["name"] == "memory" for k in e["args"]}
    assert keys == {"reserved_bytes"}


@pytest.mark.slow
def test_perfetto_class_owner_counters_and_stream_tracks():
    tr = training_trace(iterations=4)
    from pyinterpose.analysis import guarded

    it = guarded.iterations(tr).value
    cl = guarded.block_classes(tr, iters=it).value
    doc = perfetto.chrome_trace(tr, iterations=it, classes=cl)
    assert perfetto.validate(doc) == []
    json.dumps(doc, allow_nan=False)
    ev = doc["traceEvents"]
    pid = perfetto.GPU_PID_BASE
    by_class = [e for e in ev if e["ph"] == "C" and e["name"] == "live bytes by class"]
    live = {round(e["ts"] * 1000): e["args"]["live_bytes"] for e in ev
            if e["ph"] == "C" and e["name"] == "memory" and "live_bytes" in e["args"]}
    assert by_class and set(by_class[0]["args"]) == set(cl.unique())
    for e in by_class:   # the classes add up to the live bytes, and each class to its own brute force
        t_ns = round(e["ts"] * 1000)
        assert sum(e["args"].values()) == live[t_ns] == brute_live(tr.blocks, t_ns)
        for c, v in e["args"].items():
            ids = cl[cl == c].index
            assert v == brute_live(tr.blocks[tr.blocks["block_id"].isin(ids)], t_ns)
    by_owner = [e for e in ev if e["ph"] == "C" and e["name"] == "live bytes by owner"]
    assert by_owner and all(sum(e["args"].values()) == live[round(e["ts"] * 1000)] for e in by_owner)
    # one track per stream, an instant per launch, with the blocks the launch touched
    kern = [e for e in ev if e.get("cat") == "kernel"]
    assert len(kern) == len(tr.launches)
    tracks = {(e["pid"], e["tid"]) for e in kern}
    assert tracks == {(pid, 1)}     # one stream in this trace
    names = [e for e in ev if e["ph"] == "M" and e["name"] == "thread_name" and e["pid"] == pid]
    assert [n["args"]["name"] for n in names] == ["default stream (kernel launches)"]
    acc = tr.accesses.merge(tr.launches[["pid", "seq"]], on=["pid", "seq"])
    want = acc.groupby("seq")["block_id"].apply(sorted).to_dict()
    for e in kern:
        assert sorted(e["args"]["blocks"]) == want.get(e["args"]["seq"], [])


def test_perfetto_validate_catches_broken_documents():
    good = {"traceEvents": [{"name": "m", "ph": "C", "pid": 1, "ts": 0.0, "args": {"a": 1}}]}
    assert perfetto.validate(good) == []
    bad = [{"name": "m", "ph": "C", "pid": 1, "ts": 0.0, "args": {"a": float("nan")}},
           {"name": "x", "ph": "X", "pid": 1, "tid": 0, "ts": 1.0},
           {"name": "x", "ph": "Q", "pid": 1, "ts": 1.0},
           {"name": "i", "ph": "i", "pid": "1", "ts": 1.0},
           {"name": "i", "ph": "i", "pid": 1, "ts": -1.0, "s": "z"},
           {"name": "thread_nam", "ph": "M", "pid": 1, "args": {"name": "x"}},
           {"name": "f", "ph": "f", "pid": 1, "ts": 1.0}]
    for e in bad:
        assert perfetto.validate({"traceEvents": [e]}), e


@pytest.mark.slow
def test_perfetto_export_of_real_trace_is_valid(tmp_path):
    src = gpu_trace("torch-cnn-blocks.pit")
    import pyinterpose

    tr = pyinterpose.load(src)
    out = tmp_path / "p.json"
    exports.export(tr, "perfetto", str(out))
    doc = json.loads(out.read_text())
    assert perfetto.validate(doc) == []
    kern = [e for e in doc["traceEvents"] if e.get("cat") == "kernel"]
    assert len(kern) == len(tr.launches)
    # most launches name at least one block (the capture maps 100 % of PyTorch launches, see gpu-traces README)
    assert np.mean([len(e["args"]["blocks"]) > 0 for e in kern]) > 0.95


# ---- memory_viz ---------------------------------------------------------------------------------

def walk_builtin(obj, path="snapshot"):
    if isinstance(obj, dict):
        for k, v in obj.items():
            assert type(k) is str, path
            walk_builtin(v, f"{path}.{k}")
    elif isinstance(obj, (list, tuple)):
        for i, v in enumerate(obj):
            walk_builtin(v, f"{path}[{i}]")
    else:
        assert type(obj) in (str, int, bool, float, type(None)), (path, type(obj))
        if type(obj) is int:
            assert -(2 ** 63) <= obj < 2 ** 63, path


def test_snapshot_consistent_builtin_protocol4(tmp_path):
    tr = two_device_trace()
    classes = pd.Series(["a", "b", "c", "d", "e", "f"], index=range(6))
    snap = memory_viz.snapshot(tr, classes=classes)
    memory_viz.check_consistency(snap)
    walk_builtin(snap)
    assert len(snap["device_traces"]) == 2
    # final segments: blocks alive at the end (2 on GPU1, 4 = vmm handle on GPU0), address order
    assert [(s["device"], s["address"], s["total_size"]) for s in snap["segments"]] == \
        [(1, 0x2000_0000, 8 * MiB), (0, memory_viz.VMM_BASE, 2 * MiB)]
    # host block never appears; vmm handles got distinct synthetic addresses
    all_sizes = [e["size"] for d in snap["device_traces"] for e in d]
    assert 16 * MiB not in all_sizes
    vmm = {e["addr"] for e in snap["device_traces"][0] if e["size"] in (2 * MiB, 6 * MiB) and e["addr"] >= memory_viz.VMM_BASE}
    assert len(vmm) == 2
    # the reused address: free of block 0 comes before the alloc of block 1 at t=9000
    acts = [(e["action"], e["size"]) for e in snap["device_traces"][0] if e["addr"] == 0x1000_0000]
    assert acts == [("segment_alloc", 4 * MiB), ("alloc", 4 * MiB), ("free_requested", 4 * MiB),
                    ("free_completed", 4 * MiB), ("segment_free", 4 * MiB), ("segment_alloc", 2 * MiB),
                    ("alloc", 2 * MiB), ("free_requested", 2 * MiB), ("free_completed", 2 * MiB),
                    ("segment_free", 2 * MiB)]
    cats = [e.get("category") for e in snap["device_traces"][0] if e["action"] == "alloc"]
    assert cats == ["a", "e", "f", "b"]
    path = tmp_path / "s.pickle"
    memory_viz.write_snapshot(tr, str(path))
    raw = path.read_bytes()
    assert raw[:2] == b"\x80\x04"   # protocol 4
    ops = {op.name for op, _, _ in pickletools.genops(raw)}
    assert not ops & {"GLOBAL", "STACK_GLOBAL", "REDUCE", "BUILD", "INST", "OBJ", "NEWOBJ", "BINBYTES",
                      "SHORT_BINBYTES", "BINBYTES8"}
    assert pickle.loads(raw) == pickle.loads(pickle.dumps(memory_viz.snapshot(tr), protocol=4))


def test_check_consistency_catches_broken_snapshots():
    snap = memory_viz.snapshot(two_device_trace())
    broken = pickle.loads(pickle.dumps(snap))
    broken["segments"].pop()
    with pytest.raises(AssertionError):
        memory_viz.check_consistency(broken)
    broken = pickle.loads(pickle.dumps(snap))
    broken["device_traces"][0] = [e for e in broken["device_traces"][0] if e["action"] != "segment_alloc"]
    with pytest.raises(AssertionError):
        memory_viz.check_consistency(broken)


def test_snapshot_read_by_torch(tmp_path):
    mv = pytest.importorskip("torch.cuda._memory_viz", reason="torch not installed: torch's reader unavailable")
    tr = training_trace(iterations=3)
    path = tmp_path / "s.pickle"
    memory_viz.write_snapshot(tr, str(path))
    with open(path, "rb") as f:
        snap = pickle.load(f)
    stats = mv.segsum(snap)  # raises on any accounting inconsistency
    live_end = int(tr.blocks.loc[~tr.blocks["freed"], "size"].sum())
    assert f"segments: {int((~tr.blocks['freed']).sum())}" in stats
    assert f"total_reserved: {mv._format_size(live_end)}" in stats
    text = mv.trace(snap)
    assert text.count("cudaMalloc(") == len(tr.blocks)
    assert text.count("cudaFree(") == int(tr.blocks["freed"].sum())
    page = mv.trace_plot(snap)
    assert "snapshot.pickle" in page


# ---- csv / minimalloc / dispatcher ------------------------------------------------------------------

def test_csv_is_the_blocks_table(tmp_path):
    tr = training_trace(iterations=3)
    p = tmp_path / "b.csv"
    info = exports.export(tr, "csv", str(p))
    back = pd.read_csv(p)
    assert info["rows"] == len(back) == len(tr.blocks)
    assert back["size"].tolist() == tr.blocks["size"].tolist()
    assert back["address"].astype("uint64").tolist() == tr.blocks["address"].tolist()
    assert set(back["class"]) <= {"persistent", "per_iteration", "cross_iteration", "outside", "transient"}
    assert (back.loc[back["role"] == "weight", "class"] == "persistent").all()


def test_minimalloc_export(tmp_path):
    p = tmp_path / "m.csv"
    tr = training_trace(iterations=5)
    try:
        from pyinterpose.analysis.pools import steady_problem  # noqa: F401
    except ImportError:
        with pytest.raises(PyinterposeError, match="pools analysis"):
            exports.export(tr, "minimalloc", str(p))
        return
    from pyinterpose.analysis.pools.problem import read_minimalloc_csv

    info = exports.export(tr, "minimalloc", str(p))
    df = read_minimalloc_csv(str(p))
    assert info["buffers"] == len(df) > 0


def test_unknown_format():
    with pytest.raises(PyinterposeError, match="unknown export format"):
        exports.export(training_trace(iterations=3), "pprof", "x")


@pytest.fixture()
def fake_files(monkeypatch):
    made = {"run.pit": training_trace(iterations=4)}
    return fake_trace_files(monkeypatch, made)


def test_cli_export(fake_files, tmp_path, capsys):
    out = tmp_path / "p.json"
    assert main(["export", "run.pit", "--format", "perfetto", "-o", str(out), "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["format"] == "perfetto" and d["events"]["C"] > 0
    assert json.loads(out.read_text())["traceEvents"]
    assert main(["export", "run.pit", "--format", "perfetto", "-o", str(out)]) == 2
    assert "exists" in capsys.readouterr().err
    out2 = tmp_path / "s.pickle"
    assert main(["export", "run.pit", "--format", "memory-viz", "-o", str(out2)]) == 0
    assert "memory_viz" in capsys.readouterr().out
    memory_viz.check_consistency(pickle.loads(out2.read_bytes()))
