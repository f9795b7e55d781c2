#!/usr/bin/env python3
"""What the device clock (CUPTI through native/shim/cupti.c) adds per kernel launch, on simcuda and its
simulated libcupti.  Prints JSON.

1. ``launch_ns``: ns per hooked cudaLaunchKernel (4 pointer arguments scanned) inside one process
   (scripts/bench_capture.c, median of its rounds), under ``pyinterpose run --gpu-clock off`` and
   ``--gpu-clock auto``, the two runs alternating ``--repeats`` times; ``added_ns`` = auto - off (medians):
   everything the device clock costs the launching thread, the simulated CUPTI's own per-call work
   included.  ``shim_added_ns``: the shim's share alone — (hooked - real) with the clock minus (hooked -
   real) without, where "real" are the same launches through the unhooked function in the same process
   (they pay CUPTI's per-call cost too, but no push/pop and no flush).
2. ``cpu_ns_per_launch``: CPU time (user + sys, every thread: CUPTI's worker too) of a process making
   ``--launches`` launches (tests/c/gpuclock_workload.c ``many``), off vs auto, best of ``--repeats``;
   ``added_ns`` per launch.

    python scripts/bench_gpu_clock.py [--rounds 40] [--launches 200000] [--repeats 3]

Target (issue 21): at most 1000 ns added per launch on simcuda.  The simulated libcupti is not NVIDIA's:
the figure bounds what the shim's side costs (push/pop, record parsing, ring events), not real CUPTI's
instrumentation, which the GPU validation (scripts/gpu_validate.sh) measures as step time.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)  # run from a checkout without installing

TIMER = ("import json, resource, subprocess, sys\n"
         "rc = subprocess.run(sys.argv[2:], stdout=subprocess.DEVNULL).returncode\n"
         "ru = resource.getrusage(resource.RUSAGE_CHILDREN)\n"
         "json.dump({'rc': rc, 'cpu_s': ru.ru_utime + ru.ru_stime}, open(sys.argv[1], 'w'))\n")


def build(src: str, out: str, sim: str) -> str:
    subprocess.run(["cc", "-O2", "-D_GNU_SOURCE", f"-I{ROOT}/native/include", f"-I{ROOT}/native/simcuda", "-o", out,
                    src, f"-L{sim}", "-l:libcudart.so.13", f"-Wl,-rpath,{sim}", "-ldl", "-lpthread"], check=True)
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=40, help="bench_capture rounds (2000 launches each)")
    ap.add_argument("--launches", type=int, default=200000)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    from pyinterpose.capture.run import NATIVE
    import pyinterpose

    sim = os.path.join(NATIVE, "simcuda")
    tmp = tempfile.mkdtemp()
    bench = build(os.path.join(ROOT, "scripts", "bench_capture.c"), os.path.join(tmp, "bench_capture"), sim)
    many = build(os.path.join(ROOT, "tests", "c", "gpuclock_workload.c"), os.path.join(tmp, "gpuclock_workload"), sim)
    env = dict(os.environ, LD_LIBRARY_PATH=sim, PYTHONPATH=ROOT)
    trace = os.path.join(tmp, "t.pit")

    def run(mode: str, cmd: list[str]) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "pyinterpose", "run", "-q", "-f", "--simulated-gpu",
                               "--stacks", "none", "--gpu-clock", mode, "-o", trace, "--", *cmd],
                              capture_output=True, text=True, env=env, check=True)

    launch = {"off": [], "auto": []}
    real = {"off": [], "auto": []}   # the same launches through the real function (not hooked), same process
    clock = {}
    for _ in range(args.repeats):
        for mode in ("off", "auto"):
            cp = run(mode, [bench, str(args.rounds)])
            res = json.loads(cp.stdout.strip().splitlines()[-1])
            launch[mode].append(res["launch_hooked_ns"])
            real[mode].append(res["launch_real_ns"])
            tr = pyinterpose.load(trace)
            clock[mode] = {"clock": str(tr.processes["clock"].iloc[0]), "launches": len(tr.launches),
                           "gpu_activity": len(tr.gpu_activity), "gpu_dropped": int(tr.processes["gpu_dropped"].sum()),
                           "launches_with_device_time": int((tr.launches["dev_start"] >= 0).sum())}
    med = {m: statistics.median(v) for m, v in launch.items()}
    # the shim's own share: hooked minus real launch in the same process (both pay CUPTI's per-call
    # cost; only the hooked one pushes, pops and flushes), auto minus off, run by run
    shim_added = statistics.median([(launch["auto"][i] - real["auto"][i]) - (launch["off"][i] - real["off"][i])
                                    for i in range(args.repeats)])

    timing = os.path.join(tmp, "timing.json")
    cpu = {"off": None, "auto": None}
    for _ in range(args.repeats):
        for mode in ("off", "auto"):
            subprocess.run([sys.executable, "-m", "pyinterpose", "run", "-q", "-f", "--simulated-gpu", "--stacks",
                            "none", "--gpu-clock", mode, "-o", trace, "--", sys.executable, "-c", TIMER, timing,
                            many, "many", str(args.launches)], env=env, check=True, capture_output=True)
            with open(timing) as f:
                t = json.load(f)
            if t["rc"] != 0:
                raise SystemExit(f"gpuclock_workload failed ({mode})")
            cpu[mode] = t["cpu_s"] if cpu[mode] is None else min(cpu[mode], t["cpu_s"])
    added_cpu = (cpu["auto"] - cpu["off"]) * 1e9 / args.launches
    out = {
        "benchmark": "device_clock_cost_simcuda",
        "launch_ns": {"off": round(med["off"], 1), "auto": round(med["auto"], 1),
                      "added_ns": round(med["auto"] - med["off"], 1), "runs": launch, "real_runs": real,
                      "shim_added_ns": round(shim_added, 1)},
        "cpu_ns_per_launch": {"off": round(cpu["off"] * 1e9 / args.launches, 1),
                              "auto": round(cpu["auto"] * 1e9 / args.launches, 1), "added_ns": round(added_cpu, 1),
                              "launches": args.launches},
        "trace": clock,
        "target_added_ns": 1000,
        "within_target": {"launch_added_ns": med["auto"] - med["off"] <= 1000,
                          "shim_added_ns": shim_added <= 1000, "cpu_added_ns": added_cpu <= 1000},
        "cpu_count": os.cpu_count(),
    }
    print(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
