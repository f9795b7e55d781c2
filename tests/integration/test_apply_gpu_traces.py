"""Plans from the real H100 PyTorch traces (blocks view: one cudaMallocAsync per tensor): one planned
iteration holds exactly the allocations PyTorch itself counted per steady step (its memory_stats, in the
traces' truth files), and the plan passes its own check.  (Applying them needs a GPU: scripts/gpu_apply.sh.)"""
from __future__ import annotations

import json
import os

import pytest

from conftest import ROOT, run_cli

pytestmark = pytest.mark.slow   # every test here captures, replays or loads whole traces (> a few s)

PLACES = [os.path.join(ROOT, "..", "shared", "data", "gpu-traces"), os.path.join(ROOT, "samples")]


def _find(name):
    for d in PLACES:
        p = os.path.join(d, name)
        if os.path.exists(p) and os.path.exists(p.replace(".pit", ".truth.json")):
            return p
    pytest.skip(f"{name} (and its truth file) not in this checkout")


@pytest.mark.parametrize("name", ["torch-cnn-blocks.pit", "torch-transformer-blocks.pit"])
def test_plan_iteration_is_pytorchs_step(tmp_path, name):
    trace = _find(name)
    truth = json.load(open(trace.replace(".pit", ".truth.json")))
    steady = truth["allocations_per_step_native_allocator"][1:]
    assert len(set(steady)) == 1
    out = str(tmp_path / "plan.json")
    cp = run_cli("plan", trace, "-o", out, "--json", timeout=600)
    assert cp.returncode == 0, cp.stderr
    r = json.loads(cp.stdout)
    assert r["iteration_requests"] == steady[0]
    assert r["boundary"] == "anchor" and r["capacity"] >= r["load_bytes"] > 0
    doc = json.load(open(out))
    assert doc["trace"]["sha256"] and doc["knobs"].get("PYTORCH_CUDA_ALLOC_CONF") == "backend:cudaMallocAsync"
    owners = {q["owner"] for q in doc["requests"] if q["phase"] == "iteration"}
    # these traces predate owner recording: the plan then keys by size and ordinal alone, and says so
    assert doc["sites"] == (owners != {""})
    assert owners == ({"libc10_cuda.so"} if doc["sites"] else {""})


def test_jax_vmm_trace_says_why_there_is_no_plan(tmp_path):
    trace = _find("jax-attn-blocks.pit")
    cp = run_cli("plan", trace, "-o", str(tmp_path / "p.json"))
    assert cp.returncode == 2 and cp.stderr.count("\n") == 1
    assert "VMM" in cp.stderr and "does not serve" in cp.stderr


def _events(trace_path, out):
    """The trace's servable request stream (main process) as replay_requests.c reads it."""
    import numpy as np

    import pyinterpose
    from pyinterpose.analysis.pools.plan_file import servable

    t = pyinterpose.load(trace_path)
    r = servable(t, t.main_pid)
    idx = np.arange(len(r), dtype=np.int64)
    freed = r["freed"].to_numpy(bool)
    seq = np.concatenate([r["seq_alloc"].to_numpy(np.int64), r["seq_free"].to_numpy(np.int64)[freed]])
    op = np.concatenate([np.ones(len(r), np.int64), np.full(int(freed.sum()), 2, np.int64)])
    size = np.concatenate([r["size"].to_numpy(np.int64), r["size"].to_numpy(np.int64)[freed]])
    ix = np.concatenate([idx, idx[freed]])
    o = np.lexsort((-op, seq))        # at one seq, the free first
    np.stack([op[o], size[o], ix[o]], axis=1).astype("<i8").tofile(out)
    return len(r)


@pytest.mark.parametrize("name, unserved", [("torch-cnn-blocks.pit", 1), ("torch-transformer-blocks.pit", 120)])
def test_real_pytorch_request_stream_replayed_under_its_plan(tmp_path, cbuild, name, unserved):
    """A real trace's own requests (ResNet-18: 6841, transformer: 11056, warm-up step included), replayed on
    simcuda under the plan made from that trace: served from the arena, no two live served blocks
    overlapping, the device peak equal to the arena plus what fell through (simcuda's own count)."""
    import numpy as np

    import pyinterpose
    from pyinterpose.analysis.applied import served_mask

    trace = _find(name)
    plan = str(tmp_path / "plan.json")
    assert run_cli("plan", trace, "-o", plan, timeout=600).returncode == 0
    ev = str(tmp_path / "ev.bin")
    n = _events(trace, ev)
    exe = cbuild("replay_requests")
    out, stats = str(tmp_path / "r.pit"), tmp_path / "stats"
    cp = run_cli("run", "-q", "--simulated-gpu", "-o", out, "--apply", plan, "--", exe, ev,
                 env={"SIMCUDA_STATS": str(stats), "SIMCUDA_MEMORY_BYTES": str(64 << 30)}, timeout=600)
    assert cp.returncode == 0, cp.stderr
    assert json.loads(cp.stdout)["allocs"] == n
    a = json.loads(run_cli("summary", out, "--json").stdout)["applied"]["processes"][0]
    assert a["requests"] == n and not a["refused"]
    # all but the one request of the set-up that the plan does not cover (a 64 MiB block freed during the
    # first step); blocks that outlive their iteration go to their alternate slot (without it: 6830 served)
    assert a["served"] >= n - unserved
    st = json.loads(stats.read_text().splitlines()[0])
    assert st["peak_bytes"][0] == a["real_peak_bytes"]
    t = pyinterpose.load(out)
    b = t.blocks[served_mask(t)].sort_values("seq_alloc")
    sa, sf = b["seq_alloc"].to_numpy(), b["seq_free"].to_numpy()
    lo, hi = b["address"].to_numpy(np.uint64), b["address"].to_numpy(np.uint64) + b["size"].to_numpy(np.uint64)
    order = np.argsort(lo, kind="stable")   # address-sorted sweep: any pair overlapping in address and time
    for k in range(len(order)):
        i = order[k]
        for j in order[k + 1:]:
            if lo[j] >= hi[i]:
                break
            assert not (sa[i] < sf[j] and sa[j] < sf[i]), (int(i), int(j))
