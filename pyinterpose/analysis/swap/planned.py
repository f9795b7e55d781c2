"""The swap section of a plan file (``pyinterpose plan TRACE --swap``; issue 31, docs/swap-run.md).

A plan's arena is laid out for one steady iteration (:mod:`..pools.plan_file`); this module chooses, in
that same iteration, the swaps ``run --apply`` executes in every iteration, and predicts what the applied
run reaches:

1. :func:`window_problem` — the swap problem (:mod:`.problem`) of the plan's window only: the process's
   device blocks clipped to it, the access->access intervals of the plan's own requests that lie inside
   it, the compute ops released in it.  Intervals the swap engine cannot order are left out, each with
   why (``not_swapped``): its neighbouring access is a copy or memset (the engine acts at kernel
   launches), or its block outlives the iteration (two instances of its request are live at once).
2. :func:`choose` — a strategy in a mode (``no-overhead``, or ``budget`` with a budget) on that problem,
   validated (:func:`.validate_schedule`: no swap-out ends after the next access) and replayed
   (:mod:`.replay`); each swap keyed as the shim sees it: the block's request key (phase, size, site,
   ordinal), the launch after which it leaves, the launch after which it is sent back, and the launch
   before which it must be back, each as (kernel name, ordinal of that kernel's launches within the
   iteration).
3. :func:`predict` — the applied run's resident device bytes over the iteration: the arena (re-planned
   without the swapped requests, which are served from managed memory) plus each swapped block while it
   is resident (from its first touch to its swap-out's end, from its swap-in's start to its next swap-out or
   its free, at the replayed times) plus the device blocks the plan does not serve; its maximum is the
   section's ``predicted_peak_bytes``.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from ...errors import PyinterposeError
from ..bandwidth import Bandwidth
from .problem import MIN_SIZE, MODES, STRATEGIES, SWAP_INTERVAL_KIND, _kind_is, prepare_tables
from ..access import access_intervals
from ..clock import clock_of
from ..pools.plan_file import servable
from ..pools.planners import plan as run_planner
from ..pools.problem import load
from .engine_model import engine_items
from .replay import replay
from .schedule import schedule_with_candidates
from .strategies import _order
from .validate import validate_schedule

MECHANISM = "uvm"
MAX_RESCHEDULES = 60    # schedules made again at most, leaving out swaps other iterations undo


def _block_times(trace, pid: int, clock) -> pd.DataFrame:
    """The process's blocks with t_alloc / t_free on the swap clock (device clock: where the GPU reached them)."""
    tb = trace.blocks
    mine = tb["pid"].to_numpy() == pid
    b = tb[mine].copy()
    if clock.device:
        for t, sq in (("t_alloc", "seq_alloc"), ("t_free", "seq_free")):
            b[t] = clock.host_times(b[sq].to_numpy(), b[t].to_numpy())
    return b


