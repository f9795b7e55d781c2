"""Fidelity on real H100 traces (PyTorch 2.11, JAX 0.11.2), against what the frameworks themselves
recorded (``*.truth.json``: torch memory history, ``max_memory_reserved``, JAX ``memory_stats()``).

The traces are read from ``ROOT/../shared/data/gpu-traces/`` (the full set), else from the copies
committed in ``samples/`` (``PYINTERPOSE_GPU_TRACES=DIR`` puts another directory first); a test
whose trace is in none of them is skipped with the reason."""
from __future__ import annotations

import json
import os
from collections import Counter

import numpy as np
import pytest

import pyinterpose
from pyinterpose.analysis import owners
from pyinterpose.analysis.iterations import find_iterations
from pyinterpose.trace.model import peak_live_bytes

from conftest import ROOT, gpu_trace as find

pytestmark = pytest.mark.slow   # every test here captures, replays or loads whole traces (> a few s)

_cache: dict[str, object] = {}


def trace(name: str):
    if name not in _cache:
        _cache[name] = pyinterpose.load(find(name + ".pit"))
    return _cache[name]


def truth(name: str) -> dict:
    with open(find(name + ".truth.json")) as f:
        return json.load(f)


TORCH = ["torch-cnn", "torch-transformer"]


@pytest.mark.parametrize("model", TORCH)
def test_blocks_view_allocations_equal_the_memory_history(model):
    tr = trace(f"{model}-blocks")
    hist = truth(f"{model}-blocks")["torch_memory_history_same_program_native_allocator"]
    m = owners.allocator_mask(tr)
    b = tr.blocks[m]
    assert set(b["api"].astype(str)) == {"cudaMallocAsync"}
    assert len(b) == hist["alloc_count"]
    assert int(b["size"].sum()) == hist["alloc_bytes"]
    assert Counter(b["size"].tolist()) == Counter({int(k): v for k, v in hist["alloc_sizes"].items()})


@pytest.mark.parametrize("model", TORCH)
def test_blocks_view_peak_equals_max_memory_allocated(model):
    tr = trace(f"{model}-blocks")
    t = truth(f"{model}-blocks")["pytorch_reported"]
    assert peak_live_bytes(tr.blocks[owners.allocator_mask(tr)]) == t["max_memory_allocated"]


@pytest.mark.parametrize("model", TORCH)
def test_reserved_view_segments_equal_the_history_and_peak_equals_max_memory_reserved(model):
    tr = trace(f"{model}-reserved")
    t = truth(f"{model}-reserved")
    seg = tr.blocks[owners.allocator_mask(tr)]
    assert set(seg["api"].astype(str)) == {"cudaMalloc"}
    hist = t["torch_memory_history_same_program_native_allocator"]
    assert sorted(seg["size"].tolist()) == sorted(hist["segment_alloc_sizes"])
    assert peak_live_bytes(seg) == t["pytorch_reported"]["max_memory_reserved"]
    # the rest is outside PyTorch's allocator (library workspaces), shown on its own line
    assert set(tr.blocks[~owners.allocator_mask(tr) & tr.blocks["counts_device"]]["api"].astype(str)) == \
        {"cuMemAlloc_v2"}


@pytest.mark.parametrize("model", TORCH)
def test_pytorch_simulator_on_the_allocators_requests_matches_max_memory_reserved(model):
    """Replaying the blocks view's cudaMallocAsync requests (only) through the `pytorch` simulator
    gives the native allocator's max_memory_reserved exactly (docs/gpu-validation.md: "exact")
    and its segment count."""
    from pyinterpose.analysis.pools import evaluate

    tr = trace(f"{model}-blocks")
    t = truth(f"{model}-reserved") if os.path.exists(os.path.join(os.path.dirname(find(f"{model}-blocks.pit")),
                                                                  f"{model}-reserved.truth.json")) else None
    if t is None:
        pytest.skip(f"{model}-reserved.truth.json not available")
    res = evaluate(tr, strategies="pytorch")
    py = res["strategies"][0]
    want = t["pytorch_reported"]["max_memory_reserved"]
    assert py["peak_bytes"] == want
    assert py["backing_allocations"] == t["torch_memory_history_same_program_native_allocator"]["actions"][
        "segment_alloc"]
    assert res["outside_allocator"]["blocks"] > 0 and res["outside_allocator"]["bytes"] > 100 << 20


