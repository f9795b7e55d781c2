"""The self-contained HTML report (``pyinterpose report FILE -o report.html``).

One file: inline CSS, figures as base64 SVG, one small inline script that marks
the page rendered (``<body data-render="ok">`` once every image decoded; the
browser test reads it).  No external scripts, fonts, or stylesheets.

:func:`build` runs the analyses once (:func:`analyse`) and every reporter of
pyinterpose.report.registry into a :class:`Report` (sections with either
figures/tables or a "not available: <reason>" note, and the headlines
``--json`` prints); :func:`render` turns it into HTML.
"""
from __future__ import annotations

import datetime as _dt
import gc
import html as _html
import importlib
import os
import sys
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Callable

import numpy as np
import pandas as pd

from .. import __version__
from ..analysis import guarded
from ..analysis.compare import framework_of
from ..analysis.owners import allocator_info
from ..trace.model import Trace
from ..trace.pages import release_tables
from . import data, timeline
from .ati_stream import BetweenSummary
from .html_sections import ati_figure, reserved_curve
from .html_sections import SWAP, _plots
from .registry import REPORTERS
from .reporter import ReportContext
from .sections import Report
from .text import fmt_bytes, fmt_ns
from ..analysis.clock import clock_of, launch_lag
from ..heap import give_back
from ..outfile import atomic_output


# ---------------------------------------------------------------------------------------------
# helpers to read the analyses' results without depending on their exact classes

def _get(obj: Any, *names: str, default=None):
    """First attribute or key among ``names`` present in ``obj``."""
    for n in names:
        if isinstance(obj, dict) and n in obj:
            return obj[n]
        if not isinstance(obj, dict) and hasattr(obj, n):
            return getattr(obj, n)
    return default


# ---------------------------------------------------------------------------------------------

def _clock_facts(trace: Trace, heads: dict) -> list[tuple[str, str]]:
    """The header's clock line (and the launch-to-start lag on the device clock); their keys in
    the headlines."""

    c = clock_of(trace)
    lag = launch_lag(trace)
    heads.update(c.as_dict(), launch_lag=lag)
    out = [("clock", c.label + (f" — {c.note}" if c.note else ""))]
    if lag:
        out.append(("launch-to-start lag", f"median {fmt_ns(lag['median_ns'])}, p90 {fmt_ns(lag['p90_ns'])}, "
                                           f"p99 {fmt_ns(lag['p99_ns'])}, max {fmt_ns(lag['max_ns'])} "
                                           "(how far the CPU ran ahead of the GPU)"))
    return out


def build(trace: Trace, bandwidth: float | None = None, time_limit: float = 5.0,
          strategies=None, top: int = 15, progress=None) -> Report:
    """Run the analyses once (:func:`analyse`), then every reporter of the registry in page order.
    The access pass also writes the rows the swap problem reads
    (:func:`~pyinterpose.analysis.intervals.for_swap`: one pass over the intervals, not two) on a long
    run, and on a shorter one whose pass is not fanned out anyway (the rows are written by the serial
    pass; at 10 M events the problem's own pass was ~0.8 s of this thread's time, the other core idle)."""
    from contextlib import nullcontext

    from ..analysis import access_fan
    from ..analysis.intervals import for_swap
    from ..analysis.swap.problem import MIN_SIZE

    one_pass = len(trace.blocks) >= SERIAL_BLOCKS or not access_fan.may_fan_out(trace)
    with for_swap(trace, trace.main_pid, MIN_SIZE) if one_pass else nullcontext():
        ctx = analyse(trace, bandwidth=bandwidth, time_limit=time_limit, strategies=strategies, top=top,
                      progress=progress)
        facts = header_facts(ctx)
        if ctx.wait_swap is None:       # a long run: the swap work last, once the rest is let go
            sections = _sections_swap_last(ctx)
        else:
            sections = [s for s in (r.section(ctx) for r in REPORTERS) if s is not None]
    ctx.swap()        # the swap schedules' worker is done even when no section asked for them
    ctx.step(1.0, "rendering")
    title = f"pyinterpose report: {os.path.basename(trace.path) if trace.path else 'trace'}"
    return Report(title=title, facts=facts, sections=sections, headlines=ctx.heads, warnings=list(trace.warnings))


