"""``pyinterpose plan TRACE -o plan.json``: a plan file for ``run --apply`` (docs/apply.md);
``pyinterpose plan --csv IN --capacity N -o OUT``: offsets for a MiniMalloc CSV."""
from __future__ import annotations

# Lazy imports (in functions): `pyinterpose --help` loads every cli module, so analyses/reports load on use.

from . import _args as A

NO_PLAN_EXIT = 3


def register(sub) -> None:
    from ..analysis.pools import PLANNERS
    from ..analysis.swap import STRATEGIES as SWAP_STRATEGIES

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
    p.add_argument("--strategy", action="append", default=None, choices=PLANNERS + SWAP_STRATEGIES,
                   metavar="S", help="planner (" + ", ".join(PLANNERS) + "; default optimal) and, with --swap, the "
                   "swap strategy (" + ", ".join(SWAP_STRATEGIES) + "; default doa); repeat to give both")
    p.add_argument("--swap", action="store_true",
                   help="add a swap schedule: blocks run --apply moves to host memory and back between their "
                        "accesses (docs/swap-run.md)")
    p.add_argument("--bandwidth", type=A.bandwidth_gbps, metavar="GBPS",
                   help="with --swap: host<->device bandwidth per direction, GB/s (default: as `swap` resolves it)")
    p.add_argument("--budget", type=A.byte_count(0), metavar="B",
                   help="with --swap: schedule to this memory budget, pausing the program where needed (budget "
                        "mode); default: only swaps whose transfers hide (no overhead)")
    p.add_argument("--time-limit", type=A.time_limit_s, default=None, metavar="S",
                   help="seconds for the optimal planner (default 30 with --csv, 10 with a trace)")
    p.add_argument("-o", "--output", metavar="OUT", help="where to write the plan (plan.json / OUT.csv)")
    p.add_argument("-f", "--force", action="store_true", help="overwrite the -o file if it exists")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=run, outputs=(("output", "-o"),))


def _strategies(args) -> None:
    """--strategy, repeatable: the planner and the swap strategy (their names do not overlap)."""
    from ..analysis.pools import PLANNERS
    from ..errors import PyinterposeError

    given = args.strategy or []
    planners = [s for s in given if s in PLANNERS]
    swaps = [s for s in given if s not in PLANNERS]
    if len(planners) > 1 or len(swaps) > 1:
        raise PyinterposeError("plan: --strategy: at most one planner and one swap strategy")
    if swaps and not args.swap:
        raise PyinterposeError(f"plan: --strategy {swaps[0]} is a swap strategy: add --swap")
    if not args.swap and (args.bandwidth is not None or args.budget is not None):
        raise PyinterposeError("plan: --bandwidth and --budget need --swap")
    args.strategy = planners[0] if planners else "optimal"
    args.swap_strategy = swaps[0] if swaps else "doa"


def run(args) -> int:
    _strategies(args)
    if args.swap and args.csv is not None:
        from ..errors import PyinterposeError
        raise PyinterposeError("plan: --swap needs a TRACE (not --csv)")
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

    if not args.output and not args.json:
        from ..errors import PyinterposeError
        raise PyinterposeError(f"plan {args.trace}: give -o PLAN.json to write the plan (--json prints what it "
                               "would hold); nothing was written")
    A.check_input(args.trace)
    trace = A.load_trace(args.trace, quiet=args.json)
    if (trace.meta or {}).get("view") == "reserved":
        A.warn(f"{args.trace} was recorded with --view reserved: the plan lays out the framework allocator's "
               "segments, not its tensors (a --view blocks trace gives the plan that saves memory)")
    doc = plan_file.build(trace, args.strategy, 10.0 if args.time_limit is None else args.time_limit,
                          trace_path=args.trace)
    if args.swap:
        from ..analysis.bandwidth import resolve_bandwidth
        from ..analysis.swap.planned import apply_to_plan

        apply_to_plan(doc, trace, resolve_bandwidth(trace, gbps=args.bandwidth), strategy=args.swap_strategy,
                      budget=args.budget, planner=args.strategy,
                      time_limit=10.0 if args.time_limit is None else args.time_limit)
        plan_format.check(doc)
    if args.output:
        plan_format.write(doc, args.output)
    it = doc["iteration"]
    n_persist = sum(r["phase"] == "persistent" for r in doc["requests"])
    result = {"trace": args.trace, "output": args.output, "strategy": args.strategy,
              "capacity": doc["capacity"], "load_bytes": doc["load_bytes"],
              "iteration_requests": it["requests"], "persistent_requests": n_persist,
              "boundary": it["boundary"], "optimal": doc["planner"]["optimal"],
              "seconds": doc["planner"]["seconds"]}
    sw = doc.get("swap")
    if sw:
        result["swap"] = {k: sw[k] for k in ("mechanism", "strategy", "mode", "budget", "bandwidth",
                                             "predicted_peak_bytes", "predicted_stall_ns", "predicted_stall_ns_run",
                                             "peak_before_bytes",
                                             "swap_model_peak_bytes", "arena_bytes", "managed")}
        result["swap"]["swaps"] = len(sw["swaps"])
        result["swap"]["not_swapped"] = len(sw["not_swapped"])
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
              *(_swap_rows(sw, fmt_bytes) if sw else []),
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


def _swap_rows(sw: dict, fmt_bytes) -> list:
    bw = sw["bandwidth"]
    mode = sw["mode"] + (f" (budget {fmt_bytes(sw['budget'])})" if sw.get("budget") is not None else "")
    why: dict[str, int] = {}
    for n in sw["not_swapped"]:
        why[n["why"]] = why.get(n["why"], 0) + 1
    rows = [("swaps", f"{len(sw['swaps'])} per iteration, {sw['strategy']}, {mode}, {sw['managed']} requests from "
                      f"managed memory ({sw['mechanism'].upper()}), at {bw['h2d_gbps']:g}/{bw['d2h_gbps']:g} GB/s"),
            ("predicted peak", f"{fmt_bytes(sw['predicted_peak_bytes'])} (arena {fmt_bytes(sw['arena_bytes'])} + "
                               f"{fmt_bytes(sw['beside_arena_peak_bytes'])} beside it at most; "
                               f"{fmt_bytes(sw['peak_before_bytes'])} without swapping)"),
            ("predicted stall", f"{sw['predicted_stall_ns'] / 1e6:.3f} ms in the planned iteration (replayed); "
                                f"{sw.get('predicted_stall_ns_run', 0.0) / 1e6:.3f} ms over the run (the program's "
                                f"waits for swap-ins)")]
    for w, n in why.items():
        rows.append(("not swapped", f"{n} interval(s): {w}"))
    return rows
