#!/usr/bin/env python3
"""Loading and analysing a large trace: writes a synthetic trace file of N events
(a training loop: persistent weights, per-step activations freed LIFO, kernel
launches with 2-4 accesses each), then times ``pyinterpose.load`` (read + build
the tables) and the analyses.  Prints JSON.

    python scripts/bench_analysis.py [--events 10000000] [--keep FILE]

Target (issue: analysis core): load + tables for 10 M events <= 10 s on 2 cores.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)


def synth_events(n_target: int, pid: int = 4242, layers: int = 40):
    """Records of a training loop in one process, as the shim writes them."""
    from pyinterpose.capture import records

    O = records.OP
    dt = records.event_dtype()
    api = {n: i for i, n in enumerate(records.api_names())}
    # one step: L allocs (activations), L launches with 3 accesses (W, in, out), L frees
    per_step = layers * (1 + 1 + 3 + 1)
    steps = max(1, (n_target - 3 * layers) // per_step)
    recs = np.zeros(steps * per_step + 3 * layers + 8, dtype=dt)
    i = 0
    seq = 1
    t = 1_000_000
    # kernel name string (id 1) and persistent weights
    name = b"gemm_kernel"
    recs[i]["op"], recs[i]["aux"], recs[i]["size"], recs[i]["seq"] = O.STRING, 1, len(name), seq
    i += 1; seq += 1
    raw = recs.view(np.uint8).reshape(len(recs), 64)
    raw[i, 16:16 + len(name)] = np.frombuffer(name, np.uint8)
    recs[i]["op"], recs[i]["seq"] = O.STRDATA, seq
    i += 1; seq += 1
    wseq, waddr = [], []
    for l in range(layers):
        recs[i] = (t, seq, 0x7000_0000_0000 + l * (1 << 22), 1 << 20, 0, 0, 1, O.ALLOC, api["cudaMalloc"], 0, 0, 1)
        wseq.append(seq); waddr.append(0x7000_0000_0000 + l * (1 << 22))
        i += 1; seq += 1; t += 1000
    # vectorised steps
    base = i
    idx = np.arange(steps * per_step)
    step, pos = idx // per_step, idx % per_step
    layer = pos // 6
    slot = pos % 6
    block = recs[base:base + steps * per_step]
    block["seq"] = seq + idx
    block["t_ns"] = t + idx * 500
    block["tid"] = 1
    act_addr = 0x7100_0000_0000 + layer * (1 << 22)
    act_seq = seq + step * per_step + layer * 6  # alloc record of the layer's activation
    block["op"] = np.select([slot == 0, slot == 1, slot < 5, slot == 5], [O.ALLOC, O.LAUNCH, O.ACCESS, O.FREE])
    block["api"] = np.select([slot == 0, slot == 1, slot < 5, slot == 5],
                             [api["cudaMallocAsync"], api["cudaLaunchKernel"], api["cudaLaunchKernel"],
                              api["cudaFreeAsync"]])
    block["flags"] = np.select([slot == 0, slot == 5, (slot >= 2) & (slot <= 4)], [3, 3, 1], 0)
    block["size"] = np.where((slot == 0) | (slot == 5), 256 * 1024 * (1 + layer % 7), 0)
    block["aux"] = np.select([slot == 1, slot == 2, slot == 3, slot == 4],
                             [1, np.array(wseq)[layer], act_seq, act_seq], 0)
    block["addr"] = np.select([slot == 0, slot == 5, slot == 2, slot >= 3],
                              [act_addr, act_addr, np.array(waddr)[layer], act_addr], 0)
    n = base + steps * per_step
    return recs[:n], steps


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--events", type=int, default=10_000_000)
    ap.add_argument("--keep", help="keep the synthetic trace at this path")
    ap.add_argument("--analyses", action="store_true", help="also time iterations/lifetimes/access")
    args = ap.parse_args()
    from pyinterpose.capture import records
    from pyinterpose.trace.writer import TraceWriter

    path = args.keep or os.path.join(tempfile.mkdtemp(), "bench.pit")
    t0 = time.perf_counter()
    recs, steps = synth_events(args.events)
    w = TraceWriter(path, {"command": ["bench"], "view": "blocks", "t0_ns": 0, "apis": records.api_names(),
                           "kinds": {str(k): v for k, v in records.kinds().items()}})
    for lo in range(0, len(recs), 1 << 16):
        w.events(4242, recs[lo:lo + (1 << 16)])
    w.trailer({"exit_status": 0, "processes": []})
    w.close()
    t_write = time.perf_counter() - t0
    import pyinterpose

    t0 = time.perf_counter()
    tr = pyinterpose.load(path)
    t_load = time.perf_counter() - t0
    out = {"benchmark": "analysis_load", "events": int(len(recs)), "file_bytes": os.path.getsize(path),
           "write_seconds": round(t_write, 2), "load_seconds": round(t_load, 2),
           "blocks": len(tr.blocks), "accesses": len(tr.accesses), "launches": len(tr.launches),
           "target_load_seconds": 10, "cpu_count": os.cpu_count()}
    assert len(tr.blocks) == 40 + steps * 40 and len(tr.accesses) == steps * 40 * 3
    if args.analyses:
        from pyinterpose.analysis import access, iterations, lifetimes

        t0 = time.perf_counter()
        it = iterations.find_iterations(tr)
        out["iterations_seconds"] = round(time.perf_counter() - t0, 2)
        out["iterations"] = {"period_allocs": it.period_allocs, "count": it.count, "truth_steps": steps}
        t0 = time.perf_counter()
        lifetimes.summary(tr)
        out["lifetimes_seconds"] = round(time.perf_counter() - t0, 2)
        t0 = time.perf_counter()
        access.analyze(tr, bandwidth=25.0)
        out["access_seconds"] = round(time.perf_counter() - t0, 2)
    print(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