def window_problem(trace, doc: dict, bandwidth: Bandwidth, min_size: int = MIN_SIZE, unsteady=frozenset()):
    """(problem, context) of the plan's window; see the module docstring.  ``unsteady``: request keys
    (phase, size, site, ordinal) left out because another iteration names their block while it would be away."""

    pid = int(doc["trace"]["pid"])
    clock = clock_of(trace, pid)
    blocks = _block_times(trace, pid, clock)
    lo, hi = _tightest_iteration(trace, doc, pid, blocks)
    at_lo = blocks.loc[blocks["seq_alloc"] == lo, "t_alloc"]
    at_hi = blocks.loc[blocks["seq_alloc"] == hi, "t_alloc"]
    if at_lo.empty or at_hi.empty:
        raise PyinterposeError("the plan's window does not match the trace (its boundary requests are missing)")
    t_lo, t_hi = int(at_lo.iat[0]), int(at_hi.iat[0])
    ops_all = clock.replay_ops()
    m = (ops_all["seq"] >= lo) & (ops_all["seq"] < hi)
    ops = {k: np.ascontiguousarray(v[m]) for k, v in ops_all.items()}
    key_of = _keys_of_window(trace, doc, pid, lo, hi)
    outlives = {(int(r["size"]), int(r["site"]), int(r["ordinal"])) for r in doc["requests"] if r.get("alternate")}
    # what kind of op each op seq is: a launch (kernel name) or a copy / memset
    L = trace.launches
    L = L[L["pid"].to_numpy() == pid]
    lseq = L["seq"].to_numpy(np.int64)
    inw = (lseq > lo) & (lseq < hi)
    names = L["kernel_name"].astype(str).to_numpy()[inw]
    lseq = lseq[inw]
    ordinal = pd.Series(names).groupby(names, sort=False).cumcount().to_numpy()
    launch_key = {int(s): (str(n), int(o)) for s, n, o in zip(lseq, names, ordinal)}
    # candidate intervals
    iv = access_intervals(trace, pid=pid)
    keep = _kind_is(iv["kind"], SWAP_INTERVAL_KIND) & (iv["size"].to_numpy(np.int64) >= max(1, min_size)) \
        & (iv["start_seq"].to_numpy(np.int64) >= lo) & (iv["end_seq"].to_numpy(np.int64) < hi)
    iv = iv[keep].reset_index(drop=True)
    not_swapped = []
    ok = np.ones(len(iv), bool)
    oseq = ops["seq"]
    for i, (bid, ss, es, size) in enumerate(zip(iv["block_id"].to_numpy(), iv["start_seq"].to_numpy(),
                                                 iv["end_seq"].to_numpy(), iv["size"].to_numpy())):
        r = key_of.get(int(bid))
        why = None
        if r is None:
            why = "not served by the plan (a function --apply does not serve, or another process)"
        elif (int(r["size"]), int(r["site"]), int(r["ordinal"])) in outlives and r["phase"] == "iteration":
            why = "outlives its iteration (two instances of its request are live at once)"
        elif (r["phase"], int(r["size"]), int(r["site"]), int(r["ordinal"])) in unsteady:
            why = ("another iteration names it while it would be away (the iterations' accesses differ): "
                   "it would come back early there")
        else:
            # the access ops themselves: the last op at or before the start, the first at or after the end
            p = int(np.searchsorted(oseq, ss, side="right")) - 1
            n = int(np.searchsorted(oseq, es, side="left"))
            if p < 0 or n >= len(oseq) or int(oseq[p]) not in launch_key or int(oseq[n]) not in launch_key:
                why = "its neighbouring access is a copy or memset (the swap engine acts at kernel launches)"
        if why:
            ok[i] = False
            not_swapped.append({"block_id": int(bid), "size": int(size), "why": why,
                                **({"request": _req_key(r)} if r is not None else {})})
    iv = iv[ok].reset_index(drop=True)
    # the window's blocks, clipped to it
    dev = blocks[blocks["counts_device"].to_numpy(bool)]
    freed = dev["freed"].to_numpy(bool)
    ta, tf = dev["t_alloc"].to_numpy(np.int64), dev["t_free"].to_numpy(np.int64)
    live = (ta < t_hi) & (~freed | (tf > t_lo))
    wb = pd.DataFrame({"block_id": dev["block_id"].to_numpy()[live], "size": dev["size"].to_numpy(np.int64)[live],
                       "t_alloc": np.maximum(ta[live], t_lo),
                       "t_free": np.where(freed[live], np.minimum(tf[live], t_hi), t_hi),
                       "freed": np.ones(int(live.sum()), bool), "counts_device": np.ones(int(live.sum()), bool)})
    problem = prepare_tables(wb, iv, bandwidth, min_size=min_size, t_end=t_hi, ops=ops, clock=clock.as_dict())
    problem.pid = pid
    ctx = {"pid": pid, "t_lo": t_lo, "t_hi": t_hi, "lo": lo, "hi": hi, "ops": ops, "launch_key": launch_key, "key_of": key_of,
           "not_swapped": not_swapped, "window_blocks": wb, "clock": clock.as_dict(),
           "iterations": int(doc["iteration"].get("iterations_in_trace", 0))}
    return problem, ctx


def _anchor_seqs(trace, doc: dict, pid: int) -> np.ndarray:
    """The seqs of the plan's iteration boundaries in the trace (the anchor's requests, or the window)."""

    it = doc["iteration"]
    if it["boundary"] != "anchor":
        return np.asarray(it["window_seq"], np.int64)
    req = servable(trace, pid)
    a = it["anchor"]
    m = (req["size"].to_numpy() == int(a["size"])) & (req["site"].to_numpy(np.uint64) == np.uint64(int(a["site"])))
    return np.sort(req.loc[m, "seq_alloc"].to_numpy(np.int64))


def _tightest_iteration(trace, doc: dict, pid: int, blocks: pd.DataFrame) -> tuple[int, int]:
    """[lo, hi) seqs of the shortest complete iteration after the first (the schedule is keyed by launches and
    repeated in every iteration: swaps whose transfers hide in the tightest one hide in the others too, as
    far as the iterations are alike); the plan's own window when there is no other."""
    b = _anchor_seqs(trace, doc, pid)
    if len(b) < 4:
        lo, hi = (int(x) for x in doc["iteration"]["window_seq"])
        return lo, hi
    t = blocks.set_index("seq_alloc")["t_alloc"]
    tb = np.array([int(t.get(int(x), 0)) for x in b], np.int64)
    d = np.diff(tb)[1:]                     # iterations 1 .. n-2 (the first is the warm-up)
    k = 1 + int(np.argmin(d))
    return int(b[k]), int(b[k + 1])


