"""The self-contained HTML report (``pyinterpose report FILE -o report.html``).

One file: inline CSS, figures as base64 SVG, one small inline script that marks
the page rendered (``<body data-render="ok">`` once every image decoded; the
browser test reads it).  No external scripts, fonts, or stylesheets.

:func:`build` gathers everything into a :class:`Report` (sections with either
figures/tables or a "not available: <reason>" note); :func:`render` turns it
into HTML; :func:`headlines` gives the same numbers for the terminal/JSON.
"""
from __future__ import annotations

import datetime as _dt
import html as _html
import math
import os
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np
import pandas as pd

from .. import __version__
from ..trace.model import Trace
from . import analyses, data, oom_fit_sections, plots, timeline
from ..analysis.compare import framework_of
from ..analysis.owners import allocator_info, allocator_mask
from .text import fmt_bytes, fmt_ns, fmt_pct, fmt_ratio, to_jsonable


@dataclass
class Section:
    id: str
    title: str
    explain: str = ""
    figures: list[tuple[str, str]] = field(default_factory=list)   # (base64 png, alt text)
    tables: list[tuple[str, pd.DataFrame]] = field(default_factory=list)  # (caption, formatted table)
    facts: list[tuple[str, str]] = field(default_factory=list)      # headline key/values
    notes: list[str] = field(default_factory=list)                  # "not available: ..." etc.
    html: list[str] = field(default_factory=list)                   # interactive fragments (timeline)


@dataclass
class Report:
    title: str
    facts: list[tuple[str, str]]
    sections: list[Section]
    headlines: dict[str, Any]
    warnings: list[str] = field(default_factory=list)


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


def _scalars(obj: Any, limit: int = 24) -> list[tuple[str, Any]]:
    """Scalar fields of a dataclass/dict/object, for a generic facts table."""
    if obj is None:
        return []
    if isinstance(obj, dict):
        items = obj.items()
    elif hasattr(obj, "__dataclass_fields__"):
        items = ((k, getattr(obj, k)) for k in obj.__dataclass_fields__)
    elif isinstance(obj, pd.Series):
        items = obj.items()
    else:
        items = ((k, v) for k, v in vars(obj).items() if not k.startswith("_")) if hasattr(obj, "__dict__") else []
    out = []
    for k, v in items:
        if isinstance(v, (bool, np.bool_, int, float, str, np.integer, np.floating)) or v is None:
            out.append((str(k), v))
        if len(out) >= limit:
            break
    return out


_BYTE_KEYS = {"size", "bytes", "budget", "peak", "peak_after", "peak_before", "floor", "bound", "lower_bound",
              "capacity", "pool", "saved", "bytes_moved", "pool_bytes", "reserved", "live"}


def _fmt_value(key: str, v: Any) -> str:
    if v is None:
        return "-"
    if isinstance(v, (bool, np.bool_)):
        return "yes" if v else "no"
    k = key.lower().replace(" ", "_")
    if isinstance(v, (int, np.integer, float, np.floating)):
        fv = float(v)
        if math.isnan(fv):
            return "-"
        words = set(k.split("_"))
        if words & {"fraction", "share", "pct", "fragmentation"}:
            return fmt_pct(fv)
        if "ratio" in words:
            return fmt_ratio(fv)
        if words & {"ns", "t", "time", "ati", "stall", "lifetime"}:
            return fmt_ns(fv)
        if k in _BYTE_KEYS or "bytes" in k or words & {"size", "peak", "budget", "floor", "bound"}:
            return fmt_bytes(fv)
        if isinstance(v, (float, np.floating)):
            return f"{fv:.4g}"
        return f"{int(v):,}"
    return str(v)


def _frame(obj: Any) -> pd.DataFrame | None:
    if isinstance(obj, pd.DataFrame):
        return obj
    if isinstance(obj, list) and obj and isinstance(obj[0], dict):
        return pd.DataFrame(obj)
    return None


