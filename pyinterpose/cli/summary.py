"""pyinterpose summary FILE [--json]"""
from __future__ import annotations

# Lazy imports (in functions): `pyinterpose --help` loads every cli module, so analyses/reports load on use.

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


def _run(args) -> int:
    from ..analysis import job

    if job.is_many(args.file):
        return _run_job(args)
    args.file = args.file[0]
    from ..analysis.summary import summarize
    from ._args import apply_site_skip

    trace = A.load_trace(args.file, quiet=args.json)
    apply_site_skip(trace, args)
    from ..analysis import fanout, job

    with fanout.using(job.scheduler_address(args.scheduler), args.workers), \
            A.working(args, "summarising"):   # the ranks of this one trace
        s = summarize(trace)
    if args.json:
        print(json.dumps(s, indent=2, default=str))
        return 0
    from rich.console import Console      # rich and the blocks: not at CLI start

    from ..report.summary_text import print_summary

    print_summary(Console(), s, args.file)
    return 0


def run_job_analysis(args) -> dict:
    """The job (many traces) of ``args.file`` on the executor ``args`` names."""
    from ..analysis import job
    from ..errors import PyinterposeError

    if args.workers is not None and args.workers < 1:
        raise PyinterposeError("--workers must be at least 1")
    paths = job.expand_paths(args.file)
    return job.analyse_job(paths, scheduler=job.scheduler_address(args.scheduler), max_workers=args.workers)


def _run_job(args) -> int:
    with A.working(args, "analysing the job's traces"):
        res = run_job_analysis(args)
    if args.json:
        print(json.dumps(res, indent=2, default=str))
        return 0
    from rich.console import Console       # rich: not at CLI start
    from rich.table import Table

    from ..report.summary_text import print_ranks
    from ..units import fmt_bytes

    con = Console()
    t = Table(title=f"{len(res['traces'])} traces of one job", show_header=True)
    for c in ("trace", "host", "processes", "events", "lost", "peak live", "complete"):
        t.add_column(c, justify="left" if c in ("trace", "host") else "right", overflow="fold")
    for tr in res["traces"]:
        t.add_row(tr["trace"], tr["host"], str(tr["processes"]), str(tr["events"]), str(tr["lost_events"]),
                  fmt_bytes(tr["peak_live_bytes"]), "yes" if tr["complete"] else "[bold red]NO[/bold red]")
    con.print(t)
    print_ranks(con, res["per_rank"], res["ranks"])
    job = res["ranks"]
    if res["per_rank"] and not job.get("ranked", True) and job.get("imbalance") is not None:
        con.print(f"{job['ranks']} processes (no rank variables): imbalance (max peak / median) "
                  f"{job['imbalance']:.3f}; highest peak: {job['max_label']} ({fmt_bytes(job['max_peak_bytes'])})")
    from ..report.ranks_view import duplicate_line

    for d in res.get("duplicates") or []:
        con.print(f"warning: {duplicate_line(d)}", soft_wrap=True)
    for tr in res["traces"]:
        for w in tr["warnings"]:
            con.print(f"warning: {tr['trace']}: {w}")
    return 0
