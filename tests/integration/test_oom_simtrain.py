"""The out-of-memory explanation against simtrain's own ground truth (issue 22 items 2 and 4).

simtrain --oom near|final writes, at each failed request, every device allocation it holds from CUDA
(address, size, role) and what cudaMemGetInfo/cuMemGetInfo said.  On the torch, jax and tf call
paths: the live set at each failure (the very blocks), its owners and call sites, the near/final
split, the device's free/total, the growth since the step began, and `run`'s exit status (the
program's: 1 after the final OOM, 0 after a near one)."""
from __future__ import annotations

import json
import sys

import numpy as np
import pytest

import pyinterpose
from pyinterpose.analysis import oom, pools
from pyinterpose.trace.stacks import call_site

pytestmark = pytest.mark.slow   # every test here captures, replays or loads whole traces (> a few s)

ENV = {"SIMCUDA_MEMORY_BYTES": str(64 << 20)}


def _truth(path):
    with open(path) as fh:
        return [json.loads(line) for line in fh if line.strip()]


@pytest.mark.parametrize("mode", ["near", "final"])
@pytest.mark.parametrize("fw", ["torch", "jax", "tf"])
def test_live_set_owners_sites_and_split(capture, tmp_path, fw, mode):
    truth_path = str(tmp_path / "oom.jsonl")
    path, cp = capture([sys.executable, "-m", "pyinterpose.examples.simtrain", "--framework", fw, "--steps", "6",
                        "--oom", mode, "--oom-truth", truth_path], "--stacks", "native", env=ENV)
    assert cp.returncode == (0 if mode == "near" else 1), cp.stderr[-2000:]
    if mode == "final":
        assert "CUDA out of memory" in cp.stderr
    truth = _truth(truth_path)
    assert len(truth) == (1 if mode == "near" else 2)
    tr = pyinterpose.load(path)
    f = oom.oom_failures(tr)
    ex = oom.explain(tr)
    assert ex["failures"] == len(truth) and ex["other_failed_calls"] == 0
    assert [e["outcome"] for e in ex["entries"]] == [t["outcome"] for t in truth]
    assert [e["attempt"] for e in ex["entries"]] == [t["attempt"] for t in truth]
    assert ex["near"] == (1 if mode == "near" else 0) and ex["final"] == (0 if mode == "near" else 2)
    b = tr.blocks
    for t, e, (_, row) in zip(truth, ex["entries"], f.iterrows()):
        assert e["api"] == t["api"] and e["requested_bytes"] == t["size"]
        # the live set: the very blocks the program held from CUDA
        own, others = oom.live_mask(tr, int(row["pid"]), int(row["seq"]), int(row["t"]))
        got = sorted(zip(b["address"].to_numpy()[own].tolist(), b["size"].to_numpy()[own].tolist()))
        assert got == sorted((a, s) for a, s, _ in t["live"])
        assert not others.any()
        assert e["live_bytes"] == t["live_bytes"] == sum(s for _, s, _ in t["live"])
        assert e["live_blocks"] == len(t["live"])
        # the device as the program saw it (the shim's cuMemGetInfo at the failure)
        assert e["device_free_bytes"] == t["free_bytes"] and e["device_capacity_bytes"] == t["total_bytes"]
        assert e["shortfall_bytes"] == t["size"] - t["free_bytes"]
        # owners: every block is simtrain's, and its allocator's (the framework allocator's API)
        assert e["by_owner"] == [{"owner": "libsimtrain.so", "bytes": t["live_bytes"], "blocks": len(t["live"]),
                                  "framework_allocator": True}]
        assert e["framework_allocator_bytes"] == t["live_bytes"] and e["outside_allocator_bytes"] == 0
        # call sites: the groups hold exactly the live blocks, each by its own stack's innermost frame
        sites = {}
        for sid, size in zip(b["stack_id"].to_numpy()[own].tolist(), b["size"].to_numpy()[own].tolist()):
            sites[call_site(tr, sid)] = sites.get(call_site(tr, sid), 0) + size
        assert {c["call_site"]: c["bytes"] for c in e["by_call_site"]} == sites
        assert e["call_site"] and e["call_site"] in sites   # the request comes from where blocks are made
        assert sum(c["bytes"] for c in e["by_lifetime_class"]) == t["live_bytes"]
        # the growth since the step began: what the program allocated in this step and still holds
        step_bytes = sum(s for _, s, role in t["live"] if role in ("step", "cached"))
        assert e["since_last_boundary"] is not None
        assert e["since_last_boundary"]["bytes"] == step_bytes
        assert e["largest_blocks"][0]["bytes"] == max(s for _, s, _ in t["live"])
        assert e["reserve"]["allocated_bytes"] == t["live_bytes"]
        r = e["reserve"]   # simulated in this blocks-view trace: the share of the shortfall free inside it
        assert r["reserve_bytes"] >= t["live_bytes"] and r["free_in_reserve_bytes"] == r["reserve_bytes"] - t["live_bytes"]
        assert r["shortfall_share"] == min(1.0, r["free_in_reserve_bytes"] / (t["size"] - t["free_bytes"]))
        if mode == "near":
            rb = b[b["block_id"] == e["retry"]["block_id"]].iloc[0]
            assert int(rb["size"]) == t["size"] and int(rb["seq_alloc"]) > int(row["seq"])
            assert call_site(tr, int(rb["stack_id"])) == e["call_site"]
        else:
            assert e["retry"] is None


