"""Out of memory: what was live when an allocation failed, who held it, and what changed since the
last step boundary.  Pure functions over the trace's tables.

Which failures.  A failed allocation call (``trace.failures`` with ``op == "alloc"``) whose result is
out-of-memory: ``cudaErrorMemoryAllocation`` (runtime) and ``CUDA_ERROR_OUT_OF_MEMORY`` (driver) are
both 2.  Other failed calls (bad arguments, a context error) are counted, not explained.

Near and final.  Frameworks retry: PyTorch's caching allocator frees its cached blocks
(``cudaFree`` of every free segment) and calls ``cudaMalloc`` again; XLA's BFC allocator and
TensorFlow's free what they can (garbage collection, free regions) and ask again, BFC for a region
backed off by x0.9.  So a failure is followed, in its process, by frees and then by the next
allocation call.  Rule: the *chain* of a failure is the run of allocation calls of the same process,
API and stream that follow it, frees allowed in between, each no larger than the one before and at
least half of it; it ends at the first call that succeeds or that does not continue it.  A chain
that ends in a success is a **near OOM** (every failure in it: ``outcome="near"``, ``retry_block``
the block that finally succeeded); otherwise every failure in it is **final** (the program raised,
gave up, or went on without that memory).  ``attempt`` numbers the failures of a chain from 1.

The explanation of one failure (:func:`explain_failure`):

* the request (bytes, API, kind, stream, device, call site when stacks were on);
* the device: capacity and free bytes, from what the shim recorded at the failure (cuMemGetInfo,
  ``free_bytes``/``total_bytes``), else the GPU's memory from NVML at capture (``capacity_source``);
* the live set: device blocks of the process allocated before the failure and not yet freed (by
  sequence number), plus other processes' blocks live at that instant on the same device (by time);
  by owner (:func:`pyinterpose.analysis.owners.block_owners`, framework allocator or not:
  :func:`~pyinterpose.analysis.owners.allocator_mask`), by call site, by lifetime class
  (:func:`pyinterpose.analysis.lifetimes.classify`), the largest blocks;
* the growth since the last step boundary (``iterations``): live blocks allocated since then;
* the framework's reserve and what was allocated inside it (:func:`reserve_at`): in a blocks-view
  trace the reserve is *simulated* (the framework's allocator replayed on its request stream up to
  the failure: ``pytorch`` caching allocator, ``bfc`` for JAX/TensorFlow); in a reserved-view trace
  the live blocks are the reserve itself and what was allocated inside is not in the trace (said in
  ``note``).  ``shortfall_share``: the free bytes inside the reserve as a share of the shortfall
  (request minus device free, at most 1): how much of what was missing the allocator held unused.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from ..trace.model import Trace
from . import pools
from ..trace.stacks import call_site
from ..trace.window import step_offset
from .iterations import find_iterations
from .lifetimes import classify
from .owners import allocator as _allocator, allocator_mask, block_owners, framework

OOM_RESULTS = frozenset({2})   # cudaErrorMemoryAllocation == CUDA_ERROR_OUT_OF_MEMORY == 2
TOP = 10
_SIM_ALLOCATOR = {"pytorch": "pytorch", "jax": "bfc", "tensorflow": "bfc"}


def _col(df: pd.DataFrame, name: str, default, dtype) -> np.ndarray:
    if name in df:
        return df[name].to_numpy()
    return np.full(len(df), default, dtype=dtype)


def oom_failures(trace: Trace) -> pd.DataFrame:
    """The failed out-of-memory allocation requests, in (pid, seq) order, with their chains:
    columns of ``trace.failures`` plus ``outcome`` ("near" | "final"), ``attempt`` (1, 2, ... in
    its chain), ``retry_block`` (block_id of the call that succeeded, -1 none) and ``retry_size``."""
    f = trace.failures
    if len(f) == 0:
        out = f.copy()
        for c, d in (("outcome", "object"), ("attempt", "int64"), ("retry_block", "int64"),
                     ("retry_size", "int64")):
            out[c] = pd.Series([], dtype=d)
        return out
    m = (f["op"].astype(str).to_numpy() == "alloc") & np.isin(f["result"].to_numpy(), list(OOM_RESULTS))
    f = f[m].sort_values(["pid", "seq"], kind="stable").reset_index(drop=True)
    n = len(f)
    outcome = np.full(n, "final", dtype=object)
    attempt = np.ones(n, np.int64)
    retry_block = np.full(n, -1, np.int64)
    retry_size = np.full(n, -1, np.int64)
    b = trace.blocks
    for pid in pd.unique(f["pid"]).tolist():
        fi = np.flatnonzero(f["pid"].to_numpy() == pid)
        bm = (b["pid"].to_numpy() == pid) & (b["kind"].astype(str).to_numpy() != "host")
        # every allocation call of the process in seq order: successes (blocks) and failures
        calls = pd.DataFrame({
            "seq": np.concatenate([b["seq_alloc"].to_numpy()[bm], f["seq"].to_numpy()[fi]]),
            "ok": np.concatenate([np.ones(int(bm.sum()), bool), np.zeros(len(fi), bool)]),
            "api": np.concatenate([b["api"].astype(str).to_numpy()[bm], f["api"].astype(str).to_numpy()[fi]]),
            "stream": np.concatenate([b["stream"].to_numpy(np.uint64)[bm],
                                      _col(f, "stream", 0, np.uint64)[fi].astype(np.uint64)]),
            "size": np.concatenate([b["size"].to_numpy(np.int64)[bm], f["size"].to_numpy(np.int64)[fi]]),
            "ref": np.concatenate([b["block_id"].to_numpy(np.int64)[bm], fi.astype(np.int64)]),
        }).sort_values("seq", kind="stable").reset_index(drop=True)
        seq_pos = {int(s): i for i, s in enumerate(calls["seq"].tolist()) if not calls["ok"].iat[i]}
        ok, api, stream = calls["ok"].to_numpy(), calls["api"].to_numpy(), calls["stream"].to_numpy()
        size, ref = calls["size"].to_numpy(), calls["ref"].to_numpy()
        done = set()
        for k in fi.tolist():
            if k in done:
                continue
            i = seq_pos[int(f["seq"].iat[k])]
            chain = [k]
            j = i + 1
            while j < len(calls) and api[j] == api[i] and stream[j] == stream[i] and \
                    2 * size[j] >= size[j - 1] and size[j] <= size[j - 1]:
                if ok[j]:
                    break
                chain.append(int(ref[j]))
                j += 1
            near = j < len(calls) and ok[j] and api[j] == api[i] and stream[j] == stream[i] and \
                2 * size[j] >= size[j - 1] and size[j] <= size[j - 1]
            for a, c in enumerate(chain, 1):
                attempt[c] = a
                if near:
                    outcome[c] = "near"
                    retry_block[c] = int(ref[j])
                    retry_size[c] = int(size[j])
                done.add(c)
    f = f.copy()
    f["outcome"], f["attempt"], f["retry_block"], f["retry_size"] = outcome, attempt, retry_block, retry_size
    return f


def other_failures(trace: Trace) -> int:
    """Failed calls that are not out-of-memory allocation requests."""
    f = trace.failures
    if len(f) == 0:
        return 0
    m = (f["op"].astype(str).to_numpy() == "alloc") & np.isin(f["result"].to_numpy(), list(OOM_RESULTS))
    return int((~m).sum())


def live_mask(trace: Trace, pid: int, seq: int, t: int, device: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(own, others): bool masks over ``trace.blocks`` of the device blocks live at the failure
    ``(pid, seq)`` at time ``t``: the process's own by sequence number (allocated before ``seq``,
    not freed before it), other processes' by time (on ``device`` when given and known)."""
    b = trace.blocks
    dev = b["counts_device"].to_numpy(bool)
    bpid = b["pid"].to_numpy()
    sa, sf = b["seq_alloc"].to_numpy(np.int64), b["seq_free"].to_numpy(np.int64)
    freed = b["freed"].to_numpy(bool)
    own = dev & (bpid == pid) & (sa < seq) & (~freed | (sf > seq))
    ta, tf = b["t_alloc"].to_numpy(np.int64), b["t_free"].to_numpy(np.int64)
    others = dev & (bpid != pid) & (ta <= t) & (~freed | (tf > t))
    if device is not None and device >= 0:
        others &= b["device"].to_numpy() == device
    return own, others


