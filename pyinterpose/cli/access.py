"""``pyinterpose access FILE``: access intervals (ATI), the bandwidth filter and outliers (paper 1)."""
from __future__ import annotations

# Lazy imports (in functions): `pyinterpose --help` loads every cli module, so analyses/reports load on use.

from . import _args as A


def register(sub) -> None:
    p = sub.add_parser("access", help="access-time intervals, bandwidth filter and outliers",
                       description="Time between consecutive touches of each block (ATI: allocation -> first "
                                   "access, access -> access, last access -> free), its distribution, the "
                                   "bandwidth filter (an interval can hide a swap out and in only if ATI >= "
                                   "size/BW_d2h + size/BW_h2d + latency), outliers (long ATI on large blocks) "
                                   "and their share of memory pressure, and stability across iterations.")
    p.add_argument("trace", metavar="FILE", help="trace file written by `pyinterpose run`")
    p.add_argument("--bandwidth", type=A.bandwidth_gbps, metavar="GBPS",
                   help="host<->device bandwidth per direction, GB/s; default: a cached `pyinterpose "
                        "bandwidth` measurement for the trace's GPU, else NVML's link figure, else the "
                        "filter is skipped")
    p.add_argument("--latency-us", type=A.latency_us, metavar="X", help="fixed cost per transfer, microseconds")
    p.add_argument("--ati-quantile", type=A.fraction, default=0.9, metavar="Q",
                   help="outlier ATI threshold as a quantile of all ATIs (default 0.9)")
    p.add_argument("--size-quantile", type=A.fraction, default=0.9, metavar="Q",
                   help="outlier size threshold as a quantile of block sizes (default 0.9)")
    p.add_argument("--pid", type=A.count(), help="process to analyse (default: the one with most allocations)")
    p.add_argument("--top", type=A.count(), default=10, metavar="N", help="outliers listed (default 10)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    from .summary import add_job_options

    add_job_options(p)      # --scheduler / --workers: a long process's interval pass per range of blocks
    p.set_defaults(func=run)


def run(args) -> int:
    from ..analysis.access import analyze
    from ..errors import PyinterposeError
    from ..report.text import console, fmt_bytes, fmt_ns, fmt_pct, print_json, print_kv, print_table

    trace = A.load_trace(args.trace, quiet=args.json)
    if args.pid is not None and args.pid not in trace.pids:
        raise PyinterposeError(f"no process {args.pid} in the trace (processes: "
                               f"{', '.join(map(str, trace.pids)) or 'none'})")
    from ..analysis import fanout, job

    with fanout.using(job.scheduler_address(args.scheduler), args.workers), \
            A.working(args, "analysing accesses"):   # the interval pass per range of blocks (access_fan)
        r = analyze(trace, bandwidth=args.bandwidth, latency_us=args.latency_us, pid=args.pid,
                    ati_quantile=args.ati_quantile, size_quantile=args.size_quantile, top=args.top)
    if args.json:
        print_json(r, trace=trace)
        return 0
    con = console()
    q = r["ati_quantiles"] or {}
    head = [
        ("process", r["pid"]),
        ("clock", r.get("clock", "cpu") + (f" ({r['clock_note']})" if r.get("clock_note") else "")),
        ("iterations", f"{r['iterations']['count']} ({r['iterations']['source']})"),
        ("blocks", f"{r['blocks']} ({r['accessed_blocks']} accessed)"),
        ("accesses", r["accesses"]),
        ("intervals", r["intervals"]),
        ("ATI", f"p50 {fmt_ns(q.get('p50'))}, p90 {fmt_ns(q.get('p90'))}, p99 {fmt_ns(q.get('p99'))}, "
                f"max {fmt_ns(q.get('max'))}" if q else "-"),
    ]
    if r["bandwidth"]:
        bw = r["bandwidth"]
        f = r["filtered_fraction"]
        head += [
            ("bandwidth", f"D2H {bw['d2h_bytes_per_s'] / 1e9:.2f} GB/s, H2D {bw['h2d_bytes_per_s'] / 1e9:.2f} "
                          f"GB/s, latency {bw['latency_s'] * 1e6:.1f} us ({bw['source']})"),
            ("filtered out (too short to hide a swap)",
             f"{fmt_pct(f['intervals'])} of intervals, {fmt_pct(f['blocks'])} of blocks, "
             f"{fmt_pct(f['bytes'])} of bytes"),
        ]
    else:
        head.append(("bandwidth filter", r["bandwidth_note"]))
    print_kv(head, title="Access intervals", out=con)
    for n in r.get("notes", []):
        con.print(f"note: {n}")
    if r["ati_by_kind"]:
        rows = [(k, v["intervals"], fmt_ns(v["quantiles"]["p50"]), fmt_ns(v["quantiles"]["p90"]),
                 fmt_ns(v["quantiles"]["max"]),
                 fmt_pct(r["filtered_by_kind"][k]) if r.get("filtered_by_kind") else "-")
                for k, v in r["ati_by_kind"].items()]
        print_table(rows, ["interval", "count", "p50", "p90", "max", "filtered"], out=con)
    o = r["outliers"]
    if o:
        print_kv([
            ("thresholds", f"ATI >= {fmt_ns(o['ati_threshold_ns'])} (p{o['ati_quantile'] * 100:g}), "
                           f"size >= {fmt_bytes(o['size_threshold_bytes'])} (p{o['size_quantile'] * 100:g})"),
            ("outliers", f"{o['intervals']} intervals on {o['blocks']} blocks ({fmt_bytes(o['bytes'])})"),
            ("share of peak", f"{fmt_pct(o['share_of_peak_bytes'])} of {fmt_bytes(o['peak_bytes'])} live at the peak"),
            ("share of pressure", f"{fmt_pct(o['share_of_pressure'])} of bytes x time in "
                                  f"{o['pressure_window']['name']}"),
            ("swappable outliers", "-" if o["swappable_intervals"] is None else o["swappable_intervals"]),
        ], title="Outliers (long ATI on large blocks)", out=con)
        if o["top"]:
            print_table([(t["block_id"], fmt_bytes(t["size"]), fmt_ns(t["ati_ns"]), t["kind"]) for t in o["top"]],
                        ["block", "size", "ATI", "interval"], out=con)
    s = r["stability"]
    if s:
        print_kv([("blocks in iterations", s["blocks"]),
                  ("same size, position and access count next step",
                   f"{fmt_pct(s['stable_blocks'])} of blocks, {fmt_pct(s['stable_bytes'])} of bytes"),
                  ("same size and position", fmt_pct(s["same_size_and_position"]))],
                 title="Stability across iterations", out=con)
    return 0
