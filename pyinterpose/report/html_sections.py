"""The report's built-in sections, each a :class:`pyinterpose.report.reporter.Reporter` (the order they
appear in: pyinterpose.report.registry).  Each ``fill_*`` reads the analyses' results from the
:class:`~pyinterpose.report.reporter.ReportContext` and fills one section."""
from __future__ import annotations

import numpy as np
import pandas as pd

from ..analysis import access as access_analysis
from ..analysis import guarded
from ..analysis.bandwidth import Bandwidth
from ..analysis.compare import framework_of
from ..analysis.owners import allocator_mask
from ..analysis.pools import reserved_curve as pools_reserved_curve
from ..trace.model import Trace
from ..trace.stacks import helper_frames, top_call_sites
from . import ati_stream, data, timeline
from .ati_stream import BetweenSummary
from .reporter import Reporter, ReportContext, safe
from .sections import Section
from .tables import format_frame, group_rows
from .text import fmt_bytes, fmt_ns, fmt_pct, fmt_ratio, to_jsonable


def _plots():
    """The figures' module: matplotlib is imported on use, not with the report's modules (html.analyse
    imports it on a thread of its own while the first analyses run)."""
    from . import plots
    return plots


_FRAMEWORK_ALLOCATOR = {"torch": "pytorch", "pytorch": "pytorch", "jax": "bfc", "tf": "bfc", "tensorflow": "bfc"}


def _call_sites_section(s: Section, trace: Trace, heads: dict) -> None:
    """The call-site tables (pyinterpose.trace.stacks.top_call_sites) and the helpers skipped."""
    if "stack_id" not in trace.blocks or not (trace.blocks["stack_id"].to_numpy() >= 0).any():
        s.notes.append("this trace has no call stacks (captured with --stacks none, or before call sites were "
                       "recorded)")
        return
    helpers = helper_frames(trace)
    how = "--site-skip" if trace.meta.get("site_skip") else "found automatically"
    s.facts.append(("allocation helpers skipped", (", ".join(helpers) + f" ({how})") if helpers else "none"))
    heads["call_sites"] = {"helpers": helpers}
    for by, caption in (("peak", "call sites by bytes live at the peak"), ("count", "call sites by allocations")):
        t = top_call_sites(trace, by, 15)
        if len(t) == 0:
            continue
        heads["call_sites"][by] = t["call_site"].tolist()
        t = pd.DataFrame({"call site": t["call_site"], "owner": t["owner"], "allocations": t["blocks"],
                          "allocated bytes": t["bytes"], "live at peak bytes": t["peak_live_bytes"],
                          "called from": [_outer_frames(site, f) for site, f in zip(t["call_site"], t["frames"])]})
        s.tables.append((caption, format_frame(t)))


def _outer_frames(site: str, frames: list[str], n: int = 3) -> str:
    """The frames above a call site (its callers, innermost first), at most ``n``: the helpers
    below it are named once above the table, the site is the row's first column."""
    k = frames.index(site) if site in frames else 0
    outer = frames[k + 1:]
    return " \u2190 ".join(outer[:n]) + (" \u2190 \u2026" if len(outer) > n else "") if outer else "\u2013"


def reserved_curve(trace: Trace) -> dict | None:
    """In a blocks view, the framework's own allocator replayed on its requests with the
    bytes reserved after each (see :func:`pyinterpose.analysis.pools.reserved_curve`);
    None when the framework is unknown or the replay fails (the line is then flat)."""
    sim = _FRAMEWORK_ALLOCATOR.get(str(framework_of(trace)).lower())
    if sim is None:
        return None
    try:
        return pools_reserved_curve(trace, sim)
    except Exception:  # noqa: BLE001 - the flat line at the pools analysis' peak stays
        return None


