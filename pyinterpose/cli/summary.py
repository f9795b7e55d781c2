"""pyinterpose summary FILE [--json]"""
from __future__ import annotations

import json

from . import _args as A


def register(sub) -> None:
    p = sub.add_parser("summary", help="what a trace holds: counts, processes, peak, loss",
                       description="Summarise a trace: event counts, APIs, processes, peak live bytes, loss.")
    p.add_argument("file", metavar="FILE", nargs="+",
                   help="a trace file; several files, a folder or a glob: the traces of one job (per rank)")
    p.add_argument("--json", action="store_true", help="print JSON")
    add_job_options(p)
    from ._args import add_site_skip
    add_site_skip(p)
    p.set_defaults(func=_run)


def add_job_options(p) -> None:
    """--scheduler / --workers: where the traces of a job are analysed (pyinterpose.analysis.job)."""
    p.add_argument("--scheduler", metavar="ADDRESS",
                   help="analyse the traces on this Dask distributed scheduler (tcp://HOST:PORT; default: "
                        "$PYINTERPOSE_SCHEDULER, else a local process pool)")
    p.add_argument("--workers", type=A.count(1), default=None, metavar="N",
                   help="local process pool size (default: the machine's cores)")


def _fmt_bytes(n) -> str:
    n = float(n or 0)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024


def _run(args) -> int:
    from ..analysis import job

    if job.is_many(args.file):
        return _run_job(args)
    args.file = args.file[0]
    from ..analysis.summary import summarize
    from ._args import apply_site_skip

    trace = A.load_trace(args.file, quiet=args.json)
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
    print_ranks(con, s["per_rank"], s["ranks"])
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
        if p.get("swapped"):
            _print_swaps(con, p)


def _print_swaps(con, p: dict) -> None:
    """The swap engine per iteration (``plan --swap``; docs/swap-run.md)."""
    from rich.table import Table

    tot = p["swap_totals"]
    con.print(f"[bold]swaps[/bold] (pid {p['pid']}): {tot['swaps_out']} out, {tot['swaps_in']} back, "
              f"{tot['late']} late, {tot['unforeseen']} unforeseen accesses waited; {tot['managed']} requests "
              f"from managed memory, {tot['real']} to the program's allocator by plan")
    t = Table(title=f"swaps per iteration (pid {p['pid']})", show_header=True)
    cols = ["iteration", "swaps_out", "swaps_in", "late", "unforeseen", "waits", "managed", "real"]
    for c in cols:
        t.add_column(c.replace("_", " "), justify="right")
    rows = p["swapped"]
    for r in (rows if len(rows) <= 12 else rows[:6] + rows[-6:]):
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


def print_ranks(con, per_rank: list, job: dict) -> None:
    """The per-rank table and the job's imbalance line (nothing when no process has a rank)."""
    from rich.table import Table

    if not per_rank or all(r["rank"] is None for r in per_rank):
        return
    t = Table(title="ranks", show_header=True)
    for c in ("rank", "host", "pid", "device", "uuid", "peak live", "peak at", "collective lib", "iterations"):
        t.add_column(c, justify="left" if c in ("host", "uuid") else "right", overflow="fold")
    for r in per_rank:
        at = f"{r['peak_t_ns'] / 1e9:.2f} s" if r["peak_t_ns"] is not None and r["peak_t_ns"] >= 0 else "-"
        t.add_row(str(r["rank"]), str(r["host"]), str(r["pid"]), str(r["device"]), r["device_uuid"] or "?",
                  _fmt_bytes(r["peak_live_bytes"]), at, _fmt_bytes(r["collective_peak_bytes"]),
                  str(r["iterations"]))
    con.print(t)
    if len(job.get("per_device") or []) > 1 or any(len(e["ranks"]) > 1 for e in job.get("per_device") or []):
        t = Table(title="devices", show_header=True)
        for c in ("host", "uuid", "ranks", "sum of peaks"):
            t.add_column(c, justify="right" if c == "sum of peaks" else "left", overflow="fold")
        for e in job["per_device"]:
            t.add_row(str(e["host"]), e["device_uuid"] or "?", ", ".join(str(r) for r in e["ranks"]),
                      _fmt_bytes(e["sum_of_peaks"]))
        con.print(t)
    if job.get("imbalance") is not None:
        con.print(f"{job['ranks']} ranks: imbalance (max peak / median) [bold]{job['imbalance']:.3f}[/bold]; "
                  f"highest peak: rank {job['max_rank']} ({_fmt_bytes(job['max_peak_bytes'])}); "
                  f"first to reach its peak: rank {job['first_to_peak']} ({job['first_to_peak_clock']} clock)")


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


def run_job_analysis(args) -> dict:
    """The job (many traces) of ``args.file`` on the executor ``args`` names."""
    from ..analysis import job
    from ..errors import PyinterposeError

    if args.workers is not None and args.workers < 1:
        raise PyinterposeError("--workers must be at least 1")
    paths = job.expand_paths(args.file)
    return job.analyse_job(paths, scheduler=job.scheduler_address(args.scheduler), max_workers=args.workers)


def _run_job(args) -> int:
    res = run_job_analysis(args)
    if args.json:
        print(json.dumps(res, indent=2, default=str))
        return 0
    from rich.console import Console
    from rich.table import Table

    con = Console()
    t = Table(title=f"{len(res['traces'])} traces of one job", show_header=True)
    for c in ("trace", "host", "processes", "events", "lost", "peak live", "complete"):
        t.add_column(c, justify="left" if c in ("trace", "host") else "right", overflow="fold")
    for tr in res["traces"]:
        t.add_row(tr["trace"], tr["host"], str(tr["processes"]), str(tr["events"]), str(tr["lost_events"]),
                  _fmt_bytes(tr["peak_live_bytes"]), "yes" if tr["complete"] else "[bold red]NO[/bold red]")
    con.print(t)
    print_ranks(con, res["per_rank"], res["ranks"])
    for tr in res["traces"]:
        for w in tr["warnings"]:
            con.print(f"warning: {tr['trace']}: {w}")
    return 0
