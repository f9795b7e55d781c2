"""``pyinterpose summary``'s text: one block per part of :func:`pyinterpose.analysis.summary.summarize`'s
dict, each a printer ``(con, s, path)`` listed in :data:`SUMMARY_BLOCKS` (the one place; in print order).
A new block is a key of that dict (from its analysis) and a printer here; ``--json`` prints the dict."""
from __future__ import annotations

from rich.markup import escape
from rich.table import Table

from ..analysis.machine import machine_lines
from ..units import fmt_bytes, fmt_ns
from .oom_text import full


def print_summary(con, s: dict, path: str) -> None:
    for block in SUMMARY_BLOCKS:
        block(con, s, path)


def print_header(con, s: dict, path: str) -> None:
    con.print(f"[bold]{path}[/bold]  view={s['view']}  framework={s['framework']}  "
              f"duration={s['duration_s']:.2f} s  command: {' '.join(s['command'] or [])}")


def print_machine(con, s: dict, path: str) -> None:
    t = Table(title="machine", show_header=False)
    t.add_column("what")
    t.add_column("value")
    for k, v in machine_lines(s["machine"]):
        t.add_row(k, v)
    con.print(t)


def print_events(con, s: dict, path: str) -> None:
    t = Table(title="events", show_header=True)
    t.add_column("what")
    t.add_column("count", justify="right")
    for k, v in s["counts"].items():
        t.add_row(k, str(v))
    t.add_row("lost", str(s["lost_events"]))
    con.print(t)


def print_by_api(con, s: dict, path: str) -> None:
    t = Table(title="by API", show_header=True)
    t.add_column("api")
    t.add_column("calls", justify="right")
    for k, v in s["by_api"].items():
        t.add_row(k, str(v))
    con.print(t)


def print_processes(con, s: dict, path: str) -> None:
    t = Table(title="processes", show_header=True)
    for c in ("pid", "ppid", "forked", "device allocs", "host allocs", "launches", "peak live", "lost"):
        t.add_column(c, justify="right")
    for p in s["per_process"]:
        t.add_row(str(p["pid"]), str(p["ppid"]), str(p["forked"]), str(p["allocs"]), str(p.get("host_allocs", 0)),
                  str(p["launches"]),
                  fmt_bytes(p["peak_live_bytes"]), str(p["lost_events"]))
    con.print(t)


def print_owners(con, s: dict, path: str) -> None:
    known = s["framework"] != "unknown"
    t = Table(title="device memory by owner", show_header=True)
    for c in ("owner", "blocks", "allocated", "peak live", "framework allocator"):
        t.add_column(c, justify="left" if c == "owner" else "right")
    for r in s["by_owner"]:
        t.add_row(r["owner"], str(r["blocks"]), fmt_bytes(r["bytes"]), fmt_bytes(r["peak_live_bytes"]),
                  "-" if not known else "yes" if r["is_allocator"] else "no (outside the allocator)")
    con.print(t)
    con.print(allocator_line(s))


def print_graphs(con, s: dict, path: str) -> None:
    g = s.get("cuda_graphs") or {}
    if s["graph_launches"]:
        line = (f"CUDA graphs: {s['graph_launches']} replays, {g.get('replays_expanded', 0)} expanded into their "
                f"nodes ({g.get('memory_node_blocks', 0)} memory-node blocks)")
        if g.get("graph_pool_reserved_high") is not None:
            line += f"; graph pool reserved (high): {fmt_bytes(g['graph_pool_reserved_high'])}"
        if g.get("private_pool_bytes"):
            line += f"; allocated during capture (private pools): {fmt_bytes(g['private_pool_bytes'])}"
        con.print(line)
        if g.get("replays_unexpanded"):
            con.print(f"{g['replays_unexpanded']} of them ran a graph not captured in the trace: their kernels' "
                      "accesses are missing from the access analysis")


def print_completeness(con, s: dict, path: str) -> None:
    if not s["complete"]:
        con.print(f"[bold red]INCOMPLETE trace[/bold red]: {s['incomplete_reason']}")


def print_peak(con, s: dict, path: str) -> None:
    con.print(f"peak live device bytes: [bold]{fmt_bytes(s['peak_live_bytes'])}[/bold]  "
              f"allocated in total: {fmt_bytes(s['bytes_allocated'])}  kernels: {s['kernels']}")


def print_applied(con, ap: dict, fmt_bytes=fmt_bytes) -> None:
    """What the plan of a ``run --apply`` served (pyinterpose.analysis.applied)."""
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
            shown = rows if len(rows) <= 12 else rows[:6] + [None] + rows[-6:]
            for r in shown:
                if r is None:       # the rows left out, said so
                    hidden = rows[6:-6]
                    t.add_row(f"… {len(hidden)} iterations ({hidden[0]['iteration']}–{hidden[-1]['iteration']}) "
                              f"not shown", *("…" for _ in cols[1:]))
                    continue
                t.add_row(*("before the loop" if c == "iteration" and r[c] < 0 else str(r[c]) for c in cols))
            con.print(t)
        if p.get("swapped"):
            print_swaps(con, p)


def print_swaps(con, p: dict) -> None:
    """The swap engine per iteration (``plan --swap``; docs/swap-run.md)."""
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


def print_clock(con, s: dict) -> None:
    """The clock line, and on the device clock the launch-to-start lag (how far the CPU ran ahead)."""
    con.print(f"clock: [bold]{s['clock']}[/bold]" + (f"  ({s['clock_note']})" if s.get("clock_note") else ""))
    lag = s.get("launch_lag")
    if lag:
        con.print(f"launch-to-start lag over {lag['launches']} launches: median {fmt_ns(lag['median_ns'])}, "
                  f"p90 {fmt_ns(lag['p90_ns'])}, p99 {fmt_ns(lag['p99_ns'])}, max {fmt_ns(lag['max_ns'])}")