def _keys_of_window(trace, doc: dict, pid: int, lo: int, hi: int) -> dict:
    """block id -> its request key (phase, size, site, ordinal) for the blocks of the window [lo, hi): the
    iteration's requests by their ordinal within it, the blocks that live across iterations by the plan's
    persistent rows; only keys the plan has."""

    req = servable(trace, pid)
    sa = req["seq_alloc"].to_numpy(np.int64)
    inw = (sa >= lo) & (sa < hi)
    w = req[inw]
    ordinal = w.groupby(["size", "site"], sort=False).cumcount().to_numpy()
    have = {("iteration", int(r["size"]), int(r["site"]), int(r["ordinal"])) for r in doc["requests"]
            if r["phase"] == "iteration" and not r.get("alternate")}
    out = {}
    for bid, size, site, o in zip(w["block_id"].to_numpy(), w["size"].to_numpy(), w["site"].to_numpy(), ordinal):
        k = ("iteration", int(size), int(site), int(o))
        if k in have:
            out[int(bid)] = {"phase": k[0], "size": k[1], "site": k[2], "ordinal": k[3]}
    first = dict(zip(req["block_id"].to_numpy().tolist(), sa.tolist()))
    for r in doc["requests"]:
        if r["phase"] == "persistent" and int(r["block_id"]) >= 0 and first.get(int(r["block_id"]), hi) < lo:
            out[int(r["block_id"])] = {"phase": "persistent", "size": int(r["size"]), "site": int(r["site"]),
                                       "ordinal": int(r["ordinal"])}
    return out


def _req_key(r: dict) -> dict:
    return {"phase": str(r["phase"]), "size": int(r["size"]), "site": int(r["site"]), "ordinal": int(r["ordinal"])}


def choose(problem, ctx: dict, strategy: str = "doa", mode: str = "no-overhead", budget: int | None = None) -> dict:
    """The schedule (see the module docstring) as the plan's ``swap`` section, without the prediction."""

    if strategy not in STRATEGIES:
        raise PyinterposeError(f"unknown swap strategy {strategy!r} (choose from {', '.join(STRATEGIES)})")
    if mode not in MODES:
        raise PyinterposeError(f"unknown swap mode {mode!r}")
    if mode == "budget" and budget is None:
        budget = problem.default_budget
    score_budget = problem.default_budget if budget is None else int(budget)
    sched, cand = schedule_with_candidates(problem, _order(problem, strategy, score_budget), mode,
                                           budget if mode == "budget" else None)
    problems = validate_schedule(sched, mode, problem.bandwidth)
    if problems:
        raise PyinterposeError(f"the {strategy}/{mode} swap schedule failed its check: " + "; ".join(problems[:3]))
    rp = replay(problem, sched, cand)
    ops, lk = ctx["ops"], ctx["launch_key"]
    oseq, ostart = ops["seq"], ops["start"]
    c = problem.candidates
    # the engine sends a swap-in when the launch it follows has *ended* on the device (an event recorded
    # after it): the launch to follow is the last one that ends by the planned start
    oend = ostart + ops["dur"]
    order_rel = np.argsort(oend, kind="stable")
    rel_sorted = oend[order_rel]
    launch_idx = np.array([int(s) in lk for s in oseq], bool)
    swaps = []
    for j in range(len(sched)):
        ci = int(cand[j])
        prev_op, next_op = int(c["prev_op"].iat[ci]), int(c["next_op"].iat[ci])
        # the swap-in is sent after the last launch that has ended by its planned start (never before the
        # swap-out's)
        k = int(np.searchsorted(rel_sorted, float(sched["in_start"].iat[j]), side="right")) - 1
        in_op = int(order_rel[k]) if k >= 0 else prev_op
        while in_op > prev_op and not launch_idx[in_op]:
            in_op -= 1
        in_op = max(in_op, prev_op)
        if in_op >= next_op:
            in_op = prev_op
        bid = int(sched["block_id"].iat[j])
        r = ctx["key_of"][bid]

        def key(op):
            n, o = lk[int(oseq[op])]
            return {"kernel": n, "ordinal": o}
        swaps.append({
            "request": _req_key(r), "block_id": bid, "size": int(sched["size"].iat[j]),
            "out_after": key(prev_op), "in_after": key(in_op), "in_before": key(next_op),
            "planned_ns": {k2: float(sched[k2].iat[j]) - ctx["t_lo"]
                           for k2 in ("out_start", "out_end", "in_start", "in_end")},
            "replayed_ns": {"out_start": float(rp.out_start[j]) - ctx["t_lo"], "out_end": float(rp.out_end[j]) - ctx["t_lo"],
                            "in_start": float(rp.in_start[j]) - ctx["t_lo"], "in_end": float(rp.in_end[j]) - ctx["t_lo"]},
            "next_access_ns": float(c["end_t"].iat[ci]) - ctx["t_lo"],
            "first_touch_ns": _first_touch(problem, ctx, bid),
        })
    swaps.sort(key=lambda s: s["planned_ns"]["out_start"])
    bw = problem.bandwidth
    return {
        "mechanism": MECHANISM, "strategy": strategy, "mode": mode, "budget": None if budget is None else int(budget),
        "bandwidth": {"h2d_gbps": bw.h2d_bytes_per_s / 1e9, "d2h_gbps": bw.d2h_bytes_per_s / 1e9,
                      "latency_us": bw.latency_s * 1e6, "source": bw.source},
        "clock": ctx["clock"].get("clock", "cpu"), "min_size": None,
        "window_ns": ctx["t_hi"] - ctx["t_lo"], "window_seq": [int(ctx["lo"]), int(ctx["hi"])],
        "peak_before_bytes": int(problem.peak_before), "swap_model_peak_bytes": int(rp.peak_after),
        "predicted_stall_ns": float(rp.slowdown_ns),
        "swaps": swaps, "not_swapped": ctx["not_swapped"],
    }