_ID_COLS = {"block_id", "pid", "device", "seq", "stream", "kernel", "tid"}
_TIME_UNITS = ((1e9, "s", 3), (1e6, "ms", 2), (1e3, "us", 1), (1.0, "ns", 0))
_BYTE_UNITS = ((1 << 40, "TiB"), (1 << 30, "GiB"), (1 << 20, "MiB"), (1 << 10, "KiB"), (1, "B"))


def _col_kind(name: str) -> str:
    k = name.lower().replace(" ", "_")
    words = set(k.split("_"))
    if k in _ID_COLS:
        return "id"
    if words & {"fraction", "share", "pct", "fragmentation"}:
        return "pct"
    if "ratio" in words:
        return "ratio"
    if k.endswith("_ns") or words & {"ns", "time", "ati", "stall", "lifetime"}:
        return "time"
    if k in _BYTE_KEYS or "bytes" in k or words & {"size", "peak", "budget", "floor", "bound"}:
        return "bytes"
    return "number"


def _base_name(name: str) -> str:
    for suf in ("_ns", "_bytes", "_fraction"):
        if name.endswith(suf):
            return name[: -len(suf)]
    return name


def _prints_zero(x: float, dec: int) -> bool:
    """Would the non-zero magnitude ``x`` print as 0 with ``dec`` decimals?"""
    return 0 < x < 0.5 * 10.0 ** -dec


def _decimals(low: float, dec: int, most: int = 6) -> int:
    """``dec`` decimals, or more (up to ``most``) so that the smallest non-zero magnitude ``low`` does not
    print as 0."""
    while dec < most and _prints_zero(low, dec):
        dec += 1
    return dec


def _format_frame(df: pd.DataFrame, max_rows: int = 30) -> pd.DataFrame:
    """Human formatting, one unit per column, named in the header: times in the one unit
    (s, ms, µs, ns) that fits the column's median value ("lifetime (ms)"), bytes likewise
    in binary units ("size (MiB)"), fractions as "(%)", ratios with three decimals, counts
    as integers with thousands separators, ids as plain integers; missing values "–".
    No value that is not zero prints as zero: a column whose smallest value would round to 0
    in that unit takes a smaller unit (or, for fractions and ratios, more decimals)."""
    df = df.head(max_rows)
    out = pd.DataFrame(index=df.index)
    for c in df.columns:
        col = df[c]
        name = str(c)
        if pd.api.types.is_bool_dtype(col) or (col.dtype == object and col.map(
                lambda v: isinstance(v, (bool, np.bool_)) or v is None).all() and col.notna().any()):
            out[name] = ["–" if v is None else ("yes" if v else "no") for v in col.tolist()]
            continue
        if not pd.api.types.is_numeric_dtype(col):
            out[name] = ["–" if v is None or (isinstance(v, float) and math.isnan(v)) else
                         ("yes" if v is True else "no" if v is False else str(v)) for v in col.tolist()]
            continue
        vals = col.astype(np.float64).to_numpy()
        fin = vals[np.isfinite(vals)]
        nz = np.abs(fin[fin != 0])
        top = float(np.median(nz)) if len(nz) else 0.0   # the unit that fits the typical value
        low = float(nz.min()) if len(nz) else 0.0        # ... unless it would print a real value as 0
        kind = _col_kind(name)
        if kind == "time":
            k = next((i for i, u in enumerate(_TIME_UNITS) if top >= u[0]), len(_TIME_UNITS) - 1)
            while k + 1 < len(_TIME_UNITS) and _prints_zero(low / _TIME_UNITS[k][0], _TIME_UNITS[k][2]):
                k += 1
            div, unit, dec = _TIME_UNITS[k]
            header, fmt = f"{_base_name(name)} ({unit})", (lambda v, d=div, p=dec: f"{v / d:,.{p}f}")
        elif kind == "bytes":
            k = next((i for i, u in enumerate(_BYTE_UNITS) if top >= 2 * u[0]), len(_BYTE_UNITS) - 1)
            while k + 1 < len(_BYTE_UNITS) and _prints_zero(low / _BYTE_UNITS[k][0], 1):
                k += 1
            div, unit = _BYTE_UNITS[k]
            dec = 0 if unit == "B" else 1
            header, fmt = f"{_base_name(name)} ({unit})", (lambda v, d=div, p=dec: f"{v / d:,.{p}f}")
        elif kind == "pct":
            dec = _decimals(100.0 * low, 1)
            header, fmt = f"{_base_name(name)} (%)", (lambda v, p=dec: f"{100.0 * v:,.{p}f}")
        elif kind == "ratio":
            dec = _decimals(low, 3)
            header, fmt = name, (lambda v, p=dec: f"{v:,.{p}f}")
        elif kind == "id":
            header, fmt = name, (lambda v: f"{int(v)}")
        else:
            integral = bool(len(fin)) and bool(np.all(fin == np.round(fin)))
            dec = _decimals(low, 3)
            header, fmt = name, ((lambda v: f"{int(v):,}") if integral else (lambda v, p=dec: f"{v:,.{p}f}"))
        out[header] = ["–" if not np.isfinite(v) else fmt(v) for v in vals]
    return out.reset_index(drop=True)