def _reserved_line(trace: Trace, pl: guarded.Result) -> dict | None:
    """In a blocks view, what the framework's own allocator would have reserved for these
    requests (PyTorch's caching allocator, or BFC for JAX/TensorFlow): ``y`` the peak of
    the pools analysis' replay; the timeline draws the reserved bytes after each request
    (its payload's ``x``/``ys``), else a flat dashed line at ``y``."""
    sim = _FRAMEWORK_ALLOCATOR.get(str(framework_of(trace)).lower())
    if not pl.ok or sim is None:
        return None
    for r in pl.value.get("strategies", []):
        if r.get("strategy") == sim and r.get("peak_bytes"):
            return {"y": int(r["peak_bytes"]),
                    "label": f"reserved by the {'PyTorch caching' if sim == 'pytorch' else 'BFC'} allocator,"
                             f" simulated on these requests"}
    return None


def _lifetimes_section(s: Section, d: dict, heads: dict) -> None:
    rows = []
    for name, c in (d.get("classes") or {}).items():
        life = c.get("life_ns") or {}
        size = c.get("size") or {}
        rows.append({"class": name, "blocks": c.get("blocks"), "bytes": c.get("bytes"),
                     "median lifetime_ns": life.get("p50"), "p90 lifetime_ns": life.get("p90"),
                     "median size": size.get("p50")})
    if rows:
        s.tables.append(("device blocks by lifetime class (main process)", format_frame(pd.DataFrame(rows))))
    pk = d.get("peak") or {}
    s.facts += [("blocks never freed (main process)", f"{d.get('never_freed', 0):,}"),
                ("peak live (main process)", f"{fmt_bytes(pk.get('bytes'))} at {fmt_ns(pk.get('t'))}")]
    for k, v in (pk.get("by_class") or {}).items():
        s.facts.append((f"  at the peak: {k}", fmt_bytes(v)))
    heads["lifetimes"] = {"classes": {r["class"]: {"blocks": r["blocks"], "bytes": r["bytes"]} for r in rows},
                          "never_freed": d.get("never_freed"), "peak": to_jsonable(pk.get("bytes")),
                          "peak_by_class": to_jsonable(pk.get("by_class"))}


def _bandwidth_of(d: dict) -> Bandwidth | None:
    b = d.get("bandwidth")
    return Bandwidth(b["h2d_bytes_per_s"], b["d2h_bytes_per_s"], b["latency_s"], b.get("source", "")) if b else None


def ati_figure(acc: guarded.Result, between: BetweenSummary) -> tuple[str, str] | bool | Exception | None:
    """The access section's figure, drawn from what the access analysis gave ``between`` (its hook) while
    it held the intervals (:mod:`.ati_stream`: the whole intervals table is never made): the
    access-to-access intervals against the per-interval swap cost; False when there is no such interval,
    None without an access analysis, the failure itself when it cannot be drawn."""
    if not acc.ok or not between.called:
        return None
    try:
        return ati_stream.figure(between, _bandwidth_of(acc.value))
    except Exception as e:  # noqa: BLE001 - reported in the access section
        return e


ACCESS_EXPLAIN = ("The time between consecutive uses of a block by kernels or copies. An interval can hide a"
                  " swap to host memory only if it is longer than the bandwidth filter: size/BW(d2h) +"
                  " size/BW(h2d) + latency. Intervals right of the red line are swap opportunities.")


