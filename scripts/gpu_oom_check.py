#!/usr/bin/env python3
"""pyinterpose's out-of-memory explanation against the frameworks' own error messages (issue 22 item 5).

    python scripts/gpu_oom_check.py torch TRACE.pit WORKLOAD.json LABEL
    python scripts/gpu_oom_check.py jax TRACE.pit WORKLOAD.json LABEL

TRACE.pit: `pyinterpose run --view blocks` of scripts/gpu_workloads/torch_train.py --oom (cudaMallocAsync backend)
or jax_train.py --oom (platform allocator); WORKLOAD.json: what the workload wrote (the exception's message).
The explanation is `pyinterpose summary TRACE.pit --json`, key `oom` (the last final failure, else the last):

* PyTorch: `requested_bytes` = the message's request ("Tried to allocate X" of the native allocator, "Requested : X"
  of cudaMallocAsync), and the framework allocator's live bytes (`framework_allocator_bytes`) = the message's
  allocated bytes ("Currently allocated : X", "X is allocated by PyTorch", "X already allocated"), both within the
  message's rounding (2 decimals of its unit);
* XLA: `requested_bytes` = the bytes in XLA's message ("... 123B)", "rounded to 123", "allocate 123 bytes", else a
  rounded size) within max(2 MiB: the VMM granularity, the message's rounding); the live bytes are reported.

Prints a JSON list of table rows for gpu_compare.py --extra; exit 1 when a row FAILs, 2 on bad input.
Written without a GPU: the parsers are tested on hand-written messages (tests/unit/test_gpu_checks.py).
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
UNITS = {"b": 1, "bytes": 1, "byte": 1, "kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30, "tib": 1 << 40}
_SIZE = r"([0-9]+(?:\.[0-9]+)?)\s*(TiB|GiB|MiB|KiB|bytes|byte|B)\b"


def _size(m) -> tuple[int, int]:
    """(bytes, rounding bound in bytes) of a (number, unit) match."""
    num, unit = m.group(1), m.group(2).lower()
    u = UNITS[unit]
    decimals = len(num.split(".")[1]) if "." in num else 0
    return int(round(float(num) * u)), int(u * 0.5 * 10 ** -decimals) + 1


def parse_torch(msg: str) -> dict:
    """Requested and allocated bytes (with their rounding bounds) from a PyTorch OutOfMemoryError message."""
    out = {}
    for key, pats in (("requested", [r"Tried to allocate\s+" + _SIZE, r"Requested\s*:\s*" + _SIZE]),
                      ("allocated", [r"Currently allocated\s*:\s*" + _SIZE, _SIZE + r"\s+is allocated by PyTorch",
                                     _SIZE + r"\s+already allocated"])):
        for p in pats:
            m = re.search(p, msg)
            if m:
                out[key], out[key + "_tol"] = _size(m)
                break
    return out


def parse_xla(msg: str) -> dict:
    """Requested bytes from an XLA RESOURCE_EXHAUSTED message."""
    for p in (r"\(([0-9]+)B\)", r"rounded to ([0-9]+)", r"allocate ([0-9]+) bytes"):
        m = re.search(p, msg)
        if m:
            return {"requested": int(m.group(1)), "requested_tol": 0}
    m = re.search(r"allocate\s+" + _SIZE, msg)
    if m:
        b, tol = _size(m)
        return {"requested": b, "requested_tol": tol}
    return {}


def pick(entries: list[dict]) -> dict | None:
    """The failure the exception reports: the last final one, else the last."""
    final = [e for e in entries if e.get("outcome") != "near"]
    return (final or entries or [None])[-1]


def _row(trace, check, measured, expected, ok):
    return {"trace": trace, "check": check, "measured": measured, "expected": expected,
            "result": "PASS" if ok else "FAIL"}


def compare(framework: str, entries: list[dict], workload: dict, label: str) -> list[dict]:
    if not workload.get("oom"):
        return [_row(label, "the workload ran out of memory", "no", "yes", False)]
    msg = workload.get("message", "")
    e = pick(entries)
    rows = [_row(label, "out-of-memory failures in the trace", len(entries), ">= 1", e is not None)]
    if e is None:
        return rows
    want = parse_torch(msg) if framework == "torch" else parse_xla(msg)
    req = e.get("requested_bytes")
    if "requested" in want:
        tol = want["requested_tol"] if framework == "torch" else max(2 << 20, want["requested_tol"])
        rows.append(_row(label, f"requested bytes = the {framework} message's", req, want["requested"],
                         req is not None and abs(req - want["requested"]) <= tol))
    else:
        rows.append(_row(label, "requested bytes", req, "message not understood", False))
    if framework == "torch":
        mine = e.get("framework_allocator_bytes")
        if "allocated" in want:
            rows.append(_row(label, "allocator live bytes = message's allocated", mine, want["allocated"],
                             mine is not None and abs(mine - want["allocated"]) <= want["allocated_tol"]))
        else:
            rows.append(_row(label, "allocator live bytes", mine, "message not understood", False))
    rows.append(_row(label, "live bytes (all device blocks) / outside allocator",
                     f"{e.get('live_bytes')} / {e.get('outside_allocator_bytes')}", "-", True))
    return rows


def summary_oom(trace_path: str) -> list[dict]:
    """`pyinterpose summary TRACE --json`'s `oom` list (the CLI, as a user runs it)."""
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    r = subprocess.run([sys.executable, "-m", "pyinterpose", "summary", trace_path, "--json"], capture_output=True,
                       text=True, env=env, timeout=600)
    if r.returncode != 0:
        raise SystemExit(f"gpu_oom_check: summary failed: {r.stderr.strip().splitlines()[-1:] or r.returncode}")
    s = json.loads(r.stdout)
    while isinstance(s, list) and len(s) == 1:
        s = s[0]
    if isinstance(s, dict) and "oom" not in s:
        s = next((v for v in s.values() if isinstance(v, dict) and "oom" in v), s)
    return list(s.get("oom") or []) if isinstance(s, dict) else []


def main(argv: list[str]) -> int:
    if len(argv) < 4 or argv[0] not in ("torch", "jax"):
        print(__doc__, file=sys.stderr)
        return 2
    try:
        with open(argv[2]) as f:
            workload = json.load(f)
    except (OSError, ValueError) as e:
        print(f"gpu_oom_check: cannot read {argv[2]}: {e}", file=sys.stderr)
        return 2
    entries = summary_oom(argv[1]) if os.path.exists(argv[1]) else []
    rows = compare(argv[0], entries, workload, argv[3])
    print(json.dumps(rows))
    return 1 if any(r["result"] == "FAIL" for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
