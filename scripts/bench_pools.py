#!/usr/bin/env python
"""Benchmark the pool strategies; prints one JSON object.

* seconds per strategy on synthetic training traces of ~10k and ~100k blocks
  (allocators replay the whole request stream; planners plan the whole run as one
  window, so they see every block);
* the exact planner on MiniMalloc's 11 challenging instances at capacity 2^20;
* the heuristics on a uniform-random problem of 100k buffers (~5k live at once:
  no training-loop structure for the planners to lean on);
* the exact planner on generated hard instances (guillotine cuts, LOAD == capacity,
  a packing at capacity exists): perfect tilings (``holes`` 0: every cross section
  exactly full, a packing puzzle) and tilings with 15 % of the pieces deleted
  (``holes`` 0.15: fill ~0.85, like MiniMalloc's challenging set).

Usage: python scripts/bench_pools.py [--sizes 10000,100000] [--random 100000]
       [--time-limit 30] [--hard 150,250,350] [--holes 0,0.15] [--seeds 2]
       [--minimalloc DIR | --skip-minimalloc]

MiniMalloc's instances (``A.1048576.csv`` ... ``K.1048576.csv``, from
github.com/google/minimalloc's challenging set) are not in the repository: they are
looked for in ``--minimalloc DIR``, else ``data/dsa-minimalloc`` in the checkout, else
``../shared/data/dsa-minimalloc`` beside it; when none is found the JSON's
``minimalloc`` says so (and stderr), the rest still runs.  Smallest run (seconds):
``python scripts/bench_pools.py --sizes 300 --random 0 --hard 20 --holes 0 --seeds 1 --time-limit 1 --skip-minimalloc``.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from pyinterpose.analysis.pools import ALLOCATORS, plan, requests, simulate, steady_problem  # noqa: E402
from pyinterpose.analysis.pools import exact  # noqa: E402
from pyinterpose.analysis.pools.generate import hard_instance, training_trace  # noqa: E402
from pyinterpose.analysis.pools.problem import arrays, load, read_minimalloc_csv, validate_plan  # noqa: E402

# where MiniMalloc's instances are looked for when --minimalloc is not given (relative to the checkout)
DATA_DIRS = (os.path.join(ROOT, "data", "dsa-minimalloc"),
             os.path.join(os.path.dirname(ROOT), "shared", "data", "dsa-minimalloc"))
MINIMALLOC_NAMES = "ABCDEFGHIJK"


def minimalloc_dir(given: str | None) -> tuple[str | None, list[str]]:
    """The directory holding MiniMalloc's instances and the places looked in."""
    tried = [given] if given else list(DATA_DIRS)
    for d in tried:
        if any(os.path.exists(os.path.join(d, f"{n}.1048576.csv")) for n in MINIMALLOC_NAMES):
            return d, tried
    return None, tried
HEURISTICS = ("smartpool-bf", "smartpool-ff", "greedy-size", "xla-heap")


