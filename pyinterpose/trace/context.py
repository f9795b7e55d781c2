"""Who each process is in a multi-GPU job: the CONTEXT and DEVICE records (native/shim/context.c).

* ``CONTEXT``: "NAME=value" of a rank variable in the process's environment when its ring was created
  (``RANK``, ``LOCAL_RANK``, ``WORLD_SIZE``, ``JAX_PROCESS_ID``, ``TF_CONFIG``,
  ``CUDA_VISIBLE_DEVICES``, ..., and ``HOST``);
* ``DEVICE``: a device ordinal the process allocated on, with its UUID (``cuDeviceGetUuid``).

:func:`per_process` turns them into two columns of ``trace.processes``: ``context`` (JSON text of
{NAME: value}) and ``devices`` (JSON text of [[ordinal, "GPU-..."], ...]; the UUID is "" when
cuDeviceGetUuid failed).  JSON text, not Python objects: the table stays plain data to ship between
processes and to print.
"""
from __future__ import annotations

import json

import numpy as np

# the rank variables a process's environment may carry, first match wins (pyinterpose.analysis.ranks)
RANK_VARS = ("RANK", "JAX_PROCESS_ID", "@TF_CONFIG", "SLURM_PROCID", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK")
WORLD_VARS = ("WORLD_SIZE", "JAX_NUM_PROCESSES", "JAX_PROCESS_COUNT", "@TF_CONFIG", "SLURM_NTASKS",
              "OMPI_COMM_WORLD_SIZE", "PMI_SIZE")
LOCAL_RANK_VARS = ("LOCAL_RANK", "SLURM_LOCALID", "OMPI_COMM_WORLD_LOCAL_RANK")
LOCAL_WORLD_VARS = ("LOCAL_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_SIZE")
TF_TASK_ORDER = ("chief", "master", "worker", "ps", "evaluator")


def uuid_text(lo: int, hi: int) -> str:
    """The 16 UUID bytes (two little-endian words, as the shim stores them) as nvidia-smi writes them."""
    b = int(lo).to_bytes(8, "little") + int(hi).to_bytes(8, "little")
    h = b.hex()
    return f"GPU-{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


def per_process(side: np.ndarray, side_op: np.ndarray, side_pid: np.ndarray, strings: dict,
                op_context: int | None, op_device: int | None) -> dict[int, tuple[str, str]]:
    """{pid: (context JSON, devices JSON)} for the processes that have such records."""
    out: dict[int, tuple[dict, dict]] = {}
    if op_context is not None:
        for j in np.flatnonzero(side_op == op_context):
            p = int(side_pid[j])
            text = strings.get(p, {}).get(int(side["aux"][j]), "")
            name, eq, value = text.partition("=")
            if eq:
                out.setdefault(p, ({}, {}))[0][name] = value
    if op_device is not None:
        for j in np.flatnonzero(side_op == op_device):
            p = int(side_pid[j])
            ok = int(side["result"][j]) == 0
            uuid = uuid_text(int(side["addr"][j]), int(side["size"][j])) if ok else ""
            out.setdefault(p, ({}, {}))[1].setdefault(int(side["device"][j]), uuid)
    return {p: (json.dumps(c, sort_keys=True), json.dumps(sorted([k, v] for k, v in d.items())))
            for p, (c, d) in out.items()}


def context_of(text) -> dict:
    """The ``context`` column's value as a dict ({} for none)."""
    try:
        v = json.loads(text) if text else {}
    except (TypeError, ValueError):
        return {}
    return v if isinstance(v, dict) else {}


def devices_of(text) -> list[tuple[int, str]]:
    """The ``devices`` column's value as [(ordinal, uuid), ...]."""
    try:
        v = json.loads(text) if text else []
    except (TypeError, ValueError):
        return []
    return [(int(a), str(b)) for a, b in v] if isinstance(v, list) else []


def _int(v) -> int | None:
    try:
        return int(str(v).strip())
    except (TypeError, ValueError):
        return None


def _tf_config(text: str) -> tuple[int | None, int | None]:
    """(rank, world size) of TF_CONFIG's task within its cluster."""
    try:
        cfg = json.loads(text)
        cluster, task = cfg.get("cluster") or {}, cfg.get("task") or {}
        kinds = [k for k in TF_TASK_ORDER if k in cluster] + sorted(k for k in cluster if k not in TF_TASK_ORDER)
        world = sum(len(cluster[k]) for k in kinds)
        base = 0
        for k in kinds:
            if k == task.get("type"):
                idx = _int(task.get("index", 0))
                return (base + idx if idx is not None else None), world
            base += len(cluster[k])
        return None, world or None
    except (TypeError, ValueError, AttributeError):
        return None, None


def _first(ctx: dict, names: tuple, which: int) -> tuple[int | None, str]:
    for n in names:
        if n.startswith("@"):
            if "TF_CONFIG" in ctx:
                v = _tf_config(ctx["TF_CONFIG"])[which]
                if v is not None:
                    return v, "TF_CONFIG"
            continue
        v = _int(ctx.get(n))
        if v is not None:
            return v, n
    return None, ""


def rank_context(ctx: dict) -> dict:
    """rank, world_size, local_rank, local_world_size (None when unknown) and rank_source (the
    variable the rank came from) of one process's recorded environment."""
    rank, source = _first(ctx, RANK_VARS, 0)
    world, _ = _first(ctx, WORLD_VARS, 1)
    local, _ = _first(ctx, LOCAL_RANK_VARS, 0)
    lworld, _ = _first(ctx, LOCAL_WORLD_VARS, 0)
    return {"rank": rank, "world_size": world, "local_rank": local, "local_world_size": lworld,
            "rank_source": source}