def _sections_swap_last(ctx: ReportContext) -> list:
    """Every section, the swap section's work last (a long run, analyses one at a time): the other
    sections are built first, then what they read is let go (:func:`_let_go`: the analyses' results and
    the pages of the cached columns), then the swap problem is prepared and its schedules run
    (:func:`_swap_one_after_the_other`; at
    100 M events the largest step: it no longer stacks on what the other sections kept).  The sections
    come in page order, and so do the headlines (a section after the swap section put its keys after it)."""
    built, after, later_keys = {}, False, []
    for r in REPORTERS:
        if r is SWAP:
            after = True
            continue
        before = set(ctx.heads)
        built[r.id] = r.section(ctx)
        release_tables(ctx.trace)     # the pages of the cached columns it read (the next reads its own)
        if after:
            later_keys += [k for k in ctx.heads if k not in before]
    _let_go(ctx)
    start_swap(ctx, _now)
    built[SWAP.id] = SWAP.section(ctx)
    for k in later_keys:
        ctx.heads[k] = ctx.heads.pop(k)
    return [built[r.id] for r in REPORTERS if built.get(r.id) is not None]


# what the report's analyses memoized on the trace that the swap problem does not read again
_DONE_BEFORE_SWAP = ("lifetimes.classify", "pools.reserved_curve", "stacks", "growth.growth")


def _let_go(ctx: ReportContext) -> None:
    """The results the sections are built from, once they are built (a long run, before the swap work):
    the context's analyses and the trace's memoized results only they read."""
    ctx.iterations = ctx.classes = ctx.access = ctx.lifetimes = ctx.pools = guarded.Result()
    ctx.timelines = ctx.ati_figure = ctx.blocks = None
    for m in _DONE_BEFORE_SWAP:
        ctx.trace.forget(m)
    gc.collect()
    release_tables(ctx.trace)


def analyse(trace: Trace, bandwidth: float | None = None, time_limit: float = 5.0, strategies=None,
            top: int = 15, progress=None) -> ReportContext:
    """The analyses every section reads, each run once, as a :class:`ReportContext`.

    The interactive timeline's data and the pool strategies (they read only the blocks, the iterations
    and the classes) are made on a side thread while this one analyses the accesses (the ATI figure is
    drawn from the access analysis' own intervals: :mod:`.ati_stream`); then the swap problem is
    prepared and its schedules run on a worker thread (the C scheduler releases the GIL) while the
    sections before theirs are built (:meth:`ReportContext.swap` waits for them).

    On a trace of :data:`SERIAL_BLOCKS` blocks or more (a long run), everything runs on this thread,
    one analysis at a time (the peaks of concurrent analyses add up), the accesses right after the
    iterations (before the classes, the timeline and the pools are made and kept), the lifetimes right
    after the classes (then their classify table is let go), the heap's free pages handed back after
    the accesses and the lifetimes (:func:`_give_back`), and the swap work not here but
    last, once every other section is built and what they read is let go (:func:`build`)."""
    step = (progress.update if progress is not None else (lambda *a, **k: None))
    _import_plots_beside()
    # a long run: one analysis at a time (their peaks would add up), no worker threads
    later = _now if len(trace.blocks) >= SERIAL_BLOCKS else _in_background
    # the device blocks' few columns used here (not a copy of every column of millions of blocks)
    _bl = trace.blocks
    b = _bl.loc[_bl["counts_device"].to_numpy(bool) if "counts_device" in _bl else slice(None),
                ["device", "freed", "size"]]
    ctx = ReportContext(trace, bandwidth=bandwidth, time_limit=time_limit, strategies=strategies, top=top,
                        blocks=b, reserved_view=str(trace.meta.get("view", "")) == "reserved", step=step)

    def accesses():
        step(0.1, "access intervals")
        between = BetweenSummary()    # what the ATI figure reads of the intervals, while the analysis holds them
        ctx.access = guarded.access(trace, bandwidth=bandwidth, iters=it.value, between=between)
        ctx.ati_figure = ati_figure(ctx.access, between)
        _give_back(trace, later, heap=True)

    step(0.05, "iterations")
    ctx.iterations = it = guarded.iterations(trace)
    if later is _now:
        _give_back(trace, later)
        accesses()
    ctx.classes = guarded.block_classes(trace, iters=it.value)
    if later is _now:
        _lifetimes_then_let_classify_go(ctx)

    def side_work():
        if later is _now:
            step(0.15, "timeline")
        tl = _timeline_payloads(ctx)
        if later is _now:
            _give_back(trace, later)
            step(0.2, "pool strategies")
        return tl, guarded.pools(trace, strategies=strategies, time_limit=time_limit)
    side = later(side_work)
    if later is not _now:
        accesses()
        # the lifetimes on a worker while this thread prepares the swap problem (at 10 M events
        # ~0.5 s beside ~1 s, the other core otherwise idle once the side work is done: issue 30)
        life = later(lambda: guarded.lifetimes_summary(trace, iters=it.value))
        start_swap(ctx, later)     # a long run: once every other section is built (build())
    _give_back(trace, later)
    if later is not _now:
        step(0.3, "lifetimes")
        ctx.lifetimes = life.result()
    step(0.35, "timeline")
    ctx.timelines, ctx.pools = side.result()
    _give_back(trace, later)
    return ctx


