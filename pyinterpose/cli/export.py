"""``pyinterpose export FILE --format perfetto|memory-viz|csv|minimalloc -o OUT``."""
from __future__ import annotations

# Lazy imports (in functions): `pyinterpose --help` loads every cli module, so analyses/reports load on use.

import os

from ..errors import PyinterposeError
from . import _args as A
from ..report.exports import FORMATS

_EXT = {"perfetto": ".perfetto.json", "memory-viz": ".snapshot.pickle", "csv": ".blocks.csv",
        "minimalloc": ".minimalloc.csv",
        "folded": ".folded.txt", "speedscope": ".speedscope.json"}
_NEXT = {
    "perfetto": "open it at https://ui.perfetto.dev (Open trace file) or chrome://tracing",
    "memory-viz": "open it at https://pytorch.org/memory_viz, or: python -m torch.cuda._memory_viz trace_plot {out}",
    "csv": "one row per allocation (the blocks table)",
    "minimalloc": "plan it: pyinterpose plan --csv {out} --capacity BYTES",
    "folded": "draw it: flamegraph.pl --countname bytes {out} > flame.svg (or inferno-flamegraph, speedscope)",
    "speedscope": "open it at https://www.speedscope.app (or: speedscope {out})",
}


def register(sub) -> None:
    p = sub.add_parser("export", help="export a trace for other tools (Perfetto, PyTorch memory_viz, CSV, MiniMalloc)",
                       description="perfetto: Chrome trace JSON (live/reserved bytes counters per GPU, iteration "
                                   "slices, large-allocation instants). memory-viz: PyTorch memory snapshot pickle. "
                                   "csv: the blocks table. minimalloc: the steady iteration as a MiniMalloc CSV. folded: "
                                   "the device bytes live at the peak by call stack, as folded stacks "
                                   "(outer;...;inner BYTES). speedscope: the same at the peak and at each "
                                   "out-of-memory failure, as speedscope JSON.")
    p.add_argument("trace", metavar="FILE", help="trace file written by `pyinterpose run`")
    p.add_argument("--format", required=True, choices=FORMATS, help="output format")
    p.add_argument("-o", "--output", help="output file (default: FILE with a format suffix)")
    p.add_argument("-f", "--force", action="store_true", help="overwrite the output file if it exists")
    p.add_argument("--large", type=A.byte_count(), metavar="BYTES",
                   help="perfetto: allocations of at least BYTES get an instant (default: 1%% of the peak, >= 1 MiB)")
    p.add_argument("--pid", type=A.count(), help="memory-viz, minimalloc: the process to export (default: the main "
                                           "process; a snapshot holds one process)")
    p.add_argument("--moment", metavar="NAME",
                   help="folded, speedscope: the moment to export: peak (folded's default) or oom-N (the Nth "
                        "out-of-memory failure); speedscope's default: every moment, one profile each")
    p.add_argument("--json", action="store_true", help="print what was written as one JSON object")
    from .summary import add_job_options
    add_job_options(p)          # csv: a long trace's rows formatted per iteration range on these workers
    p.set_defaults(func=run)


def _say_on_stderr(fmt: str, out: str, info: dict) -> None:
    """What the file itself says: the trace was incomplete, or something was capped (one line each)."""
    import sys

    if info.get("marked_incomplete"):
        print(f"pyinterpose: warning: {out} is marked INCOMPLETE ({fmt}): {info.get('incomplete_reason')}",
              file=sys.stderr)
    for note in info.get("notes") or []:
        if not note.startswith("INCOMPLETE TRACE"):
            print(f"pyinterpose: note: {fmt} export: {note}", file=sys.stderr)


def run(args) -> int:
    from ..report.exports import export
    from ..report.text import console, print_json

    out = args.output or (os.path.splitext(args.trace)[0] + _EXT[args.format])
    A.check_output(out, args.force)
    trace = A.load_trace(args.trace, quiet=args.json)
    from ..analysis import fanout, job

    try:
        with fanout.using(job.scheduler_address(args.scheduler), args.workers), \
                A.working(args, f"exporting {args.format}") as pr:
            info = export(trace, args.format, out, large=args.large, pid=args.pid, moment=args.moment,
                          progress=pr.update)
    except OSError as e:
        raise PyinterposeError(f"cannot write {out}: {e.strerror or e}")
    _say_on_stderr(args.format, out, info)
    if args.json:
        print_json({"format": args.format, "output": out, **info}, trace=trace)
        return 0
    con = console()
    con.print(f"Wrote {args.format} export to {out}")
    if info.get("other_processes"):
        others = info["other_processes"]
        con.print(f"  process {info['pid']} only: a snapshot holds one process; the trace has device memory in "
                  f"{len(others)} other process(es) ({', '.join(map(str, others[:8]))}"
                  f"{', ...' if len(others) > 8 else ''}): export them with --pid")
    con.print("  " + _NEXT[args.format].format(out=out))
    return 0
