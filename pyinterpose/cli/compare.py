"""``pyinterpose compare A B ... [--json] [-o compare.html]``: traces side by side."""
from __future__ import annotations

# Lazy imports (in functions): `pyinterpose --help` loads every cli module, so analyses/reports load on use.

import os

from ..errors import PyinterposeError
from . import _args as A


def register(sub) -> None:
    p = sub.add_parser("compare", help="compare traces side by side (frameworks, views, ranks)",
                       description="Peak live and reserved bytes, allocations per iteration, size distribution, "
                                   "fragmentation per pool strategy, ATI and swap potential for each trace.")
    p.add_argument("traces", metavar="FILE", nargs="+",
                   help="trace files (two or more); a folder or a glob: its traces (a job's ranks)")
    p.add_argument("--labels", help="comma-separated labels, one per trace (default: file names)")
    p.add_argument("-o", "--output", help="also write a self-contained HTML page here")
    p.add_argument("-f", "--force", action="store_true", help="overwrite the HTML file if it exists")
    p.add_argument("--bandwidth", type=A.bandwidth_gbps, metavar="GBPS",
                   help="host<->device bandwidth per direction in GB/s (default: measured/NVML)")
    p.add_argument("--time-limit", type=A.time_limit_s, default=2.0, metavar="S",
                   help="time limit for the exact pool planner per trace, seconds (default 2)")
    p.add_argument("--no-pools", action="store_true", help="skip the pool strategies (faster)")
    p.add_argument("--no-swap", action="store_true", help="skip swap planning (faster)")
    p.add_argument("--json", action="store_true", help='print {"traces": [...]} as one JSON object')
    A.add_site_skip(p)
    p.set_defaults(func=run, outputs=(("output", "-o"),))


def _loaded(trace, args):
    A.apply_site_skip(trace, args)
    return trace


def run(args) -> int:
    from ..analysis.compare import compare_files
    from ..report.compare_view import print_table, render_html
    from ..report.text import print_json, progress

    import glob

    from ..analysis.job import expand_paths

    if any(os.path.isdir(t) or (not os.path.exists(t) and glob.has_magic(t)) for t in args.traces):
        args.traces = expand_paths(args.traces)      # folders and globs: their traces
    if len(args.traces) < 2:
        raise PyinterposeError("compare needs at least two trace files")
    labels = ([s.strip() for s in args.labels.split(",")] if args.labels
              else [os.path.basename(p) for p in args.traces])
    if labels is not None and len(labels) != len(args.traces):
        raise PyinterposeError(f"--labels has {len(labels)} labels for {len(args.traces)} traces")
    with progress("comparing", enabled=None if not args.json else False) as pr:
        cmp, traces = compare_files(args.traces, labels, bandwidth=args.bandwidth, time_limit=args.time_limit,
                                    pools=not args.no_pools, swap=not args.no_swap, progress=pr,
                                    load=lambda p: _loaded(A.load_trace(p, quiet=args.json), args))
    if args.output:
        try:
            from ..outfile import atomic_output

            with atomic_output(args.output, "w", encoding="utf-8") as f:
                f.write(render_html(cmp))
        except OSError as e:
            raise PyinterposeError(f"cannot write {args.output}: {e.strerror or e}")
    if args.json:
        print_json(cmp, trace=traces)
        return 0
    print_table(cmp)
    from ..report.summary_text import print_call_sites
    from ..units import fmt_bytes
    from ..report.text import console

    for r in cmp["traces"]:
        print_call_sites(console(), r.get("call_sites") or {}, fmt_bytes, f" — {r['label']}")
    if args.output:
        print(f"Comparison written to {args.output}")
    return 0