def test_summary_json_and_text(capture, tmp_path):
    from conftest import run_cli

    path, cp = capture([sys.executable, "-m", "pyinterpose.examples.simtrain", "--framework", "torch", "--steps",
                        "5", "--oom", "final"], env=ENV)
    assert cp.returncode == 1
    r = run_cli("summary", path, "--json")
    assert r.returncode == 0, r.stderr
    s = json.loads(r.stdout)
    assert len(s["oom"]) == 2 and [e["outcome"] for e in s["oom"]] == ["final", "final"]
    assert s["oom_summary"]["final"] == 2
    r = run_cli("summary", path)
    assert "2 allocations failed for lack of device memory" in r.stdout
    assert "largest live blocks" in r.stdout


def test_no_failure_says_so(capture):
    from conftest import run_cli

    path, cp = capture([sys.executable, "-m", "pyinterpose.examples.simtrain", "--framework", "jax", "--steps", "3"])
    assert cp.returncode == 0
    assert "failed for lack" not in cp.stderr
    r = run_cli("summary", path)
    assert "no allocation failed" in r.stdout
    assert json.loads(run_cli("summary", path, "--json").stdout)["oom"] == []


def test_run_prints_the_compact_explanation(tmp_path):
    from conftest import run_cli

    out = str(tmp_path / "t.pit")
    r = run_cli("run", "--simulated-gpu", "-o", out, "--", sys.executable, "-m", "pyinterpose.examples.simtrain",
                "--framework", "tf", "--steps", "5", "--oom", "near", env=ENV)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "1 allocation failed for lack of device memory: 1 near OOM" in r.stderr
    assert f"pyinterpose summary {out}" in r.stderr
    r = run_cli("run", "-q", "--simulated-gpu", "-f", "-o", out, "--", sys.executable, "-m",
                "pyinterpose.examples.simtrain", "--framework", "tf", "--steps", "5", "--oom", "final", env=ENV)
    assert r.returncode == 1
    assert "0 near OOM (a retry succeeded), 2 final" in r.stderr


def test_chains_near_and_final_on_synthetic_tables():
    """BFC-like back-off (fail 100, fail 90, ok 81) is one near OOM of two attempts; a failure followed by
    an unrelated small allocation is final; the same request failing twice and never succeeding is final."""
    import pandas as pd

    from pyinterpose.trace.model import Trace

    blocks = pd.DataFrame({"block_id": [0, 1, 2], "pid": [1, 1, 1], "api": ["cuMemAlloc_v2"] * 3,
                           "kind": ["device"] * 3, "address": [4096, 8192, 12288], "size": [81, 5, 30],
                           "seq_alloc": [4, 11, 30], "seq_free": [6, 12, 31], "t_alloc": [4, 11, 30],
                           "t_free": [6, 12, 31], "freed": [True] * 3, "counts_device": [True] * 3})
    failures = pd.DataFrame({"pid": [1, 1, 1, 1, 1], "seq": [2, 3, 10, 20, 21], "t": [2, 3, 10, 20, 21],
                             "api": ["cuMemAlloc_v2"] * 5, "op": ["alloc"] * 5, "size": [100, 90, 100, 70, 70],
                             "result": [2, 2, 2, 2, 2]})
    tr = Trace.from_tables(blocks=blocks, failures=failures)
    f = oom.oom_failures(tr)
    assert f["outcome"].tolist() == ["near", "near", "final", "final", "final"]
    assert f["attempt"].tolist() == [1, 2, 1, 1, 2]
    assert f["retry_block"].tolist() == [0, 0, -1, -1, -1]
    assert np.array_equal(f["retry_size"].to_numpy(), [81, 81, -1, -1, -1])


