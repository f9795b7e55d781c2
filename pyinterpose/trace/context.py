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
