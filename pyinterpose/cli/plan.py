"""``pyinterpose plan --csv IN --capacity N -o OUT``: offsets for a MiniMalloc CSV."""
from __future__ import annotations

from . import _args as A

NO_PLAN_EXIT = 3


def register(sub) -> None:
    from ..analysis.pools import PLANNERS

    p = sub.add_parser("plan", help="plan buffer offsets for a MiniMalloc CSV",
                       description="Read buffers (id,lower,upper,size; half-open lifetimes; legacy "
                                   "buffer/start/begin/end columns accepted), find offsets within "
                                   "--capacity and write the same rows with an offset column. Exit 0 with "
                                   "a valid plan, 3 when none fits within the capacity and time limit, "
                                   "2 on bad input.")
    p.add_argument("--csv", required=True, metavar="IN.csv", help="MiniMalloc CSV input")
    p.add_argument("--capacity", required=True, type=A.byte_count(1), metavar="N", help="memory capacity (bytes)")
    p.add_argument("--strategy", default="optimal", choices=PLANNERS, help="planner (default optimal)")
    p.add_argument("--time-limit", type=A.time_limit_s, default=30.0, metavar="S",
                   help="seconds for the optimal planner (default 30)")
    p.add_argument("-o", "--output", metavar="OUT.csv", help="where to write the plan")
    p.add_argument("-f", "--force", action="store_true", help="overwrite the -o file if it exists")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=run, outputs=(("output", "-o"),))


def run(args) -> int:
    import numpy as np

    from ..analysis.pools import load, plan, read_minimalloc_csv, write_minimalloc_csv
    from ..errors import PyinterposeError
    from ..report.text import console, fmt_bytes, print_json, print_kv

    A.check_input(args.csv, "--csv")
    df = read_minimalloc_csv(args.csv)
    prob = df.drop(columns=["offset"], errors="ignore")
    lb = load(*(prob[c].to_numpy(np.int64) for c in ("lower", "upper", "size")))
    p = plan(prob, args.strategy, time_limit=args.time_limit,
             capacity=args.capacity if args.strategy == "optimal" else None)
    result = {"input": args.csv, "buffers": int(len(prob)), "capacity": args.capacity, "strategy": args.strategy,
              "load_bytes": int(lb), "seconds": round(p.seconds, 4)}
    if p.offsets is None or p.peak_bytes > args.capacity:
        why = {"infeasible": "proven infeasible", "timeout": f"none found within {args.time_limit:g} s"}.get(
            p.details.get("status"), f"{args.strategy} needs {p.peak_bytes}")
        if lb > args.capacity:
            why = f"LOAD {lb} exceeds it"
        raise PyinterposeError(f"no plan within capacity {args.capacity}: {why}", exit_code=NO_PLAN_EXIT)
    out = prob.copy()
    out["offset"] = p.offsets
    if args.output:
        write_minimalloc_csv(out, args.output)
    result.update(height_bytes=int(p.peak_bytes), output=args.output)
    if p.optimal is not None:
        result["optimal"] = bool(p.optimal)
    if args.json:
        print_json(result)
        return 0
    print_kv([("input", f"{args.csv} ({len(prob)} buffers)"), ("strategy", args.strategy),
              ("capacity", fmt_bytes(args.capacity)), ("LOAD", fmt_bytes(lb)),
              ("height", f"{fmt_bytes(p.peak_bytes)} ({p.peak_bytes / lb:.3f} x LOAD)" if lb else "0"),
              ("seconds", f"{p.seconds:.3f}"), ("written", args.output or "(no -o given)")],
             title="Plan", out=console())
    return 0
