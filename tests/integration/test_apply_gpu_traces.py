"""Plans from the real H100 PyTorch traces (blocks view: one cudaMallocAsync per tensor): one planned
iteration holds exactly the allocations PyTorch itself counted per steady step (its memory_stats, in the
traces' truth files), and the plan passes its own check.  (Applying them needs a GPU: scripts/gpu_apply.sh.)"""
from __future__ import annotations

import json
import os

import pytest

from conftest import ROOT, run_cli

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
    if doc["sites"]:
        assert owners == {"libc10_cuda.so"}


def test_jax_vmm_trace_says_why_there_is_no_plan(tmp_path):
    trace = _find("jax-attn-blocks.pit")
    cp = run_cli("plan", trace, "-o", str(tmp_path / "p.json"))
    assert cp.returncode == 2 and cp.stderr.count("\n") == 1
    assert "VMM" in cp.stderr and "does not serve" in cp.stderr
