"""The report's out-of-memory section (first, when an allocation failed) and its fit table.

Each function fills a :class:`pyinterpose.report.sections.Section` (passed in) from
:mod:`pyinterpose.analysis.oom` and :mod:`pyinterpose.analysis.fit`."""
from __future__ import annotations

import pandas as pd

from ..analysis.fit import fit
from ..analysis.oom import explain, oom_failures
from .fit_text import capacity_line
from ..units import fmt_bytes
from .oom_text import full, headline
from .reporter import Reporter

OOM_EXPLAIN = ("Allocations that failed for lack of device memory, each with what was live at that moment (by owner,"
               " call site and lifetime class), the largest live blocks, what was allocated since the last step"
               " boundary and the framework allocator's reserve. A failure followed by a successful retry of the"
               " same request (PyTorch frees its cache and retries; XLA retries after collecting garbage) is a near"
               " OOM; the others are final.")
FIT_EXPLAIN = ("Would this run fit on another GPU? For each card of the package's table: the framework's allocator"
               " as captured (simulated), then, only where they can help, its knobs, an optimally planned pool and"
               " host swapping at the card's PCIe bandwidth (cost: stall time as a share of the run).")


def has_failures(trace) -> bool:
    return len(oom_failures(trace)) > 0


def fill_oom(s, trace, heads: dict) -> None:
    ex = explain(trace)
    heads["oom"] = {k: v for k, v in ex.items() if k != "entries"}
    s.facts.append(("failed allocations", headline(ex)))
    rows = []
    for e in ex["entries"]:
        rows.append({"outcome": e["outcome"], "attempt": e["attempt"], "pid": e["pid"], "t_s": round(e["t_s"], 6),
                     "api": e["api"], "requested": fmt_bytes(e["requested_bytes"]),
                     "device free": fmt_bytes(e.get("device_free_bytes")),
                     "capacity": fmt_bytes(e.get("device_capacity_bytes")), "live": fmt_bytes(e.get("live_bytes")),
                     "since step began": fmt_bytes((e.get("since_last_boundary") or {}).get("bytes")),
                     "call site": e.get("call_site", "")})
    s.tables.append(("failed allocations", pd.DataFrame(rows)))
    for k, e in enumerate(ex["entries"][:10]):
        if e.get("by_call_site"):
            s.tables.append((f"[{k}] live at the failure, by call site",
                             pd.DataFrame([{"call site": c["call_site"], "bytes": fmt_bytes(c["bytes"]),
                                            "blocks": c["blocks"]} for c in e["by_call_site"]])))
        if e.get("largest_blocks"):
            s.tables.append((f"[{k}] largest live blocks",
                             pd.DataFrame([{"block": b["block_id"], "bytes": fmt_bytes(b["bytes"]), "class": b["class"],
                                            "owner": b["owner"], "call site": b["call_site"]}
                                           for b in e["largest_blocks"]])))
    s.notes.extend(full(ex)[1:])


def fill_fit(s, trace, heads: dict) -> None:
    res = fit(trace, swap=False)
    heads["fit"] = {c["label"]: c["fits"] for c in res["capacities"]}
    s.facts += [("lower bound (peak live bytes)", fmt_bytes(res["lower_bound_bytes"])),
                ("its allocator's segments as recorded need" if res["simulator"] == "none" else
                 f"{res['simulator']} allocator as captured needs", fmt_bytes(res["captured_need_bytes"]))]
    s.tables.append(("per GPU", pd.DataFrame([{
        "GPU": c["label"], "memory": fmt_bytes(c["capacity_bytes"]), "verdict": c["verdict"],
        "headroom": fmt_bytes(c["headroom_bytes"]),
        "step time": "" if not c["step_time_cost"] else f"+{100 * c['step_time_cost']:.1f} %"}
        for c in res["capacities"]])))
    s.notes.extend(res.get("notes") or [])
    s.notes.append("host swapping is not evaluated here (seconds per card on a large trace): "
                   "`pyinterpose fit FILE --gpu NAME` adds it with the card's PCIe bandwidth")
    s.notes.extend(capacity_line(c) for c in res["capacities"] if not c["fits"])


OOM = Reporter("oom", "Out of memory", lambda s, ctx: fill_oom(s, ctx.trace, ctx.heads), explain=OOM_EXPLAIN,
               applies=lambda ctx: has_failures(ctx.trace))
FIT = Reporter("fit", "Would it fit on another GPU", lambda s, ctx: fill_fit(s, ctx.trace, ctx.heads),
               explain=FIT_EXPLAIN)
