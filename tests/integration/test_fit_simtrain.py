"""`pyinterpose fit` agrees with the simulators (issue 22 item 3).

On simtrain traces of the torch, jax and tf call paths: the captured allocator fits exactly from its
simulated peak up (the peak the pools simulator reports, computed here on its own); one byte below
the lower bound (peak live bytes, computed here from the blocks) no allocator and no planned pool
fits; knobs are tried only when the captured allocator does not fit and the capacity is at least the
bound, swapping only when nothing else fits; a run that ran out of memory does not fit on the device
it ran out on; bad input gets one line."""
from __future__ import annotations

import json
import os
import sys

import numpy as np
import pandas as pd
import pytest

import pyinterpose
from conftest import run_cli
from pyinterpose.analysis import fit as F
from pyinterpose.analysis import pools

pytestmark = pytest.mark.slow   # every test here captures, replays or loads whole traces (> a few s)

SIM = {"torch": "pytorch", "jax": "bfc", "tf": "bfc"}
OPTS = {"torch": {}, "jax": {"allow_growth": True}, "tf": {"allow_growth": True}}


@pytest.fixture(scope="module")
def traces(tmp_path_factory):
    d = tmp_path_factory.mktemp("fit")
    out = {}
    for fw in ("torch", "jax", "tf"):
        p = str(d / f"{fw}.pit")
        r = run_cli("run", "-q", "--simulated-gpu", "-o", p, "--", sys.executable, "-m",
                    "pyinterpose.examples.simtrain", "--framework", fw, "--steps", "8")
        assert r.returncode == 0, r.stderr[-2000:]
        out[fw] = p
    return out


def _load_bytes(tr) -> int:
    """Peak live device bytes of the main process, from the blocks (frees first at an equal seq)."""
    b = tr.blocks[(tr.blocks["pid"] == tr.main_pid) & tr.blocks["counts_device"]]
    ev = sorted([(int(s), 1, int(z)) for s, z in zip(b["seq_alloc"], b["size"])] +
                [(int(s), 0, -int(z)) for s, z, f in zip(b["seq_free"], b["size"], b["freed"]) if f])
    live = peak = 0
    for _, _, d in ev:
        live += d
        peak = max(peak, live)
    return peak


def _answer(res, name_prefix):
    return [a for a in res["answers"] if a["name"].startswith(name_prefix)]


@pytest.mark.parametrize("fw", ["torch", "jax", "tf"])
def test_verdicts_agree_with_the_simulators(traces, fw):
    tr = pyinterpose.load(traces[fw])
    req = pools.requests(tr, allocator_only=True)
    peak = pools.simulate(req, SIM[fw], **OPTS[fw])["peak_reserved_bytes"]
    bound = _load_bytes(tr)
    m = F.FitModel(tr)
    assert m.outside_peak == 0 and m.lower_bound == bound and m.captured_need == peak
    # the captured allocator fits exactly from its simulated peak up
    at = m.answer(peak)
    assert at["fits"] and at["verdict"] == "fits" and at["headroom_bytes"] == 0
    assert [a["name"] for a in at["answers"]] == [f"captured allocator ({SIM[fw]})"]   # nothing else tried
    below = m.answer(peak - 1)
    assert not below["answers"][0]["fits"]
    assert below["answers"][0]["need_bytes"] == peak
    # between the bound and the captured need: knobs tried (they can help), each through its simulator
    mid = m.answer(bound)
    names = [a["name"] for a in mid["answers"]]
    assert len(names) > 2 and "host swapping" not in names
    one_per_tensor = [a for a in mid["answers"]
                      if "cudaMallocAsync" in a["name"] or "platform" in a["name"] or "cuda_malloc_async" in a["name"]]
    assert one_per_tensor                       # the knob that allocates one block per tensor was tried
    assert all(a["need_bytes"] == pools.simulate(req, "cudamalloc")["peak_reserved_bytes"] for a in one_per_tensor)
    assert mid["fits"]   # one knob (one allocation per tensor, 4 KiB multiples) reaches the bound exactly
    # one byte below the lower bound: no allocator, knob or planned pool fits; only swapping is tried
    low = m.answer(bound - 1)
    assert not low["fits"]
    assert [a["name"] for a in low["answers"]] == [f"captured allocator ({SIM[fw]})", "host swapping"]
    assert "not evaluated: no bandwidth" in low["answers"][1]["note"]


