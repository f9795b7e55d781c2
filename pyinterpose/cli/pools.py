"""``pyinterpose pools FILE``: every pool strategy against the lower bound."""
from __future__ import annotations

# Lazy imports (in functions): `pyinterpose --help` loads every cli module, so analyses/reports load on use.

from . import _args as A


def register(sub) -> None:
    from ..analysis.pools import DEFAULT_TIME_LIMIT, STRATEGIES

    p = sub.add_parser("pools", help="compare pool strategies with the lower bound",
                       description="Replay the trace's device allocations through simulated allocators "
                                   "(cudamalloc, pytorch, bfc, cnmem) and plan one steady iteration with "
                                   "offline planners (smartpool-bf, smartpool-ff, greedy-size, xla-heap, "
                                   "optimal). Each result is a ratio to the lower bound: peak live bytes "
                                   "(steady iteration for planners, whole run for allocators).")
    p.add_argument("trace", metavar="FILE", help="trace file written by `pyinterpose run`")
    p.add_argument("--strategies", metavar="A,B,...", default=",".join(STRATEGIES),
                   help="comma-separated subset of: " + ", ".join(STRATEGIES))
    p.add_argument("--time-limit", type=A.time_limit_s, default=DEFAULT_TIME_LIMIT, metavar="S",
                   help=f"seconds for the optimal planner's search; it stops earlier once its result is "
                        f"proven optimal (default {DEFAULT_TIME_LIMIT:g})")
    p.add_argument("--capacity", type=A.byte_count(1), metavar="BYTES",
                   help="device memory limit for the simulated allocators (default: none)")
    p.add_argument("--alloc-conf", metavar="CONF",
                   help="PyTorch allocator settings for the pytorch simulator, in PYTORCH_ALLOC_CONF syntax "
                        "(e.g. \"expandable_segments:True,max_split_size_mb:128,roundup_power2_divisions:4\"); "
                        "default: your PYTORCH_ALLOC_CONF / PYTORCH_CUDA_ALLOC_CONF as the trace recorded it, "
                        "else PyTorch's defaults; \"\" forces the defaults")
    p.add_argument("--pid", type=A.count(), help="process to analyse (default: the one with most allocations)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=run)


def run(args) -> int:
    from ..analysis.pools import evaluate
    from ..report.text import console, fmt_bytes, print_json, print_kv, print_table

    trace = A.load_trace(args.trace, quiet=args.json)
    allocator_options = None if args.alloc_conf is None else {"pytorch": args.alloc_conf}
    with A.working(args, "simulating pool strategies"):
        res = evaluate(trace, strategies=args.strategies, time_limit=args.time_limit, pid=args.pid,
                       capacity=args.capacity, allocator_options=allocator_options)
    if args.json:
        print_json(res, trace=trace)
        return 0
    con = console()
    it = res["iteration"]
    kv = [
        ("process", res["pid"]),
        ("lower bound (steady iteration)", "- (" + res["nothing_to_plan"] + ")" if res.get("nothing_to_plan")
         else fmt_bytes(res["bound_bytes"])),
        ("lower bound (whole run)", fmt_bytes(res["bound_whole_run_bytes"])),
        ("steady window (seq)", f"[{it['window'][0]}, {it['window'][1]}) from {it.get('source', '?')}"
                                f", {it['blocks']} blocks, {it['events']} events"),
    ]
    if res.get("capacity_bytes") is not None:
        fit = [r["strategy"] for r in res["strategies"] if r.get("fits")]
        kv.append(("capacity", f"{fmt_bytes(res['capacity_bytes'])}: "
                   + (f"fits with {', '.join(fit)}" if fit else "the run does not fit with any strategy")))
    print_kv(kv, title="Pool strategies", out=con)
    rows = []
    for r in res["strategies"]:
        extra = ""
        if "backing_allocations" in r:
            extra = _allocator_notes(r, from_cli=args.alloc_conf is not None)
        if "optimal" in r:
            extra = "proven optimal" if r["optimal"] else "best found (not proven)"
        if r.get("skipped"):
            extra = r["skipped"]
        if r.get("fits") is False:
            extra = f"DOES NOT FIT: {r['does_not_fit']}" + (f"; {extra}" if extra else "")
        ratio, frag = r["ratio_to_bound"], r["fragmentation"]
        peak = "-" if r["peak_bytes"] is None else fmt_bytes(r["peak_bytes"])
        if "oom_at_request" in r:
            peak += " at OOM"          # how far the replay got, not a pool
        rows.append([r["strategy"], peak,
                     "-" if ratio is None else f"{ratio:.3f}", "-" if frag is None else f"{100 * frag:.1f}%",
                     r["bound"], f"{r['seconds']:.3f}", extra])
    al, out = res.get("allocator") or {}, res.get("outside_allocator") or {}
    if out.get("blocks"):
        rows.append(["outside the allocator", fmt_bytes(out["peak_live_bytes"]), "-", "-", "-", "-",
                     f"{out['blocks']} blocks not replayed: made outside {al.get('framework', '?')}'s allocator "
                     f"(its blocks: {al.get('rule', '?')})"])
    print_table(rows, ["strategy", "peak", "ratio", "fragmentation", "bound", "seconds", "notes"],
                right=[1, 2, 3, 5], out=con)
    return 0


def _allocator_notes(r: dict, from_cli: bool) -> str:
    """The notes column of a simulated allocator: backing allocations and the options used."""
    d = r.get("details") or {}
    if r["strategy"] == "pytorch" and "pages_mapped" in d:
        notes = [f"{d['pages_mapped']} pages mapped in {d['segment_maps']} maps"
                 + (f", {d['pages_unmapped']} unmapped" if d["pages_unmapped"] else "")]
    else:
        notes = [f"{r['backing_allocations']} backing allocations"]
    if r["strategy"] == "pytorch":
        conf = r.get("alloc_conf") or {}
        src = conf.get("source", "default")
        if src == "default":
            notes.append("PyTorch defaults" + (f" ({conf['note']})" if conf.get("note") else ""))
        else:
            where = "--alloc-conf" if (src == "given" and from_cli) else src
            notes.append(f"{conf.get('alloc_conf') or _fmt_options(r.get('options') or {})} (from {where})")
        if conf.get("not_simulated"):
            notes.append("not simulated: " + ", ".join(conf["not_simulated"]))
    elif r["strategy"] == "cnmem" and d.get("streams"):
        notes.append(f"{d['child_managers']} stream managers, {d['borrowed']} borrowed blocks"
                     + (f", {d['steals']} stolen" if d["steals"] else ""))
    elif r.get("options"):
        notes.append(_fmt_options(r["options"]))
    return "; ".join(notes)


def _fmt_options(opts: dict) -> str:
    return ",".join(f"{k}:{v}" for k, v in opts.items()) or "defaults"