def fill_access(s: Section, ctx: ReportContext) -> None:
    """``ctx.access``: access.analyze() dict.  The figure: :func:`ati_figure` (``ctx.ati_figure``)."""
    acc, heads = ctx.access, ctx.heads
    if not acc.ok:
        s.notes.append(f"access analysis {acc.note}")
        return
    d = acc.value
    fig = ctx.ati_figure
    if isinstance(fig, Exception):
        raise fig
    bw = _bandwidth_of(d)
    if fig is False:
        total = int(d.get("intervals", 0) or 0)
        if total:
            s.notes.append(f"ATI histogram not applicable: none of the {total:,} intervals lies between two accesses"
                           " of a device block (they all run from an allocation to its first access or from the last"
                           " access to the free), so there is no access-to-access interval to plot")
        else:
            s.notes.append("ATI histogram not applicable: the trace has no access intervals (was it captured with"
                           " access events on?)")
    else:
        s.figures.append(fig)
    q = d.get("ati_quantiles") or {}
    s.facts += [("intervals (all kinds)", f"{d.get('intervals', 0):,}"),
                ("accessed blocks", f"{d.get('accessed_blocks', 0):,} of {d.get('blocks', 0):,}"),
                ("ATI median / p90 / p99", " / ".join(fmt_ns(q.get(k)) for k in ("p50", "p90", "p99")))]
    if bw is not None:
        ff = d.get("filtered_fraction") or {}
        sw = d.get("swappable") or {}
        s.facts += [("bandwidth", _bandwidth_text(d["bandwidth"])),
                    ("intervals too short to hide a swap", fmt_pct(ff.get("intervals"))),
                    ("bytes in blocks with no hideable interval", fmt_pct(ff.get("bytes"))),
                    ("swappable blocks", f"{sw.get('blocks', 0):,} ({fmt_bytes(sw.get('bytes'))})")]
    else:
        s.notes.append(str(d.get("bandwidth_note") or "bandwidth filter skipped"))
    o = d.get("outliers")
    if o:
        s.facts += [("outliers (high ATI and size)", f"{o.get('intervals', 0):,} intervals in {o.get('blocks', 0):,} "
                     f"blocks ({fmt_bytes(o.get('bytes'))})"),
                    ("outliers' share of the peak", fmt_pct(o.get("share_of_peak_bytes"))),
                    (f"outliers' share of memory pressure ({(o.get('pressure_window') or {}).get('name', '')})",
                     fmt_pct(o.get("share_of_pressure")))]
    heads["access"] = {"intervals": d.get("intervals"), "ati_quantiles_ns": to_jsonable(q),
                       "filtered_fraction": to_jsonable(d.get("filtered_fraction")),
                       "swappable": to_jsonable(d.get("swappable")),
                       "outliers": None if not o else {k: to_jsonable(o.get(k)) for k in
                                                       ("intervals", "blocks", "bytes", "share_of_peak_bytes",
                                                        "share_of_pressure")}}


def _pools_section(s: Section, pl: guarded.Result, heads: dict) -> None:
    """``pl``: pools.evaluate() dict (strategies with ratio_to_bound against their bound:
    "steady" = LOAD of one steady step for planners, "whole_run" = peak live of the run for
    simulated allocators)."""
    if not pl.ok:
        s.notes.append(f"pool evaluation {pl.note}")
        return
    d = pl.value
    if d.get("nothing_to_plan"):
        s.notes.append(d["nothing_to_plan"])
    df = pd.DataFrame([r for r in d.get("strategies", []) if not r.get("skipped")])
    if len(df) == 0:
        s.notes.append("pool evaluation returned no strategy")
        return
    bound, whole = d.get("bound_bytes"), d.get("bound_whole_run_bytes")
    label = (f"step: planners vs one steady step, {fmt_bytes(bound)}; "
             f"run: allocators vs the whole run, {fmt_bytes(whole)}")
    names = [str(n) for n in df["strategy"]]
    bkinds = [("steady" if b == "steady" else "whole_run") for b in df.get("bound", ["whole_run"] * len(df))]
    s.figures.append((_plots().pools_png(names, df["ratio_to_bound"].astype(float).tolist(), label, bounds=bkinds,
                                      bound_bytes={"steady": bound, "whole_run": whole}),
                      "pool strategies"))
    cols = [c for c in ("strategy", "bound", "peak_bytes", "ratio_to_bound", "fragmentation", "optimal",
                        "backing_allocations", "seconds") if c in df]
    t = df[cols].rename(columns={"seconds": "time_ns"})
    if "time_ns" in t:
        t["time_ns"] = t["time_ns"].astype(float) * 1e9
    s.tables.append(("strategies (fragmentation = 1 - bound / peak)", format_frame(t)))
    it = d.get("iteration") or {}
    for kind, title in (("whole_run", "allocators, pool / bound"), ("steady", "planners, pool / bound")):
        sel = df[df["bound"] == kind] if "bound" in df else df.iloc[:0]
        if len(sel):
            s.facts.append((title, ", ".join(f"{n} {fmt_ratio(r)}" for n, r in
                                             zip(sel["strategy"], sel["ratio_to_bound"].astype(float)))))
    s.facts += [("lower bound, steady step (LOAD)", fmt_bytes(bound)),
                ("lower bound, whole run (peak live)", fmt_bytes(whole) + _scope_note(d)),
                ("steady window", f"{it.get('events', 0):,} alloc/free events, {it.get('blocks', 0):,} blocks "
                                  f"({it.get('source', '?')})")]
    heads["pools"] = {"bound_bytes": bound, "bound_whole_run_bytes": whole,
                      "ratio_to_bound": {str(r["strategy"]): to_jsonable(r.get("ratio_to_bound"))
                                         for r in d.get("strategies", [])}}


