"""``pyinterpose iterations FILE``: the training loop's period, steps and their durations."""
from __future__ import annotations

# Lazy imports (in functions): `pyinterpose --help` loads every cli module, so analyses/reports load on use.

from . import _args as A


def register(sub) -> None:
    p = sub.add_parser("iterations", help="find the training loop's iterations",
                       description="Find the period of the training loop from the allocation sequence "
                                   "(sizes and lifetimes, as SINGA's signature), skipping warm-up and "
                                   "tolerating extra allocations in some steps. Markers recorded with "
                                   "pyinterpose.mark_step() override detection. With no loop the answer "
                                   "is source 'none', count 0.")
    p.add_argument("trace", metavar="FILE", help="trace file written by `pyinterpose run`")
    p.add_argument("--pid", type=A.count(), help="process to analyse (default: the one with most allocations)")
    p.add_argument("--no-markers", action="store_true", help="ignore markers, detect from allocations")
    p.add_argument("--max-extra", type=A.count(), metavar="N",
                   help="extra allocations tolerated in one step (default: max(3, period/4))")
    p.add_argument("--min-steps", type=A.count(2), default=3, metavar="N",
                   help="fewest repetitions that count as a loop (default 3)")
    p.add_argument("--limit", type=A.count(), default=20, metavar="N",
                   help="iterations listed in the table (default 20; --json lists all)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=run)


def run(args) -> int:
    from ..analysis.iterations import find_iterations
    from ..errors import PyinterposeError
    from ..report.text import console, fmt_ns, fmt_pct, print_kv, print_table

    trace = A.load_trace(args.trace, quiet=args.json)
    if args.pid is not None and args.pid not in trace.pids:
        raise PyinterposeError(f"no process {args.pid} in the trace (processes: "
                               f"{', '.join(map(str, trace.pids)) or 'none'})")
    with A.working(args, "finding iterations"):
        it = find_iterations(trace, args.pid, use_markers=not args.no_markers, min_steps=args.min_steps,
                             max_extra=args.max_extra)
    if args.json:           # the steps' list written a piece at a time (450 k steps at 100 M events)
        from ..report.json_rows import print_json_rows

        print_json_rows(it.to_dict(per_iteration=False), "iterations", it.count, it.rows, trace=trace)
        return 0
    d = it.to_dict()
    con = console()
    if it.count == 0:
        print_kv([("process", it.pid), ("source", it.source), ("count", 0),
                  ("why", it.reason or "no loop")], title="Iterations: no training loop found", out=con)
        return 0
    dur = d["duration_ns"]
    print_kv([
        ("process", it.pid),
        ("source", it.source + (" (pyinterpose.mark_step markers)" if it.source == "markers" else
                                " (detected from allocations)")),
        ("clock", d.get("clock", "cpu") + (f" ({d['clock_note']})" if d.get("clock_note") else "")),
        ("allocations per step", it.period_allocs),
        ("steps", it.count),
        ("first steady seq", it.first_steady_seq),
        ("stable steps", f"{fmt_pct(it.stable_fraction)} (same allocations and lifetimes, no extras)"),
        ("step duration", f"median {fmt_ns(dur['median'])}, min {fmt_ns(dur['min'])}, "
                          f"max {fmt_ns(dur['max'])}, cv {dur['cv']:.3f}"),
        ("signature match", fmt_pct(it.score) if it.source == "auto" else "-"),
    ], title="Iterations", out=con)
    rows = [(r["index"], r["start_seq"], r["end_seq"], fmt_ns(r["duration_ns"]),
             "yes" if r["exact"] else "no", r["extra_allocs"]) for r in d["iterations"][:args.limit]]
    print_table(rows, ["#", "start seq", "end seq", "duration", "exact", "extra allocs"], out=con)
    if it.count > args.limit:
        con.print(f"  ... {it.count - args.limit} more (--limit N, or --json for all)")
    return 0