def _first_touch(problem, ctx: dict, bid: int) -> float:
    """When the block is first touched in the window (its managed pages become resident), relative to the
    window's start; 0 for a block allocated before the window."""
    wb = ctx["window_blocks"]
    row = wb[wb["block_id"] == bid]
    ta = int(row["t_alloc"].iat[0]) if len(row) else ctx["t_lo"]
    c = problem.candidates
    mine = c[c["block_id"] == bid]
    if ta <= ctx["t_lo"] or mine.empty:
        return 0.0
    return float(mine["start_t"].min()) - ctx["t_lo"]


def predict(section: dict, ctx: dict, capacity: int, arena_blocks: set) -> dict:
    """``predicted_peak_bytes`` (see the module docstring) and the curve's parts, added to ``section``.
    ``arena_blocks``: the blocks the arena serves (every other device block counts while it lives,
    a swapped one while it is resident)."""
    wb = ctx["window_blocks"]
    t_lo, t_hi = ctx["t_lo"], ctx["t_hi"]
    swapped = {}
    for s in section["swaps"]:
        swapped.setdefault(s["block_id"], []).append(s)
    ts, ds = [], []
    for bid, size, ta, tf in zip(wb["block_id"].to_numpy(), wb["size"].to_numpy(np.int64),
                                 wb["t_alloc"].to_numpy(np.int64), wb["t_free"].to_numpy(np.int64)):
        bid = int(bid)
        if bid in swapped:
            sw = sorted(swapped[bid], key=lambda s: s["replayed_ns"]["out_start"])
            start = t_lo + sw[0]["first_touch_ns"]
            for s in sw:
                ts += [start, t_lo + s["replayed_ns"]["out_end"]]
                ds += [size, -size]
                start = t_lo + s["replayed_ns"]["in_start"]
            ts += [start, tf]
            ds += [size, -size]
        elif bid not in arena_blocks:      # beside the arena: the real allocator
            ts += [int(ta), int(tf)]
            ds += [size, -size]
    managed_peak = 0
    if ts:
        t = np.asarray(ts, np.float64)
        d = np.asarray(ds, np.int64)
        o = np.lexsort((d, t))
        managed_peak = int(max(0, np.cumsum(d[o]).max()))
    section["arena_bytes"] = int(capacity)
    section["beside_arena_peak_bytes"] = managed_peak
    section["predicted_peak_bytes"] = int(capacity) + managed_peak
    n_it = max(1, int(ctx.get("iterations") or 1))
    section["predicted_stall_ns_per_iteration"] = section["predicted_stall_ns"]
    section["iterations_in_trace"] = n_it
    return section


def apply_to_plan(doc: dict, trace, bandwidth: Bandwidth, strategy: str = "doa", budget: int | None = None,
                  min_size: int = MIN_SIZE, planner: str = "optimal", time_limit: float = 10.0) -> dict:
    """Add the swap section to a pool plan (``doc``, :func:`..pools.plan_file.build`'s), in place: the
    swapped requests are served from managed memory (``serve: managed``), the other requests of the
    iteration of at least ``min_size`` bytes by the program's own allocator (``serve: real``: their
    memory is then free for others while it is not in use, as the swapped blocks' is while they are
    away), the rest by the arena, re-planned without them.  Returns ``doc``."""

    import copy

    tables = run_tables(trace, doc)      # what every schedule's prediction reads of the trace

    def once(left_out):
        d = _apply_once(copy.deepcopy(doc), trace, bandwidth, strategy, budget, min_size, planner, time_limit,
                        frozenset(left_out), tables)
        return d, d["swap"].pop("_unsteady", set())

    best, unsteady = once(())
    if unsteady:
        # the swaps another iteration undoes (a launch names the block before the planned one there: it
        # comes back early and that iteration's peak stays higher): without all of them, and then greedily,
        # each round leaving out the one whose absence lowers the whole run's predicted peak most (the keys
        # a new schedule undoes joining the candidates), the schedule re-chosen each time, at most
        # MAX_RESCHEDULES schedules
        whole, _ = once(unsteady)
        left_out: set = set()
        cands = set(unsteady)
        n = 0
        while cands and n < MAX_RESCHEDULES:
            round_best = None
            for key in sorted(cands):
                if n >= MAX_RESCHEDULES:
                    break
                n += 1
                d, more = once(left_out | {key})
                if d["swap"]["predicted_peak_bytes"] < (round_best or best)["swap"]["predicted_peak_bytes"]:
                    round_best, round_key, round_more = d, key, more
            if round_best is None:
                break
            best = round_best
            left_out.add(round_key)
            cands = (cands | set(round_more)) - left_out
        if whole["swap"]["predicted_peak_bytes"] < best["swap"]["predicted_peak_bytes"]:
            best = whole
    doc.clear()
    doc.update(best)
    return doc


