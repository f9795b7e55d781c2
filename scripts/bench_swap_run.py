"""Swapping for real, measured on simcuda (issue 31): plan --swap, replayed with run --apply.

    python scripts/bench_swap_run.py [--trace T ...] [--speed 0.25] [--bandwidth 55] [--budget B ...] > out.json

``--budget`` per trace, in order (the last one for the rest; default 700MB for ResNet-18, 1500MB for the
transformer: a budget mode schedule needs a budget the trace can reach).

For each trace (default: samples/torch-cnn-blocks.pit and, when present,
../shared/data/gpu-traces/torch-transformer-blocks.pit): three plans (the pool plan alone, ``--swap`` with no
overhead, ``--swap --budget B``), then ``python -m pyinterpose.examples.replay TRACE`` on simcuda four times
under ``pyinterpose run --simulated-gpu``: without a plan and with each plan, at ``--speed`` (the recorded
pace dilated: a loaded host keeps it), with simcuda's copy engines at the plan's bandwidth
(SIMCUDA_H2D_GBPS/SIMCUDA_D2H_GBPS) and latency (SIMCUDA_COPY_LATENCY_NS); then once more with the swap
plan and SIMCUDA_CHECK=1 at full speed (the replay's kernels check the pattern in every block they touch).
Prints one JSON object: per trace and run, simcuda's high-water mark of resident device bytes
(SIMCUDA_STATS ``resident_peak_bytes``), the stall on the device clock (SIMCUDA_STATS ``stall_ns``: how
long the program's ops were held by stream waits — the swap-ins — and page faults beyond when their stream
and the host let them start; times ``--speed``, back on the recorded clock), the replay's lateness at the
end (how much later the device ended than the recording: host-paced, so it carries the host's jitter),
the shim's swap counts, and the plans' predictions (``predicted_stall_ns_run`` is the same quantity as
``stall_ns``).  Also the load average before and after.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TRACES = [os.path.join(ROOT, "samples", "torch-cnn-blocks.pit"),
          os.path.join(ROOT, "..", "..", "shared", "data", "gpu-traces", "torch-transformer-blocks.pit"),
          "/work/shared/data/gpu-traces/torch-transformer-blocks.pit"]


def _run(cmd, env=None):
    return subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)


def _replay(trace, plan, out_dir, speed, env_extra, tag):
    env = dict(os.environ, **env_extra)
    stats = os.path.join(out_dir, f"{tag}.stats")
    env["SIMCUDA_STATS"] = stats
    cmd = [sys.executable, "-m", "pyinterpose", "run", "-f", "--simulated-gpu", "-o", os.path.join(out_dir, f"{tag}.pit")]
    if plan:
        cmd += ["--apply", plan]
    cmd += ["--", sys.executable, "-m", "pyinterpose.examples.replay", trace, "--speed", str(speed)]
    r = _run(cmd, env)
    summary = next((json.loads(line) for line in r.stdout.splitlines() if line.startswith("{")), {})
    st = {}
    if os.path.exists(stats):
        with open(stats) as f:
            st = json.loads(f.read().splitlines()[-1])
    swaps = next((line.split("swaps: ", 1)[1] for line in r.stderr.splitlines() if "swaps: " in line), None)
    stall = (st.get("stall_ns") or [None])[0]
    return {"rc": r.returncode, "resident_peak_bytes": (st.get("resident_peak_bytes") or [None])[0],
            "faults": st.get("faults"), "prefetches": st.get("prefetches"),
            "stall_ns": None if stall is None else stall * (speed if speed > 0 else 1.0),
            "lateness_ns": summary.get("stall_ns"), "check_errors": summary.get("check_errors"),
            "checked_words": summary.get("checked_words"), "swaps": swaps}


def _plan(trace, out, extra):
    r = _run([sys.executable, "-m", "pyinterpose", "plan", trace, "-f", "-o", out, "--json", *extra])
    if r.returncode:
        raise SystemExit(f"plan {trace} {extra}: {r.stderr.strip()}")
    with open(out) as f:
        return json.load(f)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--trace", action="append")
    ap.add_argument("--speed", type=float, default=0.25)
    ap.add_argument("--bandwidth", type=float, default=55.0)
    ap.add_argument("--budget", action="append", help="per trace, in order (default 700MB, 1500MB)")
    args = ap.parse_args()
    traces = args.trace or [t for i, t in enumerate(TRACES) if os.path.exists(t)
                            and not any(os.path.samefile(t, u) for u in TRACES[:i] if os.path.exists(u))]
    out = {"speed": args.speed, "bandwidth_gbps": args.bandwidth, "loadavg_before": list(os.getloadavg()),
           "traces": {}}
    env = {"SIMCUDA_H2D_GBPS": str(args.bandwidth), "SIMCUDA_D2H_GBPS": str(args.bandwidth),
           "SIMCUDA_COPY_LATENCY_NS": "10000"}
    budgets = args.budget or ["700MB", "1500MB"]
    with tempfile.TemporaryDirectory() as d:
        for i, trace in enumerate(traces):
            budget = budgets[min(i, len(budgets) - 1)]
            name = os.path.basename(trace)
            bw = ["--bandwidth", str(args.bandwidth)]
            plans = {"pool": _plan(trace, os.path.join(d, "pool.json"), []),
                     "swap": _plan(trace, os.path.join(d, "swap.json"), ["--swap", *bw]),
                     "budget": _plan(trace, os.path.join(d, "budget.json"), ["--swap", *bw, "--budget", budget])}
            res = {"none": _replay(trace, None, d, args.speed, env, "none")}
            for k in plans:
                res[k] = _replay(trace, os.path.join(d, f"{k}.json"), d, args.speed, env, k)
            res["swap_checked"] = _replay(trace, os.path.join(d, "swap.json"), d, 0, dict(env, SIMCUDA_CHECK="1"),
                                          "checked")
            t = {"runs": res, "budget_bytes_asked": budget}
            base = res["none"]["resident_peak_bytes"]
            for k in ("swap", "budget"):
                sw = plans[k]["swap"]
                got = res[k]["resident_peak_bytes"]
                t[k] = {"predicted_peak_bytes": sw["predicted_peak_bytes"], "measured_peak_bytes": got,
                        "below_no_plan": 1 - got / base if got and base else None,
                        "vs_prediction": got / sw["predicted_peak_bytes"] - 1 if got else None,
                        "predicted_stall_ns": sw["predicted_stall_ns_run"],
                        "window_stall_ns": sw["predicted_stall_ns"],
                        "measured_stall_ns": res[k]["stall_ns"],
                        "stall_vs_prediction": (res[k]["stall_ns"] / sw["predicted_stall_ns_run"] - 1)
                        if res[k]["stall_ns"] is not None and sw["predicted_stall_ns_run"] else None,
                        "lateness_vs_pool_ns": (res[k]["lateness_ns"] - res["pool"]["lateness_ns"])
                        if res[k]["lateness_ns"] is not None and res["pool"]["lateness_ns"] is not None else None,
                        "swaps_per_iteration": len(sw["swaps"]), "predicted_unforeseen": sw["predicted_unforeseen"],
                        "predicted_late": sw["predicted_late_swap_ins"]}
            pool = res["pool"]["resident_peak_bytes"]
            t["pool"] = {"arena_bytes": plans["pool"]["capacity"], "measured_peak_bytes": pool,
                         "vs_no_plan": pool / base - 1 if pool and base else None}
            out["traces"][name] = t
    out["loadavg_after"] = list(os.getloadavg())
    json.dump(out, sys.stdout, indent=1)
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
