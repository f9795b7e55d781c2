#!/usr/bin/env python3
"""Per-rank figures of a captured torchrun job against each rank's own PyTorch records (issue 23 item 6).

    pyinterpose run -o job.pit -- torchrun --nproc-per-node 2 scripts/gpu_workloads/torch_ranks.py --out-dir D
    python scripts/gpu_ranks_check.py job.pit D

For every rank: pyinterpose's peak of the framework allocator's blocks (blocks view: one cudaMallocAsync per
tensor) against the rank's torch.cuda.max_memory_allocated (the allocator rounds requests up to 512 bytes:
the two agree within 1 %), the pid, and the device UUID against torch's.  Prints one JSON object; exit 1 when
a check fails.  Written before a GPU was available to the project: not yet run on one (only
smoke-run on a simcuda capture of simtrain --ranks, where no framework allocator exists to compare with).
"""
import json
import os
import sys


def main() -> int:
    trace_path, truth_dir = sys.argv[1], sys.argv[2]
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    import pyinterpose
    from pyinterpose.analysis.owners import allocator_mask
    from pyinterpose.analysis.ranks import per_rank
    from pyinterpose.trace.model import peak_live_bytes_of

    tr = pyinterpose.load(trace_path)
    mask = allocator_mask(tr)
    rows, ok = [], True
    for r in per_rank(tr):
        with open(os.path.join(truth_dir, f"{r['rank']}.json")) as f:
            t = json.load(f)
        mine = peak_live_bytes_of(tr, mask & (tr.blocks["pid"].to_numpy() == r["pid"]))
        rel = abs(mine - t["max_memory_allocated"]) / max(t["max_memory_allocated"], 1)
        row = {"rank": r["rank"], "pid_ok": r["pid"] == t["pid"], "allocator_peak": mine,
               "max_memory_allocated": t["max_memory_allocated"], "rel_diff": rel,
               "uuid_ok": (not t["device_uuid"]) or r["device_uuid"] == t["device_uuid"],
               "peak_live_bytes": r["peak_live_bytes"], "iterations": r["iterations"]}
        row["pass"] = row["pid_ok"] and row["uuid_ok"] and rel <= 0.01
        ok &= row["pass"]
        rows.append(row)
    print(json.dumps({"ranks": rows, "pass": ok and len(rows) >= 2}, indent=1))
    return 0 if ok and len(rows) >= 2 else 1


if __name__ == "__main__":
    sys.exit(main())
