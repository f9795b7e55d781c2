"""``pyinterpose fit`` as text: one line per capacity, then what was tried (from analysis.fit's dict)."""
from __future__ import annotations

from ..units import fmt_bytes


def _cost(c) -> str:
    if c is None:
        return ""
    return "no step-time cost" if not c else f"+{100 * c:.1f} % step time"


def capacity_line(a: dict) -> str:
    """``<label> (<bytes>): fits / fits with X / does not fit, headroom H, cost``."""
    head = f"{a['label']} ({fmt_bytes(a['capacity_bytes'])})"
    room = a["headroom_bytes"]
    if a["fits"]:
        tail = f"headroom {fmt_bytes(room)}"
        c = _cost(a["step_time_cost"])
        return f"{head}: {a['verdict']}; {tail}" + (f"; {c}" if c else "")
    return f"{head}: does not fit; short by {fmt_bytes(-room)} (best answer tried)"


def lines(res: dict, detail: bool = True) -> list[str]:
    out = [f"process {res['pid']} ({res['framework']}): lower bound (peak live bytes) "
           f"{fmt_bytes(res['lower_bound_bytes'])}; "
           f"{'its allocator' if res['simulator'] == 'none' else res['simulator'] + ' allocator'} as captured needs "
           f"{fmt_bytes(res['captured_need_bytes'])} (outside it: {fmt_bytes(res['outside_allocator_peak_bytes'])} "
           f"at most)"]
    for n in res.get("notes") or []:
        out.append(f"note: {n}")
    for a in res["capacities"]:
        out.append(capacity_line(a))
        if not detail:
            continue
        for ans in a["answers"]:
            need = f" needs {fmt_bytes(ans['need_bytes'])}" if ans["need_bytes"] is not None else ""
            cost = f", {_cost(ans['step_time_cost'])}" if ans["fits"] and ans["step_time_cost"] else ""
            note = f" ({ans['note']})" if str(ans.get("note", "")).startswith("not evaluated") or (
                ans["name"] == "host swapping" and ans.get("note")) else ""
            out.append(f"    {'yes' if ans['fits'] else 'no '}  {ans['name']}{need}{cost}{note}")
        for t in a.get("not_tried") or []:
            out.append(f"    not tried: {t}")
        for t in a.get("not_modelled") or []:
            out.append(f"    not modelled: {t}")
    return out