def _group_rows(df: pd.DataFrame, keys: list[str], id_col: str = "block_id") -> pd.DataFrame:
    """Identical rows (equal ``keys``) folded into one: a leading ``blocks`` column with the
    count ("15 ×") and the ids listed (first and last when many); other columns take the
    first row's value, numeric ones their median when they differ."""
    if len(df) == 0:
        return df
    rows = []
    for _, g in df.groupby(keys, sort=False, dropna=False):
        r = g.iloc[0].copy()
        for c in g.columns:
            if c not in keys and c != id_col and pd.api.types.is_numeric_dtype(g[c]) \
                    and not pd.api.types.is_bool_dtype(g[c]) and g[c].nunique() > 1:
                r[c] = float(g[c].median())
        ids = g[id_col].astype(int).tolist() if id_col in g else []
        r = r.drop(labels=[id_col]) if id_col in r.index else r
        head = pd.Series({"blocks": f"{len(g)} ×" if len(g) > 1 else "1",
                          "block ids": ", ".join(map(str, ids)) if len(ids) <= 3 else
                          f"{ids[0]}, {ids[1]} … {ids[-1]}"})
        rows.append(pd.concat([head, r]))
    out = pd.DataFrame(rows).reset_index(drop=True)
    for c in out.columns:
        v = out[c].tolist()
        if v and all(isinstance(x, (int, float, np.integer, np.floating)) and not isinstance(x, (bool, np.bool_))
                     for x in v):
            out[c] = out[c].astype(np.float64)
        elif v and all(isinstance(x, (bool, np.bool_)) for x in v):
            out[c] = out[c].astype(bool)
    return out


def _safe(section: Section, fn: Callable[[], None]) -> None:
    """Run a section builder; any failure becomes a note in that section only."""
    try:
        fn()
    except Exception as e:  # noqa: BLE001 - one section must not break the report
        section.notes.append(f"not available: {type(e).__name__}: {e}")


# ---------------------------------------------------------------------------------------------