def _import_plots_beside() -> None:
    """The figures' module and matplotlib (~0.3 s of imports) imported on a thread of its own while this one
    runs the first analyses (numpy, mostly without the GIL): until then the report used one core.  A section
    drawing a figure imports it on use (``html_sections._plots``), waiting for this import if it is under way;
    should this one fail, that import says why."""
    name = f"{__package__}.plots"
    if name in sys.modules:
        return

    def run():
        try:
            importlib.import_module(name)
        except Exception:  # noqa: BLE001 - the section's own import reports it
            pass
    threading.Thread(target=run, name="pyinterpose-import", daemon=True).start()


def _lifetimes_then_let_classify_go(ctx: ReportContext) -> None:
    """A long run: the lifetimes summary right after the block classes, then the heap it used given back.
    On a trace that long the summary reads the blocks' columns a piece at a time and makes no classify
    table (``lifetimes.LEAN_BLOCKS``: at 100 M events the table and its transient arrays peaked this
    step at 3.4 GB); should it make one (block ids not ascending), the table is let go after it, so
    that it is not held through the timeline, the pools and the sections (the classes the timeline and
    the sections read are ``ctx.classes``, a series of their own)."""
    ctx.step(0.12, "lifetimes")
    ctx.lifetimes = guarded.lifetimes_summary(ctx.trace, iters=ctx.iterations.value)
    ctx.trace.forget("lifetimes.classify")
    _give_back(ctx.trace, _now, heap=True)    # the summary's own transient arrays


