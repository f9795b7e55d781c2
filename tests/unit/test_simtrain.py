"""simtrain: the truth file must be self-consistent and match hand-computed
counts of the loop (L layers, S steps):

  regular step: 1 input + L activations + L workspaces + 1 loss grad
                + (L-1) activation grads + L weight grads        = 4L + 1 allocs
  persistent:   W, Adam m, v per layer = 3L (+1 pinned staging buffer for torch)
  launches:     L fwd + 1 loss + L bwd + L opt                   = 3L + 1 per step
  memsets:      2L at start (m, v) + L per step (gradient zeroing)
  accesses:     per step 1 (H2D) + 4L (fwd) + 2 (loss) + 6L-1 (bwd; layer 0 has
                no input grad) + L (memsets) + 4L (opt) = 15L + 2; + 2L at start;
                torch's H2D copy also touches its pinned staging buffer: +1 per step
"""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

pytestmark = [pytest.mark.slow,  # compiles and runs C programs on simcuda (> a few s)
              pytest.mark.skipif(shutil.which("cc") is None, reason="needs a C compiler")]

EXPECTED_APIS = {
    "torch": {"cudaMalloc", "cudaFree", "cudaMallocHost", "cudaFreeHost", "cudaLaunchKernel", "cudaMemcpyAsync",
              "cudaMemsetAsync"},
    "jax": {"cuMemAlloc_v2", "cuMemFree_v2", "cuLaunchKernel", "cuMemcpyHtoD_v2", "cuMemsetD8_v2"},
    "tf": {"cuMemAllocFromPoolAsync", "cuMemFreeAsync", "cuLaunchKernelEx", "cuMemcpyHtoDAsync_v2",
           "cuMemsetD8Async", "cuMemPoolCreate", "cuMemPoolDestroy"},
}
CLASSES = {  # API name -> what it does, independent of the C table
    "alloc": {"cudaMalloc", "cudaMallocAsync", "cudaMallocHost", "cuMemAlloc_v2", "cuMemAllocFromPoolAsync"},
    "free": {"cudaFree", "cudaFreeAsync", "cudaFreeHost", "cuMemFree_v2", "cuMemFreeAsync"},
    "launch": {"cudaLaunchKernel", "cuLaunchKernel", "cuLaunchKernelEx"},
}


@pytest.fixture(scope="module")
def native(tmp_path_factory):
    from pyinterpose._build import build_native

    out = str(tmp_path_factory.mktemp("native"))
    try:
        build_native(out, only=["simcuda", "simtrain"])
    except FileNotFoundError:  # headers copied after the build
        pass
    assert os.path.exists(os.path.join(out, "libsimtrain.so"))
    return out


def _env(native, **extra):
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("SIMCUDA_", "PYTORCH_")) and k not in ("LD_PRELOAD", "LD_LIBRARY_PATH")}
    env["PYINTERPOSE_NATIVE_DIR"] = native
    env["PYTHONPATH"] = ROOT
    env.update(extra)
    return env