def _clock_facts(trace: Trace, heads: dict) -> list[tuple[str, str]]:
    """The header's clock line (and the launch-to-start lag on the device clock); their keys in
    the headlines."""
    from ..analysis.clock import clock_of, launch_lag

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
    """Run the analyses and assemble every section of the report."""
    step = (progress.update if progress is not None else (lambda *a, **k: None))
    heads: dict[str, Any] = {}
    # the device blocks' few columns used here (not a copy of every column of millions of blocks)
    _bl = trace.blocks
    b = _bl.loc[_bl["counts_device"].to_numpy(bool) if "counts_device" in _bl else slice(None),
                ["device", "freed", "size"]]
    reserved_view = str(trace.meta.get("view", "")) == "reserved"

    step(0.05, "iterations")
    # the access intervals (the access analysis' and the swap problem's first and longest
    # part) need no iterations: found on a side thread while this one finds the iterations
    intervals = _in_background(lambda: _prefetch_intervals(trace))
    it = analyses.iterations(trace)
    cls = analyses.block_classes(trace, iters=it.value)
    classes = cls.value

    # ---- the interactive timeline's data (one payload per device; None: no chart library, so
    # the static figure instead) and the pool strategies read only the blocks, the iterations
    # and the classes: built on a side thread while this one analyses the accesses
    def _timeline_payloads():
        if timeline.chart_js() is None or not len(b):
            return None
        rcurve = None if reserved_view else _reserved_curve(trace)
        try:
            return {int(d): timeline.payload(trace, int(d), classes=classes,
                                             iterations=it.value if it.ok else None, reserved_view=reserved_view,
                                             reserved=rcurve)
                    for d in sorted(b["device"].unique())}
        except Exception:  # noqa: BLE001 - the memory section reports the failure itself
            return None

    side = _in_background(lambda: (_timeline_payloads(),
                                   analyses.pools(trace, strategies=strategies, time_limit=time_limit)))

    # ---- meanwhile the access analysis and the swap problem: the access intervals they share
    # (hundreds of MB at 10 M events) are let go before the other sections are built. The swap
    # schedules then run on a worker thread (the C scheduler releases the GIL) while this
    # thread builds the other sections; their section is written when it comes to it.
    step(0.1, "access intervals")
    acc_s = Section("access", "Access time intervals (ATI)",
                    "The time between consecutive uses of a block by kernels or copies. An interval can hide a"
                    " swap to host memory only if it is longer than the bandwidth filter: size/BW(d2h) +"
                    " size/BW(h2d) + latency. Intervals right of the red line are swap opportunities.")
    acc = analyses.access(trace, bandwidth=bandwidth, iters=it.value)
    _safe(acc_s, lambda: _access_section(acc_s, trace, acc, heads))
    step(0.2, "swap planning")
    sp = analyses._call("swap", "problem_for", trace, bandwidth=bandwidth)   # prepared once for both
    trace.forget("access.intervals")
    # the swap evaluation and the Pareto sweep: one list of tasks, worked through by a worker
    # thread now and by this thread too once its own sections are built (two busy threads,
    # the C scheduler releasing the GIL, and never more runs at once than that)
    work = analyses.swap_work(sp.value) if sp.ok else sp
    worker = _in_background(work.value.work) if work.ok else None
    step(0.3, "lifetimes")
    life = analyses.lifetimes_summary(trace, iters=it.value)
    step(0.35, "timeline")
    payloads, pl = side.result()
    intervals.result()

    # ---- header facts
    if payloads and len(payloads) == 1 and next(iter(payloads.values())) is not None:
        peak = next(iter(payloads.values()))["stats"]["peak_bytes"]
    else:
        peak = data.peak_of(trace)
    nv = trace.nvml
    facts = [
        ("trace", os.path.basename(trace.path) if trace.path else "(in memory)"),
        ("command", " ".join(map(str, trace.meta.get("command", []))) or "-"),
        ("view", str(trace.meta.get("view", "-"))),
        ("framework", framework_of(trace)),
        ("GPUs", ", ".join(str(_get(g, "name", default=g)) for g in trace.meta.get("gpus", [])) or "-"),
        ("processes", str(len(trace.pids))),
        ("duration", fmt_ns(trace.duration_ns)),
        ("device allocations", f"{len(b):,}"),
        ("accesses", f"{len(trace.accesses):,}"),
        ("kernel launches", f"{len(trace.launches):,}"),
        *(_peak_facts(trace, peak) if reserved_view else [("peak live bytes", fmt_bytes(peak))]),
        ("NVML peak used", fmt_bytes(int(nv["used_bytes"].max())) if len(nv) else "not sampled"),
    ]
    facts += _clock_facts(trace, heads)
    if reserved_view:
        al = allocator_info(trace)
        heads.update(allocator_peak_bytes=int(al["peak_live_bytes"]),
                     outside_allocator_peak_bytes=int(al["outside"]["peak_live_bytes"]))
    heads.update(blocks=int(len(b)), peak_live_bytes=int(peak), view=trace.meta.get("view"),
                 nvml_peak_used_bytes=int(nv["used_bytes"].max()) if len(nv) else None,
                 duration_ns=int(trace.duration_ns))

    sections: list[Section] = []

    # ---- out of memory: first, when an allocation failed
    if oom_fit_sections.has_failures(trace):
        s = Section("oom", "Out of memory", oom_fit_sections.OOM_EXPLAIN)
        _safe(s, lambda: oom_fit_sections.fill_oom(s, trace, heads))
        sections.append(s)

    # ---- memory over time
    s = Section("memory", "Memory over time",
                "Live device bytes after every allocation and free, stacked by lifetime class (or by owner"
                " library: the buttons switch), drawn against the event index (each allocation and each free is"
                " one step; the top axis gives the time). It opens on one steady iteration; drag or scroll to"
                " zoom, drag the minimap below to move, \u2018whole run\u2019 to see everything. Shaded bands are"
                " alternate iterations (ticks above the plot mark their boundaries), drawn under the data. The black"
                " line is the memory NVML reports as used on the GPU (the framework's reserve plus the CUDA"
                " context). Hover over the stack for the block under the cursor: size, API, owner, class,"
                " allocation and free, call site. Far out, each screen bin keeps its peak, so no peak is lost;"
                " zoomed in, every event is drawn."
                + (" This is a reserved-view trace: the blocks are the segments the framework's allocator took"
                   " from CUDA, so the stacked area is its reserve; what is allocated inside the segments is not"
                   " visible in this view (capture the blocks view for that)." if reserved_view else ""))
    if not cls.ok:
        s.notes.append(f"block classes {cls.note}; showing all blocks as one series")
    if not it.ok:
        s.notes.append(f"iteration boundaries {it.note}")

    def _mem():
        rc = data.reserved_curves(trace)
        if not len(b) and not rc:
            s.notes.append("no device allocations in this trace")
            return
        frags = []
        rline = None if reserved_view else _reserved_line(trace, pl)
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
        else:
            tls = data.memory_timeline(trace, classes=classes)
            peaks = [(tl.device, tl.peak, tl.peak_t, int(tl.total[-1]) if len(tl.total) else 0) for tl in tls]
            bt = it.value.boundaries_t if it.ok and getattr(it.value, "count", 0) else None
            if len(b):
                why = ("the uplot-python package is not installed (pip install uplot-python)"
                       if timeline.chart_js() is None else "its data could not be prepared")
                s.notes.append(f"interactive timeline not available: {why}; showing a static figure")
            s.figures.append((plots.memory_over_time_png(tls, rc, bt, reserved_view), "memory over time"))
        if rline is not None:
            s.facts.append(("reserved (dashed line)", f"peak {fmt_bytes(rline['y'])}: {rline['label']}"))
        if frags:
            s.html.extend(frags)
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
    _safe(s, _mem)
    sections.append(s)

    # ---- call sites (the first frame outside allocation helpers; each block keeps its stack), when
    # the trace recorded stacks (summary says so when it did not)
    _sid = _bl["stack_id"].to_numpy() if "stack_id" in _bl else np.zeros(0, np.int64)
    s = Section("sites", "Call sites",
                "Where the allocations come from: each block's call site is the first frame of its stack outside"
                " allocation helpers (a function of the program that nearly every allocation goes through, found"
                " automatically, or chosen with --site-skip). The tables rank the call sites by bytes live at the"
                " peak and by allocations; 'called from' gives the callers of the site's largest block.")
    if (_sid >= 0).any():
        _safe(s, lambda: _call_sites_section(s, trace, heads))
        sections.append(s)

    # ---- flame graphs of the live set by call stack (report/flame.py), at the peak and each OOM
    s = Section("flame", "Live memory by call stack",
                "Flame graphs of the device bytes live at the peak, and at each out-of-memory failure: each"
                " rectangle is a frame, as wide as the bytes live under it (root on top). Click a frame to zoom"
                " on it, the root or Escape to zoom out. Export them with"
                " `pyinterpose export --format folded|speedscope`.")
    if (_sid >= 0).any():
        _safe(s, lambda: _flame_section(s, trace, heads))
        sections.append(s)

    # ---- iterations + lifetimes
    s = Section("iterations", "Iterations and block lifetimes",
                "The training loop's period, found from the allocation sequence (or from mark_step markers),"
                " and how blocks divide into lifetime classes.")
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
        _safe(s, lambda: _lifetimes_section(s, life.value, heads))
    else:
        s.notes.append(f"lifetime summary {life.note}")
    sections.append(s)

    # ---- sizes
    s = Section("sizes", "Block sizes",
                "How many device allocations fall in each power-of-two size bin, and how many bytes they add up to.")

    def _sizes():
        h = data.size_histogram(trace.blocks)
        if len(h) == 0:
            s.notes.append("no device allocations in this trace")
            return
        s.figures.append((plots.size_histogram_png(h), "block size histogram"))
        q = data.size_quantiles(trace.blocks)
        s.facts += [(k, fmt_bytes(v)) for k, v in q.items()]
        heads["sizes"] = q
    _safe(s, _sizes)
    sections.append(s)

    # ---- access / ATI (analysed first, above)
    sections.append(acc_s)

    # ---- pools
    step(0.5, "pool strategies")
    s = Section("pools", "Pool strategies against the lower bound",
                "The same allocation requests replayed through simulated allocators (cudaMalloc, caching, BFC,"
                " CNMeM) and offline planners; each bar is the memory the strategy needs divided by the lower"
                " bound (the peak of live bytes). 1.0 means no fragmentation.")
    _safe(s, lambda: _pools_section(s, pl, heads))
    sections.append(s)
    s = Section("fit", "Would it fit on another GPU", oom_fit_sections.FIT_EXPLAIN)
    _safe(s, lambda: oom_fit_sections.fill_fit(s, trace, heads))
    sections.append(s)

    # ---- swap
    step(0.75, "swap schedules")
    s = Section("swap", "Host-swap potential (Pareto curve)",
                "Blocks copied to host memory between two accesses and copied back before the next one lower"
                " the peak. Each point of the curve is a budget: the peak reached against the time the copies add"
                " to the run (PCIe modelled as one channel per direction, latency + size/bandwidth). Every schedule"
                " is replayed on a model of the GPU (kernels in recorded order, one copy engine per direction,"
                " delays propagating): its peak and its slowdown are the replay's.")
    ev, sw = analyses.swap_work_results(work)     # this thread takes the tasks left, then waits
    if worker is not None:
        worker.result()
    _safe(s, lambda: _swap_section(s, ev, sw, heads, run_ns=float(trace.duration_ns)))
    sections.append(s)

    # ---- ranks of a multi-GPU job (only when its processes name ranks)
    from .ranks_view import ranks_section
    s = Section("ranks", "Ranks")
    _safe(s, lambda: sections.append(ranks_section(trace, heads)))
    if s.notes:
        sections.append(s)
    sections[:] = [x for x in sections if x is not None]

    # ---- largest / outliers
    s = Section("blocks", "Largest and outlier blocks",
                "The largest device allocations with their lifetime and class; outliers are blocks whose"
                " (ATI x size) is unusually high: the best candidates to swap or to free early.")

    def _largest():
        lb = data.largest_blocks(trace, n=max(top * 40, 200), classes=classes)
        lb = lb.rename(columns={"t_alloc": "t_alloc_ns"})
        g = _group_rows(lb, ["pid", "device", "api", "kind", "size", "class", "freed"]).head(top)
        s.tables.append(("largest blocks (identical size, API, kind, class and process grouped into one row;"
                         " t_alloc and lifetime are the group's medians)", _format_frame(g, max_rows=top)))
        heads["largest_blocks"] = to_jsonable(lb.head(5))
    _safe(s, _largest)
    if acc.ok and acc.value.get("outliers") and acc.value["outliers"].get("top"):
        df = pd.DataFrame(acc.value["outliers"]["top"]).rename(columns={"start_t": "start_t_ns", "end_t": "end_t_ns"})
        s.tables.append(("outlier intervals (ATI >= p90 of ATIs and size >= p90 of sizes; largest ATI x size first)",
                         _format_frame(df, max_rows=top)))
    sections.append(s)

    step(1.0, "rendering")
    title = f"pyinterpose report: {os.path.basename(trace.path) if trace.path else 'trace'}"
    return Report(title=title, facts=facts, sections=sections, headlines=heads, warnings=list(trace.warnings))


