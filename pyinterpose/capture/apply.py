"""``pyinterpose run --apply plan.json``: hand a plan to the shim, and say afterwards what it served.

The plan file (pyinterpose.trace.plan_format) is read and checked here, in the parent; its
compact binary digest goes into the run's private ring directory and the shim finds it through
``PYINTERPOSE_APPLY`` (native/shim/apply.c maps it at the first allocation request).  At exit each
process that had the plan writes one status line (``apply-<pid>`` in the ring directory), which
:func:`read_status` reads before the directory is removed and :func:`report` turns into the lines
``run`` prints.
"""
from __future__ import annotations

import hashlib
import os
import sys

from ..errors import PyinterposeError
from ..trace import plan_format
from ..units import fmt_bytes

ENV = "PYINTERPOSE_APPLY"
COUNTS = ("served", "no_key", "occupied", "bigger", "capture", "overlap", "off", "other")


def prepare(plan_path: str, rdir: str | None, argv: list[str], knobs: dict, env: dict) -> dict:
    """Read and check the plan, write its digest for the shim, set the environment; the trace's
    ``meta["apply"]``."""
    try:
        doc = plan_format.read(plan_path)
    except PyinterposeError as e:
        raise PyinterposeError(f"--apply {e}") from None
    if not rdir:
        raise PyinterposeError("--apply: no private directory for the plan's digest (see --ring-dir)")
    bin_path = os.path.join(rdir, "plan.bin")
    data = plan_format.digest(doc)
    with open(bin_path, "wb") as f:
        f.write(data)
    env[ENV] = bin_path
    with open(plan_path, "rb") as f:
        sha = hashlib.sha256(f.read()).hexdigest()
    planned_knobs = doc.get("knobs") or {}
    differ = sorted(k for k in set(planned_knobs) | set(knobs) if planned_knobs.get(k) != knobs.get(k))
    if differ:
        _warn(f"--apply {plan_path}: the plan was made with other framework knobs ({', '.join(differ)}): "
              "its requests may not match")
    cmd = (doc.get("program") or {}).get("command") or []
    if cmd and [os.path.basename(str(c)) for c in cmd] != [os.path.basename(str(c)) for c in argv]:
        _warn(f"--apply {plan_path}: the plan was made for another command ({' '.join(map(str, cmd))})")
    return {"plan": os.path.abspath(plan_path), "sha256": sha, "capacity": int(doc["capacity"]),
            "strategy": (doc.get("planner") or {}).get("strategy"), "trace": (doc.get("trace") or {}).get("path"),
            "boundary": doc["iteration"]["boundary"], "iteration_requests": int(doc["iteration"]["requests"]),
            **({"swap": {k: doc["swap"][k] for k in ("mechanism", "strategy", "mode", "budget", "predicted_peak_bytes",
                                                      "predicted_stall_ns", "managed")}
                | {"swaps": len(doc["swap"]["swaps"])}} if doc.get("swap") else {})}


def read_status(rdir: str | None) -> list[dict]:
    """The shim's status lines (one per process that had the plan)."""
    out = []
    if not rdir or not os.path.isdir(rdir):
        return out
    for name in sorted(os.listdir(rdir)):
        if not name.startswith("apply-"):
            continue
        try:
            with open(os.path.join(rdir, name)) as f:
                line = f.readline().rstrip("\n")
        except OSError:
            continue
        head, _, reason = line.partition("\treason=")
        d = dict(kv.split("=", 1) for kv in head.split() if "=" in kv)
        rec = {k: (int(v) if v.lstrip("-").isdigit() else v) for k, v in d.items()}
        if reason:
            rec["reason"] = reason
        out.append(rec)
    return out


def report(plan_path: str, status: list[dict], quiet: bool = False) -> list[str]:
    """The lines ``run`` prints about the plan (also when quiet: a refused plan is never silent)."""
    lines = []
    if not status:
        return [f"pyinterpose: --apply {plan_path}: no process asked for memory the plan covers; nothing served"]
    for s in status:
        fell = sum(int(s.get(c, 0)) for c in COUNTS if c != "served")
        why = ", ".join(f"{c.replace('_', ' ')} {s[c]}" for c in COUNTS[1:] if s.get(c))
        head = f"pyinterpose: --apply {plan_path}: pid {s.get('pid')}: "
        if s.get("state") == "refused":
            lines.append(head + f"the plan does not match this program ({s.get('reason', '')}); nothing served "
                                f"after that ({s.get('served', 0)} before)")
        elif not quiet:
            lines.append(head + f"served {s.get('served', 0)} of {int(s.get('served', 0)) + fell} requests from "
                                f"a {fmt_bytes(int(s.get('capacity', 0)))} arena over {s.get('iterations', 0)} "
                                f"iterations" + (f"; {fell} fell through ({why})" if fell else "")
                                + (f"; {s['placed']} of the first iterations' requests placed off their planned "
                                   f"slots" if s.get("placed") else ""))
        if "swap_managed" in s and not quiet:
            lines.append(head + f"swaps: {s.get('swap_out', 0)} out, {s.get('swap_in', 0)} back "
                                f"({s.get('swap_waits', 0)} stream waits), {s.get('swap_late', 0)} late, "
                                f"{s.get('swap_unforeseen', 0)} unforeseen accesses waited; "
                                f"{s.get('swap_managed', 0)} requests from managed memory "
                                f"({s.get('swap_populated', 0)} populated on the device before their first kernel), "
                                f"{s.get('swap_real', 0)} to the program's allocator by plan"
                                + (f" ({s['swap_refused']} of them because the device had too little free memory "
                                   f"for managed memory)" if s.get("swap_refused") else "")
                                + (f"; a swap-in found no room on the device {s['swap_no_room']} times (the block "
                                   f"stayed on the host until a launch needed it)" if s.get("swap_no_room") else ""))
        if s.get("arena") == "failed":
            lines.append(head + "the arena could not be reserved; nothing served")
    return lines


def _warn(msg: str) -> None:
    sys.stderr.write(f"pyinterpose: warning: {msg}\n")
    sys.stderr.flush()