def _apply_once(doc, trace, bandwidth, strategy, budget, min_size, planner, time_limit, unsteady=frozenset(),
                tables=None):
    mode = "no-overhead" if budget is None else "budget"
    problem, ctx = window_problem(trace, doc, bandwidth, min_size=min_size, unsteady=unsteady)
    section = choose(problem, ctx, strategy, mode, budget)
    section["min_size"] = int(min_size)
    reqs = doc["requests"]
    keys_swapped = {(s["request"]["phase"], int(s["request"]["size"]), int(s["request"]["site"]),
                     int(s["request"]["ordinal"])) for s in section["swaps"]}
    n_managed = 0
    for r in reqs:
        key = (r["phase"], int(r["size"]), int(r["site"]), int(r["ordinal"]))
        if key in keys_swapped and not r.get("alternate"):
            r["serve"], r["managed_index"] = "managed", n_managed
            n_managed += 1
        elif key in keys_swapped or (r["phase"] == "iteration" and int(r["size"]) >= min_size):
            r["serve"] = "real"
        else:
            r["serve"] = "arena"
    arena = [r for r in reqs if r["serve"] == "arena"]
    if arena:
        prob = pd.DataFrame({"id": np.arange(len(arena)), "lower": [r["lifetime"][0] for r in arena],
                             "upper": [r["lifetime"][1] for r in arena],
                             "size": [r["slot_size"] for r in arena]})
        p = run_planner(prob, planner, time_limit=time_limit)
        if p.offsets is None:
            raise PyinterposeError(f"the {planner} planner found no plan for the arena within {time_limit:g} s")
        offs = np.asarray(p.offsets, np.int64)
        for r, o in zip(arena, offs):
            r["offset"] = int(o)
        doc["capacity"] = int((offs + prob["size"].to_numpy(np.int64)).max())
        doc["load_bytes"] = int(load(prob["lower"], prob["upper"], prob["size"]))
    else:
        doc["capacity"], doc["load_bytes"] = 0, 0
    for r in reqs:
        if r["serve"] != "arena":
            r["offset"] = 0
    req = servable(trace, ctx["pid"])
    arena_blocks = set(req.loc[req["size"].to_numpy() < min_size, "block_id"].tolist()) | \
        {int(r["block_id"]) for r in arena}
    predict(section, ctx, doc["capacity"], arena_blocks)
    section["window_peak_bytes"] = section["predicted_peak_bytes"]
    predict_run(trace, doc, section, tables=tables)
    section["managed"] = n_managed
    doc["swap"] = section
    return doc