def start_swap(ctx: ReportContext, later) -> None:
    """The swap problem, prepared once for the evaluation and the Pareto sweep, and their work:
    one list of tasks, worked through by a worker thread now (``later`` is :func:`_in_background`)
    and by this thread too once its own sections are built (two busy threads, the C scheduler
    releasing the GIL, and never more runs at once than that); ``ctx.wait_swap`` gives the results.
    A long run (``later`` is :func:`_now`, every other section built): the evaluation and then the
    sweep, when ``ctx.wait_swap`` is called (:func:`_swap_one_after_the_other`)."""
    trace = ctx.trace
    ctx.step(0.7 if later is _now else 0.2, "swap planning")     # a long run's: after the other sections
    # prepared once for both, where the swap command puts it (on disk past swap.ondisk.ON_DISK_CANDIDATES).
    # At 100 M events in memory the report peaked at 3415 MiB in the sweep (the runs give back the pages of
    # a mapped problem only: schedule's drop_hot_live), on disk at 1882-1912 MiB, and no slower (109-110 s
    # against 116 s, profiled; issue 30)
    sp = guarded._call("swap", "problem_for", trace, bandwidth=ctx.bandwidth)
    # the accesses' per-block touches: read by the access analysis and the swap problem, both made by
    # now (kept only inside intervals.shared(); nothing after this reads them again)
    trace.forget("access.touches")
    if later is _now:
        ctx.wait_swap = lambda: _swap_one_after_the_other(trace, sp)
        _give_back(trace, later)
        return
    work = guarded.swap_work(sp.value) if sp.ok else sp
    del sp
    worker = later(work.value.work) if work.ok else None

    def wait_swap():
        ev, sw = guarded.swap_work_results(work)     # this thread takes the tasks left, then waits
        if worker is not None:
            worker.result()
        return ev, sw
    ctx.wait_swap = wait_swap
    _give_back(trace, later)


def _swap_one_after_the_other(trace: Trace, sp: guarded.Result) -> tuple[guarded.Result, guarded.Result]:
    """A long run's swap work, every other section built: the evaluation, then the Pareto sweep, each
    through the swap analysis' own entry point on the prepared problem, so with its own policy for a
    long trace (``swap.evaluate``: the runs two at a time, each order made when first needed and let go
    after its last run; the same values as :class:`~pyinterpose.analysis.swap.SwapWork`'s, which keeps
    every order for both: at 100 M events ~1 GB more), and ``swap.pareto`` (one budget at a time on a long
    trace), the sweep first (the vote orders' shared inputs made once for both).  The problem holds what the
    runs read of the clock (its replay ops), so the clock's own go (~0.5 GB at 100 M events), and the heap
    the other sections, the preparation and then the evaluation freed is given back before each step
    (as ``swap.analyse`` does on a long trace)."""
    if not sp.ok:
        return sp, sp
    trace.forget("clock")
    give_back()
    # the sweep first: what every vote order is made from is then made once for both (the evaluation
    # lets it go once its own orders are made; made again, ~5 s at 100 M events)
    sweep = guarded._call("swap", "pareto", trace, problem=sp.value)
    give_back()
    # two runs at a time, as the swap command (swap.LONG_WORKERS): at 100 M events, the problem on disk, the
    # evaluation peaks at ~1.3 GB, below the sweep (~1.9 GB); one at a time took 116-121 s against 107-110 s
    # when the problem was in memory (issue 30: 120 s)
    return guarded._call("swap", "evaluate", trace, problem=sp.value), sweep


def _give_back(trace: Trace, later, heap: bool = False) -> None:
    """A long run (analyses one at a time): the pages of the cached columns the step before read are given
    back before the next (at 100 M events ~3 GB of mapped columns otherwise stay resident to the end);
    with ``heap``, the heap's free pages too (:func:`~pyinterpose.heap.give_back`): after the accesses
    (at 100 M events the access analysis grows the heap to ~3.4 GB and keeps ~0.8 GB in use) and after
    the lifetimes summary (its transient arrays: ~1.4 GB at 100 M events), so that the steps
    after them grow it only as far as they need, instead of keeping the largest step's high-water mark
    resident beneath every later step's mapped columns.  Not after every step: each give-back costs
    the page faults of the heap grown again (~1.5 s of system time a GB at 100 M events), and the
    iterations' heap is reused by the accesses, which need more."""
    if later is _now:
        release_tables(trace)
        if heap:
            give_back()


