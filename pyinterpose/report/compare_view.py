"""Render a comparison (pyinterpose.analysis.compare.compare) as a terminal table
(rows = metrics, columns = traces) and as a self-contained HTML page."""
from __future__ import annotations

import datetime as _dt
from typing import Any

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from .. import __version__
from .text import fmt_bytes, fmt_ns, fmt_pct, fmt_ratio
from . import plots
from .html import _CSS, _esc, _SCRIPT, _table_html
from .text import console, table

# matplotlib (through .plots) is imported by the figures only: `compare --json` and the terminal
# table never draw, and importing it costs more than a small comparison itself


def _g(d: dict | None, *path, default=None):
    for p in path:
        if not isinstance(d, dict) or p not in d or d[p] is None:
            return default
        d = d[p]
    return d


def metric_rows(cmp: dict[str, Any]) -> tuple[list[str], list[list[str]]]:
    """(column labels, rows) for the side-by-side table; first cell of a row = metric."""
    rows_in = cmp["traces"]
    cols = [r["label"] for r in rows_in]

    def line(name, fn):
        return [name] + [fn(r) for r in rows_in]

    out = [
        line("framework", lambda r: r["framework"]),
        line("view", lambda r: r["view"]),
        line("duration", lambda r: fmt_ns(r.get("duration_ns"))),
        line("processes", lambda r: f"{r['processes']:,}"),
        line("GPUs used", lambda r: (f"{len(r['devices'])} (GPU {', '.join(map(str, r['devices']))})"
                                     if r["devices"] else "none")),
        line("device allocations", lambda r: f"{r['blocks']:,}"),
        line("peak live", lambda r: fmt_bytes(r["peak_live_bytes"])),
        line("reserved", lambda r: fmt_bytes(r["reserved_bytes"]) + (f" ({r['reserved_source']})"
                                                                     if r["reserved_source"] else "")),
        line("reserved / allocator peak live", lambda r: fmt_ratio(r["reserved_over_live"], 2)),
        line("NVML used (whole GPU)", lambda r: fmt_bytes(r.get("nvml_used_bytes"))),
        line("framework allocator peak", lambda r: fmt_bytes(r.get("allocator_peak_bytes"))),
        line("outside the allocator (peak)", lambda r: fmt_bytes(r.get("outside_allocator_bytes"))),
    ]
    owners_seen: list[str] = []
    for r in rows_in:
        for o in r.get("by_owner") or []:
            if o["owner"] not in owners_seen:
                owners_seen.append(o["owner"])

    def owner_peak(r, name):
        row = next((o for o in r.get("by_owner") or [] if o["owner"] == name), None)
        return "-" if row is None else (f"{fmt_bytes(row['peak_live_bytes'])} ({row['blocks']:,} blocks"
                                        + (", allocator)" if row["is_allocator"] else ")"))
    out += [line(f"owner: {o} (peak)", lambda r, o=o: owner_peak(r, o)) for o in owners_seen]
    out += [
        line("iterations", lambda r: "-" if r["iterations"] is None else f"{r['iterations']:,}"),
        line("allocations / iteration", lambda r: "-" if r["allocs_per_iteration"] is None
             else f"{r['allocs_per_iteration']:,}"),
        line("bytes allocated / iteration", lambda r: fmt_bytes(r["bytes_per_iteration"])),
        line("size p50 / p90 / max", lambda r: " / ".join(fmt_bytes(_g(r, "size", k)) for k in ("p50", "p90", "max"))),
        line("blocks < 1 MiB", lambda r: fmt_pct(r["small_fraction"])),
    ]
    strategies: list[str] = []
    for r in rows_in:
        for k in (r.get("fragmentation") or {}):
            if k not in strategies:
                strategies.append(k)
    for s in strategies:
        out.append(line(f"pool/bound: {s}", lambda r, s=s: fmt_ratio(_g(r, "fragmentation", s))))
    out += [
        line("ATI p50 / p90", lambda r: " / ".join(fmt_ns(_g(r, "ati", "quantiles_ns", k)) for k in ("p50", "p90"))),
        line("intervals too short to swap", lambda r: fmt_pct(_g(r, "ati", "filtered_intervals"))),
        line("swap: best no-overhead peak", lambda r: fmt_bytes(_g(r, "swap", "best_no_overhead_peak"))
             + (f" (-{fmt_pct(_g(r, 'swap', 'reduction'))})" if _g(r, "swap", "reduction") else "")),
        line("swap: floor", lambda r: fmt_bytes(_g(r, "swap", "floor"))),
    ]
    return cols, out


