"""``pyinterpose plan TRACE -o plan.json``: a plan file for ``run --apply`` (docs/apply.md);
``pyinterpose plan --csv IN --capacity N -o OUT``: offsets for a MiniMalloc CSV."""
from __future__ import annotations

from . import _args as A

NO_PLAN_EXIT = 3


def register(sub) -> None:
    from ..analysis.pools import PLANNERS

    p = sub.add_parser("plan", help="plan a trace's allocations into one arena (plan.json for run --apply), "
                                    "or offsets for a MiniMalloc CSV",
                       description="TRACE -o plan.json: lay one steady iteration of a blocks-view trace (and the "
                                   "blocks that live across iterations) out in one arena, each request keyed by "
                                   "(size, call site, ordinal) for `pyinterpose run --apply plan.json` "
                                   "(docs/apply.md). --csv IN.csv --capacity N: read buffers (id,lower,upper,size; "
                                   "half-open lifetimes; legacy buffer/start/begin/end columns accepted), find "
                                   "offsets within --capacity and write the same rows with an offset column. Exit 0 "
                                   "with a valid plan, 3 when none fits within the capacity and time limit, 2 on "
                                   "bad input.")
    p.add_argument("trace", nargs="?", metavar="TRACE", help="a blocks-view trace (pyinterpose run) to plan")
    p.add_argument("--csv", metavar="IN.csv", help="MiniMalloc CSV input (instead of a trace)")
    p.add_argument("--capacity", type=A.byte_count(1), metavar="N",
                   help="memory capacity (bytes; required with --csv)")
    p.add_argument("--strategy", default="optimal", choices=PLANNERS, help="planner (default optimal)")
    p.add_argument("--time-limit", type=A.time_limit_s, default=None, metavar="S",
                   help="seconds for the optimal planner (default 30 with --csv, 10 with a trace)")
    p.add_argument("-o", "--output", metavar="OUT", help="where to write the plan (plan.json / OUT.csv)")
    p.add_argument("-f", "--force", action="store_true", help="overwrite the -o file if it exists")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=run, outputs=(("output", "-o"),))


def run(args) -> int:
    if (args.trace is None) == (args.csv is None):
        from ..errors import PyinterposeError
        raise PyinterposeError("plan: give a TRACE (plan.json for run --apply) or --csv IN.csv --capacity N")
    if args.trace is not None:
        return _plan_trace(args)
    if args.capacity is None:
        from ..errors import PyinterposeError
        raise PyinterposeError("plan --csv needs --capacity N")
    if args.time_limit is None:
        args.time_limit = 30.0
    return _plan_csv(args)


def _plan_trace(args) -> int:
    from ..analysis.pools import plan_file
    from ..trace import plan_format
    from ..report.text import console, fmt_bytes, print_json, print_kv

    A.check_input(args.trace)
    trace = A.load_trace(args.trace, quiet=args.json)
    if (trace.meta or {}).get("view") == "reserved":
        A.warn(f"{args.trace} was recorded with --view reserved: the plan lays out the framework allocator's "
               "segments, not its tensors (a --view blocks trace gives the plan that saves memory)")
    doc = plan_file.build(trace, args.strategy, 10.0 if args.time_limit is None else args.time_limit,
                          trace_path=args.trace)
    if args.output:
        plan_format.write(doc, args.output)
    it = doc["iteration"]
    n_persist = sum(r["phase"] == "persistent" for r in doc["requests"])
    result = {"trace": args.trace, "output": args.output, "strategy": args.strategy,
              "capacity": doc["capacity"], "load_bytes": doc["load_bytes"],
              "iteration_requests": it["requests"], "persistent_requests": n_persist,
              "boundary": it["boundary"], "optimal": doc["planner"]["optimal"],
              "seconds": doc["planner"]["seconds"]}
    if args.json:
        print_json(result)
        return 0
    cap, lb = doc["capacity"], doc["load_bytes"]
    anchor = it["anchor"]
    print_kv([("trace", args.trace), ("strategy", args.strategy),
              ("arena", f"{fmt_bytes(cap)} ({cap / lb:.3f} x LOAD)" if lb else fmt_bytes(cap)),
              ("LOAD", fmt_bytes(lb)),
              ("requests", f"{it['requests']} per iteration, {n_persist} across iterations"),
              ("iteration boundary", "pyinterpose.mark_step() markers" if it["boundary"] == "markers" else
               f"each request of {anchor['size']} B from {anchor['owner'] or '(unknown caller)'}"),
              ("written", args.output or "(no -o given)")],
             title="Plan", out=console())
    if args.output:
        console().print(f"next: pyinterpose run --apply {args.output} -- {' '.join(doc['program']['command'])}")
    return 0


def _plan_csv(args) -> int:
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
