"""A small, fully known training-like Trace built with Trace.from_tables.

Used by the report/export/compare tests (ground truth is computable by hand)
and as a stand-in where no capture is possible.  Layout per iteration of a
``layers``-layer model, one process, device 0:

* weights: ``layers`` blocks of ``weight`` bytes, allocated before the loop,
  never freed (persistent);
* optimizer state: ``layers`` blocks of ``2*weight`` bytes allocated in the
  first iteration, never freed;
* per iteration: forward allocates ``layers`` activations of ``act`` bytes
  (freed in backward, reverse order), one ``workspace`` block per layer
  (freed at once), gradients of ``weight`` bytes (freed after the update).

Every allocation and every block use gets an access (a launch) so access
analyses have something to chew on.  Times are 1 us apart per event.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from ..trace.model import Trace
from ..trace.model import live_bytes_curve


def training_trace(iterations: int = 6, layers: int = 4, weight: int = 4 << 20,
                   act: int = 8 << 20, workspace: int = 1 << 20, pid: int = 100,
                   device: int = 0, base: int = 0x7f0000000000, nvml: bool = True,
                   view: str = "blocks", framework: str = "torch", step_ns: int = 1000) -> Trace:
    blocks: list[dict] = []
    accesses: list[dict] = []
    launches: list[dict] = []
    state = {"t": 0, "seq": 0, "addr": base}
    live: dict[int, dict] = {}

    def tick() -> tuple[int, int]:
        state["t"] += step_ns
        state["seq"] += 1
        return state["t"], state["seq"]

    def alloc(size: int, role: str) -> int:
        t, seq = tick()
        bid = len(blocks)
        addr = state["addr"]
        state["addr"] += size
        row = dict(block_id=bid, pid=pid, device=device, api="cudaMalloc", kind="device",
                   address=addr, size=size, t_alloc=t, seq_alloc=seq, t_free=-1, seq_free=-1,
                   freed=False, stream=0, role=role)
        blocks.append(row)
        live[bid] = row
        return bid

    def free(bid: int) -> None:
        t, seq = tick()
        row = live.pop(bid)
        row.update(t_free=t, seq_free=seq, freed=True)

    def launch(name: str, bids: list[int]) -> None:
        t, seq = tick()
        k = kernels.index(name)
        launches.append(dict(pid=pid, tid=pid, seq=seq, t=t, device=device, stream=0,
                             api="cudaLaunchKernel", kernel=k, kernel_name=name,
                             n_access=len(bids), graph=False))
        for b in bids:
            accesses.append(dict(block_id=b, pid=pid, seq=seq, t=t, kernel=k, op="launch", flags=1))

    kernels = ["fwd", "bwd", "sgd"]
    weights = [alloc(weight, "weight") for _ in range(layers)]
    optim: list[int] = []
    markers = []
    for it in range(iterations):
        t0, s0 = state["t"], state["seq"] + 1
        markers.append(dict(pid=pid, seq=s0, t=t0 + step_ns, label="step"))
        acts = []
        for li in range(layers):
            a = alloc(act, "activation")
            ws = alloc(workspace, "workspace")
            launch("fwd", [weights[li], a, ws] + ([acts[-1]] if acts else []))
            free(ws)
            acts.append(a)
        grads = []
        for li in reversed(range(layers)):
            g = alloc(weight, "gradient")
            launch("bwd", [weights[li], acts[li], g])
            free(acts[li])
            grads.append(g)
        if not optim:
            optim = [alloc(2 * weight, "optimizer") for _ in range(layers)]
        for li, g in enumerate(reversed(grads)):
            launch("sgd", [weights[li], g, optim[li]])
        for g in grads:
            free(g)
    t_end, s_end = tick()
    for row in live.values():
        row.update(t_free=t_end, seq_free=s_end + 1, freed=False)
    b = pd.DataFrame(blocks)
    nv = None
    if nvml:
        # a "reserved" view of the device: live bytes rounded up to 32 MiB plus a 300 MiB context
        ts = np.arange(0, t_end + 1, max(1, t_end // 50), dtype=np.int64)
        ct, cl = live_bytes_curve(Trace.from_tables(blocks=b).blocks)
        idx = np.searchsorted(ct, ts, side="right") - 1
        lv = np.where(idx >= 0, cl[np.clip(idx, 0, None)], 0)
        used = ((lv + (32 << 20) - 1) // (32 << 20)) * (32 << 20) + (300 << 20)
        nv = pd.DataFrame(dict(t=ts, device=device, used_bytes=used, pcie_tx_kbs=0.0, pcie_rx_kbs=0.0))
    meta = {"view": view, "framework": framework, "command": ["synthetic", framework],
            "t0_ns": 0, "host": "synthetic", "gpus": [{"index": device, "name": "Synthetic GPU"}]}
    procs = pd.DataFrame([dict(pid=pid, ppid=1, exe="synthetic", forked=False, start_ns=0,
                               written=state["seq"], lost=0, waits=0, unscanned_launches=0)])
    return Trace.from_tables(blocks=b, accesses=pd.DataFrame(accesses), launches=pd.DataFrame(launches),
                             markers=pd.DataFrame(markers), processes=procs, nvml=nv,
                             kernels=kernels, meta=meta)