def _engines(items, ostart, odur, t_out, t_in, calls=None):
    """The swaps of ``items`` (block, size, out-after op, in-after op or -1, waiting op or -1; in-after ==
    waiting op: a late or unforeseen swap-in, sent with that op; :func:`.engine_model.engine_items`) on a
    timeline of one program stream, op by op: each op sent at ``ostart`` and started when the stream is
    free and every swap-in it needs has landed, for ``odur``.  A swap-out is sent when the launch it
    follows has ended, a swap-in likewise (after its own swap-out), a late or unforeseen one when its
    launch is called (``calls``: when the host makes each op's call, if not at ``ostart``: on a device
    timeline the host runs ahead of the device); each copy engine serves them in the order they are sent.
    Returns (rec: per item its swap-out's end and swap-in's start on the undelayed timeline, i.e. less the
    delay of their op, inf when it never comes back; the late swap-ins; the stall: the sum of the waits,
    what simcuda counts as SIMCUDA_STATS stall_ns — the program's ops held by a stream wait beyond when
    their stream and the host let them start)."""
    n = len(ostart)
    outs, ins, now_in, needs = {}, {}, {}, {}
    for j, (_, _, o_op, i_op, n_op) in enumerate(items):
        outs.setdefault(o_op, []).append(j)
        if i_op >= 0:               # -1: never sent back (freed while away)
            (now_in if i_op == n_op else ins).setdefault(i_op, []).append(j)
        if n_op >= 0:               # -1: nothing names the block again before its free
            needs.setdefault(n_op, []).append(j)
    touched = sorted(set(outs) | set(ins) | set(now_in) | set(needs))
    out_end = np.zeros(len(items))
    in_end = np.zeros(len(items))
    rec = np.zeros((len(items), 2))
    rec[:, 1] = np.inf              # no swap-in: away until its free
    d2h = h2d = -np.inf
    stall, late = 0.0, 0
    free = base_free = -np.inf
    k = 0
    for j in touched:
        # the ops in between: nothing waits there (only the stream's own order)
        if k < j:
            for q in range(k, j):
                free = max(float(ostart[q]), free) + float(odur[q])
                base_free = max(float(ostart[q]), base_free) + float(odur[q])
        k = j + 1
        send = float(ostart[j])
        before = max(send, free) - max(float(ostart[j]), base_free)     # the delay this op finds
        for i in now_in.get(j, ()):       # unforeseen: sent with the launch
            st = max(send if calls is None else float(calls[j]), h2d, out_end[i])
            h2d = in_end[i] = st + t_in(items[i][1])
            rec[i, 1] = st - before
        ready = max(send, free)
        base = max(float(ostart[j]), base_free)
        start = ready
        for i in needs.get(j, ()):
            if in_end[i] > start + 1.0:
                late += 1
                start = in_end[i]
        stall += start - ready
        free = start + float(odur[j])
        base_free = base + float(odur[j])
        shift = free - base_free
        for i in outs.get(j, ()):
            d2h = max(free, d2h) + t_out(items[i][1])
            out_end[i] = d2h
            rec[i, 0] = d2h - shift
        for i in ins.get(j, ()):
            st = max(free, h2d, out_end[i])
            h2d = in_end[i] = st + t_in(items[i][1])
            rec[i, 1] = st - shift
    del n
    return rec, late, stall


def _device_timeline(trace, pid: int, oseq, ostart, odur):
    """(start, duration) per op of the program's device timeline as a replay (and the device) runs it: each
    op sent at its recorded call (the swap clock's start) and started when its stream is free, for its
    recorded device duration (one stream).  On the device clock, or without device durations: the swap
    clock's own."""
    clock = clock_of(trace, pid)
    if clock.device:
        return ostart, odur
    dur = {}
    for tab in (trace.launches, trace.copies):
        t = tab[tab["pid"].to_numpy() == pid]
        ok = (t["dev_start"].to_numpy() >= 0) & (t["dev_end"].to_numpy() >= t["dev_start"].to_numpy())
        dur.update(zip(t["seq"].to_numpy()[ok].tolist(), (t["dev_end"] - t["dev_start"]).to_numpy()[ok].tolist()))
    if not dur:
        return ostart, odur
    d = np.array([float(dur.get(int(q), 0)) for q in oseq])
    start = np.empty(len(oseq))
    free = -np.inf
    for j in range(len(oseq)):
        start[j] = max(float(ostart[j]), free)
        free = start[j] + d[j]
    return start, d