def _capacity(trace: Trace, row: dict) -> tuple[int | None, str]:
    total = int(row.get("total_bytes", -1) if row.get("total_bytes") is not None else -1)
    if total > 0:
        return total, "cuMemGetInfo at the failure"
    devs = ((trace.meta.get("nvml") or {}).get("devices") or []) if not trace.meta.get("simulated_gpu") else []
    dev = int(row.get("device", 0) or 0)
    for i, d in enumerate(devs):
        if d.get("total_bytes") and (i == dev or len(devs) == 1):
            return int(d["total_bytes"]), "NVML at capture"
    return None, "unknown (no cuMemGetInfo at the failure, no NVML)"


def _site_texts(trace: Trace, stack_ids: np.ndarray) -> np.ndarray:
    out = np.empty(len(stack_ids), dtype=object)
    cache: dict[int, str] = {}
    for i, s in enumerate(stack_ids.tolist()):
        if s not in cache:
            cache[s] = call_site(trace, int(s)) if s >= 0 else ""
        out[i] = cache[s]
    return out


def _group(df: pd.DataFrame, key: str, top: int, extra=None) -> list[dict]:
    if len(df) == 0:
        return []
    g = df.groupby(key, observed=True, sort=False).agg(bytes=("size", "sum"), blocks=("size", "size"))
    if extra:
        for name, (col, fn) in extra.items():
            g[name] = df.groupby(key, observed=True, sort=False)[col].agg(fn)
    g = g.sort_values(["bytes", "blocks"], ascending=False, kind="stable").head(top)
    def py(v):
        if isinstance(v, (bool, np.bool_)):
            return bool(v)
        return int(v) if isinstance(v, (int, np.integer)) else v

    return [{key: str(k), **{c: py(v) for c, v in r.items()}} for k, r in g.to_dict("index").items()]


