"""Managed memory beyond the device's capacity (issue 31): simcuda bounds resident device bytes by
SIMCUDA_MEMORY_BYTES as UVM does (evictions of other managed memory, least recently used first; ordinary
memory never evicted), and `run --apply` with a swap plan stays exact and says what happened on a device
too small for it.

Ground truth the code under test does not produce: the capacity each test sets, sizes and orders worked
out by hand below, the replayer's pattern check (SIMCUDA_CHECK=1: every kernel verifies, in every block
it touches, what the kernel before wrote there), and the replay of the same trace without the plan on
the same device (how many of the program's allocations fail there)."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

import pyinterpose
from conftest import ROOT, SIMCUDA_USE_KERNEL, run_cli

SAMPLE = os.path.join(ROOT, "samples", "torch-cnn-blocks.pit")
ENGINES = {"SIMCUDA_H2D_GBPS": "55", "SIMCUDA_D2H_GBPS": "55", "SIMCUDA_COPY_LATENCY_NS": "10000"}
SIMLIB = os.path.join(os.path.dirname(pyinterpose.__file__), "_native", "simcuda")
MiB = 1 << 20

EVICT_CODE = "import ctypes, json\n" + SIMCUDA_USE_KERNEL + r"""
MiB = 1 << 20
def launch(ptr):
    arg = ctypes.c_uint64(ptr)
    params = (ctypes.c_void_p * 1)(ctypes.cast(ctypes.byref(arg), ctypes.c_void_p))
    assert cu.cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, None, params, None) == 0
    assert cu.cuCtxSynchronize() == 0
def alloc(n):
    p = ctypes.c_uint64()
    r = cu.cuMemAlloc_v2(ctypes.byref(p), ctypes.c_size_t(n))
    assert r == 0, r                 # an ordinary allocation that fits beside the others never fails
    return p.value
def managed(n):
    p = ctypes.c_uint64()
    assert cu.cuMemAllocManaged(ctypes.byref(p), ctypes.c_size_t(n), 1) == 0
    return p.value
def prefetch(p):
    assert cu.cuMemPrefetchAsync_v2(ctypes.c_uint64(p), ctypes.c_size_t(64 * MiB), Loc(1, 0), 0, None) == 0
    assert cu.cuCtxSynchronize() == 0
def free():
    fr, tot = ctypes.c_size_t(), ctypes.c_size_t()
    assert cu.cuMemGetInfo_v2(ctypes.byref(fr), ctypes.byref(tot)) == 0
    return fr.value
