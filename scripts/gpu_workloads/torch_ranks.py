"""Two (or more) ranks of a small PyTorch training loop under torchrun, for the per-rank check of
pyinterpose on a real GPU (issue 23 item 6).  Every rank trains its own MLP on cuda:LOCAL_RANK modulo the
GPUs there are (two ranks may share one GPU), with a gloo process group (NCCL refuses two ranks on one
GPU) and an all-reduce of the loss each step; rank 1 uses a wider model (an imbalance).  Each rank writes
RANK.json into --out-dir: what PyTorch itself says (max_memory_allocated, max_memory_reserved), its pid,
its device and the device's UUID.

    torchrun --nproc-per-node 2 scripts/gpu_workloads/torch_ranks.py --out-dir DIR [--steps N]
"""
import argparse, json, os
import torch, torch.distributed as dist, torch.nn as nn

p = argparse.ArgumentParser()
p.add_argument("--out-dir", required=True)
p.add_argument("--steps", type=int, default=20)
a = p.parse_args()
rank, local = int(os.environ["RANK"]), int(os.environ.get("LOCAL_RANK", "0"))
dist.init_process_group("gloo")
dev = torch.device("cuda", local % torch.cuda.device_count())
torch.cuda.set_device(dev)
width = 1024 if rank != 1 else 2048
model = nn.Sequential(*[m for _ in range(6) for m in (nn.Linear(width, width), nn.ReLU())]).to(dev)
opt = torch.optim.Adam(model.parameters(), 1e-3)
x, y = torch.randn(256, width, device=dev), torch.randn(256, width, device=dev)
for _ in range(a.steps):
    opt.zero_grad(set_to_none=True)
    loss = nn.functional.mse_loss(model(x), y)
    loss.backward()
    opt.step()
    t = loss.detach().cpu()
    dist.all_reduce(t)
torch.cuda.synchronize()
props = torch.cuda.get_device_properties(dev)
uuid = str(getattr(props, "uuid", ""))
out = {"rank": rank, "local_rank": local, "pid": os.getpid(), "device": dev.index,
       "device_uuid": ("GPU-" + uuid) if uuid and not uuid.startswith("GPU-") else uuid,
       "max_memory_allocated": torch.cuda.max_memory_allocated(dev),
       "max_memory_reserved": torch.cuda.max_memory_reserved(dev), "steps": a.steps}
with open(os.path.join(a.out_dir, f"{rank}.json"), "w") as f:
    json.dump(out, f)
dist.destroy_process_group()
