#!/usr/bin/env python3
"""CUDA graph replays expanded by the reader (pyinterpose/trace/graphs.py): the cost of the expansion.

Captures simtrain ``--graphs`` (torch path, cudaMallocAsync backend: eager warm-up, one step captured, every
later step a replay) on simcuda, then loads the trace ``--repeat`` times and times ``trace.graphs.expand``
alone and the whole load.  Prints one JSON object: steps, layers, replays, nodes per replay, expanded rows
(accesses, blocks, launches), the median expand and load seconds, and whether the expanded totals equal the
workload's truth.

    python scripts/bench_graphs.py [--steps 3000] [--layers 6] [--repeat 3] [--keep DIR]

Target (``ok``): expanding costs less than the rest of loading (``expand_s`` < ``load_s`` / 2) — the expansion
must not dominate reading a trace of a graph-replaying job.  Exit status 1 when the expanded totals differ from
the truth.  Measured (2-core shared machine, load average 17): 3000 steps x 6 layers, 2998 replays x 76 nodes,
279012 accesses: expand 1.04 s of a 5.08 s load.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=3000)
    ap.add_argument("--layers", type=int, default=6)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--keep", default=None, help="directory for the trace and truth (default: a temporary one)")
    a = ap.parse_args()
    d = a.keep or tempfile.mkdtemp(prefix="bench_graphs-")
    os.makedirs(d, exist_ok=True)
    trace, truth_path = os.path.join(d, "graphs.pit"), os.path.join(d, "truth.json")
    env = dict(os.environ, PYTORCH_CUDA_ALLOC_CONF="backend:cudaMallocAsync",
               PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    subprocess.run([sys.executable, "-m", "pyinterpose", "run", "-q", "-f", "--simulated-gpu", "-o", trace, "--",
                    sys.executable, "-m", "pyinterpose.examples.simtrain", "--framework", "torch", "--steps",
                    str(a.steps), "--layers", str(a.layers), "--graphs", "2", "--truth", truth_path],
                   check=True, env=env, stdout=subprocess.DEVNULL)
    from pyinterpose.trace import graphs, reader

    orig, spent = graphs.expand, []

    def timed(*args, **kw):
        t0 = time.perf_counter()
        try:
            return orig(*args, **kw)
        finally:
            spent.append(time.perf_counter() - t0)
    graphs.expand = timed
    loads = []
    for _ in range(a.repeat):
        t0 = time.perf_counter()
        tr = reader.load(trace)
        loads.append(time.perf_counter() - t0)
    graphs.expand = orig
    with open(truth_path) as f:
        truth = json.load(f)
    g = truth["graphs"]
    expand_s, load_s = statistics.median(spent), statistics.median(loads)
    out = {"steps": a.steps, "layers": a.layers, "replays": int(tr.counts.get("graph_replays", 0)),
           "nodes_per_replay": int(len(tr.graph_nodes)), "accesses": len(tr.accesses), "blocks": len(tr.blocks),
           "launches": int((~tr.launches["graph"]).sum()), "expand_s": round(expand_s, 3),
           "load_s": round(load_s, 3), "loadavg": os.getloadavg()[0],
           "matches_truth": len(tr.accesses) == truth["accesses"] and len(tr.blocks) == truth["allocs"]
           and int((~tr.launches["graph"]).sum()) == truth["launches"] and g["replays"] == tr.counts["graph_replays"],
           "ok": expand_s < load_s / 2}
    print(json.dumps(out))
    return 0 if out["matches_truth"] else 1


if __name__ == "__main__":
    sys.exit(main())
