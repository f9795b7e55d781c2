#!/usr/bin/env python3
"""Overhead of capture on simcuda: ns the shim adds per intercepted alloc/free
event and per kernel launch with four pointer arguments (scanned against a live
map of 68 blocks), shim vs no shim in the same process.  Prints JSON.

    python scripts/bench_capture.py [--rounds N] [--no-access]
    python scripts/bench_capture.py --python-stacks [--depth 30]

Targets (issue: capture): <= 150 ns per alloc or free event, <= 300 ns per launch
with scanning; <= 2000 ns per allocation for a Python stack of depth 30
(--python-stacks).  Also reports the same program run without any shim (a second
process) as a sanity check that the real path is unaffected.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)  # run from a checkout without installing


# ---- Python stacks (--python-stacks): cost per allocation of recording the Python stack ----
PYSTACK_WORKLOAD = r"""
import ctypes, json, sys, time
rt = ctypes.CDLL("libcudart.so.13")
rt.cudaMalloc.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_size_t]
rt.cudaFree.argtypes = [ctypes.c_void_p]
N, DEPTH = int(sys.argv[1]), int(sys.argv[2])

def loop():
    p = ctypes.c_void_p()
    ref = ctypes.byref(p)
    best = []
    for r in range(7):
        t0 = time.perf_counter_ns()
        for i in range(N):
            rt.cudaMalloc(ref, 256)
            rt.cudaFree(p)
        best.append((time.perf_counter_ns() - t0) / N)
    return min(best)

def nest(d):
    return loop() if d <= 2 else nest(d - 1)   # module + nest frames + loop = DEPTH frames

print(json.dumps({"pair_ns": nest(DEPTH)}))
"""


def python_stacks(rounds: int = 5, n: int = 20000, depth: int = 30) -> dict:
    """ns added per allocation by ``--stacks python`` with a Python stack ``depth`` frames deep,
    against ``--stacks none`` (owner only) and against no shim at all.  Each figure is the
    median over ``rounds`` alternating runs of the best of 7 loops of ``n`` alloc+free pairs
    through ctypes (frees record no stack, so the difference is per allocation)."""
    import statistics

    from pyinterpose.capture.run import NATIVE
    from pyinterpose.trace import stacks as S

    sim = os.path.join(NATIVE, "simcuda")
    tmp = tempfile.mkdtemp()
    prog = os.path.join(tmp, "pystack_bench.py")
    with open(prog, "w") as f:
        f.write(PYSTACK_WORKLOAD)
    env = dict(os.environ, LD_LIBRARY_PATH=sim,
               PYTHONPATH=os.pathsep.join(p for p in (ROOT, os.environ.get("PYTHONPATH")) if p))
    res = {"python": [], "none": [], "no_shim": []}
    trace = os.path.join(tmp, "pystack.pit")
    for _ in range(rounds):
        for mode in ("python", "none"):
            cmd = [sys.executable, "-m", "pyinterpose", "run", "-q", "--simulated-gpu", "--stacks", mode,
                   "-o", trace, "--", sys.executable, prog, str(n), str(depth)]
            out = subprocess.run(cmd, capture_output=True, text=True, env=env, check=True).stdout
            res[mode].append(json.loads(out.strip().splitlines()[-1])["pair_ns"])
        out = subprocess.run([sys.executable, prog, str(n), str(depth)], capture_output=True, text=True,
                             env=env, check=True).stdout
        res["no_shim"].append(json.loads(out.strip().splitlines()[-1])["pair_ns"])
    med = {k: statistics.median(v) for k, v in res.items()}
    # the last --stacks none run overwrote the trace: record one python run to check the depth
    subprocess.run([sys.executable, "-m", "pyinterpose", "run", "-q", "--simulated-gpu", "--stacks", "python",
                    "-o", trace, "--", sys.executable, prog, "200", str(depth)], env=env, check=True,
                   capture_output=True)
    import pyinterpose

    tr = pyinterpose.load(trace)
    sid = int(tr.blocks["stack_id"].iloc[-1])
    added = med["python"] - med["none"]
    return {
        "benchmark": "python_stacks_simcuda",
        "stack_depth_recorded": len(S.frames_of(tr, sid)),
        "allocs_per_run": n * 7,
        "pair_ns": med,
        "python_stacks_added_ns_per_alloc": round(added, 1),
        "shim_with_python_stacks_added_ns_per_pair": round(med["python"] - med["no_shim"], 1),
        "target_ns_per_alloc": 2000,
        "within_target": added <= 2000,
        "lost_events": int(tr.processes["lost"].sum()),
        "rounds": rounds,
        "cpu_count": os.cpu_count(),
    }


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=100)
    ap.add_argument("--no-access", action="store_true")
    ap.add_argument("--python-stacks", action="store_true",
                    help="measure the cost of --stacks python (depth 30) instead")
    ap.add_argument("--depth", type=int, default=30, help="Python stack depth for --python-stacks")
    args = ap.parse_args()
    if args.python_stacks:
        print(json.dumps(python_stacks(depth=args.depth), indent=2))
        return 0
    from pyinterpose.capture.run import NATIVE

    sim = os.path.join(NATIVE, "simcuda")
    tmp = tempfile.mkdtemp()
    exe = os.path.join(tmp, "bench_capture")
    subprocess.run(["cc", "-O2", "-D_GNU_SOURCE", f"-I{ROOT}/native/include", f"-I{ROOT}/native/simcuda",
                    "-o", exe, os.path.join(ROOT, "scripts", "bench_capture.c"), f"-L{sim}", "-l:libcudart.so.13",
                    f"-Wl,-rpath,{sim}", "-ldl"], check=True)
    env = dict(os.environ, LD_LIBRARY_PATH=sim)
    trace = os.path.join(tmp, "bench.pit")
    cmd = [sys.executable, "-m", "pyinterpose", "run", "-q", "--simulated-gpu", "-o", trace]
    if args.no_access:
        cmd.append("--no-access")
    shim = subprocess.run(cmd + ["--", exe, str(args.rounds)], capture_output=True, text=True, env=env, check=True)
    bare = subprocess.run([exe, str(args.rounds)], capture_output=True, text=True, env=env, check=True)
    with_shim = json.loads(shim.stdout.strip().splitlines()[-1])
    without = json.loads(bare.stdout.strip().splitlines()[-1])
    import pyinterpose

    tr = pyinterpose.load(trace)
    out = {
        "benchmark": "capture_overhead_simcuda",
        "access_scanning": not args.no_access,
        "alloc_free_added_ns": with_shim["alloc_free_added_ns"],
        "launch_added_ns": with_shim["launch_added_ns"],
        "targets": {"alloc_free_added_ns": 150, "launch_added_ns": 300},
        "within_targets": with_shim["alloc_free_added_ns"] <= 150 and with_shim["launch_added_ns"] <= 300,
        "same_process": with_shim,
        "no_shim_process": without,
        "events_in_trace": tr.counts["events"],
        "lost_events": int(tr.processes["lost"].sum()),
        "cpu_count": os.cpu_count(),
    }
    print(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