def short_uuid(uuid: str | None) -> str:
    """A GPU UUID as a table shows it: 'GPU-…00000001' (its last 8 hex digits; the whole UUID
    is in --json).  "?" when unknown."""
    if not uuid:
        return "?"
    return uuid if len(uuid) <= 13 else f"{uuid[:4]}…{uuid[-8:]}"


def print_ranks(con, per_rank: list, job: dict) -> None:
    """The per-rank table and the job's imbalance line (nothing when no process has a rank)."""
    if not per_rank or all(r["rank"] is None for r in per_rank):
        return
    t = Table(title="ranks", show_header=True)
    for c in ("rank", "host", "pid", "dev", "uuid", "peak live", "peak at", "coll. lib", "iters"):
        t.add_column(c, justify="left" if c in ("host", "uuid") else "right", overflow="fold", no_wrap=c == "uuid")
    for r in per_rank:
        at = f"{r['peak_t_ns'] / 1e9:.2f} s" if r["peak_t_ns"] is not None and r["peak_t_ns"] >= 0 else "-"
        t.add_row(str(r["rank"]), str(r["host"]), str(r["pid"]), str(r["device"]), short_uuid(r["device_uuid"]),
                  fmt_bytes(r["peak_live_bytes"]), at, fmt_bytes(r["collective_peak_bytes"]),
                  str(r["iterations"]))
    con.print(t)
    if len(job.get("per_device") or []) > 1 or any(len(e["ranks"]) > 1 for e in job.get("per_device") or []):
        t = Table(title="devices", show_header=True)
        for c in ("host", "uuid", "ranks", "sum of peaks"):
            t.add_column(c, justify="right" if c == "sum of peaks" else "left", overflow="fold")
        for e in job["per_device"]:
            t.add_row(str(e["host"]), short_uuid(e["device_uuid"]), ", ".join(str(r) for r in e["ranks"]),
                      fmt_bytes(e["sum_of_peaks"]))
        con.print(t)
    if job.get("imbalance") is not None:
        con.print(f"{job['ranks']} ranks: imbalance (max peak / median) [bold]{job['imbalance']:.3f}[/bold]; "
                  f"highest peak: {job.get('max_label') or 'rank ' + str(job['max_rank'])} "
                  f"({fmt_bytes(job['max_peak_bytes'])}); first to reach its peak: "
                  f"{job.get('first_to_peak_label') or 'rank ' + str(job['first_to_peak'])} "
                  f"({job['first_to_peak_clock']} clock)")


def allocator_line(s: dict) -> str:
    """The framework allocator in one line, from :func:`summarize`'s dict."""
    al, out = s["allocator"], s["outside_allocator"]
    if s["framework"] == "unknown":
        return (f"no framework recognised ({al['rule']}): {al['blocks']} device blocks, peak "
                f"{fmt_bytes(al['peak_live_bytes'])}")
    how = {"owners": "by recorded owner", "api": "by API"}.get(al["source"], al["source"])
    line = (f"{s['framework']}'s allocator ({how}: {al['rule']}): {al['blocks']} blocks, peak "
            f"{fmt_bytes(al['peak_live_bytes'])}; outside it: {out['blocks']} blocks, peak "
            f"{fmt_bytes(out['peak_live_bytes'])}")
    return line + (f"\n  note: {al['note']}" if al.get("note") else "")


def print_oom(con, s: dict) -> None:
    """The out-of-memory explanation (pyinterpose.report.oom_text), or "no allocation failed"."""
    ex = {**s["oom_summary"], "entries": s["oom"]}
    lines = full(ex)
    con.print(f"[bold]out of memory[/bold]: {escape(lines[0])}")
    for line in lines[1:]:
        con.print(escape(line), soft_wrap=True)


def print_call_sites(con, sites: dict, fmt_bytes=fmt_bytes, title_suffix: str = "") -> None:
    """The top call sites by bytes live at the peak and by allocation count (rich tables)."""
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


def print_window(con, s: dict) -> None:
    """A windowed or flight-recorder trace: the steps it covers and the whole run's growth."""
    w, g = s.get("window"), s.get("growth")
    if not w:
        return
    for p in w.get("processes", []):
        con.print(f"pid {p['pid']}: steps {p['first_step']} to {p['last_step']} of {p['steps_in_run']} in this trace "
                  f"({w['mode']}); live at the window's start: {fmt_bytes(p['live_bytes_at_start'] or 0)} "
                  f"in {p['snapshot_blocks']} blocks")
    if g:
        con.print(f"growth over the whole run: [bold]{g['bytes_per_step']:+,.0f} B per step[/bold]")
        for p in g["processes"]:
            for c in p["call_sites"][:5]:
                con.print(f"  {'LEAK ' if c['leak'] else ''}{c['call_site']}: +{fmt_bytes(c['grew_bytes'])} "
                          f"({c['bytes_per_step']:+,.0f} B per step), {fmt_bytes(c['live_bytes_at_end'])} live at the end")


SUMMARY_BLOCKS = [
    print_header,
    print_machine,
    print_events,
    print_by_api,
    print_processes,
    print_owners,
    print_graphs,
    print_completeness,
    print_peak,
    lambda con, s, path: print_clock(con, s),
    lambda con, s, path: print_call_sites(con, s["call_sites"]),
    lambda con, s, path: print_oom(con, s),
    lambda con, s, path: print_window(con, s),
    lambda con, s, path: print_ranks(con, s["per_rank"], s["ranks"]),
    lambda con, s, path: print_applied(con, s["applied"]) if s.get("applied") else None,
]
