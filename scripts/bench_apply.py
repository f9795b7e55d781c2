#!/usr/bin/env python
"""Benchmark ``pyinterpose run --apply`` on simcuda; prints one JSON object.

For each workload (simtrain's three call paths, simtrain with noise, and the demo's workload): a
profiling run, ``pyinterpose plan`` (exact planner), then the program without and with the plan, each
with SIMCUDA_STATS (simcuda's own high-water mark of device bytes) and SIMCUDA_CHECK=1 (simtrain checks
every block's data): requests served, fallen through by reason, the arena, peak bytes without and with
the plan, LOAD, wall time.  Then the time of one allocation and one free measured inside a small C loop
(scripts/bench_apply_alloc.c; the median iteration, best of --repeat runs): bare on simcuda, recorded by
``pyinterpose run``, and served from a plan.

Usage (from a fresh clone, after ``pip install .``):
    python scripts/bench_apply.py [--steps 20] [--layers 6] [--iters 300] [--k 64] [--repeat 3]
        [--workloads simtrain-torch,simtrain-jax,simtrain-tf,simtrain-torch-noise,demo]
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
PY = sys.executable


def cli(*args, env=None, check=True):
    e = dict(os.environ)
    e.update(env or {})
    cp = subprocess.run([PY, "-m", "pyinterpose", *args], capture_output=True, text=True, env=e)
    if check and cp.returncode != 0:
        raise SystemExit(f"pyinterpose {' '.join(args[:3])} failed ({cp.returncode}): {cp.stderr.strip()[-400:]}")
    return cp


def run(d, name, cmd, plan=None):
    trace, stats = os.path.join(d, name + ".pit"), os.path.join(d, name + ".stats")
    env = {"SIMCUDA_CHECK": "1", "SIMCUDA_STATS": stats}
    t0 = time.perf_counter()
    cli("run", "-q", "-f", "--simulated-gpu", "-o", trace, *(["--apply", plan] if plan else []), "--", *cmd, env=env)
    wall = time.perf_counter() - t0
    with open(stats) as f:
        st = json.loads(f.readline())
    return trace, st, wall


def workload(d, name, cmd):
    prof, _, _ = run(d, name + "-profile", cmd)
    plan = os.path.join(d, name + ".plan.json")
    t0 = time.perf_counter()
    info = json.loads(cli("plan", prof, "-o", plan, "-f", "--json").stdout)
    plan_s = time.perf_counter() - t0
    _, st0, wall0 = run(d, name + "-plain", cmd)
    trace, st1, wall1 = run(d, name + "-apply", cmd, plan)
    s = json.loads(cli("summary", trace, "--json").stdout)["applied"]["processes"][0]
    return {
        "command": " ".join(cmd[2:]), "load_bytes": info["load_bytes"], "arena_bytes": info["capacity"],
        "plan_command_s": round(plan_s, 3), "requests": s["requests"], "served": s["served"],
        "fell_through": s["fell_through"], "by_reason": {k: v for k, v in s["by_reason"].items() if v},
        "peak_bytes_without_plan": st0["peak_bytes"][0], "peak_bytes_with_plan": st1["peak_bytes"][0],
        "peak_from_trace": s["real_peak_bytes"], "stream_waits": st1["stream_waits"],
        "real_device_allocs_without_plan": st0["allocs"], "real_device_allocs_with_plan": st1["allocs"],
        "wall_s_without_plan": round(wall0, 3), "wall_s_with_plan": round(wall1, 3),
    }


def alloc_time(d, iters, k, repeat, async_):
    from pyinterpose.capture.run import NATIVE

    exe = os.path.join(d, "bench_apply_alloc")
    if not os.path.exists(exe):
        sim = os.path.join(NATIVE, "simcuda")
        subprocess.run([shutil.which("cc") or "gcc", "-O2", "-I" + os.path.join(ROOT, "native", "include"), "-o", exe,
                        os.path.join(ROOT, "scripts", "bench_apply_alloc.c"), "-L" + sim, "-l:libcudart.so.13",
                        "-Wl,-rpath," + sim], check=True)
    env = {"ASYNC": "1" if async_ else "0"}
    cmd = [exe, str(iters), str(k)]
    tag = "async" if async_ else "sync"
    prof = os.path.join(d, f"alloc-{tag}.pit")
    cli("run", "-q", "-f", "--simulated-gpu", "-o", prof, "--", *cmd, env=env)
    plan = os.path.join(d, f"alloc-{tag}.plan.json")
    cli("plan", prof, "-o", plan, "-f", "--json")
    out = {}
    for mode in ("bare", "recorded", "applied"):
        best = None
        for _ in range(repeat):
            if mode == "bare":
                e = dict(os.environ, **env)
                e["LD_LIBRARY_PATH"] = os.path.join(NATIVE, "simcuda")   # what --simulated-gpu sets
                cp = subprocess.run(cmd, capture_output=True, text=True, env=e, check=True)
            else:
                cp = cli("run", "-q", "-f", "--simulated-gpu", "-o", os.path.join(d, f"a-{tag}-{mode}.pit"),
                         *(["--apply", plan] if mode == "applied" else []), "--", *cmd, env=env)
            r = json.loads(cp.stdout.strip().splitlines()[-1])
            if best is None or r["ns_per_alloc"] + r["ns_per_free"] < best["ns_per_alloc"] + best["ns_per_free"]:
                best = r
        out[mode] = best
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--layers", type=int, default=6)
    ap.add_argument("--iters", type=int, default=300)
    ap.add_argument("--k", type=int, default=64)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--workloads", default="simtrain-torch,simtrain-jax,simtrain-tf,simtrain-torch-noise,demo")
    a = ap.parse_args()
    d = tempfile.mkdtemp(prefix="bench-apply-")
    try:
        base = [PY, "-m", "pyinterpose.examples.simtrain", "--steps", str(a.steps), "--layers", str(a.layers)]
        works = {
            "simtrain-torch": base + ["--framework", "torch"],
            "simtrain-jax": base + ["--framework", "jax"],
            "simtrain-tf": base + ["--framework", "tf"],
            "simtrain-torch-noise": base + ["--framework", "torch", "--noise", "0.3", "--noise-kinds",
                                            "extra,missing,stream2", "--seed", "1"],
            "demo": [PY, "-m", "pyinterpose.examples.simtrain", "--framework", "torch"],   # pyinterpose demo's run
        }
        chosen = [w.strip() for w in a.workloads.split(",") if w.strip()]
        unknown = [w for w in chosen if w not in works]
        if unknown:
            raise SystemExit(f"bench_apply: unknown workload {unknown[0]!r} (choose from {', '.join(works)})")
        res = {"workloads": {n: workload(d, n, works[n]) for n in chosen},
               "alloc_time_ns": {"cudaMalloc": alloc_time(d, a.iters, a.k, a.repeat, False),
                                 "cudaMallocAsync": alloc_time(d, a.iters, a.k, a.repeat, True)},
               "machine": {"cpus": os.cpu_count()}}
        print(json.dumps(res, indent=1))
    finally:
        shutil.rmtree(d, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
