"""``pyinterpose diff``'s tables (pyinterpose.analysis.diff): totals, what grew, appeared and
vanished per call site, owner and lifetime class, and the steps side by side."""
from __future__ import annotations

from typing import Any

from ..units import fmt_bytes
from .text import console, table

MARK = {"appeared": "+ appeared", "vanished": "- vanished", "grew": "\u2191 grew", "shrank": "\u2193 shrank",
        "same": "= same"}


def _signed(n: int | None) -> str:
    if n is None:
        return "-"
    return ("+" if n > 0 else "\u2212" if n < 0 else "\u00b1") + fmt_bytes(abs(n))


def _pct(p: float | None) -> str:
    return "new" if p is None else f"{p:+.1f} %"


def _side(r: dict | None, key: str = "peak_live_bytes") -> str:
    return "-" if r is None else fmt_bytes(r[key])


def _keyed_table(rows: list[dict], name: str, title: str, top: int, show_same: bool):
    shown = [r for r in rows if show_same or r["status"] != "same"][:top]
    t = table([(r[name], MARK[r["status"]], _side(r["a"]), _side(r["b"]), _signed(r["delta"]),
                _side(r["a"], "bytes"), _side(r["b"], "bytes"),
                "-" if not (r["a"] and r["b"]) else f"{r['a']['blocks']:,} \u2192 {r['b']['blocks']:,}")
               for r in shown],
              [name.replace("_", " "), "", "live at peak A", "live at peak B", "\u0394 live", "allocated A",
               "allocated B", "blocks"], title=title, right=[2, 3, 4, 5, 6, 7])
    return t, len([r for r in rows if show_same or r["status"] != "same"]) - len(shown)


def print_diff(d: dict[str, Any], top: int = 20, gate: dict | None = None) -> None:
    con = console()
    a, b = d["a"]["label"], d["b"]["label"]
    con.print(f"A: {a}\nB: {b}")
    rows = []
    for k, what in (("peak", "peak live device bytes"), ("reserved", "reserved by the allocator"),
                    ("allocated", "device bytes allocated"), ("blocks", "device allocations")):
        t = d["totals"][k]
        f = (lambda v: "unknown" if v is None else f"{v:,}") if k == "blocks" else \
            (lambda v: "unknown" if v is None else fmt_bytes(v))
        delta = "-" if t["delta"] is None else (f"{t['delta']:+,}" if k == "blocks" else _signed(t["delta"]))
        rows.append((what, f(t["a"]), f(t["b"]), delta, "-" if t["delta"] is None else _pct(t["delta_pct"])))
    con.print(table(rows, ["", "A", "B", "\u0394", "\u0394 %"], title="totals"))
    src = d["totals"]["reserved"]["source"]
    con.print(f"  reserved: A {src['a']}; B {src['b']}")
    c = d["call_site_counts"]
    con.print(f"call sites: {c['grew']} grew, {c['appeared']} appeared, {c['vanished']} vanished, "
              f"{c['shrank']} shrank, {c['same']} unchanged")
    for rows_, name, title in ((d["call_sites"], "call_site", "call sites (changed)"),
                               (d["owners"], "owner", "owners"), (d["classes"], "class", "lifetime classes")):
        if not rows_:
            continue
        t, more = _keyed_table(rows_, name, title, top, show_same=name != "call_site")
        if t.row_count:
            con.print(t)
        if more:
            con.print(f"  ... {more} more (--top N, or --json for all)")
    steps = d["steps"]          # each has a or b (diff's StepPairs: made when read, so only the rows shown)
    if len(steps):
        shown = steps[:top]
        con.print(table([(s["step"], _side(s["a"]), _side(s["b"]), _signed(s["delta"]),
                          "-" if not s["a"] else f"{s['a']['blocks']:,}", "-" if not s["b"] else f"{s['b']['blocks']:,}")
                         for s in shown],
                        ["step", "peak A", "peak B", "\u0394", "allocs A", "allocs B"], title="steps (main process)"))
        if len(steps) > len(shown):
            con.print(f"  ... {len(steps) - len(shown)} more steps (--json for all)")
    for n in d["notes"]:
        con.print(f"note: {n}")
    if gate is not None:
        con.print(gate_line(gate))


def gate_line(g: dict) -> str:
    p = "new (from 0)" if g["delta_pct"] is None else f"{g['delta_pct']:+.2f} %"
    verdict = "FAIL" if g["exceeded"] else "ok"
    return (f"{verdict}: {g['metric']} {fmt_bytes(g['a'])} -> {fmt_bytes(g['b'])} ({p}; limit "
            f"+{g['limit_pct']:g} %): {g['what']}")
