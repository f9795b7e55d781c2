"""CUDA graphs in PyTorch on a real GPU, for pyinterpose's graph checks (scripts/gpu_graphs_check.py).

    torch_graphs.py --mode capture --replays 10 --out OUT.json
        a small MLP step captured with torch.cuda.graph (a private memory pool) and replayed --replays times
        (the workload behind the H100's graphs-blocks.pit)
    torch_graphs.py --mode compile --steps 30 --history-json H.json --out OUT.json
        ResNet-18 training under torch.compile(mode="reduce-overhead") (CUDA-graph trees), with the memory
        history recorded

OUT.json: what PyTorch says: replays, max_memory_allocated / max_memory_reserved, memory_stats counters;
H.json: the history's actions counted (alloc, free_requested, segment_alloc, ...), alloc sizes."""
import argparse, collections, json, time

import torch
import torch.nn as nn

p = argparse.ArgumentParser()
p.add_argument("--mode", choices=["capture", "compile"], default="capture")
p.add_argument("--replays", type=int, default=10)
p.add_argument("--steps", type=int, default=30)
p.add_argument("--history-json", default=None)
p.add_argument("--out", default=None)
a = p.parse_args()
torch.manual_seed(0)
dev = "cuda"
if a.history_json:
    torch.cuda.memory._record_memory_history(context=None, max_entries=2_000_000)
res = {"mode": a.mode, "torch": torch.__version__, "gpu": torch.cuda.get_device_name()}
if a.mode == "capture":
    model = nn.Sequential(nn.Linear(1024, 4096), nn.ReLU(), nn.Linear(4096, 1024)).to(dev)
    x = torch.randn(256, 1024, device=dev)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):          # warm-up outside the graph, as the PyTorch docs do
        for _ in range(3):
            y = model(x)
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        y = model(x)
    for _ in range(a.replays):
        x.copy_(torch.randn_like(x))
        g.replay()
    torch.cuda.synchronize()
    res.update(replays=a.replays, eager_warmup_steps=3)
else:
    import torchvision
    model = torchvision.models.resnet18(num_classes=100).to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    x = torch.randn(32, 3, 128, 128, device=dev); y = torch.randint(0, 100, (32,), device=dev)

    @torch.compile(mode="reduce-overhead")
    def fwd_bwd(x, y):
        loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        return loss

    times = []
    for i in range(a.steps):
        t0 = time.perf_counter_ns()
        opt.zero_grad(set_to_none=False)
        # a new step of the cudagraph trees: the last step's graph outputs may be overwritten (without it,
        # torch 2.11 on an H100 raised "accessing tensor output of CUDAGraphs that has been overwritten")
        torch.compiler.cudagraph_mark_step_begin()
        fwd_bwd(x, y)
        opt.step()
        torch.cuda.synchronize()
        times.append(time.perf_counter_ns() - t0)
    res.update(steps=a.steps, step_ns=times)
s = torch.cuda.memory_stats()
res.update(max_memory_allocated=torch.cuda.max_memory_allocated(), max_memory_reserved=torch.cuda.max_memory_reserved(),
           memory_stats={k: s.get(k) for k in ("allocation.all.allocated", "allocation.all.freed",
                                                "segment.all.allocated", "allocated_bytes.all.peak",
                                                "reserved_bytes.all.peak")})
if a.history_json:
    snap = torch.cuda.memory._snapshot()
    torch.cuda.memory._record_memory_history(enabled=None)
    actions = collections.Counter()
    sizes = collections.Counter()
    for trace in snap.get("device_traces", []):
        for e in trace:
            actions[e["action"]] += 1
            if e["action"] == "alloc":
                sizes[e["size"]] += 1
    json.dump({"actions": dict(actions), "alloc_sizes": {str(k): v for k, v in sizes.items()},
               "segments": len(snap.get("segments", []))}, open(a.history_json, "w"))
if a.out:
    json.dump(res, open(a.out, "w"))
print(json.dumps({k: v for k, v in res.items() if k != "step_ns"}))