def test_swapping_is_the_only_way_below_the_bound(traces):
    tr = pyinterpose.load(traces["torch"])
    m = F.FitModel(tr, bandwidth_bytes_per_s=1e15)   # a link so fast that every swap hides
    bound = m.lower_bound
    res = m.answer(bound - (1 << 20))
    assert [a["name"] for a in res["answers"]] == ["captured allocator (pytorch)", "host swapping"]
    sw = res["answers"][1]
    assert res["fits"] == sw["fits"] is True      # 1 MiB below the bound, on a link where every swap hides
    assert res["verdict"] == "fits with host swapping" and sw["need_bytes"] <= bound - (1 << 20)


def test_planned_pool_when_no_allocator_fits():
    """Two live 3 MiB blocks, framework unknown: cudaMalloc rounds each to 4 MiB (8 MiB), the bound is
    6 MiB: at 7 MiB only a planned pool fits."""
    from pyinterpose.trace.model import Trace

    MiB = 1 << 20
    blocks = pd.DataFrame({"block_id": [0, 1], "pid": [7, 7], "api": ["cuMemAlloc_v2"] * 2, "kind": ["device"] * 2,
                           "address": [1 << 30, 2 << 30], "size": [3 * MiB, 3 * MiB], "seq_alloc": [1, 2],
                           "seq_free": [10, 11], "t_alloc": [1, 2], "t_free": [10, 11], "freed": [True, True],
                           "counts_device": [True, True]})
    tr = Trace.from_tables(blocks=blocks, meta={"framework": "other"})
    m = F.FitModel(tr)
    assert m.lower_bound == 6 * MiB and m.captured_need == 8 * MiB
    res = m.answer(7 * MiB)
    assert res["fits"] and res["verdict"] == "fits with planned pool (optimal offsets)"
    assert res["headroom_bytes"] == MiB
    assert not m.answer(6 * MiB - 1)["fits"]


def test_a_run_that_ran_out_does_not_fit_where_it_ran_out(tmp_path):
    p = str(tmp_path / "oom.pit")
    truth = str(tmp_path / "oom.jsonl")
    r = run_cli("run", "-q", "--simulated-gpu", "-o", p, "--", sys.executable, "-m", "pyinterpose.examples.simtrain",
                "--framework", "jax", "--steps", "6", "--oom", "final", "--oom-truth", truth,
                env={"SIMCUDA_MEMORY_BYTES": str(64 << 20)})
    assert r.returncode == 1
    with open(truth) as fh:
        last = [json.loads(line) for line in fh][-1]
    m = F.FitModel(pyinterpose.load(p), bandwidth_bytes_per_s=1e15)
    assert m.unmet and m.lower_bound >= last["live_bytes"] + last["size"] > 64 << 20
    res = m.answer(64 << 20)
    assert not res["fits"]   # swapping what ran does not make room for the request that failed
    assert [a["name"] for a in res["answers"]] == ["captured allocator (bfc)", "host swapping"]
    assert m.answer(m.captured_need)["fits"]


def test_cli_table_json_and_bad_input(traces):
    r = run_cli("fit", traces["tf"], "--json")
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    names = [g["name"] for g in F.gpu_table()]
    assert [c["label"] for c in d["capacities"]] == names
    assert all(isinstance(c["fits"], bool) and all(isinstance(a["fits"], bool) for a in c["answers"])
               for c in d["capacities"])
    r = run_cli("fit", traces["tf"], "--gpu", "t4", "--capacity", "20MiB", "--capacity", "40GiB")
    assert r.returncode == 0, r.stderr
    lines = [ln for ln in r.stdout.splitlines() if not ln.startswith((" ", "note:"))]
    assert lines[1].startswith("T4 (16.0 GiB): fits")
    assert lines[2].startswith("20971520 (20.0 MiB): does not fit")
    assert lines[3].startswith("42949672960 (40.0 GiB): fits")
    for args, text in ((["--capacity", "0"], "must be >= 1 bytes"), (["--gpu", "H1000"], "unknown GPU 'H1000' (known: H100-SXM"),
                       (["--capacity", "lots"], "not a byte count")):
        r = run_cli("fit", traces["tf"], *args)
        assert r.returncode == 2 and r.stdout == ""
        assert len(r.stderr.strip().splitlines()) == 1 and text in r.stderr, r.stderr