def test_report_opens_with_the_oom_section_and_has_the_fit_table(capture, tmp_path):
    from pyinterpose.report import html

    path, cp = capture([sys.executable, "-m", "pyinterpose.examples.simtrain", "--framework", "tf", "--steps", "5",
                        "--oom", "final"], env=ENV)
    assert cp.returncode == 1
    rep = html.build(pyinterpose.load(path))
    ids = [s.id for s in rep.sections]
    assert ids[0] == "oom" and "fit" in ids
    oom_s = rep.sections[0]
    assert not [n for n in oom_s.notes if n.startswith("not available")]
    assert oom_s.tables[0][1]["outcome"].tolist() == ["final", "final"]
    assert rep.headlines["oom"]["final"] == 2
    fit_s = rep.sections[ids.index("fit")]
    assert len(fit_s.tables[0][1]) == len(__import__("pyinterpose.analysis.fit", fromlist=["x"]).gpu_table())


def test_forked_workers_each_explained(capture, tmp_path):
    """Two processes (a forked worker), each with its near OOM: one entry per process, each with its own live
    set; the other process's blocks live at that time are counted apart."""
    truth_path = str(tmp_path / "oom.jsonl")
    path, cp = capture([sys.executable, "-m", "pyinterpose.examples.simtrain", "--framework", "jax", "--steps", "5",
                        "--workers", "1", "--oom", "near", "--oom-truth", truth_path], env=ENV)
    assert cp.returncode == 0, cp.stderr[-2000:]
    truth = {t["pid"]: t for t in _truth(truth_path)}
    ex = oom.explain(pyinterpose.load(path))
    assert sorted(e["pid"] for e in ex["entries"]) == sorted(truth) and len(truth) == 2
    for e in ex["entries"]:
        assert e["outcome"] == "near"
        assert e["process_live_bytes"] == truth[e["pid"]]["live_bytes"]
        assert e["live_bytes"] == e["process_live_bytes"] + e["other_processes_live_bytes"]


def test_many_failures_explained_at_both_ends(monkeypatch):
    """Past 2 x FULL failures, the middle ones are brief (request, outcome, retry) and say so."""
    import pandas as pd

    from pyinterpose.trace.model import Trace

    monkeypatch.setattr(oom, "FULL", 2)
    n = 7
    failures = pd.DataFrame({"pid": [1] * n, "seq": [10 * (k + 1) for k in range(n)], "t": list(range(n)),
                             "api": ["cudaMalloc"] * n, "op": ["alloc"] * n, "size": [1 << 30] * n, "result": [2] * n})
    blocks = pd.DataFrame({"block_id": [0], "pid": [1], "api": ["cudaMalloc"], "kind": ["device"], "address": [4096],
                           "size": [1 << 20], "seq_alloc": [1], "seq_free": [1000], "t_alloc": [0], "t_free": [99],
                           "freed": [True], "counts_device": [True]})
    ex = oom.explain(Trace.from_tables(blocks=blocks, failures=failures))
    assert len(ex["entries"]) == n and ex["final"] == n
    brief = [e for e in ex["entries"] if "detail" in e]
    assert [e["seq"] for e in brief] == [30, 40, 50]
    assert all(e["live_bytes"] == 1 << 20 for e in ex["entries"] if "detail" not in e)
    from pyinterpose.report.oom_text import full
    assert sum("omitted" in line for line in full(ex)) == 3


def test_perfetto_marks_each_failure(capture, tmp_path):
    from pyinterpose.report import perfetto

    path, cp = capture([sys.executable, "-m", "pyinterpose.examples.simtrain", "--framework", "jax", "--steps", "5",
                        "--oom", "final"], env=ENV)
    tr = pyinterpose.load(path)
    for doc in (perfetto.chrome_trace(tr), json.loads(perfetto.chrome_trace_json(tr)[0])):
        ooms = [e for e in doc["traceEvents"] if e.get("cat") == "oom"]
        assert [e["args"]["attempt"] for e in ooms] == [1, 2]
        assert all(e["name"].startswith("OOM (final) cuMemAlloc_v2") and e["ph"] == "i" for e in ooms)


