"""A PyTorch loop with a slow leak that runs out of memory on purpose, for `run --flight-recorder 20`
(issue 29): each step marks itself (pyinterpose.mark_step), trains a small MLP, and keeps one 4 MiB tensor
(the leak); after --steps steps it asks for more than the device has free.  PyTorch's own OOM observer
(torch._C._cuda_attach_out_of_memory_observer) writes the caching allocator's snapshot at the failure:
every segment (address, total_size) and every active block, to --out as JSON.

    python scripts/gpu_workloads/torch_leak_oom.py --steps 200 --out oom-observer.json

Run it with the native caching allocator (`run --view reserved`): the trace's blocks are then its
segments (cudaMalloc), which the snapshot lists too."""
import argparse
import json
import sys

import torch
import torch.nn as nn

try:
    import pyinterpose
except ImportError:          # the workload runs without pyinterpose too
    pyinterpose = None

p = argparse.ArgumentParser()
p.add_argument("--steps", type=int, default=200)
p.add_argument("--leak-mib", type=int, default=4)
p.add_argument("--out", required=True)
a = p.parse_args()

dev = torch.device("cuda")
res = {"torch": torch.__version__, "gpu": torch.cuda.get_device_name(), "steps": a.steps, "observer_called": 0}


def observer(device, alloc, device_alloc, device_free):
    snap = torch.cuda.memory._snapshot()
    segs = [{"address": s["address"], "total_size": s["total_size"], "stream": s.get("stream"),
             "active_size": sum(b["size"] for b in s["blocks"] if b["state"] == "active_allocated")}
            for s in snap["segments"] if s.get("device", 0) == (device if isinstance(device, int) else 0)]
    res.update(observer_called=res["observer_called"] + 1, device=device, alloc=alloc, device_allocated=device_alloc,
               device_free=device_free, segments=segs, memory_reserved=torch.cuda.memory_reserved(),
               memory_allocated=torch.cuda.memory_allocated())
    json.dump(res, open(a.out, "w"))


torch._C._cuda_attach_out_of_memory_observer(observer)
model = nn.Sequential(*[m for _ in range(4) for m in (nn.Linear(1024, 1024), nn.ReLU())]).to(dev)
opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
x = torch.randn(256, 1024, device=dev)
leak = []
for step in range(a.steps + 1):
    if pyinterpose:
        pyinterpose.mark_step()
    if step == a.steps:   # the batch too large
        free, _ = torch.cuda.mem_get_info()
        try:
            torch.empty(free + (1 << 30), dtype=torch.uint8, device=dev)
        except torch.cuda.OutOfMemoryError as e:
            res["message"] = str(e)
            res["oom_step"] = step
        break
    opt.zero_grad(set_to_none=True)
    model(x).square().mean().backward()
    opt.step()
    leak.append(torch.empty(a.leak_mib << 20, dtype=torch.uint8, device=dev))
    torch.cuda.synchronize()
json.dump(res, open(a.out, "w"))
print(json.dumps({k: v for k, v in res.items() if k not in ("segments", "message")}))
sys.exit(0 if "message" in res and res["observer_called"] else 1)   # 0: it ran out of memory as planned