_FRAMEWORK_ALLOCATOR = {"torch": "pytorch", "pytorch": "pytorch", "jax": "bfc", "tf": "bfc", "tensorflow": "bfc"}


def _call_sites_section(s: Section, trace: Trace, heads: dict) -> None:
    """The call-site tables (pyinterpose.trace.stacks.top_call_sites) and the helpers skipped."""
    from ..trace.stacks import helper_frames, top_call_sites

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
        s.tables.append((caption, _format_frame(t)))


def _flame_section(s: Section, trace: Trace, heads: dict) -> None:
    from ..analysis.flame import moments
    from .flame import section_html

    ms = moments(trace)
    heads["flame"] = [{"moment": m.name, "live_bytes": m.live_bytes, "stacks": int(len(m.stacks))} for m in ms]
    s.html += section_html(ms)


def _outer_frames(site: str, frames: list[str], n: int = 3) -> str:
    """The frames above a call site (its callers, innermost first), at most ``n``: the helpers
    below it are named once above the table, the site is the row's first column."""
    k = frames.index(site) if site in frames else 0
    outer = frames[k + 1:]
    return " \u2190 ".join(outer[:n]) + (" \u2190 \u2026" if len(outer) > n else "") if outer else "\u2013"


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


def _in_background(fn: Callable[[], Any]) -> Future:
    """``fn()`` on a worker thread; ``.result()`` waits for it."""
    ex = ThreadPoolExecutor(max_workers=1, thread_name_prefix="pyinterpose-report")
    try:
        return ex.submit(fn)
    finally:
        ex.shutdown(wait=False)      # the submitted call still runs; no thread is left behind