def test_reserved_view_says_what_it_cannot_see(capture, tmp_path):
    """In a reserved-view trace the live blocks are the allocator's segments: the reserve is what was live,
    what was allocated inside it is unknown and the entry says so."""
    truth_path = str(tmp_path / "oom.jsonl")
    path, cp = capture([sys.executable, "-m", "pyinterpose.examples.simtrain", "--framework", "torch", "--steps", "5",
                        "--oom", "near", "--oom-truth", truth_path], "--view", "reserved", env=ENV)
    assert cp.returncode == 0, cp.stderr[-2000:]
    (t,) = _truth(truth_path)
    (e,) = oom.explain(pyinterpose.load(path))["entries"]
    assert e["outcome"] == "near" and e["api"] == "cudaMalloc" and e["live_bytes"] == t["live_bytes"]
    r = e["reserve"]
    assert r["reserve_bytes"] == t["live_bytes"] and r["allocated_bytes"] is None and r["shortfall_share"] is None
    assert "--view blocks" in r["note"]


def test_other_processes_and_the_reserve_at_the_failure(capture, tmp_path):
    """Against what the workloads themselves held: another process (simtrain --oom-neighbour) holds three
    blocks through the whole loop, so at the failure the other processes' live set is exactly its blocks;
    the allocator keeps its cache and asks for a smaller batch after the failure (--oom-retry smaller), so
    the reserve changes at the request right after it, and the reserve at the failure must be the one
    after the last request before it (the newest block the program held when it failed)."""
    truth_path = str(tmp_path / "oom.jsonl")
    path, cp = capture([sys.executable, "-m", "pyinterpose.examples.simtrain", "--framework", "torch", "--steps",
                        "4", "--oom", "near", "--oom-retry", "smaller", "--oom-neighbour", str(3_000_000),
                        "--oom-truth", truth_path], env=ENV)
    assert cp.returncode == 0, cp.stderr[-2000:]
    lines = _truth(truth_path)
    nb = [t for t in lines if "neighbour" in t]
    fails = [t for t in lines if "neighbour" not in t]
    assert len(nb) == 1 and nb[0]["live_bytes"] == 3_000_000 and len(fails) == 1
    tr = pyinterpose.load(path)
    b = tr.blocks
    f = oom.oom_failures(tr)
    assert len(f) == 1
    row = f.iloc[0]
    e = oom.explain(tr)["entries"][0]
    own, others = oom.live_mask(tr, int(row["pid"]), int(row["seq"]), int(row["t"]))
    got = sorted(zip(b["pid"].to_numpy()[others].tolist(), b["address"].to_numpy()[others].tolist(),
                     b["size"].to_numpy()[others].tolist()))
    assert got == sorted((nb[0]["neighbour"], a, s) for a, s, _ in nb[0]["live"])
    assert e["other_processes_live_bytes"] == nb[0]["live_bytes"]
    assert e["process_live_bytes"] == fails[0]["live_bytes"]
    assert e["live_bytes"] == fails[0]["live_bytes"] + nb[0]["live_bytes"]
    # the reserve: the simulated allocator's after the last request before the failure
    last_addr, last_size, _ = fails[0]["live"][-1]
    mine = (b["pid"] == row["pid"]) & (b["address"] == last_addr) & (b["size"] == last_size) & \
        (b["seq_alloc"] < row["seq"])
    last_seq = int(b.loc[mine, "seq_alloc"].max())
    rc = pools.reserved_curve(tr, "pytorch", int(row["pid"]))
    idx = int(np.flatnonzero(np.asarray(rc["seq"]) == last_seq)[0])
    assert rc["bytes"][idx + 1] > rc["bytes"][idx]          # the smaller batch after the failure grew it
    assert e["reserve"]["reserve_bytes"] == int(rc["bytes"][idx])
    assert e["reserve"]["allocator"] == "pytorch"


def test_a_block_freed_at_the_instant_of_the_failure_is_not_live():
    """The shim stamps a free when the real free has returned: another process's block whose free carries
    the failure's very timestamp had its memory back by then; one allocated at that instant holds it."""
    from types import SimpleNamespace

    import pandas as pd

    from pyinterpose.trace.model import BLOCK_COLUMNS, conform

    t = 1_000
    blocks = conform(pd.DataFrame({
        "block_id": [0, 1, 2, 3], "pid": [2, 2, 2, 1], "device": [0, 0, 0, 0], "size": [10, 20, 40, 80],
        "t_alloc": [100, 200, t, 100], "t_free": [t, t + 1, -1, -1], "freed": [True, True, False, False],
        "seq_alloc": [1, 2, 3, 1], "seq_free": [4, 5, -1, -1], "counts_device": [True] * 4,
    }), BLOCK_COLUMNS)
    tr = SimpleNamespace(blocks=blocks)      # live_mask reads the blocks only
    own, others = oom.live_mask(tr, pid=1, seq=5, t=t)
    assert blocks["size"][others].tolist() == [20, 40]     # freed at t: gone; freed after t, allocated at t: live
    assert blocks["size"][own].tolist() == [80]