def _bandwidth_text(bw: dict | None) -> str:
    """The bandwidth used, in numbers (GB/s each way, latency), then where it came from."""
    if not bw:
        return "-"
    h2d, d2h, lat = bw.get("h2d_bytes_per_s"), bw.get("d2h_bytes_per_s"), bw.get("latency_s")
    src = str(bw.get("source", "") or "")
    if not h2d or not d2h or "GB/s" in src:      # (a given bandwidth's source already says it)
        return src or "-"
    rate = (f"{h2d / 1e9:.3g} GB/s per direction" if abs(h2d - d2h) <= 1e-6 * max(h2d, d2h)
            else f"{h2d / 1e9:.3g} GB/s host to device, {d2h / 1e9:.3g} GB/s device to host")
    if lat is not None:
        rate += f", latency {fmt_ns(float(lat) * 1e9)}"
    return f"{rate} ({src})" if src else rate


def _swap_section(s: Section, ev: guarded.Result, sw: guarded.Result, heads: dict,
                  run_ns: float | None = None) -> None:
    """``ev``: swap.evaluate() dict; ``sw``: swap.pareto() list of budget points."""
    if not ev.ok and not sw.ok:
        s.notes.append(f"swap planning {ev.note or sw.note}")
        return
    peak_before = floor = None
    if ev.ok:
        d = ev.value
        peak_before, floor = d.get("peak_before"), d.get("floor")
        bw = d.get("bandwidth", {})
        s.facts += [("bandwidth", _bandwidth_text(bw)),
                    ("peak before swapping", fmt_bytes(peak_before)),
                    ("swap floor (all candidates swapped)", fmt_bytes(floor)),
                    ("budget", f"{fmt_bytes(d.get('budget'))} ({d.get('budget_source', '')})"),
                    ("candidates", f"{d.get('candidates', 0):,} ({d.get('candidates_hideable', 0):,} hideable)")]
        s.notes += [str(n) for n in d.get("notes", [])]
        strat = pd.DataFrame(d.get("strategies", []))
        if len(strat):
            cols = [c for c in ("strategy", "mode", "budget", "peak_after", "reduction", "stall_seconds",
                                "overhead_fraction", "swaps", "bytes_moved", "budget_met") if c in strat]
            t = strat[cols].copy()
            if "stall_seconds" in t:
                t["stall_ns"] = t.pop("stall_seconds") * 1e9
            if "reduction" in t:
                t["reduction_fraction"] = t.pop("reduction")
            if "swaps" in strat and int(pd.to_numeric(strat["swaps"], errors="coerce").fillna(0).sum()) == 0:
                s.notes.append(f"strategies not applicable: none of the {len(strat)} strategy/mode runs found a swap"
                               " to make (0 swaps, 0 bytes moved, the peak unchanged)")
            else:
                s.tables.append(("strategies (no-overhead: only swaps that hide fully; budget: aim at the budget,"
                                 " pausing the run where a transfer is late; stall = the replayed run's slowdown)",
                                 format_frame(t)))
        heads["swap"] = {k: to_jsonable(d.get(k)) for k in ("clock", "peak_before", "floor", "budget", "candidates")}
        if len(strat):
            best = strat[strat["mode"] == "no-overhead"] if "mode" in strat else strat
            if len(best):
                r = best.sort_values("peak_after").iloc[0]
                heads["swap"]["best_no_overhead"] = {"strategy": str(r["strategy"]),
                                                     "peak_after": int(r["peak_after"]),
                                                     "reduction": float(r.get("reduction", 0.0))}
    else:
        s.notes.append(f"swap strategies {ev.note}")
    if sw.ok:
        pts = pd.DataFrame(sw.value)
        if len(pts):
            pts["stall_ns"] = pts["stall_seconds"] * 1e9
            heads["swap_pareto"] = to_jsonable(pts)
            gain = (peak_before or 0) - int(pts["peak_after"].min())
            if peak_before is not None and gain <= 0:
                s.notes.append("Pareto curve not applicable: no budget lowers the peak"
                               + (f" (the swap floor, {fmt_bytes(floor)}, is the peak itself: no candidate"
                                  " interval straddles the peak or can be hidden)" if floor is not None
                                  and floor >= peak_before else ""))
            else:
                budget = ev.value.get("budget") if ev.ok else None
                s.figures.append((_plots().swap_pareto_png(pts, peak_before, floor, budget=budget, run_ns=run_ns),
                                  "swap Pareto curve"))
    else:
        s.notes.append(f"Pareto curve {sw.note}")