def _timeline_payloads(ctx: ReportContext) -> dict | None:
    """The interactive timeline's data, one payload per device (None: no chart library, so the
    memory section draws the static figure instead)."""
    trace, b, it = ctx.trace, ctx.blocks, ctx.iterations
    if timeline.chart_js() is None or not len(b):
        return None
    # the framework allocator replayed for its reserved curve: not for a summarised (long) run, whose
    # line is drawn flat at the pools analysis' simulated peak (the replay is the pools' second one:
    # at 100 M events 10-35 s and +2.4 GB for a line of a few steps)
    dev, freed = b["device"].to_numpy(), b["freed"].to_numpy(bool)
    long_run = any(int((dev == d).sum()) + int((freed & (dev == d)).sum()) > timeline.exact_max_events()
                   for d in np.unique(dev))
    rcurve = None if ctx.reserved_view or long_run else reserved_curve(trace)
    try:
        return {int(d): timeline.payload(trace, int(d), classes=ctx.classes.value,
                                         iterations=it.value if it.ok else None, reserved_view=ctx.reserved_view,
                                         reserved=rcurve)
                for d in sorted(b["device"].unique())}
    except Exception:  # noqa: BLE001 - the memory section reports the failure itself
        return None


def header_facts(ctx: ReportContext) -> list[tuple[str, str]]:
    """The summary at the top of the report (and its numbers in the headlines)."""
    trace, b, heads, payloads = ctx.trace, ctx.blocks, ctx.heads, ctx.timelines
    if payloads and len(payloads) == 1 and next(iter(payloads.values())) is not None:
        peak = next(iter(payloads.values()))["stats"]["peak_bytes"]
    else:
        peak = data.peak_of(trace)
    nv = trace.nvml
    duration = int(trace.duration_ns)      # read once (four full-length columns' maxima)
    facts = [
        ("trace", os.path.basename(trace.path) if trace.path else "(in memory)"),
        ("command", " ".join(map(str, trace.meta.get("command", []))) or "-"),
        ("view", str(trace.meta.get("view", "-"))),
        ("framework", framework_of(trace)),
        ("GPUs", ", ".join(str(_get(g, "name", default=g)) for g in trace.meta.get("gpus", []))
         or ("simulated (simcuda): no real GPU" if trace.meta.get("simulated_gpu") else "not recorded")),
        ("processes", str(len(trace.pids))),
        ("duration", fmt_ns(duration)),
        ("device allocations", f"{len(b):,}"),
        ("accesses", f"{len(trace.accesses):,}"),
        ("kernel launches", f"{len(trace.launches):,}"),
        *(_peak_facts(trace, peak) if ctx.reserved_view else [("peak live bytes", fmt_bytes(peak))]),
        ("NVML peak used", fmt_bytes(int(nv["used_bytes"].max())) if len(nv) else "not sampled"),
    ]
    facts += _clock_facts(trace, heads)
    if ctx.reserved_view:
        al = allocator_info(trace)
        heads.update(allocator_peak_bytes=int(al["peak_live_bytes"]),
                     outside_allocator_peak_bytes=int(al["outside"]["peak_live_bytes"]))
    heads.update(blocks=int(len(b)), peak_live_bytes=int(peak), view=trace.meta.get("view"),
                 nvml_peak_used_bytes=int(nv["used_bytes"].max()) if len(nv) else None,
                 duration_ns=duration)
    return facts


def _peak_facts(trace: Trace, peak: int) -> list[tuple[str, str]]:
    """A reserved view's peaks, each under its own name: the framework allocator's reserve (what
    the framework itself reports, e.g. PyTorch's max_memory_reserved), the blocks made outside it
    (library workspaces, the runtime), and both together (the timeline's peak)."""
    al = allocator_info(trace)
    fw, out = al["framework"], al["outside"]
    if fw == "unknown":
        return [("peak reserved (all device blocks; no framework recognised)", fmt_bytes(peak))]
    facts = [(f"peak reserved by {fw}'s allocator", f"{fmt_bytes(al['peak_live_bytes'])} "
                                                  f"({al['peak_live_bytes']:,} B; {al['blocks']:,} segments)")]
    if out["blocks"]:
        facts += [("peak outside the allocator (libraries)",
                   f"{fmt_bytes(out['peak_live_bytes'])} ({out['blocks']:,} blocks)"),
                  ("peak of both together", fmt_bytes(peak))]
    return facts