def reserve_at(trace: Trace, pid: int, seq: int, allocator_live: int) -> dict:
    """The framework allocator's reserve at the failure and the bytes allocated inside it (see the
    module docstring for where each comes from)."""

    fw = framework(trace)
    view = str(trace.meta.get("view") or "blocks")
    if view == "reserved":
        return {"source": "trace (reserved view)", "allocator": fw, "reserve_bytes": int(allocator_live),
                "allocated_bytes": None, "free_in_reserve_bytes": None, "fragmentation": None,
                "note": "a reserved-view trace records the allocator's segments, not the tensors inside them: "
                        "capture with --view blocks to see what was allocated inside the reserve"}
    sim = _SIM_ALLOCATOR.get(fw)
    if sim is None:
        return {"source": "none", "allocator": fw, "reserve_bytes": None, "allocated_bytes": int(allocator_live),
                "free_in_reserve_bytes": None, "fragmentation": None,
                "note": f"no simulator for the {fw} framework's allocator"}

    try:
        rc = pools.reserved_curve(trace, sim, pid)
    except Exception as e:  # noqa: BLE001 - the explanation goes on without it
        return {"source": "none", "allocator": sim, "reserve_bytes": None, "allocated_bytes": int(allocator_live),
                "free_in_reserve_bytes": None, "fragmentation": None, "note": f"simulation failed: {e}"}
    req_seq = np.asarray(rc["seq"], np.int64)
    k = int(np.searchsorted(req_seq, seq, side="left"))
    reserve = int(rc["bytes"][k - 1]) if k > 0 else 0
    free_in = max(reserve - int(allocator_live), 0)
    return {"source": f"simulated ({sim} allocator replayed on the framework allocator's requests up to the "
                      "failure, no capacity limit)",
            "allocator": sim, "reserve_bytes": reserve, "allocated_bytes": int(allocator_live),
            "free_in_reserve_bytes": free_in, "fragmentation": (free_in / reserve) if reserve else 0.0,
            "note": ""}


