"""The out-of-memory explanation as text: compact (after `pyinterpose run`) and in full (`summary`).

Input: :func:`pyinterpose.analysis.oom.explain`'s dict."""
from __future__ import annotations

from ..units import fmt_bytes


def headline(ex: dict) -> str:
    if not ex["failures"]:
        other = ex.get("other_failed_calls", 0)
        return "no allocation failed" + (f" for lack of memory ({other} other CUDA calls failed)" if other else "")
    return (f"{ex['failures']} allocation{'s' if ex['failures'] != 1 else ''} failed for lack of device memory: "
            f"{ex['near']} near OOM (a retry succeeded), {ex['final']} final")


def _request(e: dict) -> str:
    where = f", {e['call_site']}" if e.get("call_site") else ""
    dev = ""
    if e.get("device_capacity_bytes"):
        dev = f"; device {fmt_bytes(e['device_capacity_bytes'])}"
        if e.get("device_free_bytes") is not None:
            dev += f", {fmt_bytes(e['device_free_bytes'])} free"
    retry = ""
    if e.get("retry"):
        retry = f"; retry of {fmt_bytes(e['retry']['bytes'])} succeeded (block {e['retry']['block_id']})"
    att = f" (attempt {e['attempt']})" if e.get("attempt", 1) > 1 else ""
    return (f"{e['outcome']}{att}: {e['api']} of {fmt_bytes(e['requested_bytes'])} at {e['t_s']:.3f} s "
            f"(pid {e['pid']}{where}){dev}{retry}")


# lifetime classes as the OOM lines say them ("outside" alone would clash with "outside the allocator")
CLASS_WORDS = {"outside": "outside the steps", "per_iteration": "per iteration", "cross_iteration": "cross iteration"}


def _holders_line(e: dict, n: int = 3) -> str | None:
    """The call sites holding the most of the live set (largest first)."""
    sites = [c for c in e.get("by_call_site") or [] if c["call_site"] != "(no call site recorded)"][:n]
    if not sites:
        return None
    return "held by " + ", ".join(f"{c['call_site']} {fmt_bytes(c['bytes'])}" for c in sites)


def _allocator_line(e: dict) -> str:
    if not e.get("framework_known", True):
        return "no framework's allocator recognised: every block is the program's own request"
    return (f"framework allocator {fmt_bytes(e['framework_allocator_bytes'])}, outside the framework allocator "
            f"{fmt_bytes(e['outside_allocator_bytes'])}")


def _live_line(e: dict) -> str:
    owners = ", ".join(f"{o['owner']} {fmt_bytes(o['bytes'])}" + (" (framework allocator)" if o.get(
        "framework_allocator") else "") for o in e["by_owner"][:3])
    classes = ", ".join(f"{CLASS_WORDS.get(c['class'], c['class'])} {fmt_bytes(c['bytes'])}"
                        for c in e["by_lifetime_class"][:4])
    s = f"live {fmt_bytes(e['process_live_bytes'])} in {e['live_blocks']} blocks: {owners or 'none'}"
    if classes:
        s += f"; {classes}"
    if e.get("other_processes_live_bytes"):
        s += f"; other processes on the device: {fmt_bytes(e['other_processes_live_bytes'])} more"
    return s


def _since_line(e: dict) -> str | None:
    sb = e.get("since_last_boundary")
    if not sb:
        return None
    top = sb["by_call_site"][0]["call_site"] if sb.get("by_call_site") else ""
    return (f"since step {sb['step']} began: +{fmt_bytes(sb['bytes'])} in {sb['blocks']} blocks still live"
            + (f" (most from {top})" if top else ""))


def _reserve_line(e: dict) -> str | None:
    r = e.get("reserve") or {}
    if r.get("reserve_bytes") is None:
        return f"reserve: {r.get('note', '')}" if r.get("note") else None
    if r.get("allocated_bytes") is None:
        return f"allocator reserve {fmt_bytes(r['reserve_bytes'])} ({r['source']}); {r.get('note', '')}"
    share = (f"; it would cover {100 * r['shortfall_share']:.0f} % of the shortfall"
             if r.get("shortfall_share") is not None else "")
    return (f"{r['allocator']} allocator reserve {fmt_bytes(r['reserve_bytes'])}, allocated inside "
            f"{fmt_bytes(r['allocated_bytes'])}, free inside {fmt_bytes(r['free_in_reserve_bytes'])} "
            f"({100 * (r['fragmentation'] or 0):.0f} % of the reserve{share}; {r['source'].split(' (')[0]})")


def compact(ex: dict, trace_path: str, limit: int = 3) -> list[str]:
    """A few lines for stderr after `run`: the headline, then per failure (the first ``limit`` and the
    last) the request, the live set and the growth since the last step boundary."""
    lines = [f"pyinterpose: {headline(ex)}"]
    ents = ex["entries"]
    shown = ents[:limit] + (ents[-1:] if len(ents) > limit else [])
    for i, e in enumerate(shown):
        if i == limit and len(ents) > limit + 1:
            lines.append(f"  ... {len(ents) - limit - 1} more")
        lines.append("  " + _request(e))
        lines.append("    " + _live_line(e))
        h = _holders_line(e)
        if h:
            lines.append("    " + h)
        s = _since_line(e)
        if s:
            lines.append("    " + s)
    lines.append(f"  the full explanation: pyinterpose summary {trace_path}; "
                 f"where it would fit: pyinterpose fit {trace_path}")
    return lines


def full(ex: dict, top: int = 5) -> list[str]:
    """Every failure in full, for `summary`."""
    lines = [headline(ex)]
    for k, e in enumerate(ex["entries"]):
        lines.append(f"[{k}] " + _request(e))
        if e.get("detail"):
            lines.append(f"    {e['detail']}")
            continue
        if e.get("shortfall_bytes") is not None:
            lines.append(f"    short by {fmt_bytes(e['shortfall_bytes'])} (capacity: {e['capacity_source']})")
        lines.append("    " + _live_line(e))
        lines.append("    " + _allocator_line(e))
        r = _reserve_line(e)
        if r:
            lines.append("    " + r)
        if e["by_call_site"]:
            lines.append("    by call site:")
            for c in e["by_call_site"][:top]:
                lines.append(f"      {fmt_bytes(c['bytes']):>10}  {c['blocks']:>5} blocks  {c['call_site']}")
        if e["largest_blocks"]:
            lines.append("    largest live blocks:")
            for b in e["largest_blocks"][:top]:
                lines.append(f"      {fmt_bytes(b['bytes']):>10}  block {b['block_id']}  {b['class']}  {b['owner']}  "
                             f"{b['call_site']}  (allocated {b['age_s']:.3f} s before)")
        s = _since_line(e)
        if s:
            lines.append("    " + s)
    return lines
