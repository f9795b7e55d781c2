"""pyinterpose fit FILE [--capacity BYTES | --gpu NAME]... [--bandwidth GBPS] [--pid PID] [--json]"""
from __future__ import annotations

# Lazy imports (in functions): `pyinterpose --help` loads every cli module, so analyses/reports load on use.

from . import _args as A


def register(sub) -> None:
    p = sub.add_parser(
        "fit", help="would this run fit on a device of another size, and at what cost",
        description="For each capacity (bytes, or a GPU model from the package's table): does the run fit "
                    "with its framework's allocator as captured, with one of its knobs, with an optimally "
                    "planned pool, or with host swapping (and its cost in step time)? Without --capacity "
                    "or --gpu: every card of the table.",
        usage="pyinterpose fit FILE [--capacity BYTES | --gpu NAME]... [--bandwidth GBPS] [--pid PID] [--json]")
    p.add_argument("trace", metavar="FILE", help="trace file written by `pyinterpose run`")
    p.add_argument("--capacity", type=A.byte_count(1), action="append", default=[], metavar="BYTES",
                   help="device memory: bytes or with a unit (40GiB, 24GB = 24e9, 512MiB); repeatable")
    p.add_argument("--gpu", action="append", default=[], metavar="NAME",
                   help="a GPU model from the table (H100-SXM, A100-40GB, L4, T4, RTX-4090, ...); repeatable")
    p.add_argument("--bandwidth", type=A.bandwidth_gbps, metavar="GBPS",
                   help="host link per direction for swapping, GB/s (default: the card's PCIe; with a plain "
                        "--capacity, the trace's measured or NVML figure)")
    p.add_argument("--pid", type=A.count(), help="process to analyse (default: the one with most allocations)")
    p.add_argument("--json", action="store_true", help="print one JSON object (each answer has boolean `fits`)")
    p.set_defaults(func=run)


def run(args) -> int:
    from ..analysis.fit import find_gpu, fit
    from ..report.text import print_json

    caps = []
    for name in args.gpu:
        g = find_gpu(name)          # unknown name: one line listing the known ones
        caps.append((g["name"], g["capacity_bytes"], g))
    caps += [(None, c, None) for c in args.capacity]
    trace = A.load_trace(args.trace, quiet=args.json)
    with A.working(args, "fitting"):
        res = fit(trace, caps or None, pid=args.pid,
                  bandwidth_bytes_per_s=args.bandwidth * 1e9 if args.bandwidth else None)
    if args.json:
        print_json(res, trace=trace)
        return 0
    from ..report.fit_text import lines

    for line in lines(res):
        print(line)
    return 0
