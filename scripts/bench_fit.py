"""Speed of `fit` and of the out-of-memory explanation on one trace; prints one JSON object.

    python scripts/bench_fit.py TRACE.pit [--runs 3]      (e.g. samples/torch-cnn-blocks.pit)

A ~1 M-event trace: ``pyinterpose run --simulated-gpu -o big.pit -- python -m
pyinterpose.examples.simtrain --steps 1240 --layers 100``; an OOM trace:
``SIMCUDA_MEMORY_BYTES=67108864 pyinterpose run --simulated-gpu -o oom.pit -- python -m
pyinterpose.examples.simtrain --steps 6 --oom final``.

Reports, per run (seconds): ``load``; ``explain`` (oom.explain); ``model`` (fit.FitModel: the captured
allocator's simulation and what the run needs); ``table`` (answers for every card of the GPU table);
``tight`` (answers at the captured need, the lower bound and one byte below it: the knobs and the
planned pool are tried there).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)   # the checkout's pyinterpose, from any directory


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("trace")
    ap.add_argument("--runs", type=int, default=3)
    a = ap.parse_args()
    import pyinterpose
    from pyinterpose.analysis.fit import FitModel, gpu_table
    from pyinterpose.analysis.oom import explain

    runs = []
    for _ in range(a.runs):
        r = {}
        t0 = time.perf_counter()
        tr = pyinterpose.load(a.trace)
        r["load"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        ex = explain(tr)
        r["explain"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        m = FitModel(tr)
        r["model"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        for g in gpu_table():
            m.answer(g["capacity_bytes"], g["name"], g)
        r["table"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        for c in (m.captured_need, m.lower_bound, m.lower_bound - 1):
            m.answer(c)
        r["tight"] = time.perf_counter() - t0
        runs.append(r)
    out = {"trace": a.trace, "blocks": int(len(tr.blocks)), "failures": ex["failures"],
           "lower_bound_bytes": int(m.lower_bound), "captured_need_bytes": int(m.captured_need),
           "median_s": {k: round(statistics.median(x[k] for x in runs), 4) for k in runs[0]},
           "runs": [{k: round(v, 4) for k, v in x.items()} for x in runs]}
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