out = {}
alloc(64 * MiB)
a, b, c = managed(64 * MiB), managed(64 * MiB), managed(64 * MiB)
ctypes.memset(a, 0xA5, 64 * MiB); ctypes.memset(b, 0xB5, 64 * MiB); ctypes.memset(c, 0xC5, 64 * MiB)
prefetch(a); prefetch(b)
launch(a)                       # a used after b arrived
out["free_ab"] = free()
prefetch(c)                     # 64 + 3 x 64 MiB: exactly the device
out["free_abc"] = free()
alloc(36 * MiB)
out["free_alloc"] = free()
launch(a)
launch(b)
prefetch(c)
out["free_c"] = free()
alloc(100 * MiB)
out["free_full"] = free()
prefetch(a)
launch(a)
out["data"] = [ctypes.string_at(p, 64 * MiB) == bytes([v]) * (64 * MiB) for p, v in ((a, 0xA5), (b, 0xB5), (c, 0xC5))]
print(json.dumps(out))
"""


def test_simcuda_evicts_least_recently_used_managed_memory_and_never_ordinary_memory(tmp_path):
    """A 256 MiB device, 64 MiB of ordinary memory and three managed allocations a, b, c of 64 MiB, worked
    out by hand (the device's copies timed, so every eviction is an op on the device clock):
    prefetch a, b; a kernel uses a -> b is the least recently used.  Prefetch c: 64 + 192 = 256, it fits
    (no eviction).  An ordinary 36 MiB: 292 > 256 -> b evicted (1), not a.  A kernel on a: resident, no
    fault.  A kernel on b: a fault, 64 MiB needed, a (used last by a kernel) and c (arrived before that
    kernel): c evicted (2).  Prefetch c: 36 MiB needed, a used before b -> a evicted (3), the prefetch
    starting when that eviction has ended.  An ordinary 100 MiB: 200 MiB ordinary + b + c = 328 -> both
    evicted (4, 5).
    Prefetch a: 264 > 256 and nothing left to evict -> no room, it stays on the host (1); the kernel on a
    faults, served from the host (fault 2, no room 2).  cuMemGetInfo's free memory counts resident managed
    bytes as used; the data is the host's writes all along."""
    stats = tmp_path / "evict.stats"
    env = dict(os.environ, SIMCUDA_MEMORY_BYTES=str(256 * MiB), SIMCUDA_H2D_GBPS="10", SIMCUDA_D2H_GBPS="10",
               SIMCUDA_COPY_LATENCY_NS="10000", SIMCUDA_STATS=str(stats), LD_LIBRARY_PATH=SIMLIB)
    cp = subprocess.run([sys.executable, "-c", EVICT_CODE], env=env, capture_output=True, text=True, timeout=120)
    assert cp.returncode == 0, cp.stderr
    out = json.loads(cp.stdout.splitlines()[-1])
    st = json.loads(stats.read_text().splitlines()[-1])
    assert out["free_ab"] == (256 - 64 - 128) * MiB
    assert out["free_abc"] == 0
    assert out["free_alloc"] == (256 - 100 - 128) * MiB        # a and c resident, b evicted
    assert out["free_c"] == (256 - 100 - 128) * MiB            # b and c resident, a evicted
    assert out["free_full"] == (256 - 200) * MiB                # no managed byte left on the device
    assert st["evictions"] == 5 and st["evicted_bytes"] == 5 * 64 * MiB
    assert st["faults"] == 2 and st["no_room"] == 2
    assert st["resident_peak_bytes"][0] <= 256 * MiB
    assert out["data"] == [True, True, True]


def _replay(tmp_path, name, cap, plan=None):
    stats = tmp_path / f"{name}.stats"
    env = dict(ENGINES, SIMCUDA_STATS=str(stats), SIMCUDA_CHECK="1", SIMCUDA_MEMORY_BYTES=str(cap))
    opts = ["--apply", plan] if plan else []
    cp = run_cli("run", "-f", "--simulated-gpu", "-o", str(tmp_path / f"{name}.pit"), *opts, "--",
                 sys.executable, "-m", "pyinterpose.examples.replay", SAMPLE, "--speed", "0",
                 env=env, timeout=600)
    assert cp.returncode == 0, cp.stderr
    summary = next(json.loads(x) for x in cp.stdout.splitlines() if x.startswith("{"))
    st = json.loads(stats.read_text().splitlines()[-1])
    return cp, summary, st


@pytest.fixture(scope="module")
def swap_plan(tmp_path_factory):
    plan = str(tmp_path_factory.mktemp("tightplan") / "plan.json")
    cp = run_cli("plan", SAMPLE, "--swap", "--bandwidth", "55", "-o", plan, "--json")
    assert cp.returncode == 0, cp.stderr
    return plan


@pytest.mark.slow
def test_a_swap_plan_runs_a_program_exactly_on_a_device_too_small_for_it_alone(tmp_path, swap_plan):
    """720 MB: the replay without the plan fails allocations there (its peak is 840 MB); with the plan
    (predicted 719 MB) every allocation succeeds, the data is exact, and the resident bytes never exceed
    the device."""
    cap = 720_000_000
    _, s0, st0 = _replay(tmp_path, "none", cap)
    assert s0["failed_calls"] > 0                                  # too small for the program alone
    cp, s1, st1 = _replay(tmp_path, "swap", cap, plan=swap_plan)
    assert s1["failed_calls"] == 0
    assert s1["check_errors"] == 0 and s1["checked_words"] > 100_000
    assert st1["resident_peak_bytes"][0] <= cap
    # the engine: every block that left came back by a prefetch (a swap-in held back for want of room was
    # sent when a launch named it), and simcuda ran each of those moves
    line = next(x for x in cp.stderr.splitlines() if "swaps: " in x)
    out, back = (int(line.split("swaps: ")[1].split(" out, ")[0]), int(line.split(" out, ")[1].split(" back")[0]))
    assert out > 100 and back == out
    populated = int(line.split(" populated on the device")[0].rsplit("(", 1)[1])   # before their first kernel
    assert st1["prefetches"] == out + back + populated


@pytest.mark.slow
def test_a_swap_plan_on_a_300_mb_device_stays_within_it_and_says_what_happened(tmp_path, swap_plan):
    """The case of docs/gpu-validation.md (2026-11-27): managed buffers made while memory was free come
    back later whatever is free then (before this, their resident bytes reached 400 MB on this device).
    Now: resident bytes within the device, other managed memory evicted to make room, swap-ins without
    room left on the host (run's status line and the trace say so), the program's data exact."""
    cap = 300_000_000
    cp, s, st = _replay(tmp_path, "swap300", cap, plan=swap_plan)
    assert st["resident_peak_bytes"][0] <= cap
    assert st["evictions"] > 0 and st["evicted_bytes"] >= st["evictions"] * MiB   # swapped blocks are >= 1 MiB
    assert s["check_errors"] == 0 and s["checked_words"] > 50_000
    line = next(x for x in cp.stderr.splitlines() if "swaps: " in x)
    assert "a swap-in found no room on the device" in line
    notes = pyinterpose.load(str(tmp_path / "swap300.pit")).meta["capture_notes"]
    assert any("no room for a swapped block coming back" in n["note"] for n in notes), notes