def _boundary(trace: Trace, pid: int, seq: int) -> dict | None:
    it = find_iterations(trace, pid)
    if it.count == 0:
        return None
    B = it.boundaries
    k = int(np.searchsorted(B, seq, side="right")) - 1
    if k < 0:
        return None
    step = k
    if it.source == "markers":   # a windowed or flight-recorder trace: the step's number in the whole run

        step += step_offset(trace, pid)
    return {"seq": int(B[k]), "t": int(it.boundaries_t[k]), "step": step, "steps": int(it.count),
            "inside_regular_steps": bool(k < it.count)}


def explain_failure(trace: Trace, row: dict, top: int = TOP) -> dict:
    """The explanation of one out-of-memory failure (a row of :func:`oom_failures` as a dict)."""

    pid, seq, t = int(row["pid"]), int(row["seq"]), int(row["t"])
    device = int(row.get("device", -1)) if row.get("device") is not None else -1
    own, others = live_mask(trace, pid, seq, t, device)
    b = trace.blocks
    owners = trace.derived(("oom.block_owners",), lambda: block_owners(trace).to_numpy())
    amask = trace.derived(("oom.allocator_mask",), lambda: allocator_mask(trace))
    idx = np.flatnonzero(own)
    live = pd.DataFrame({
        "block_id": b["block_id"].to_numpy()[idx], "size": b["size"].to_numpy(np.int64)[idx],
        "api": b["api"].astype(str).to_numpy()[idx], "owner": owners[idx].astype(str),
        "is_allocator": amask[idx], "seq_alloc": b["seq_alloc"].to_numpy(np.int64)[idx],
        "t_alloc": b["t_alloc"].to_numpy(np.int64)[idx],
        "stack_id": _col(b, "stack_id", -1, np.int64)[idx].astype(np.int64),
    })
    live["call_site"] = _site_texts(trace, live["stack_id"].to_numpy())
    live.loc[live["call_site"] == "", "call_site"] = "(no call site recorded)"
    classes = classify(trace, pid=pid)
    cls = classes.set_index("block_id")["class"].astype(str)
    live["class"] = cls.reindex(live["block_id"]).fillna("unknown").to_numpy()
    own_bytes = int(live["size"].sum())
    other_bytes = int(b["size"].to_numpy(np.int64)[others].sum())
    capacity, cap_src = _capacity(trace, row)
    free = row.get("free_bytes")
    free = int(free) if free is not None and int(free) >= 0 else None
    size = int(row["size"])
    boundary = _boundary(trace, pid, seq)
    since = live[live["seq_alloc"] >= boundary["seq"]] if boundary else live.iloc[0:0]
    stack = int(row.get("stack_id", -1)) if row.get("stack_id") is not None else -1

    known = _allocator(trace).known       # no framework recognised: every block is the program's own request
    alloc_live = int(live.loc[live["is_allocator"], "size"].sum())
    live["is_framework_allocator"] = live["is_allocator"].to_numpy(bool) & known
    largest = live.sort_values(["size", "seq_alloc"], ascending=[False, True], kind="stable").head(top)
    out = {
        "pid": pid, "seq": seq, "t_s": t / 1e9, "api": str(row["api"]), "kind": str(row.get("kind", "") or ""),
        "requested_bytes": size, "result": int(row["result"]),
        "stream": int(row.get("stream", 0) or 0), "device": device,
        "call_site": _site_texts(trace, np.array([stack]))[0] if stack >= 0 else "",
        "outcome": str(row["outcome"]), "attempt": int(row["attempt"]),
        "retry": ({"block_id": int(row["retry_block"]), "bytes": int(row["retry_size"])}
                  if int(row["retry_block"]) >= 0 else None),
        "device_capacity_bytes": capacity, "capacity_source": cap_src, "device_free_bytes": free,
        "live_bytes": own_bytes + other_bytes, "live_blocks": int(len(live)),
        "process_live_bytes": own_bytes, "other_processes_live_bytes": other_bytes,
        "shortfall_bytes": (size - free) if free is not None else (
            size - (capacity - own_bytes - other_bytes) if capacity else None),
        "framework_known": bool(known),
        "by_owner": _group(live, "owner", top, {"framework_allocator": ("is_framework_allocator", "any")}),
        "framework_allocator_bytes": alloc_live,
        "outside_allocator_bytes": own_bytes - alloc_live,
        "by_call_site": _group(live, "call_site", top),
        "by_lifetime_class": _group(live, "class", top),
        "largest_blocks": [{"block_id": int(r["block_id"]), "bytes": int(r["size"]), "api": r["api"],
                            "owner": r["owner"], "call_site": r["call_site"], "class": str(r["class"]),
                            "age_s": (t - int(r["t_alloc"])) / 1e9} for r in largest.to_dict("records")],
        "since_last_boundary": ({**boundary, "bytes": int(since["size"].sum()), "blocks": int(len(since)),
                                 "by_call_site": _group(since, "call_site", top)} if boundary else None),
        "reserve": reserve_at(trace, pid, seq, alloc_live),
    }
    # the fragmentation share of the failure: how much of what was missing sat free inside the reserve
    r, short = out["reserve"], out["shortfall_bytes"]
    r["shortfall_share"] = (min(1.0, r["free_in_reserve_bytes"] / short)
                            if r.get("free_in_reserve_bytes") is not None and short and short > 0 else None)
    return out


