"""scripts/gpu_compare.py (the comparison step of scripts/gpu_validate.sh), dry-run without a GPU: the
workloads' own outputs are rebuilt from the shipped truth files, turned back into truth by `make-truth`,
and every check must pass on the real traces; a tampered record must fail."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(ROOT, "scripts", "gpu_compare.py")
from conftest import GPU_TRACE_DIRS as SRC  # noqa: E402

pytestmark = pytest.mark.slow   # every test here captures, replays or loads whole traces (> a few s)
NAMES = ["torch-cnn-blocks", "torch-cnn-reserved", "jax-attn-blocks", "jax-attn-reserved"]


def _src() -> str:
    for d in SRC:
        if d and all(os.path.exists(os.path.join(d, n + ".pit")) for n in NAMES):
            return d
    pytest.skip("the four sample traces are in neither ../shared/data/gpu-traces nor samples/")


def _workload_outputs(src: str, out: str) -> None:
    """What torch_train.py / jax_train.py write (--out, --history-json), rebuilt from the truth files."""
    for n in NAMES:
        shutil.copy(os.path.join(src, n + ".pit"), out)
        t = json.load(open(os.path.join(src, n + ".truth.json")))
        if n.startswith("torch"):
            res = dict(t["pytorch_reported"], steps=t["workload"]["steps"], step_bounds_us=t["step_bounds_unix_us"],
                       per_step=[{"allocs": k} for k in t["allocations_per_step_native_allocator"]],
                       median_step_ms=12.0)
            if n.endswith("-reserved"):
                json.dump(t["torch_memory_history_same_program_native_allocator"],
                          open(os.path.join(out, "torch-cnn-history.json"), "w"))
        else:
            res = dict(t["jax_reported"], model="attn", step_ns=[1] * t["workload"]["steps"])
        json.dump(res, open(os.path.join(out, n + ".json"), "w"))


def _run(*args):
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.run([sys.executable, SCRIPT, *args], capture_output=True, text=True, env=env, timeout=600)


def test_make_truth_then_compare_passes_on_the_real_traces(tmp_path):
    src = _src()
    _workload_outputs(src, str(tmp_path))
    assert _run("make-truth", str(tmp_path)).returncode == 0
    for n in NAMES:
        assert os.path.exists(tmp_path / (n + ".truth.json"))
    r = _run(str(tmp_path), "--json")
    assert r.returncode == 0, r.stdout + r.stderr
    rows = json.loads(r.stdout)["checks"]
    assert len(rows) >= 15 and all(x["result"] == "PASS" for x in rows)
    checks = {(x["trace"], x["check"]) for x in rows}
    assert ("torch-cnn-blocks", "pytorch simulator segments") in checks
    assert ("jax-attn-reserved", "region = bytes_limit") in checks


def test_a_wrong_record_fails(tmp_path):
    src = _src()
    _workload_outputs(src, str(tmp_path))
    p = tmp_path / "torch-cnn-reserved.json"
    res = json.load(open(p))
    res["max_memory_reserved"] += 2 << 20
    json.dump(res, open(p, "w"))
    _run("make-truth", str(tmp_path))
    r = _run(str(tmp_path))
    assert r.returncode == 1
    assert "segment peak = max_memory_reserved" in r.stdout and "FAIL" in r.stdout
