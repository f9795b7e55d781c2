#!/usr/bin/env python3
"""Cost of simcuda's device clock per kernel launch (no shim).  Prints JSON.

    python scripts/bench_simcuda_clock.py [--launches N]

Modes, each the best of 5 rounds of N cuLaunchKernel calls through the PLT (scripts/bench_simcuda_clock.c):
  plain      nothing takes device time, no log, no CUPTI (the fast path every existing test takes)
  timed      SIMCUDA_KERNEL_NS=1: every launch is computed on the device clock (lock, clock read, queue)
  logged     plain + SIMCUDA_DEVICE_LOG (one write per op)
  cupti      the simulated libcupti collecting kernel, external-correlation and driver records, an external
             id pushed/popped around each launch (the shim's pattern), durations 0
This is simcuda's own cost (a test double's), which sits in both sides of any shim measurement on simcuda;
no target.  CLOCK_MONOTONIC costs about 85 ns per read on the 2-core development VM.
Run from a fresh clone after `pip install -e .` (the libraries in pyinterpose/_native/simcuda).
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SIMCUDA = os.path.join(ROOT, "pyinterpose", "_native", "simcuda")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--launches", type=int, default=200000)
    args = p.parse_args(argv)
    if not os.path.exists(os.path.join(SIMCUDA, "libcupti.so.13")):
        print("bench_simcuda_clock: error: simcuda is not built (pip install -e .)", file=sys.stderr)
        return 1
    cc = shutil.which("cc") or shutil.which("gcc")
    if not cc:
        print("bench_simcuda_clock: error: needs a C compiler", file=sys.stderr)
        return 1
    with tempfile.TemporaryDirectory() as tmp:
        exe = os.path.join(tmp, "bench")
        subprocess.run([cc, "-O2", "-D_GNU_SOURCE", "-I" + os.path.join(ROOT, "native", "include"),
                        "-I" + os.path.join(ROOT, "native", "simcuda"), "-o", exe,
                        os.path.join(ROOT, "scripts", "bench_simcuda_clock.c"), "-L" + SIMCUDA, "-l:libcuda.so.1",
                        "-ldl"], check=True)
        base = {k: v for k, v in os.environ.items() if not k.startswith(("SIMCUDA_", "SIMCUPTI_")) and k != "LD_PRELOAD"}
        base["LD_LIBRARY_PATH"] = SIMCUDA
        modes = {"plain": ({}, []), "timed": ({"SIMCUDA_KERNEL_NS": "1"}, []),
                 "logged": ({"SIMCUDA_DEVICE_LOG": os.path.join(tmp, "dev.log")}, []), "cupti": ({}, ["cupti"])}
        out = {"launches": args.launches, "ns_per_launch": {}}
        for name, (env, extra) in modes.items():
            r = subprocess.run([exe, str(args.launches), *extra], env={**base, **env}, capture_output=True, text=True)
            if r.returncode:
                print(f"bench_simcuda_clock: error: mode {name} exited with {r.returncode}", file=sys.stderr)
                return 1
            out["ns_per_launch"][name] = float(r.stdout.strip())
    print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