FULL = 50   # failures explained in full at each end of a long list (each one scans the blocks)


def _brief(row: dict) -> dict:
    return {"pid": int(row["pid"]), "seq": int(row["seq"]), "t_s": int(row["t"]) / 1e9, "api": str(row["api"]),
            "kind": str(row.get("kind", "") or ""), "requested_bytes": int(row["size"]), "result": int(row["result"]),
            "outcome": str(row["outcome"]), "attempt": int(row["attempt"]),
            "retry": ({"block_id": int(row["retry_block"]), "bytes": int(row["retry_size"])}
                      if int(row["retry_block"]) >= 0 else None),
            "device_free_bytes": int(row["free_bytes"]) if int(row.get("free_bytes", -1)) >= 0 else None,
            "detail": f"omitted: more than {2 * FULL} failures (the first and last {FULL} are explained in full; "
                      "pyinterpose.analysis.oom.explain_failure explains any)"}


def explain(trace: Trace, top: int = TOP) -> dict:
    """Every out-of-memory failure of ``trace``: {"failures": n, "near": k, "final": m,
    "other_failed_calls": ..., "entries": [one per failure, in (pid, seq) order]}; each entry is
    :func:`explain_failure`'s, except, past 2 x FULL failures, those in the middle (brief: the request,
    outcome, retry; ``detail`` says so)."""
    f = oom_failures(trace)
    rows = f.to_dict("records")
    n = len(rows)
    entries = [explain_failure(trace, r, top) if (n <= 2 * FULL or k < FULL or k >= n - FULL) else _brief(r)
               for k, r in enumerate(rows)]
    return {"failures": len(entries), "near": sum(e["outcome"] == "near" for e in entries),
            "final": sum(e["outcome"] == "final" for e in entries),
            "other_failed_calls": other_failures(trace), "entries": entries}
