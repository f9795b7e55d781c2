"""The report's "whole run" section for windowed and flight-recorder traces: the run's per-step history
(live bytes at step boundaries and each step's peak, with the window the events cover shaded) above the
window's own detail, and the call sites that grew (pyinterpose.analysis.growth)."""
from __future__ import annotations

import numpy as np
import pandas as pd

from ..units import fmt_bytes
from .reporter import Reporter
from ..analysis.growth import growth, window_summary
from ..trace.window import history

EXPLAIN = ("The trace holds part of the run (a capture window or the flight recorder's last steps); this is the"
           " whole run from its per-step history: live device bytes at every step boundary and each step's peak"
           " (beyond 4,096 steps a point covers several steps), the steps the rest of the report covers shaded."
           " Growth is a least-squares line through the live bytes at step boundaries; a call site whose live"
           " bytes never went down and went up step after step is a leak.")


def has_history(trace) -> bool:
    return bool(trace.meta.get("history"))


def whole_run_png(hist: pd.DataFrame, windows: dict) -> str:
    from matplotlib.figure import Figure      # matplotlib on use (html.analyse imports it beside the analyses)

    from .plots import PALETTE, _byte_unit, _layout, _legend_outside, _png

    vmax = float(max(hist["peak"].max(), hist["live_end"].max())) if len(hist) else 0.0
    div, unit = _byte_unit(vmax)
    fig = Figure(figsize=(10.0, 3.2))
    ax = fig.add_subplot(1, 1, 1)
    for i, (pid, h) in enumerate(hist.groupby("pid", sort=True)):
        x = (h["step"] + h["steps"]).to_numpy(np.float64)
        ax.plot(h["step"].to_numpy(np.float64), h["peak"].to_numpy(np.float64) / div, color=PALETTE[(2 * i + 1) % 10],
                linewidth=0.8, alpha=0.7, label=f"step peak (pid {pid})")
        ax.plot(x, h["live_end"].to_numpy(np.float64) / div, color=PALETTE[(2 * i) % 10], linewidth=1.4,
                label=f"live at step boundaries (pid {pid})")
    for k, (a, b) in enumerate(windows.get("spans", [])):
        ax.axvspan(a, b + 1, color="#999999", alpha=0.25, label="in this trace" if k == 0 else None)
    ax.set_xlabel("step", fontsize=8)
    ax.set_ylabel(f"device memory ({unit})", fontsize=8)
    ax.set_ylim(bottom=0)
    _legend_outside(ax)
    _layout(fig, left=0.8, bottom=0.6, top=0.2, outside=[ax])
    return _png(fig, tight=False)


def fill(s, trace, heads: dict) -> None:
    hist = history(trace)
    g = trace.derived(("growth.growth",), lambda: growth(trace))
    w = window_summary(trace) or {}
    spans = [(p["first_step"], p["last_step"]) for p in w.get("processes", [])
             if p.get("first_step") is not None and p.get("last_step") is not None]
    heads["window"] = w
    heads["growth"] = g
    s.facts.append(("steps in the run", ", ".join(str(p.get("steps_in_run")) for p in w.get("processes", []))))
    s.facts.append(("steps in this trace", ", ".join(f"{a} to {b}" for a, b in spans) or "none"))
    if g:
        s.facts.append(("growth", f"{g['bytes_per_step']:+,.0f} B per step"))
        if g["leaks"]:
            s.facts.append(("leaks", "; ".join(f"{lk['call_site']} ({lk['bytes_per_step']:+,.0f} B per step, "
                                               f"{fmt_bytes(lk['live_bytes_at_end'])} at the end)"
                                               for lk in g["leaks"][:5])))
    if len(hist):
        s.figures.append((whole_run_png(hist, {"spans": spans}), "the whole run: live bytes per step"))
    rows = [{"pid": p["pid"], "call site": c["call_site"], "grew": fmt_bytes(c["grew_bytes"]),
             "per step": f"{c['bytes_per_step']:+,.0f} B", "live at the end": fmt_bytes(c["live_bytes_at_end"]),
             "leak": "yes" if c["leak"] else "no"}
            for p in (g or {}).get("processes", []) for c in p["call_sites"]]
    if rows:
        s.tables.append(("call sites whose live bytes grew over the run", pd.DataFrame(rows)))


GROWTH = Reporter("whole-run", "The whole run", lambda s, ctx: fill(s, ctx.trace, ctx.heads), explain=EXPLAIN,
                  applies=lambda ctx: has_history(ctx.trace))