# ---- the sections' fills and their reporters ---------------------------------------------------

MEMORY_EXPLAIN = (
    "Live device bytes after every allocation and free, stacked by lifetime class (or by owner"
    " library: the buttons switch), drawn against the event index (each allocation and each free is"
    " one step; the top axis gives the time). It opens on one steady iteration; drag or scroll to"
    " zoom, drag the minimap below to move, \u2018whole run\u2019 to see everything. Shaded bands are"
    " alternate iterations (ticks above the plot mark their boundaries), drawn under the data. The black"
    " line is the memory NVML reports as used on the GPU (the framework's reserve plus the CUDA"
    " context). Hover over the stack for the block under the cursor: size, API, owner, class,"
    " allocation and free, call site. Far out, each screen bin keeps its peak, so no peak is lost;"
    " zoomed in, every event is drawn.")
MEMORY_RESERVED_VIEW = (
    " This is a reserved-view trace: the blocks are the segments the framework's allocator took"
    " from CUDA, so the stacked area is its reserve; what is allocated inside the segments is not"
    " visible in this view (capture the blocks view for that).")


def fill_memory(s: Section, ctx: ReportContext) -> None:
    it = ctx.iterations
    if not ctx.classes.ok:
        s.notes.append(f"block classes {ctx.classes.note}; showing all blocks as one series")
    if not it.ok:
        s.notes.append(f"iteration boundaries {it.note}")
    safe(s, lambda: _memory_over_time(s, ctx))