def test_gpu_table_has_sources_and_installs():
    table = F.gpu_table()
    for g in table:
        assert g["memory_bytes"] == int(g["memory_gb"] * (1 << 30)) and g["bytes_per_s"] > 0
        assert "https://" in g["source"], g["name"]
    h = F.find_gpu("h100")
    assert h["name"] == "H100-SXM" and h["capacity_bytes"] == 85520809984 < h["memory_bytes"]
    assert F.find_gpu("A100 40GB")["memory_gb"] == 40
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    with open(os.path.join(root, "pyproject.toml")) as fh:
        assert '"data/*.json"' in fh.read()
    assert np.isclose(F.find_gpu("T4")["bytes_per_s"], 16 * 8e9 * 128 / 130 / 8)


def test_reserved_view_needs_its_segments_and_asks_nothing_else():
    """A reserved-view trace (real H100, JAX preallocating): its need is the segments' peak as recorded;
    no allocator is replayed on top of them, no knob, planned pool or swap is tried."""
    from conftest import gpu_trace

    tr = pyinterpose.load(gpu_trace("jax-attn-reserved.pit"))
    m = F.FitModel(tr)
    assert m.simulator == "none" and m.captured_need == _load_bytes(tr)
    small, big = m.answer(24 << 30, "L4"), m.answer(m.captured_need)
    assert not small["fits"] and [a["name"] for a in small["answers"]] == ["captured allocator (its segments as recorded)"]
    assert big["fits"] and big["headroom_bytes"] == 0


def test_bytes_outside_the_allocator_come_off_the_capacity(tmp_path):
    """simtrain --outside-bytes holds one block outside the framework allocator's API for the whole run
    (as cuBLAS workspaces or NCCL buffers do): fit counts exactly those bytes outside, and a limited replay
    of the allocator gets the capacity less them: one byte short of the allocator's own live peak beside
    them it cannot fit, at its simulated peak beside them it does."""
    n = 32 << 20
    p, truth_path = str(tmp_path / "o.pit"), str(tmp_path / "truth.json")
    r = run_cli("run", "-q", "--simulated-gpu", "-o", p, "--", sys.executable, "-m", "pyinterpose.examples.simtrain",
                "--framework", "torch", "--steps", "6", "--outside-bytes", str(n), "--truth", truth_path)
    assert r.returncode == 0, r.stderr[-2000:]
    with open(truth_path) as f:
        truth = json.load(f)
    assert truth["outside_bytes"] == n
    tr = pyinterpose.load(p)
    b = tr.blocks
    outside = (b["address"] == truth["outside_address"]) & (b["size"] == n) & b["counts_device"]
    assert outside.sum() == 1 and b.loc[outside, "api"].astype(str).iloc[0] == "cuMemAlloc_v2"
    m = F.FitModel(tr)
    assert m.outside_peak == n
    # the allocator's own live peak, from its blocks (every device block of the process but the outside one)
    own = tr.blocks[(tr.blocks["pid"] == tr.main_pid) & tr.blocks["counts_device"] & ~outside]
    ev = sorted([(int(s), 1, int(z)) for s, z in zip(own["seq_alloc"], own["size"])] +
                [(int(s), 0, -int(z)) for s, z, f in zip(own["seq_free"], own["size"], own["freed"]) if f])
    live = peak_live = 0
    for _, _, d in ev:
        live += d
        peak_live = max(peak_live, live)
    sim_peak = pools.simulate(pools.requests(tr, allocator_only=True), "pytorch")["peak_reserved_bytes"]
    assert n + peak_live - 1 > sim_peak          # without the outside bytes taken off, it would fit
    assert not m.allocator_fits_limited("pytorch", {}, n + peak_live - 1)
    assert m.allocator_fits_limited("pytorch", {}, n + sim_peak)
    assert m.captured_need == sim_peak + n       # the outside block is live throughout
