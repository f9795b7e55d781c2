"""pyinterpose summary FILE [--json]"""
from __future__ import annotations

import json


def register(sub) -> None:
    p = sub.add_parser("summary", help="what a trace holds: counts, processes, peak, loss",
                       description="Summarise a trace: event counts, APIs, processes, peak live bytes, loss.")
    p.add_argument("file", metavar="FILE")
    p.add_argument("--json", action="store_true", help="print JSON")
    from ._args import add_site_skip
    add_site_skip(p)
    p.set_defaults(func=_run)


def _fmt_bytes(n) -> str:
    n = float(n or 0)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024


def _run(args) -> int:
    from ..analysis.summary import summarize
    from ..report.text import load_trace

    from ._args import apply_site_skip

    trace = load_trace(args.file, quiet=args.json)
    apply_site_skip(trace, args)
    s = summarize(trace)
    if args.json:
        print(json.dumps(s, indent=2, default=str))
        return 0
    from rich.console import Console
    from rich.table import Table

    con = Console()
    con.print(f"[bold]{args.file}[/bold]  view={s['view']}  framework={s['framework']}  "
              f"duration={s['duration_s']:.2f} s  command: {' '.join(s['command'] or [])}")
    from ..analysis.machine import machine_lines

    t = Table(title="machine", show_header=False)
    t.add_column("what")
    t.add_column("value")
    for k, v in machine_lines(s["machine"]):
        t.add_row(k, v)
    con.print(t)
    t = Table(title="events", show_header=True)
    t.add_column("what")
    t.add_column("count", justify="right")
    for k, v in s["counts"].items():
        t.add_row(k, str(v))
    t.add_row("lost", str(s["lost_events"]))
    con.print(t)
    t = Table(title="by API", show_header=True)
    t.add_column("api")
    t.add_column("calls", justify="right")
    for k, v in s["by_api"].items():
        t.add_row(k, str(v))
    con.print(t)
    t = Table(title="processes", show_header=True)
    for c in ("pid", "ppid", "forked", "allocs", "launches", "peak live", "lost"):
        t.add_column(c, justify="right")
    for p in s["per_process"]:
        t.add_row(str(p["pid"]), str(p["ppid"]), str(p["forked"]), str(p["allocs"]), str(p["launches"]),
                  _fmt_bytes(p["peak_live_bytes"]), str(p["lost_events"]))
    con.print(t)
    al = s["allocator"]
    known = s["framework"] != "unknown"
    t = Table(title="device memory by owner", show_header=True)
    for c in ("owner", "blocks", "allocated", "peak live", "framework allocator"):
        t.add_column(c, justify="left" if c == "owner" else "right")
    for r in s["by_owner"]:
        t.add_row(r["owner"], str(r["blocks"]), _fmt_bytes(r["bytes"]), _fmt_bytes(r["peak_live_bytes"]),
                  "-" if not known else "yes" if r["is_allocator"] else "no (outside the allocator)")
    con.print(t)
    con.print(allocator_line(s))
    if s["graph_launches"]:
        con.print(f"{s['graph_launches']} CUDA graph launches: the kernels inside graph replays are not seen "
                  "(their accesses are missing from the access analysis)")
    if not s["complete"]:
        con.print(f"[bold red]INCOMPLETE trace[/bold red]: {s['incomplete_reason']}")
    con.print(f"peak live device bytes: [bold]{_fmt_bytes(s['peak_live_bytes'])}[/bold]  "
              f"allocated in total: {_fmt_bytes(s['bytes_allocated'])}  kernels: {s['kernels']}")
    _print_clock(con, s)
    print_call_sites(con, s["call_sites"], _fmt_bytes)
    print_oom(con, s)
    if s.get("applied"):
        print_applied(con, s["applied"], _fmt_bytes)
    return 0