def run_tables(trace, doc: dict):
    """What :func:`predict_run` reads of the trace for the plan ``doc``: the same for every schedule of one
    plan (:func:`apply_to_plan` tries up to ``MAX_RESCHEDULES``), so made once.  Depends on the plan's
    process, iteration and persistent requests, none of which a schedule changes."""
    from types import SimpleNamespace

    pid = int(doc["trace"]["pid"])
    clock = clock_of(trace, pid)
    ops = clock.replay_ops()
    oseq, ostart, odur = ops["seq"], ops["start"], ops["dur"]
    blocks = _block_times(trace, pid, clock)
    dev = blocks[blocks["counts_device"].to_numpy(bool)]
    req = servable(trace, pid)
    # iteration boundaries: the anchor's allocations (seq)
    bnd = _anchor_seqs(trace, doc, pid)
    # launches: iteration and ordinal of their kernel within it
    L = trace.launches
    L = L[L["pid"].to_numpy() == pid]
    lseq = L["seq"].to_numpy(np.int64)
    lit = np.searchsorted(bnd, lseq, side="right") - 1
    names = L["kernel_name"].astype(str).to_numpy()
    lord = pd.DataFrame({"it": lit, "n": names}).groupby(["it", "n"], sort=False).cumcount().to_numpy()
    op_of_seq = {int(s): i for i, s in enumerate(oseq)}
    at = {(int(i), str(n), int(o)): op_of_seq.get(int(s), -1) for i, n, o, s in zip(lit, names, lord, lseq)}
    # block instances of the managed keys: iteration rows per iteration, persistent rows once
    rseq = req["seq_alloc"].to_numpy(np.int64)
    rit = np.searchsorted(bnd, rseq, side="right") - 1
    rkey = pd.DataFrame({"it": rit, "size": req["size"].to_numpy(), "site": req["site"].to_numpy()})
    life_ord = rkey.groupby(["size", "site"], sort=False).cumcount().to_numpy()
    # as apply.c keys them: the requests of the process whose ordinal of their (size, site) is a persistent
    # row's go to that row; only the others count in the iterations' ordinals
    pers_rows = {(int(r["size"]), int(r["site"]), int(r["ordinal"])) for r in doc["requests"]
                 if r["phase"] == "persistent"}
    is_pers = np.array([(int(a), int(b), int(o)) in pers_rows for a, b, o in
                        zip(req["size"].to_numpy(), req["site"].to_numpy(), life_ord)], bool)
    it_ord = rkey.assign(p=is_pers).groupby(["it", "size", "site", "p"], sort=False).cumcount().to_numpy()
    it_ord = np.where(is_pers, -1, it_ord)
    bid = req["block_id"].to_numpy()
    inst_it = {(int(i), int(s), int(si), int(o)): int(b) for i, s, si, o, b in
               zip(rit, req["size"], req["site"], it_ord, bid)}
    inst_life = {(int(s), int(si), int(o)): int(b) for s, si, o, b in zip(req["size"], req["site"], life_ord, bid)}
    acc = trace.accesses
    acc = acc[acc["pid"].to_numpy() == pid]
    first_acc = acc.groupby("block_id")["seq"].min()
    # the engine's moves, op by op over the whole run (engine_model.engine_items): each iteration's
    # launches keyed (kernel, ordinal) as the shim keys them, the requests' blocks served from their
    # managed buffer when it is free, the first op naming an away block waiting for it
    op_key: list = [None] * len(oseq)
    for (i_, n_, o_), j_ in at.items():
        if j_ >= 0:
            op_key[j_] = (n_, o_)
    life = {int(b_): (int(sa), int(sf) if fr else None) for b_, sa, sf, fr in
            zip(dev["block_id"].to_numpy(), dev["seq_alloc"].to_numpy(), dev["seq_free"].to_numpy(),
                dev["freed"].to_numpy(bool))}
    named: dict = {}
    for b_, sq in zip(acc["block_id"].to_numpy().tolist(), acc["seq"].to_numpy().tolist()):
        named.setdefault(sq, []).append(b_)
    # the residency and the stall on the program's device timeline (what simcuda counts: on the CPU clock
    # the device runs behind the host's calls, and a copy engine's backlog with it): each op started when
    # its stream is free, a stream-ordered allocation or free counted where its stream gets to it (after
    # the op before it), a swapped block resident from the start of its first access.  On the device
    # clock the swap clock is the device's already.
    dstart, ddur = _device_timeline(trace, pid, oseq, ostart, odur)
    seq_t = dict(zip(oseq.tolist(), np.asarray(dstart, np.float64).tolist()))
    dend = np.asarray(dstart, np.float64) + np.asarray(ddur, np.float64)

    def on_device(sq, t):
        """Where the device's stream gets to the calls at ``sq`` made at host times ``t`` (float64)."""
        t = np.asarray(t, np.float64)
        if clock.device:
            return t
        j = np.searchsorted(oseq, np.asarray(sq)) - 1
        return np.where(j >= 0, np.maximum(t, dend[np.maximum(j, 0)]), t)

    # each device block's residency without swaps: from its allocation (a stream-ordered one where its
    # stream gets to it) to its free (likewise) or the trace's end; a swapped one from its first access
    fr = dev["freed"].to_numpy(bool)
    t_alloc = dev["t_alloc"].to_numpy(np.int64)
    stream_ordered = dev["api"].astype(str).str.contains("Async", regex=False).to_numpy(bool)
    start = np.where(stream_ordered, on_device(dev["seq_alloc"].to_numpy(), t_alloc), t_alloc.astype(np.float64))
    end = np.where(fr, on_device(dev["seq_free"].to_numpy(), dev["t_free"].to_numpy(np.int64)), float(trace.end_ns))
    # the arena, from the first request it serves on
    arena_t = float(req["seq_alloc"].size and blocks.loc[blocks["block_id"].isin(req["block_id"]), "t_alloc"].min())
    return SimpleNamespace(pid=pid, clock=clock, oseq=oseq, ostart=ostart, req=req, bnd=bnd, at=at,
                           inst_it=inst_it, inst_life=inst_life, first_acc=first_acc, op_key=op_key, life=life,
                           named=named, dstart=dstart, ddur=ddur, seq_t=seq_t,
                           block_id=dev["block_id"].to_numpy().astype(np.int64), size=dev["size"].to_numpy(np.int64),
                           start=start, end=end, arena_t=arena_t)