SERIAL_BLOCKS = 2_000_000     # blocks in the trace (~20 M events) from which the report runs its analyses one at a time


def _now(fn: Callable[[], Any]) -> Future:
    """``fn()`` run here and now, as a done :class:`Future` (the serial counterpart of :func:`_in_background`)."""
    f: Future = Future()
    try:
        f.set_result(fn())
    except Exception as e:  # noqa: BLE001 - raised again by .result(), as a worker's would be
        f.set_exception(e)
    return f


def _in_background(fn: Callable[[], Any]) -> Future:
    """``fn()`` on a worker thread; ``.result()`` waits for it."""
    ex = ThreadPoolExecutor(max_workers=1, thread_name_prefix="pyinterpose-report")
    try:
        return ex.submit(fn)
    finally:
        ex.shutdown(wait=False)      # the submitted call still runs; no thread is left behind


# ---------------------------------------------------------------------------------------------

_CSS = """
body{font-family:-apple-system,'Segoe UI',Helvetica,Arial,sans-serif;margin:0;color:#1d1d1f;background:#fafafa}
header{background:#1f2937;color:#fff;padding:16px 28px}
header h1{margin:0;font-size:20px;font-weight:600}
header .sub{color:#cbd5e1;font-size:12px;margin-top:4px}
nav{padding:8px 28px;background:#e5e7eb;font-size:13px}
nav a{margin-right:14px;color:#1f2937;text-decoration:none}
main{padding:8px 28px 40px}
section{background:#fff;border:1px solid #e5e7eb;border-radius:6px;padding:14px 18px;margin:16px 0}
h2{font-size:17px;margin:0 0 6px}
p.explain{color:#4b5563;font-size:13px;margin:4px 0 10px}
img{width:100%;max-width:1800px;height:auto;display:block;margin:8px 0}
table{border-collapse:collapse;font-size:12px;margin:8px 0}
th,td{padding:3px 10px;border-bottom:1px solid #eee;text-align:right;white-space:nowrap}
th:first-child,td:first-child{text-align:left}
th{background:#f3f4f6}
table.facts td{text-align:left;white-space:normal}
table.facts td:first-child{color:#6b7280}
.note{color:#92400e;background:#fffbeb;border-left:3px solid #f59e0b;padding:4px 8px;font-size:12px;margin:6px 0}
.warn{color:#991b1b;background:#fef2f2;border-left:3px solid #ef4444;padding:4px 8px;font-size:12px}
caption{text-align:left;font-weight:600;padding:4px 0}
footer{color:#9ca3af;font-size:11px;padding:0 28px 20px}
.pit-tl{margin:8px 0 14px}
.pit-tl-bar{display:flex;gap:14px;align-items:center;font-size:12px;flex-wrap:wrap}
.pit-tl-bar button{font-size:12px;border:1px solid #cbd5e1;background:#fff;padding:2px 8px;cursor:pointer}
.pit-tl-bar button.on{background:#1f2937;color:#fff;border-color:#1f2937}
.pit-tl-info{color:#6b7280}
.pit-tl-mini{border-top:1px dashed #e5e7eb}
.pit-tl-hover{font-size:12px;min-height:150px;color:#374151}
.pit-tl-main,.pit-tl-mini{position:relative}
.pit-tl-legend{display:flex;flex-wrap:wrap;gap:4px 14px;font-size:11px;color:#374151;margin:2px 0 4px 74px}
.pit-tl-key i{display:inline-block;width:11px;height:11px;margin-right:4px;vertical-align:-1px}
.pit-tl-key i.line{height:0;border-top:2px solid;width:18px;vertical-align:3px}
.pit-tl-key i.line.dash{border-top-style:dashed}
.pit-tl-key i.band{background:rgba(0,0,0,0.08);border:1px solid #bbb}
.pit-tl-key i.tick{width:2px;height:11px;background:#B45309;margin:0 6px 0 4px}
.pit-tl-window{position:absolute;top:0;bottom:0;border:1.5px solid #C44E52;background:rgba(196,78,82,0.12);
  cursor:grab;z-index:5}
.pit-tl-mark{position:absolute;display:none;pointer-events:none;width:6px;background:#000;z-index:4;
  box-shadow:0 0 0 1px #fff}
.pit-tl-life{position:absolute;display:none;pointer-events:none;bottom:0;height:5px;background:#000;z-index:4}
.pit-tl-help{font-size:11px;color:#6b7280;margin:2px 0 4px 74px}
.pit-tl-none{color:#9ca3af}
"""