def simtrain(native, tmp_path, *args, env=None):
    truth = tmp_path / "truth.json"
    r = subprocess.run([sys.executable, "-m", "pyinterpose.examples.simtrain", *args, "--truth", str(truth)],
                       env=_env(native, **(env or {})), capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert r.returncode == 0, r.stderr
    return json.loads(truth.read_text())


BATCH = """
import json, sys
from pyinterpose.examples import _simlib as s
lib = s.bind_simtrain()
out = [s.run_once(lib, fw, steps, layers, noise, seed) for fw, steps, layers, noise, seed in json.loads(sys.argv[1])]
print(json.dumps(out))
"""


def batch(native, configs, env=None):
    """Several runs in one process (saves interpreter start-ups)."""
    r = subprocess.run([sys.executable, "-c", BATCH, json.dumps(configs)], env=_env(native, **(env or {})),
                       capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def check_consistent(t):
    assert t["allocs"] == t["frees"]
    by = t["by_api"]
    assert sum(v for k, v in by.items() if k in CLASSES["alloc"]) == t["allocs"]
    assert sum(v for k, v in by.items() if k in CLASSES["free"]) == t["frees"]
    assert sum(v for k, v in by.items() if k in CLASSES["launch"]) == t["launches"]


@pytest.mark.parametrize("framework", ["torch", "jax", "tf"])
def test_truth_matches_hand_counts(native, tmp_path, framework):
    L, S = 5, 7
    t = simtrain(native, tmp_path, "--framework", framework, "--steps", str(S), "--layers", str(L))
    check_consistent(t)
    pinned = 1 if framework == "torch" else 0
    assert t["allocs_per_step"] == 4 * L + 1
    assert t["allocs"] == 3 * L + S * (4 * L + 1) + pinned
    assert t["launches"] == S * (3 * L + 1)
    assert t["accesses"] == S * (15 * L + 2 + pinned) + 2 * L
    assert t["noise_steps"] == 0
    assert set(t["by_api"]) == EXPECTED_APIS[framework]
    memset = {"torch": "cudaMemsetAsync", "jax": "cuMemsetD8_v2", "tf": "cuMemsetD8Async"}[framework]
    assert t["by_api"][memset] == 2 * L + S * L
    assert t["framework"] == framework and t["steps"] == S and t["workers"] == 0
    assert t["pids"] and len(t["pids"]) == 1
    # sizes vary per layer and the total is the sum of what was allocated
    assert t["bytes"] > t["allocs"] * 4096


def test_torch_async_backend_follows_alloc_conf(native):
    plain, = batch(native, [["torch", 3, 2, 0.0, 0]])
    for var in ("PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF"):
        t, = batch(native, [["torch", 3, 2, 0.0, 0]], env={var: "expandable_segments:False,backend:cudaMallocAsync"})
        check_consistent(t)
        assert "cudaMalloc" not in t["by_api"] and "cudaFree" not in t["by_api"]
        assert t["by_api"]["cudaMallocAsync"] == plain["by_api"]["cudaMalloc"]
        assert t["by_api"]["cudaFreeAsync"] == plain["by_api"]["cudaFree"]


def test_noise_determinism_and_seeds(native):
    runs = batch(native, [
        [fw, 30, 3, noise, seed]
        for fw in ("torch", "jax", "tf") for noise, seed in ((0.0, 1), (0.5, 1), (0.5, 1), (0.5, 2))
    ])
    for i in range(0, len(runs), 4):
        base, noisy, again, other = runs[i:i + 4]
        for t in (base, noisy, other):
            check_consistent(t)
        assert base["noise_steps"] == 0
        assert 0 < noisy["noise_steps"] < 30
        extra = noisy["allocs"] - base["allocs"]
        assert noisy["noise_steps"] <= extra <= 2 * noisy["noise_steps"]  # 1 or 2 buffers per noisy step
        assert noisy["allocs_per_step"] == base["allocs_per_step"] == 4 * 3 + 1
        strip = lambda t: {k: v for k, v in t.items() if k != "pids"}  # noqa: E731
        assert strip(noisy) == strip(again)  # same seed, same run
        assert strip(noisy) != strip(other)  # another seed, other noise


def test_workers_multiply_counts(native, tmp_path):
    one = simtrain(native, tmp_path, "--framework", "tf", "--steps", "4", "--layers", "3", "--noise", "0.5",
                   "--seed", "3")
    three = simtrain(native, tmp_path, "--framework", "tf", "--steps", "4", "--layers", "3", "--noise", "0.5",
                     "--seed", "3", "--workers", "2")
    check_consistent(three)
    assert three["workers"] == 2
    assert len(set(three["pids"])) == 3
    for k in ("allocs", "frees", "bytes", "accesses", "launches", "noise_steps"):
        assert three[k] == 3 * one[k], k
    assert three["by_api"] == {k: 3 * v for k, v in one["by_api"].items()}
    assert three["allocs_per_step"] == one["allocs_per_step"]


def test_failure_in_a_worker_fails_the_run(native, tmp_path):
    # 1 MiB of device memory: the first large weight does not fit anywhere
    r = subprocess.run([sys.executable, "-m", "pyinterpose.examples.simtrain", "--framework", "torch",
                        "--workers", "1"], env=_env(native, SIMCUDA_MEMORY_BYTES=str(1 << 20)),
                       capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert r.returncode != 0
    assert "cudaMalloc failed with error 2" in r.stderr


@pytest.mark.parametrize("args", [["--steps", "0"], ["--noise", "1.5"], ["--workers", "-1"], ["--layers", "0"]])
def test_bad_arguments(native, args):
    r = subprocess.run([sys.executable, "-m", "pyinterpose.examples.simtrain", *args], env=_env(native),
                       capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert r.returncode != 0
    assert r.stderr.strip().startswith("simtrain: error:") and len(r.stderr.strip().splitlines()) == 1


def test_call_paths_seen_by_a_dlsym_interposer(native, tmp_path):
    """A dlsym-overriding preload (tests/c/simcuda_spy.c) sees which path each
    framework takes: jax never asks for cuGetProcAddress_v2; tf asks once and
    resolves its 23 driver functions through it; torch reaches the driver only
    through the runtime (default + per-thread tables).  Also checks that
    LD_LIBRARY_PATH pointing at the simcuda folder works."""
    spy = str(tmp_path / "spy.so")
    subprocess.run(["cc", "-O1", "-shared", "-fPIC", "-D_GNU_SOURCE", "-I" + os.path.join(ROOT, "native", "include"),
                    "-o", spy, os.path.join(ROOT, "tests", "c", "simcuda_spy.c"), "-ldl"],
                   check=True, capture_output=True)
    seen = {}
    for fw in ("jax", "tf", "torch"):
        r = subprocess.run([sys.executable, "-m", "pyinterpose.examples.simtrain", "--framework", fw, "--steps", "2"],
                           env=_env(native, LD_PRELOAD=spy, LD_LIBRARY_PATH=os.path.join(native, "simcuda")),
                           capture_output=True, text=True, timeout=120, cwd=ROOT)
        assert r.returncode == 0, r.stderr
        m = re.search(r"spy: dlsym_getproc=(\d+) lookups=(\d+) lookups_ptsz=(\d+) cuMemAlloc=(\d+)", r.stderr)
        assert m, r.stderr
        seen[fw] = tuple(map(int, m.groups()))
    assert seen["jax"] == (0, 0, 0, 0)
    assert seen["tf"][:3] == (1, 23, 0)
    dl, lookups, ptsz, n_alloc = seen["torch"]
    assert dl == 1 and ptsz >= 40 and lookups >= 2 * ptsz
    assert n_alloc == 3 * 6 + 2 * (4 * 6 + 1)  # every cudaMalloc reached the driver's cuMemAlloc