def _memory_over_time(s: Section, ctx: ReportContext) -> None:
    trace, b, it, reserved_view, payloads = ctx.trace, ctx.blocks, ctx.iterations, ctx.reserved_view, ctx.timelines
    rc = data.reserved_curves(trace)
    if not len(b) and not rc:
        s.notes.append("no device allocations in this trace")
        return
    frags = []
    rline = None if reserved_view else _reserved_line(trace, ctx.pools)
    if payloads is not None:
        # (device, peak, peak time, bytes live at the end) from the payloads
        peaks = [(d, p["stats"]["peak_bytes"], p["stats"]["peak_t_ns"], p["stats"]["end_bytes"])
                 for d, p in payloads.items() if p is not None]
        for k, p in enumerate(p for p in payloads.values() if p is not None):
            curve = p.pop("reserved_line", None)
            if rline is not None and len(payloads) == 1:
                # the curve when it maps onto the events (its maximum is the peak), else flat
                p["reserved_line"] = {**rline, **(curve or {})}
            frags.append(timeline.fragment(p, k))
            s.tail.append(timeline.deferred(p, k))
    else:
        tls = data.memory_timeline(trace, classes=ctx.classes.value)
        peaks = [(tl.device, tl.peak, tl.peak_t, int(tl.total[-1]) if len(tl.total) else 0) for tl in tls]
        bt = it.value.boundaries_t if it.ok and getattr(it.value, "count", 0) else None
        if len(b):
            why = ("the uplot-python package is not installed (pip install uplot-python)"
                   if timeline.chart_js() is None else "its data could not be prepared")
            s.notes.append(f"interactive timeline not available: {why}; showing a static figure")
        s.figures.append((_plots().memory_over_time_png(tls, rc, bt, reserved_view), "memory over time"))
    if rline is not None:
        s.facts.append(("reserved (dashed line)", f"peak {fmt_bytes(rline['y'])}: {rline['label']}"))
    if frags:
        s.html.extend(frags)
    _bl = trace.blocks
    mine = allocator_mask(trace)[_bl["counts_device"].to_numpy(bool)] if reserved_view else None
    for dev, pk, pk_t, end in peaks:
        s.facts.append((f"GPU {dev} peak live", f"{fmt_bytes(pk)} at {fmt_ns(pk_t)}"))
        on = b["device"].to_numpy() == dev
        left = ~b["freed"].to_numpy(bool) & on
        size = b["size"].to_numpy(np.int64)
        if reserved_view:       # the allocator's segments and the libraries' blocks, each named
            fw = framework_of(trace)
            for what, sel, why in (
                    (f"segments still reserved by {fw}'s allocator", left & mine,
                     " (the allocator keeps its segments until the process exits)"),
                    ("library blocks never freed (outside the allocator)", left & ~mine, "")):
                if sel.any() or what.startswith("segments"):
                    s.facts.append((f"GPU {dev} {what}", f"{int(sel.sum()):,} ({fmt_bytes(int(size[sel].sum()))})"
                                    + (why if sel.any() else "")))
        else:
            s.facts.append((f"GPU {dev} blocks never freed",
                            f"{int(left.sum()):,} ({fmt_bytes(int(size[left].sum()))}): where the area ends"))
        assert int(size[left].sum()) == end, "timeline end != bytes never freed"


def has_stacks(ctx: ReportContext) -> bool:
    """Call sites only when the trace recorded stacks (summary says so when it did not)."""
    b = ctx.trace.blocks
    sid = b["stack_id"].to_numpy() if "stack_id" in b else np.zeros(0, np.int64)
    return bool((sid >= 0).any())


def fill_iterations(s: Section, ctx: ReportContext) -> None:
    it, life, heads = ctx.iterations, ctx.lifetimes, ctx.heads
    if it.ok:
        v = it.value
        s.facts += [("source", str(v.source)), ("iterations found", f"{v.count:,}"),
                    ("allocations per iteration", f"{v.period_allocs:,}"),
                    ("stable fraction", fmt_pct(v.stable_fraction))]
        if getattr(v, "count", 0) > 0:
            dur = np.diff(np.asarray(v.boundaries_t, dtype=np.int64))
            s.facts.append(("median iteration time", fmt_ns(float(np.median(dur)))))
        heads["iterations"] = {"source": v.source, "count": int(v.count), "period_allocs": int(v.period_allocs),
                               "stable_fraction": float(v.stable_fraction)}
    else:
        s.notes.append(f"iterations {it.note}")
    if life.ok:
        safe(s, lambda: _lifetimes_section(s, life.value, heads))
    else:
        s.notes.append(f"lifetime summary {life.note}")


def fill_sizes(s: Section, ctx: ReportContext) -> None:
    blocks = ctx.trace.blocks
    h = data.size_histogram(blocks)
    if len(h) == 0:
        s.notes.append("no device allocations in this trace")
        return
    s.figures.append((_plots().size_histogram_png(h), "block size histogram"))
    q = data.size_quantiles(blocks)
    s.facts += [(k, fmt_bytes(v)) for k, v in q.items()]
    ctx.heads["sizes"] = q


def fill_swap(s: Section, ctx: ReportContext) -> None:
    ev, sw = ctx.swap()
    # the run's duration as the header read it (Trace.duration_ns reads the maximum of four full-length
    # columns: at 100 M events ~0.6 GB of mapped pages, after the swap work, at the report's peak)
    run_ns = ctx.heads.get("duration_ns")
    _swap_section(s, ev, sw, ctx.heads, run_ns=float(ctx.trace.duration_ns if run_ns is None else run_ns))