def print_applied(con, ap: dict, fmt_bytes) -> None:
    """What the plan of a ``run --apply`` served (pyinterpose.analysis.applied)."""
    from rich.table import Table

    plan = ap.get("plan") or {}
    for p in ap["processes"]:
        why = ", ".join(f"{k.replace('_', ' ')} {v}" for k, v in p["by_reason"].items() if v)
        con.print(f"[bold]plan[/bold] {plan.get('plan', '')} (pid {p['pid']}): served {p['served']} of "
                  f"{p['requests']} requests ({p['served_blocks']} blocks, {fmt_bytes(p['served_bytes'])}) from a "
                  f"{fmt_bytes(p['arena_capacity'])} arena"
                  + ("" if p["arena_reserved"] else " (never reserved)")
                  + (f"; {p['fell_through']} fell through ({why})" if p["fell_through"] else "")
                  + f"; real device peak {fmt_bytes(p['real_peak_bytes'])}")
        if p["refused"]:
            con.print(f"[bold red]plan refused[/bold red] at iteration {p['refused_at_iteration']}: "
                      + "; ".join(p["notes"]))
        rows = p["iterations"]
        if rows:
            t = Table(title=f"plan per iteration (pid {p['pid']})", show_header=True)
            cols = ["iteration", "served", "no_key", "occupied", "bigger", "capture", "overlap", "off", "other"]
            for c in cols:
                t.add_column(c.replace("_", " "), justify="right")
            shown = rows if len(rows) <= 12 else rows[:6] + rows[-6:]
            for r in shown:
                t.add_row(*("before the loop" if c == "iteration" and r[c] < 0 else str(r[c]) for c in cols))
            con.print(t)


def _print_clock(con, s: dict) -> None:
    """The clock line, and on the device clock the launch-to-start lag (how far the CPU ran ahead)."""
    from ..report.text import fmt_ns

    con.print(f"clock: [bold]{s['clock']}[/bold]" + (f"  ({s['clock_note']})" if s.get("clock_note") else ""))
    lag = s.get("launch_lag")
    if lag:
        con.print(f"launch-to-start lag over {lag['launches']} launches: median {fmt_ns(lag['median_ns'])}, "
                  f"p90 {fmt_ns(lag['p90_ns'])}, p99 {fmt_ns(lag['p99_ns'])}, max {fmt_ns(lag['max_ns'])}")


def allocator_line(s: dict) -> str:
    """The framework allocator in one line, from :func:`summarize`'s dict."""
    al, out = s["allocator"], s["outside_allocator"]
    if s["framework"] == "unknown":
        return (f"no framework recognised ({al['rule']}): {al['blocks']} device blocks, peak "
                f"{_fmt_bytes(al['peak_live_bytes'])}")
    how = {"owners": "by recorded owner", "api": "by API"}.get(al["source"], al["source"])
    line = (f"{s['framework']}'s allocator ({how}: {al['rule']}): {al['blocks']} blocks, peak "
            f"{_fmt_bytes(al['peak_live_bytes'])}; outside it: {out['blocks']} blocks, peak "
            f"{_fmt_bytes(out['peak_live_bytes'])}")
    return line + (f"\n  note: {al['note']}" if al.get("note") else "")


def print_oom(con, s: dict) -> None:
    """The out-of-memory explanation (pyinterpose.report.oom_text), or "no allocation failed"."""
    from rich.markup import escape

    from ..report.oom_text import full

    ex = {**s["oom_summary"], "entries": s["oom"]}
    lines = full(ex)
    con.print(f"[bold]out of memory[/bold]: {escape(lines[0])}")
    for line in lines[1:]:
        con.print(escape(line), soft_wrap=True)


def print_call_sites(con, sites: dict, fmt_bytes, title_suffix: str = "") -> None:
    """The top call sites by bytes live at the peak and by allocation count (rich tables)."""
    from rich.table import Table

    for key, title in (("by_peak", "top call sites by bytes live at the peak"),
                       ("by_count", "top call sites by allocations")):
        rows = sites.get(key) or []
        if not rows:
            continue
        t = Table(title=title + title_suffix, show_header=True)
        for c in ("call site", "owner", "allocs", "bytes", "live at peak"):
            if c in ("call site", "owner"):
                t.add_column(c, overflow="fold", ratio=3 if c == "call site" else 2)
            else:
                t.add_column(c, justify="right", no_wrap=True)
        for r in rows:
            t.add_row(r["call_site"], r["owner"], str(r["blocks"]), fmt_bytes(r["bytes"]),
                      fmt_bytes(r["peak_live_bytes"]))
        con.print(t)
    if sites.get("helpers") and (sites.get("by_peak") or sites.get("by_count")):
        how = "found automatically" if sites.get("site_skip") == "auto" else "--site-skip"
        con.print(f"call sites: the first frame outside the allocation helpers ({how}; --site-skip to choose): "
                  + ", ".join(sites["helpers"]))
    for n in sites.get("notes") or []:
        con.print(f"note (pid {n['pid']}): {n['note']}")