def _prefetch_intervals(trace: Trace) -> None:
    """The main process's access intervals into the trace's derived tables, where the access
    analysis and the swap problem read them (a failure is theirs to report)."""
    if trace.main_pid is None:
        return
    try:
        from ..analysis.access import access_intervals
        access_intervals(trace, trace.main_pid)
    except Exception:  # noqa: BLE001 - the access section reports it when it asks again
        pass


def _reserved_curve(trace: Trace) -> dict | None:
    """In a blocks view, the framework's own allocator replayed on its requests with the
    bytes reserved after each (see :func:`pyinterpose.analysis.pools.reserved_curve`);
    None when the framework is unknown or the replay fails (the line is then flat)."""
    sim = _FRAMEWORK_ALLOCATOR.get(str(framework_of(trace)).lower())
    if sim is None:
        return None
    try:
        from ..analysis.pools import reserved_curve
        return reserved_curve(trace, sim)
    except Exception:  # noqa: BLE001 - the flat line at the pools analysis' peak stays
        return None


def _reserved_line(trace: Trace, pl: analyses.Result) -> dict | None:
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
        s.tables.append(("device blocks by lifetime class (main process)", _format_frame(pd.DataFrame(rows))))
    pk = d.get("peak") or {}
    s.facts += [("blocks never freed (main process)", f"{d.get('never_freed', 0):,}"),
                ("peak live (main process)", f"{fmt_bytes(pk.get('bytes'))} at {fmt_ns(pk.get('t'))}")]
    for k, v in (pk.get("by_class") or {}).items():
        s.facts.append((f"  at the peak: {k}", fmt_bytes(v)))
    heads["lifetimes"] = {"classes": {r["class"]: {"blocks": r["blocks"], "bytes": r["bytes"]} for r in rows},
                          "never_freed": d.get("never_freed"), "peak": to_jsonable(pk.get("bytes")),
                          "peak_by_class": to_jsonable(pk.get("by_class"))}


