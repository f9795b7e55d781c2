#!/usr/bin/env python3
"""Overhead of capture on simcuda: ns the shim adds per intercepted alloc/free
event and per kernel launch with four pointer arguments (scanned against a live
map of 68 blocks), shim vs no shim in the same process.  Prints JSON.

    python scripts/bench_capture.py [--rounds N] [--no-access]

Targets (issue: capture): <= 150 ns per alloc or free event, <= 300 ns per launch
with scanning.  Also reports the same program run without any shim (a second
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


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=100)
    ap.add_argument("--no-access", action="store_true")
    args = ap.parse_args()
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