def print_table(cmp: dict[str, Any], out=None) -> None:
    con = out or console()
    cols, rows = metric_rows(cmp)
    con.print(table(rows, ["metric"] + cols, title="Traces side by side"))
    for r in cmp["traces"]:
        for n in r.get("notes", []):
            con.print(f"  {r['label']}: {n}")


def _bars_png(cmp: dict[str, Any]) -> str:
    rows = cmp["traces"]
    labels = [r["label"] for r in rows]
    peak = np.array([r["peak_live_bytes"] or 0 for r in rows], dtype=np.float64)
    res = np.array([r["reserved_bytes"] if r["reserved_bytes"] is not None else np.nan for r in rows],
                   dtype=np.float64)
    div, unit = plots._byte_unit(float(np.nanmax(np.r_[peak, res, 1.0])))
    fig = Figure(figsize=(10, 0.5 * max(3, len(rows)) + 1.2))
    ax = fig.add_subplot(1, 1, 1)
    y = np.arange(len(rows))
    ax.barh(y - 0.2, peak / div, height=0.4, color=plots.PALETTE[0], label="peak live")
    ax.barh(y + 0.2, np.nan_to_num(res / div), height=0.4, color=plots.PALETTE[1], label="reserved")
    ax.set_yticks(y)
    ax.set_yticklabels(labels, fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel(unit)
    plots._legend_outside(ax)
    fig.tight_layout()
    return plots._png(fig)


def _frag_png(cmp: dict[str, Any]) -> str | None:
    rows = cmp["traces"]
    strategies: list[str] = []
    for r in rows:
        for k in (r.get("fragmentation") or {}):
            if k not in strategies:
                strategies.append(k)
    if not strategies:
        return None
    fig = Figure(figsize=(10, 0.35 * len(strategies) * max(1, len(rows)) / 2 + 1.5))
    ax = fig.add_subplot(1, 1, 1)
    h = 0.8 / max(1, len(rows))
    y = np.arange(len(strategies))
    for i, r in enumerate(rows):
        vals = [np.nan if _g(r, "fragmentation", s) is None else _g(r, "fragmentation", s) for s in strategies]
        ax.barh(y + i * h - 0.4 + h / 2, np.nan_to_num(np.array(vals, dtype=np.float64)), height=h,
                color=plots.PALETTE[i % len(plots.PALETTE)], label=r["label"])
    ax.axvline(1.0, color="black", linewidth=1, label="lower bound")
    ax.set_yticks(y)
    ax.set_yticklabels(strategies, fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel("pool size / lower bound")
    plots._legend_outside(ax)
    fig.tight_layout()
    return plots._png(fig)


def render_html(cmp: dict[str, Any]) -> str:
    cols, rows = metric_rows(cmp)
    df = pd.DataFrame(rows, columns=["metric"] + cols)
    figs = [(_bars_png(cmp), "peak live and reserved bytes per trace")]
    fr = _frag_png(cmp)
    if fr:
        figs.append((fr, "pool size over lower bound per strategy"))
    notes = "".join(f'<div class="note">{_esc(r["label"])}: {_esc(n)}</div>'
                    for r in cmp["traces"] for n in r.get("notes", []))
    imgs = "".join(f'<h2>{_esc(alt)}</h2><img alt="{_esc(alt)}" src="data:{plots.MIME};base64,{png}">'
                   for png, alt in figs)
    now = _dt.datetime.now().strftime("%Y-%m-%d %H:%M")
    return (
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>pyinterpose compare</title>"
        f"<style>{_CSS}</style></head><body><header><h1>pyinterpose compare: {len(cols)} traces</h1>"
        f"<div class=\"sub\">pyinterpose {__version__} &middot; {now}</div></header><main>"
        f"<section id=\"table\"><h2>Side by side</h2><p class=\"explain\">Peak live = peak of live device bytes of "
        "the traced blocks; reserved = the framework's reserve (reserved view) or NVML used memory (reserve plus "
        "CUDA context); pool/bound = memory a pool strategy needs for the same requests over the lower bound.</p>"
        f"{_table_html('metrics', df)}{notes}</section><section id=\"figures\">{imgs}</section></main>"
        f"<script>{_SCRIPT}</script></body></html>\n")
