"""``pyinterpose report FILE [-o report.html]``: the self-contained HTML report."""
from __future__ import annotations

# Lazy imports (in functions): `pyinterpose --help` loads every cli module, so analyses/reports load on use.

import os

from ..errors import PyinterposeError
from . import _args as A


def register(sub) -> None:
    p = sub.add_parser("report", help="write a self-contained HTML report with plots",
                       description="Write one self-contained HTML file (figures inline, no network needed): "
                                   "memory over time by block class, block sizes, access intervals and the "
                                   "bandwidth filter, pool strategies against the bound, the swap Pareto curve, "
                                   "and the largest/outlier blocks.")
    p.add_argument("trace", metavar="FILE", nargs="+",
                   help="trace file written by `pyinterpose run`; several files, a folder or a glob: the traces "
                        "of one job, reported side by side per rank (default output: job.html)")
    p.add_argument("-o", "--output", help="HTML file to write (default: FILE with .html)")
    p.add_argument("-f", "--force", action="store_true", help="overwrite the output file if it exists")
    p.add_argument("--bandwidth", type=A.bandwidth_gbps, metavar="GBPS",
                   help="host<->device bandwidth per direction in GB/s (default: measured/NVML)")
    p.add_argument("--time-limit", type=A.time_limit_s, default=5.0, metavar="S",
                   help="time limit for the exact pool planner, seconds (default 5)")
    p.add_argument("--top", type=A.count(1), default=15, help="rows in the largest-blocks table (default 15)")
    p.add_argument("--json", action="store_true", help="print the headlines as one JSON object")
    from .summary import add_job_options
    add_job_options(p)
    A.add_site_skip(p)
    p.set_defaults(func=run)


def default_output(trace_path: str) -> str:
    base, _ = os.path.splitext(trace_path)
    return base + ".html"


def run(args) -> int:
    from ..analysis import job

    if job.is_many(args.trace):
        return _run_job(args)
    args.trace = args.trace[0]
    from ..outfile import atomic_output
    from ..report import html
    from ..report.text import console, print_json, print_kv, progress

    out = args.output or default_output(args.trace)
    A.check_output(out, args.force)
    trace = A.load_trace(args.trace, quiet=args.json)
    A.apply_site_skip(trace, args)
    with progress("analysing", enabled=None if not args.json else False) as pr:
        rep = html.build(trace, bandwidth=args.bandwidth, time_limit=args.time_limit, top=args.top, progress=pr)
    try:
        with atomic_output(out, "w", encoding="utf-8") as f:
            f.write(html.render(rep))
    except OSError as e:
        raise PyinterposeError(f"cannot write {out}: {e.strerror or e}")
    notes = [f"{s.title}: {n}" for s in rep.sections for n in s.notes if "not available" in n]
    if args.json:
        print_json({"output": out, "headlines": rep.headlines, "not_available": notes}, trace=trace)
        return 0
    con = console()
    print_kv(rep.facts, title="Summary", out=con)
    for n in notes:
        con.print(f"  {n}")
    con.print(f"Report written to {out}")
    return 0


def _run_job(args) -> int:
    """Many traces: the job's ranks side by side in one HTML page."""
    from ..report import html
    from ..report.ranks_view import job_report
    from ..report.text import console, print_kv, to_jsonable
    from .summary import run_job_analysis

    out = args.output or "job.html"
    A.check_output(out, args.force)
    res = run_job_analysis(argparse_namespace(args))
    rep = job_report(res, f"pyinterpose job report: {len(res['traces'])} traces")
    from ..outfile import atomic_output
    try:
        with atomic_output(out, "w", encoding="utf-8") as f:
            f.write(html.render(rep))
    except OSError as e:
        raise PyinterposeError(f"cannot write {out}: {e.strerror or e}")
    if args.json:
        import json
        print(json.dumps(to_jsonable({"output": out, "headlines": rep.headlines}), indent=2, default=str))
        return 0
    con = console()
    print_kv(rep.facts, title="Job", out=con)
    con.print(f"Report written to {out}")
    return 0


def argparse_namespace(args):
    """``args`` as summary's job analysis reads it (the traces in ``file``)."""
    import argparse
    return argparse.Namespace(file=args.trace, scheduler=args.scheduler, workers=args.workers)
