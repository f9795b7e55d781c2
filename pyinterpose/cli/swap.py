"""``pyinterpose swap FILE``: how far host swapping would lower the peak, and at what stall cost."""
from __future__ import annotations

# Lazy imports (in functions): `pyinterpose --help` loads every cli module, so analyses/reports load on use.

from ..errors import PyinterposeError
from . import _args as A
from ._args import parse_bytes  # noqa: F401  (the one byte-count parser)


def register(sub) -> None:
    from ..analysis.swap import MIN_SIZE, STRATEGIES

    p = sub.add_parser("swap", help="evaluate host swapping (SINGA's scores and schedulers)",
                       description="Evaluate swapping blocks to host memory between accesses: candidates are "
                                   "access->access intervals of blocks >= --min-size, ranked by DOA, AOA, WDOA, "
                                   "their majority vote, size, or ATI x size (outliers); scheduled with no "
                                   "overhead (transfers hidden) or to a budget (stalls counted). PCIe is one "
                                   "channel per direction, latency + size / bandwidth per transfer.")
    p.add_argument("trace", metavar="FILE", help="trace file written by `pyinterpose run`")
    p.add_argument("--bandwidth", type=A.bandwidth_gbps, metavar="GBPS",
                   help="host<->device bandwidth per direction, GB/s (1e9 B/s); default: a cached "
                        "`pyinterpose bandwidth` measurement for the trace's GPU, else NVML's link figure")
    p.add_argument("--latency-us", type=A.latency_us, metavar="X", help="fixed cost per transfer, microseconds")
    p.add_argument("--budget", type=A.byte_count(), metavar="BYTES",
                   help="memory budget (e.g. 6GiB); default: half-way between the swap floor and the peak")
    p.add_argument("--strategy", action="append", choices=STRATEGIES, metavar="NAME",
                   help=f"strategy to run (repeatable; default all: {', '.join(STRATEGIES)})")
    p.add_argument("--min-size", type=A.byte_count(1), default=MIN_SIZE, metavar="BYTES",
                   help="smallest block considered (default 1MiB)")
    p.add_argument("--pid", type=A.count(), help="process to analyse (default: the one with most allocations)")
    p.add_argument("--schedule-csv", metavar="OUT", help="write every schedule, one row per swap (seconds)")
    p.add_argument("-f", "--force", action="store_true", help="overwrite the --schedule-csv file if it exists")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=run, outputs=(("schedule_csv", "--schedule-csv"),))


def run(args) -> int:
    from ..analysis.swap import analyse
    from ..report.text import console, fmt_bytes, fmt_pct, print_json, print_kv, print_table

    trace = A.load_trace(args.trace, quiet=args.json)
    with A.working(args, "scheduling swaps"):
        ev = analyse(trace, bandwidth=args.bandwidth, budget=args.budget, strategies=args.strategy,
                     min_size=args.min_size, pid=args.pid, latency_us=args.latency_us,
                     schedules=bool(args.schedule_csv))     # whole schedules only when they are written
    d = ev.as_dict()
    if args.schedule_csv:
        try:
            from ..outfile import atomic_path

            with atomic_path(args.schedule_csv) as tmp:
                ev.schedule_table().to_csv(tmp, index=False, float_format="%.9f")
        except OSError as e:
            raise PyinterposeError(f"cannot write {args.schedule_csv}: {e.strerror or e}")
        d["schedule_csv"] = args.schedule_csv
    if args.json:
        print_json(d, trace=trace)
        return 0
    con = console()
    bw = d["bandwidth"]
    print_kv([
        ("process", d["pid"]),
        ("peak before", fmt_bytes(d["peak_before"])),
        ("swap floor", f"{fmt_bytes(d['floor'])} (every candidate away for its whole interval)"),
        ("budget", f"{fmt_bytes(d['budget'])} ({d['budget_source']})"),
        ("candidates", f"{d['candidates']} ({d['candidates_straddling_peak']} straddle the peak, "
                       f"{d['candidates_hideable']} long enough to hide both transfers)"),
        ("bandwidth", f"H2D {bw['h2d_bytes_per_s'] / 1e9:.2f} GB/s, D2H {bw['d2h_bytes_per_s'] / 1e9:.2f} GB/s, "
                      f"latency {bw['latency_s'] * 1e6:.1f} us"),
        ("bandwidth source", bw["source"]),
        ("clock", d.get("clock", "cpu")),
    ], title="Host swap", out=con)
    rows = [(r["strategy"], r["mode"] + ("*" if r.get("fallback") else ""), fmt_bytes(r["peak_after"]), fmt_pct(r["reduction"]),
             f"{r['stall_seconds'] * 1e3:.3f} ms", fmt_pct(r["overhead_fraction"], 2), r["swaps"],
             fmt_bytes(r["bytes_moved"]),
             "-" if r["budget_met"] is None else ("yes" if r["budget_met"] else "no"))
            for r in d["strategies"]]
    print_table(rows, ["strategy", "mode", "peak after", "reduction", "stall", "overhead", "swaps", "moved",
                       "budget met"], out=con)
    con.print("  stall: how much later the run ends when the schedule is replayed on a model of the GPU (kernels in"
              " recorded order, one copy engine per direction); peak after: the replayed peak; overhead: stall /"
              " run duration")
    if any(r.get("fallback") for r in d["strategies"]):
        con.print("  budget*: no schedule that stalls reached a lower peak than the no-overhead one: budget mode"
                  " offers the no-overhead schedule")
    for n in d["notes"]:
        con.print(f"  note: {n}")
    if args.schedule_csv:
        con.print(f"Schedules written to {args.schedule_csv}")
    return 0