@pytest.mark.parametrize("model", TORCH)
def test_pytorch_period_and_steps(model):
    """The period is the framework's allocations per step; the steps found are the steps whose
    allocations repeat that count (19 of 20: step 1, the warm-up, allocates more)."""
    tr = trace(f"{model}-blocks")
    t = truth(f"{model}-blocks")
    per = t["allocations_per_step_native_allocator"]
    assert len(per) == t["workload"]["steps"]
    steady = per[-1]
    it = find_iterations(tr)
    assert it.period_allocs == steady
    assert it.count == sum(1 for n in per if n == steady) == 19
    # no step runs to the end of the trace: each within 2x the framework's median step time
    steps_ns = np.diff(np.array(t["step_bounds_unix_us"], dtype=np.int64), axis=1).ravel() * 1000
    assert it.durations_ns.max() < 2 * np.median(steps_ns), (it.durations_ns.max(), np.median(steps_ns))


def test_jax_blocks_view_one_block_per_buffer():
    tr = trace("jax-attn-blocks")
    stats = truth("jax-attn-reserved")["jax_reported"]["memory_stats"]
    vmm = tr.blocks[tr.blocks["kind"] == "vmm"]
    assert len(vmm) == stats["num_allocs"] == 1049
    assert owners.framework(tr) == "jax" and int(owners.allocator_mask(tr).sum()) == 1049
    assert vmm["counts_device"].all() and (vmm["handle_t_create"] >= 0).all()
    assert len(tr.reservations) == 1049 and (tr.reservations["maps"] == 1).all()
    assert tr.counts["unresolved_access"] == 0


def test_jax_blocks_view_accesses_swap_and_steps():
    tr = trace("jax-attn-blocks")
    dev = tr.blocks[tr.blocks["counts_device"]]
    touched = dev["block_id"].isin(tr.accesses["block_id"])
    assert round(100 * dev.loc[touched, "size"].sum() / dev["size"].sum(), 1) == 96.5   # docs: 96.5 %
    it = find_iterations(tr)
    assert it.count == truth("jax-attn-blocks")["workload"]["steps"]       # every step run (20)
    from pyinterpose.analysis.swap import evaluate
    assert evaluate(tr, bandwidth=55.0)["candidates"] == 7293               # docs/gpu-validation.md


def test_jax_reserved_region_equals_bytes_limit():
    tr = trace("jax-attn-reserved")
    stats = truth("jax-attn-reserved")["jax_reported"]["memory_stats"]
    region = tr.blocks[owners.allocator_mask(tr)]
    assert len(region) == 1 and int(region["size"].iloc[0]) == stats["bytes_limit"] == stats["pool_bytes"]
    assert int(tr.reservations["size"].sum()) == stats["bytes_limit"]
    assert peak_live_bytes(region) == stats["bytes_limit"]


def test_graph_launches_are_counted_and_said():
    tr = trace("graphs-blocks")
    from pyinterpose.analysis.access import analyze
    assert int(tr.launches["graph"].sum()) == 10
    res = analyze(tr, bandwidth=55.0)
    assert res["graph_launches"] == 10
    assert any("graph" in n for n in res.get("notes", [])), res.get("notes")


def test_demo_sample_uses_the_committed_pytorch_trace(tmp_path):
    from conftest import run_cli
    from pyinterpose.cli import demo

    if not os.path.exists(os.path.join(ROOT, "samples", "torch-cnn-blocks.pit")):
        pytest.skip("samples/torch-cnn-blocks.pit is not in this checkout")
    assert os.path.basename(demo.sample_traces()[0]) == "torch-cnn-blocks.pit"
    r = run_cli("demo", "--sample", "--json", "-o", str(tmp_path / "out"))
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    assert d["source"] == "sample torch-cnn-blocks.pit" and os.path.exists(d["report"])
    assert d["headlines"]["blocks"] > 6831


def test_reserved_view_report_says_each_peak_under_its_own_name():
    """The report's headline on the reserved view: PyTorch's own max_memory_reserved under the
    allocator's name, the libraries' cuMemAlloc_v2 blocks on their own line, never summed under
    the allocator's name; segments still reserved likewise split."""
    from pyinterpose.report import html

    tr = trace("torch-cnn-reserved")
    want = truth("torch-cnn-reserved")["pytorch_reported"]["max_memory_reserved"]
    rep = html.build(tr, bandwidth=25.0, time_limit=0.5)
    facts = dict(rep.facts)
    assert facts["peak reserved by pytorch's allocator"] == f"982.0 MiB ({want:,} B; 41 segments)"
    assert facts["peak outside the allocator (libraries)"] == "128.3 MiB (10 blocks)"
    assert facts["peak of both together"] == "1.1 GiB"
    assert not any("framework allocator" in k for k in facts)
    assert rep.headlines["allocator_peak_bytes"] == want
    mem = dict(next(s for s in rep.sections if s.title == "Memory over time").facts)
    assert mem["GPU 0 segments still reserved by pytorch's allocator"].startswith("41 (982.0 MiB)")
    assert mem["GPU 0 library blocks never freed (outside the allocator)"] == "10 (128.3 MiB)"
