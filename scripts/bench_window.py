#!/usr/bin/env python3
"""Capture windows and the flight recorder on simcuda: cost per event against a full capture, and a long
run's trace size and ``run``'s memory.  Prints JSON.

1. ``per_event``: the same workload under ``pyinterpose run`` (full capture) and under
   ``--flight-recorder N`` and ``--capture-range cudaProfilerApi`` (a window over the middle third):
   the program's CPU time (user + sys, the shim's side: the same records are written in every mode) and
   ``run``'s CPU time less its fixed cost (``run_fixed_cpu_s``: a program that does nothing) (the drain:
   full capture writes every record; the recorder keeps the live map and the last N steps), each per
   event the shim wrote; best of --repeats.  CPU times are /proc's (10 ms ticks).  Workloads: simtrain torch (the
   C loop: launches and accesses dominate, no step markers: pseudo-steps) and simleak (Python, markers).
2. ``long_run``: simleak with --long-steps steps (default 100,000) under --flight-recorder 20: the trace's
   size, ``run``'s peak resident memory (VmHWM, sampled from /proc while it runs) and wall time.

    python scripts/bench_window.py [--long-steps 100000] [--steps 3000] [--repeats 3] [--skip-long]

Targets (issue 29): the long run's trace under 4 MB and ``run`` under 300 MB RSS; the recorder's cost per
event of the same order as a full capture's.  Scratch files go to a temporary directory removed at the end.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
TICK = os.sysconf("SC_CLK_TCK")


def _cpu_s(pid: int) -> float | None:
    try:
        with open(f"/proc/{pid}/stat") as f:
            rest = f.read().rsplit(")", 1)[1].split()
        return (int(rest[11]) + int(rest[12])) / TICK       # utime + stime (fields 14, 15)
    except (OSError, IndexError, ValueError):
        return None


def _hwm_kb(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


def _run(tmp: str, run_args: list[str], prog: list[str]) -> dict:
    """One `pyinterpose run`: its own CPU time and peak RSS (sampled until it exits), the program's CPU time
    (RUSAGE_CHILDREN of `run` is not ours to read: the program reports its own through a wrapper)."""
    out = os.path.join(tmp, "b.pit")
    cpu_file = os.path.join(tmp, "cpu.json")
    wrapper = ("import os,runpy,sys,json,atexit\n"
               "def _w():\n t=os.times(); json.dump(t.user+t.system, open(%r,'w'))\n"
               "atexit.register(_w)\n"
               "mod=sys.argv[2]; sys.argv=[mod]+sys.argv[3:]\n"
               "runpy.run_module(mod, run_name='__main__', alter_sys=True)\n") % cpu_file
    cmd = [sys.executable, "-m", "pyinterpose", "run", "-q", "-f", "-o", out, "--simulated-gpu", "--stacks", "python",
           *run_args, "--", sys.executable, "-c", wrapper, *prog]
    t0 = time.monotonic()
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    hwm, cpu = 0, 0.0
    while p.poll() is None:
        h = _hwm_kb(p.pid)
        c = _cpu_s(p.pid)
        if h:
            hwm = max(hwm, h)
        if c is not None:
            cpu = c
        time.sleep(0.05)
    wall = time.monotonic() - t0
    err = p.stderr.read()
    if p.returncode not in (0, 1):
        raise SystemExit(f"run failed ({p.returncode}): {err[-2000:]}")
    from pyinterpose.trace.reader import read_file

    raw = read_file(out)
    tr = raw.trailer or {}
    with open(cpu_file) as f:
        prog_cpu = json.load(f)
    return {"events": int(tr.get("events_written", 0)), "events_in_file": int(tr.get("events_in_file", 0)),
            "trace_bytes": os.path.getsize(out), "run_cpu_s": cpu, "program_cpu_s": prog_cpu, "wall_s": wall,
            "run_peak_rss_mb": hwm / 1024}


def per_event(tmp: str, steps: int, repeats: int) -> dict:
    third = steps // 3
    # run's fixed cost (start, imports, the trace's header and trailer) with a program that does nothing
    fixed = min((_run(tmp, [], ["-m", "pyinterpose.errors"]) for _ in range(repeats)), key=lambda r: r["run_cpu_s"])
    workloads = {
        "simtrain-torch": ["-m", "pyinterpose.examples.simtrain", "--framework", "torch", "--steps", str(steps // 5)],
        "simleak": ["-m", "pyinterpose.examples.simtrain", "--leak", "--steps", str(steps),
                    "--window", f"{third}:{2 * third}"],
    }
    modes = {"full": [], "flight-recorder-20": ["--flight-recorder", "20"],
             "cudaProfilerApi-window": ["--capture-range", "cudaProfilerApi"]}
    out = {}
    for wname, prog in workloads.items():
        res = {}
        for mname, margs in modes.items():
            if wname == "simtrain-torch" and mname == "cudaProfilerApi-window":
                continue      # the C loop opens no window
            best = None
            for _ in range(repeats):
                r = _run(tmp, margs, prog)
                if best is None or r["run_cpu_s"] + r["program_cpu_s"] < best["run_cpu_s"] + best["program_cpu_s"]:
                    best = r
            ev = max(best["events"], 1)
            best["run_ns_per_event"] = max(best["run_cpu_s"] - fixed["run_cpu_s"], 0.0) * 1e9 / ev
            best["program_ns_per_event"] = best["program_cpu_s"] * 1e9 / ev
            res[mname] = best
        full = res["full"]
        for mname, r in res.items():
            r["run_cost_vs_full"] = r["run_ns_per_event"] / max(full["run_ns_per_event"], 1e-9)
        out[wname] = res
    out["run_fixed_cpu_s"] = fixed["run_cpu_s"]
    return out


def long_run(tmp: str, steps: int) -> dict:
    r = _run(tmp, ["--flight-recorder", "20"], ["-m", "pyinterpose.examples.simtrain", "--leak", "--steps", str(steps)])
    r["steps"] = steps
    r["trace_mb"] = r["trace_bytes"] / 1e6
    r["targets"] = {"trace_under_4_mb": r["trace_bytes"] < 4e6, "run_under_300_mb_rss": r["run_peak_rss_mb"] < 300}
    return r


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=3000)
    ap.add_argument("--long-steps", type=int, default=100_000)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--skip-long", action="store_true")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-window-") as tmp:
        res = {"per_event": per_event(tmp, a.steps, a.repeats)}
        if not a.skip_long:
            res["long_run"] = long_run(tmp, a.long_steps)
    print(json.dumps(res, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