def _access_section(s: Section, trace: Trace, acc: analyses.Result, heads: dict) -> None:
    """``acc``: access.analyze() dict.  The figure uses access_intervals (kind "between":
    access -> next access of the same block) and the per-interval swap cost."""
    if not acc.ok:
        s.notes.append(f"access analysis {acc.note}")
        return
    d = acc.value
    from ..analysis import access as _access

    iv = _access.access_intervals(trace, d.get("pid"))
    sel = iv["counts_device"].to_numpy(bool) & (iv["kind"].cat.codes.to_numpy()
                                                == iv["kind"].cat.categories.get_loc("between"))
    iv = pd.DataFrame({k: iv[k].to_numpy()[sel] for k in ("size", "ati_ns")}, copy=False)  # the two it plots
    bw = None
    if d.get("bandwidth"):
        from ..analysis.bandwidth import Bandwidth
        b = d["bandwidth"]
        bw = Bandwidth(b["h2d_bytes_per_s"], b["d2h_bytes_per_s"], b["latency_s"], b.get("source", ""))
    if len(iv) == 0:
        total = int(d.get("intervals", 0) or 0)
        if total:
            s.notes.append(f"ATI histogram not applicable: none of the {total:,} intervals lies between two accesses"
                           " of a device block (they all run from an allocation to its first access or from the last"
                           " access to the free), so there is no access-to-access interval to plot")
        else:
            s.notes.append("ATI histogram not applicable: the trace has no access intervals (was it captured with"
                           " access events on?)")
    else:
        thr = _access.swap_cost_ns(iv["size"].to_numpy(np.int64), bw) if bw is not None else None
        s.figures.append((plots.ati_png(iv["ati_ns"].to_numpy(), None, thr), "ATI distribution"))
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