def fill_blocks(s: Section, ctx: ReportContext) -> None:
    trace, top, acc = ctx.trace, ctx.top, ctx.access

    def _largest():
        lb = data.largest_blocks(trace, n=max(top * 40, 200), classes=ctx.classes.value)
        lb = lb.rename(columns={"t_alloc": "t_alloc_ns"})
        g = group_rows(lb, ["pid", "device", "api", "kind", "size", "class", "freed"]).head(top)
        s.tables.append(("largest blocks (identical size, API, kind, class and process grouped into one row;"
                         " t_alloc and lifetime are the group's medians)", format_frame(g, max_rows=top)))
        ctx.heads["largest_blocks"] = to_jsonable(lb.head(5))
    safe(s, _largest)
    if acc.ok and acc.value.get("outliers") and acc.value["outliers"].get("top"):
        df = pd.DataFrame(acc.value["outliers"]["top"]).rename(columns={"start_t": "start_t_ns", "end_t": "end_t_ns"})
        s.tables.append(("outlier intervals (ATI >= p90 of ATIs and size >= p90 of sizes; largest ATI x size first)",
                         format_frame(df, max_rows=top)))


MEMORY = Reporter("memory", "Memory over time", fill_memory,
                  explain=lambda ctx: MEMORY_EXPLAIN + (MEMORY_RESERVED_VIEW if ctx.reserved_view else ""))
SITES = Reporter(
    "sites", "Call sites", lambda s, ctx: _call_sites_section(s, ctx.trace, ctx.heads), applies=has_stacks,
    explain="Where the allocations come from: each block's call site is the first frame of its stack outside"
            " allocation helpers (a function of the program that nearly every allocation goes through, found"
            " automatically, or chosen with --site-skip). The tables rank the call sites by bytes live at the"
            " peak and by allocations; 'called from' gives the callers of the site's largest block.")
ITERATIONS = Reporter(
    "iterations", "Iterations and block lifetimes", fill_iterations,
    explain="The training loop's period, found from the allocation sequence (or from mark_step markers),"
            " and how blocks divide into lifetime classes.")
SIZES = Reporter(
    "sizes", "Block sizes", fill_sizes,
    explain="How many device allocations fall in each power-of-two size bin, and how many bytes they add up to.")
ACCESS = Reporter("access", "Access time intervals (ATI)", fill_access, explain=ACCESS_EXPLAIN)
POOLS = Reporter(
    "pools", "Pool strategies against the lower bound", lambda s, ctx: _pools_section(s, ctx.pools, ctx.heads),
    progress=(0.5, "pool strategies"),
    explain="The same allocation requests replayed through simulated allocators (cudaMalloc, caching, BFC,"
            " CNMeM) and offline planners; each bar is the memory the strategy needs divided by the lower"
            " bound (the peak of live bytes). 1.0 means no fragmentation.")
SWAP = Reporter(
    "swap", "Host-swap potential (Pareto curve)", fill_swap, progress=(0.75, "swap schedules"),
    explain="Blocks copied to host memory between two accesses and copied back before the next one lower"
            " the peak. Each point of the curve is a budget: the peak reached against the time the copies add"
            " to the run (PCIe modelled as one channel per direction, latency + size/bandwidth). Every schedule"
            " is replayed on a model of the GPU (kernels in recorded order, one copy engine per direction,"
            " delays propagating): its peak and its slowdown are the replay's.")
BLOCKS = Reporter(
    "blocks", "Largest and outlier blocks", fill_blocks,
    explain="The largest device allocations with their lifetime and class; outliers are blocks whose"
            " (ATI x size) is unusually high: the best candidates to swap or to free early.")


def _scope_note(d: dict) -> str:
    """What the pools' bound covers when it is not every device block: the framework allocator's blocks
    only, the libraries' (cuBLAS workspaces, NCCL, ...) left out."""
    out = d.get("outside_allocator") or {}
    fw = (d.get("allocator") or {}).get("framework")
    if not fw or fw == "unknown" or not out.get("blocks"):
        return ""
    return (f" (the framework allocator's blocks only; the libraries' {out['blocks']} blocks outside it, "
            f"{fmt_bytes(out.get('peak_live_bytes'))} at their peak, left out)")
