#!/usr/bin/env python3
"""`run --flight-recorder 20` of a PyTorch run that OOMs on purpose, against PyTorch's own OOM observer
snapshot (issue 29; scripts/gpu_workloads/torch_leak_oom.py under `run --view reserved`).

    python scripts/gpu_window_check.py TRACE.pit OBSERVER.json [LABEL]

Checks (one table row each, for gpu_compare.py --extra): the trace holds 20 steps of the run, its last
failure is final, the blocks live at the failure from the framework allocator (its segments: cudaMalloc)
are the snapshot's segments, address and size each (the OOM observer runs after the allocator released
its cache), the request is the observer's, and the growth names the leak (about leak MiB per step).
Prints a JSON list of rows; exit 1 when a row FAILs, 2 on bad input."""
from __future__ import annotations

import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def segments_equal(live: list[tuple[int, int]], segments: list[dict]) -> bool:
    """The live set at the failure (address, size) is the snapshot's segments (address, total_size)."""
    return sorted(live) == sorted((int(s["address"]), int(s["total_size"])) for s in segments)


def main(argv: list[str]) -> int:
    if len(argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    import pyinterpose
    from pyinterpose.analysis.summary import summarize

    label = argv[2] if len(argv) > 2 else "torch leak OOM, flight recorder 20"
    try:
        obs = json.load(open(argv[1]))
        t = pyinterpose.load(argv[0])
    except (OSError, ValueError, pyinterpose.TraceError) as e:
        print(f"gpu_window_check: {e}", file=sys.stderr)
        return 2
    s = summarize(t)
    rows = []

    def row(check, measured, expected, ok):
        rows.append({"trace": label, "check": check, "measured": measured, "expected": expected,
                     "result": "PASS" if ok else "FAIL"})

    row("OOM observer called", obs.get("observer_called"), ">= 1", (obs.get("observer_called") or 0) >= 1)
    w = s.get("window") or {}
    row("steps in the trace", f"{w.get('first_step')}..{w.get('last_step')} of {w.get('steps_in_run')}", "20 steps",
        w.get("last_step") is not None and w["last_step"] - w["first_step"] + 1 == 20)
    final = [e for e in s.get("oom") or [] if e.get("outcome") == "final"]
    row("final OOM in the trace", len(final), ">= 1", bool(final))
    if final:
        e = final[-1]
        f = t.failures[(t.failures["pid"] == e["pid"]) & (t.failures["seq"] == e["seq"])].iloc[0]
        b = t.blocks[(t.blocks["pid"] == f["pid"]) & t.blocks["counts_device"].to_numpy(bool)]
        live = b[(b["seq_alloc"] < f["seq"]) & (~b["freed"] | (b["seq_free"] > f["seq"]))]
        own = live[live["owner"].astype(str).str.contains("c10_cuda|torch", regex=True)]
        pairs = list(zip(own["address"].astype("int64").tolist(), own["size"].astype("int64").tolist()))
        segs = obs.get("segments") or []
        row("live segments at the failure = observer snapshot's", f"{len(pairs)} blocks, {sum(n for _, n in pairs)} B",
            f"{len(segs)} segments, {sum(int(x['total_size']) for x in segs)} B", segments_equal(pairs, segs))
        row("request = observer's alloc", e.get("requested_bytes"), obs.get("alloc"),
            obs.get("alloc") is not None and abs(int(e["requested_bytes"]) - int(obs["alloc"])) <= (2 << 20))
    g = s.get("growth") or {}
    per = g.get("bytes_per_step")
    row("growth (bytes per step) ~ the leak (4 MiB per step)", per, 4 << 20,
        per is not None and abs(per - (4 << 20)) <= 0.1 * (4 << 20))
    print(json.dumps(rows))
    return 1 if any(r["result"] == "FAIL" for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