def _pools_section(s: Section, pl: analyses.Result, heads: dict) -> None:
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
    s.figures.append((plots.pools_png(names, df["ratio_to_bound"].astype(float).tolist(), label, bounds=bkinds,
                                      bound_bytes={"steady": bound, "whole_run": whole}),
                      "pool strategies"))
    cols = [c for c in ("strategy", "bound", "peak_bytes", "ratio_to_bound", "fragmentation", "optimal",
                        "backing_allocations", "seconds") if c in df]
    t = df[cols].rename(columns={"seconds": "time_ns"})
    if "time_ns" in t:
        t["time_ns"] = t["time_ns"].astype(float) * 1e9
    s.tables.append(("strategies (fragmentation = 1 - bound / peak)", _format_frame(t)))
    it = d.get("iteration") or {}
    for kind, title in (("whole_run", "allocators, pool / bound"), ("steady", "planners, pool / bound")):
        sel = df[df["bound"] == kind] if "bound" in df else df.iloc[:0]
        if len(sel):
            s.facts.append((title, ", ".join(f"{n} {fmt_ratio(r)}" for n, r in
                                             zip(sel["strategy"], sel["ratio_to_bound"].astype(float)))))
    s.facts += [("lower bound, steady step (LOAD)", fmt_bytes(bound)),
                ("lower bound, whole run (peak live)", fmt_bytes(whole)),
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


def _swap_section(s: Section, ev: analyses.Result, sw: analyses.Result, heads: dict,
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
                                 _format_frame(t)))
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
                s.figures.append((plots.swap_pareto_png(pts, peak_before, floor, budget=budget, run_ns=run_ns),
                                  "swap Pareto curve"))
    else:
        s.notes.append(f"Pareto curve {sw.note}")


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
        inner += [f'<img alt="{_esc(alt)}" src="data:{plots.MIME};base64,{png}">' for png, alt in s.figures]
        inner += [_table_html(c, df) for c, df in s.tables]
        parts.append(f'<section id="{_esc(s.id)}">{"".join(inner)}</section>')
    warns = "".join(f'<div class="warn">{_esc(w)}</div>' for w in rep.warnings)
    now = _dt.datetime.now().strftime("%Y-%m-%d %H:%M")
    interactive = any(s.html and s.id != "flame" for s in rep.sections)   # the timeline's charts
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
        f"{libs}<script>{_SCRIPT}</script></body></html>\n"
    )


def write(trace: Trace, path: str, **kw) -> Report:
    from ..outfile import atomic_output

    rep = build(trace, **kw)
    with atomic_output(path, "w", encoding="utf-8") as f:
        f.write(render(rep))
    return rep