_SCRIPT = """
window.addEventListener('load', function () {
  var imgs = document.images, ok = 0;
  for (var i = 0; i < imgs.length; i++) { if (imgs[i].complete && imgs[i].naturalWidth > 0) ok++; }
  document.body.setAttribute('data-images', ok + '/' + imgs.length);
  document.body.setAttribute('data-render', ok === imgs.length ? 'ok' : 'broken');
});
"""


def _esc(x: Any) -> str:
    return _html.escape(str(x), quote=True)


def _facts_html(facts: list[tuple[str, str]]) -> str:
    if not facts:
        return ""
    rows = "".join(f"<tr><td>{_esc(k)}</td><td>{_esc(v)}</td></tr>" for k, v in facts)
    return f'<table class="facts">{rows}</table>'


def _table_html(caption: str, df: pd.DataFrame) -> str:
    head = "".join(f"<th>{_esc(c)}</th>" for c in df.columns)
    body = "".join("<tr>" + "".join(f"<td>{_esc(v)}</td>" for v in row) + "</tr>"
                   for row in df.itertuples(index=False, name=None))
    return f"<table><caption>{_esc(caption)}</caption><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def render(rep: Report) -> str:
    nav = "".join(f'<a href="#{s.id}">{_esc(s.title)}</a>' for s in rep.sections)
    parts = []
    for s in rep.sections:
        inner = [f'<h2>{_esc(s.title)}</h2>']
        if s.explain:
            inner.append(f'<p class="explain">{_esc(s.explain)}</p>')
        inner += [f'<div class="note">{_esc(n)}</div>' for n in s.notes]
        inner.append(_facts_html(s.facts))
        inner += s.html
        inner += [f'<img alt="{_esc(alt)}" src="data:{_plots().MIME};base64,{png}">' for png, alt in s.figures]
        inner += [_table_html(c, df) for c, df in s.tables]
        parts.append(f'<section id="{_esc(s.id)}">{"".join(inner)}</section>')
    warns = "".join(f'<div class="warn">{_esc(w)}</div>' for w in rep.warnings)
    now = _dt.datetime.now().strftime("%Y-%m-%d %H:%M")
    interactive = any(s.html and s.id != "flame" for s in rep.sections)   # the timeline's charts (not the flame graph's)
    libs = (f"<script>{timeline.chart_js()}</script><script>{timeline.timeline_js()}</script>"
            if interactive else "")
    css = _CSS + (timeline.chart_css() if interactive else "")
    return (
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
        f"<meta name=\"viewport\" content=\"width=device-width,initial-scale=1\"><title>{_esc(rep.title)}</title>"
        f"<style>{css}</style></head><body>"
        f"<header><h1>{_esc(rep.title)}</h1><div class=\"sub\">pyinterpose {__version__} &middot; {now}</div></header>"
        f"<nav>{nav}</nav><main>{warns}<section id=\"summary\"><h2>Summary</h2>{_facts_html(rep.facts)}</section>"
        f"{''.join(parts)}</main>"
        "<footer>Self-contained report: no network access needed. Figures are SVG images embedded in this file;"
        " the memory timeline is drawn by uPlot (MIT), inlined."
        "</footer>"
        f"{libs}<script>{_SCRIPT}</script>{''.join(t for s in rep.sections for t in s.tail)}</body></html>\n"
    )


def write(trace: Trace, path: str, **kw) -> Report:
    rep = build(trace, **kw)
    with atomic_output(path, "w", encoding="utf-8") as f:
        f.write(render(rep))
    return rep