def bench_sizes(n_blocks: int) -> dict:
    layers = max(1, n_blocks // 30)
    tr, _ = training_trace(iterations=10, layers=layers, seed=1)
    req = requests(tr)
    seqs = req["seq"].to_numpy()
    prob = steady_problem(tr, window=(int(seqs.min()), int(seqs.max()) + 1))
    out = {"blocks": int(len(tr.blocks)), "requests": int(len(req)), "problem_rows": int(len(prob)),
           "load": load(*arrays(prob)), "strategies": {}}
    for a in ALLOCATORS:
        r = simulate(req, a)
        out["strategies"][a] = {"seconds": round(r["seconds"], 4), "peak_bytes": r["peak_reserved_bytes"]}
    for s in HEURISTICS:
        p = plan(prob, s)
        t0 = time.perf_counter()
        validate_plan(*arrays(prob), p.offsets)
        out["strategies"][s] = {"seconds": round(p.seconds, 4), "peak_bytes": p.peak_bytes,
                                "validate_seconds": round(time.perf_counter() - t0, 4)}
    return out


def bench_random(n: int, seed: int = 1) -> dict:
    import numpy as np
    import pandas as pd

    rng = np.random.default_rng(seed)
    lo = rng.integers(0, 10 ** 6, n)
    up = lo + rng.exponential(50000, n).astype(np.int64) + 1
    sz = (rng.lognormal(10, 2, n).astype(np.int64) // 512 + 1) * 512
    prob = pd.DataFrame({"id": range(n), "lower": lo, "upper": up, "size": sz})
    out = {"buffers": n, "load": load(lo, up, sz), "strategies": {}}
    for s in HEURISTICS:
        p = plan(prob, s)
        out["strategies"][s] = {"seconds": round(p.seconds, 4), "peak_bytes": p.peak_bytes,
                                "ratio_to_load": round(p.peak_bytes / out["load"], 4)}
    return out


def bench_exact(df, capacity: int, time_limit: float) -> dict:
    lo, up, sz = arrays(df)
    t0 = time.perf_counter()
    r = exact.solve(lo, up, sz, capacity, time_limit)
    res = {"buffers": int(len(df)), "load": load(lo, up, sz), "status": r.status,
           "seconds": round(time.perf_counter() - t0, 3), "nodes": r.nodes}
    greedy = plan(df, "xla-heap").peak_bytes
    res["xla_heap_ratio_to_capacity"] = round(greedy / capacity, 4)
    if r.status == "found":
        res["height"] = validate_plan(lo, up, sz, r.offsets, capacity)
    return res


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="10000,100000")
    ap.add_argument("--time-limit", type=float, default=30.0)
    ap.add_argument("--random", type=int, default=100000, help="buffers in the random problem (0: skip)")
    ap.add_argument("--hard", default="150,250,350")
    ap.add_argument("--holes", default="0,0.15")
    ap.add_argument("--seeds", type=int, default=2)
    ap.add_argument("--skip-minimalloc", action="store_true")
    ap.add_argument("--minimalloc", metavar="DIR", help="directory of MiniMalloc's A..K.1048576.csv "
                    "(default: data/dsa-minimalloc in the checkout, then ../shared/data/dsa-minimalloc)")
    args = ap.parse_args()
    out = {"cpus": os.cpu_count(), "time_limit_s": args.time_limit, "sizes": {}, "random": None,
           "minimalloc": {}, "hard": []}
    for n in [int(x) for x in args.sizes.split(",") if x]:
        out["sizes"][str(n)] = bench_sizes(n)
    if args.random > 0:
        out["random"] = bench_random(args.random)
    if args.skip_minimalloc:
        out["minimalloc"] = {"skipped": "--skip-minimalloc"}
    else:
        data, tried = minimalloc_dir(args.minimalloc)
        if data is None and args.minimalloc:
            print(f"bench_pools: --minimalloc {args.minimalloc}: no A..K.1048576.csv there", file=sys.stderr)
            return 2
        if data is None:
            why = "MiniMalloc's instances (A..K.1048576.csv) not found in " + ", ".join(tried)
            print(f"bench_pools: {why}; skipped (--minimalloc DIR to give them)", file=sys.stderr)
            out["minimalloc"] = {"skipped": why}
        else:
            out["minimalloc_dir"] = data
            for name in MINIMALLOC_NAMES:
                path = os.path.join(data, f"{name}.1048576.csv")
                if os.path.exists(path):
                    out["minimalloc"][name] = bench_exact(read_minimalloc_csv(path), 1 << 20, args.time_limit)
    for holes in [float(x) for x in args.holes.split(",") if x]:
        for n in [int(x) for x in args.hard.split(",") if x]:
            for seed in range(args.seeds):
                df, _ = hard_instance(n, seed=seed, holes=holes)
                out["hard"].append({"n": n, "holes": holes, "seed": seed, **bench_exact(df, 1 << 20, args.time_limit)})
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