def predict_run(trace, doc: dict, section: dict, curve: list | None = None, tables=None) -> dict:
    """The applied run's resident device bytes over the whole trace, every iteration with its own times
    (the schedule is keyed by launches, so each iteration moves the same blocks at its own pace): the
    arena from its first request on, every device block the arena does not serve while it lives, a
    swapped one while it is resident.  Per swap and iteration: the swap-out starts when the launch it
    follows has ended and its copy engine is free (one per direction, in the order they are sent), the
    swap-in is sent after its launch and starts once its swap-out has ended and its engine is free.
    Sets ``predicted_peak_bytes`` (the maximum), ``predicted_late_swap_ins`` (swap-ins that would end
    after the launch that needs them starts) and ``predicted_stall_ns_run`` (the sum of the program's
    waits for swap-ins over the run, each wait delaying everything after it: how much later the run
    ends; simcuda's ``stall_ns`` measures the same), and returns ``section``.  ``tables``: :func:`run_tables`
    of ``trace`` and ``doc`` when the caller has them (one plan's schedules share them)."""

    r = tables if tables is not None else run_tables(trace, doc)
    clock, oseq, bnd, at = r.clock, r.oseq, r.bnd, r.at
    min_size = int(section.get("min_size") or MIN_SIZE)
    bw = section["bandwidth"]
    lat = bw["latency_us"] * 1e3
    t_out = lambda n: lat + n / bw["d2h_gbps"]      # noqa: E731  (ns: 1 GB/s = 1 byte/ns)
    t_in = lambda n: lat + n / bw["h2d_gbps"]       # noqa: E731
    unsteady: set = set()
    # per block: resident intervals (managed) or its life (real)
    pers = {int(q["block_id"]) for q in doc["requests"] if q["phase"] == "persistent" and q.get("serve") == "arena"}
    small = set(r.req.loc[r.req["size"].to_numpy() < min_size, "block_id"].tolist())
    moves: dict[int, list] = {}
    n_it = len(bnd)
    instances = []
    for s in section["swaps"]:
        q = s["request"]
        if q["phase"] == "persistent":
            b_ = r.inst_life.get((q["size"], q["site"], q["ordinal"]))
            instances.append([] if b_ is None else [b_])
        else:
            instances.append([b_ for k in range(-1, n_it)
                              if (b_ := r.inst_it.get((k, q["size"], q["site"], q["ordinal"]))) is not None])
    items, _, unforeseen, sources = engine_items(section["swaps"], instances, r.life, r.op_key, oseq, r.named)
    for it_, src in zip(items, sources):
        # a swap another iteration undoes: a launch there names the block before the planned one
        s = section["swaps"][src]
        k = int(np.searchsorted(bnd, oseq[it_[2]], side="right")) - 1
        n_plan = at.get((k, s["in_before"]["kernel"], s["in_before"]["ordinal"]), -1)
        if 0 <= it_[4] < n_plan:
            q = s["request"]
            unsteady.add((q["phase"], int(q["size"]), int(q["site"]), int(q["ordinal"])))
    # the swaps' times on the program's device timeline (run_tables), as the blocks' residency
    rec, late, delay = _engines(items, r.dstart, r.ddur, t_out, t_in, calls=None if clock.device else r.ostart)
    for j, it_ in enumerate(items):
        moves.setdefault(it_[0], []).append((rec[j, 0], rec[j, 1]))
    # the blocks the arena serves are not counted (the arena is); those not swapped are resident from
    # start to end; a swapped one between its moves
    served = np.isin(r.block_id, np.fromiter(pers | small, np.int64))
    moved = ~served & np.isin(r.block_id, np.fromiter(moves, np.int64))
    keep = ~served & ~moved
    ts = [r.start[keep], r.end[keep]]
    ds = [r.size[keep], -r.size[keep]]
    sw_t, sw_d = [], []
    for b, size, start, end in zip(r.block_id[moved].tolist(), r.size[moved].tolist(), r.start[moved].tolist(),
                                   r.end[moved].tolist()):
        fa = r.first_acc.get(b)
        start = float(r.seq_t.get(int(fa), start)) if fa is not None else start
        for oe, is_ in sorted(moves[b]):
            sw_t += [start, oe]
            sw_d += [size, -size]
            start = is_
            if not np.isfinite(start):      # never came back
                break
        if np.isfinite(start):
            sw_t += [start, end]
            sw_d += [size, -size]
    # the arena, from the first request it serves on
    cap = int(doc["capacity"])
    if cap:
        sw_t.append(r.arena_t)
        sw_d.append(cap)
    t = np.concatenate(ts + [np.asarray(sw_t, np.float64)])
    d = np.concatenate(ds + [np.asarray(sw_d, np.int64)])
    o = np.lexsort((d, t))
    if curve is not None:          # the curve itself (time ns on the trace's clock, resident bytes)
        curve += [t[o], np.cumsum(d[o])]
    section["predicted_peak_bytes"] = int(max(0, np.cumsum(d[o]).max())) if len(d) else 0
    section["predicted_late_swap_ins"] = int(late)
    section["predicted_unforeseen"] = int(unforeseen)
    section["_unsteady"] = unsteady
    section["iterations_in_trace"] = int(n_it)
    section["predicted_stall_ns_run"] = float(delay)
    return section
