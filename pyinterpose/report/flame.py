"""Flame graphs of live device memory by call stack (pyinterpose.analysis.flame): the report's
section, and the ``folded`` and ``speedscope`` exports.

The HTML graph is drawn here, as inline SVG: one rectangle per frame of the folded stacks merged
into a tree (root at the top, icicle style as memray and speedscope draw memory), its width the
bytes live under it; a ``<title>`` on each gives the frame, bytes and share.  A click zooms on a
frame (its ancestors stay, full width); a click on the root, or Escape, zooms out.  The script is
ours, a few lines; nothing is fetched.

``folded``: Brendan Gregg's folded stacks (``outer;...;inner BYTES``), one moment per file (the
peak by default, or ``--moment oom-N``), readable by flamegraph.pl, inferno, speedscope and
memray-like tools.  ``speedscope``: speedscope's JSON file format
(https://www.speedscope.app/file-format-schema.json), one *sampled* profile per moment (the peak
and each OOM), weights in bytes, stacks listed outermost frame first.
"""
from __future__ import annotations

import html
import json
from typing import Any

from .. import __version__
from ..analysis.flame import Moment, folded_lines
from ..errors import PyinterposeError
from .reporter import Reporter
from ..analysis.flame import moments
from ..outfile import atomic_output
from ..units import fmt_bytes
from .html_sections import has_stacks

SPEEDSCOPE_SCHEMA = "https://www.speedscope.app/file-format-schema.json"
WIDTH = 1200
ROW = 17
MIN_PX = 0.4     # frames narrower than this are not drawn (their bytes stay in the parent's width)


def pick(moments: list[Moment], name: str | None) -> Moment:
    if name is None:
        return moments[0]
    for m in moments:
        if m.name == name:
            return m
    raise PyinterposeError(f"no moment {name!r} in this trace (moments: {', '.join(m.name for m in moments)})")


def write_folded(moments: list[Moment], path: str, name: str | None = None) -> dict[str, Any]:
    m = pick(moments, name)
    lines = folded_lines(m)
    with atomic_output(path, "w", encoding="utf-8") as f:
        f.write("".join(line + "\n" for line in lines))
    return {"moment": m.name, "title": m.title, "stacks": len(lines), "bytes": m.live_bytes,
            "moments": [x.name for x in moments]}


def speedscope(moments: list[Moment], name: str = "pyinterpose") -> dict[str, Any]:
    """The speedscope file object: shared frames, one sampled profile per moment."""
    index: dict[str, int] = {}
    frames: list[dict] = []
    profiles = []
    for m in moments:
        samples, weights = [], []
        for fr, v in zip(m.stacks["frames"], m.stacks["bytes"]):
            stack = []
            for text in fr:
                i = index.get(text)
                if i is None:
                    i = index[text] = len(frames)
                    frames.append(_speedscope_frame(text))
                stack.append(i)
            samples.append(stack)
            weights.append(int(v))
        profiles.append({"type": "sampled", "name": m.title, "unit": "bytes", "startValue": 0,
                         "endValue": int(sum(weights)), "samples": samples, "weights": weights})
    return {"$schema": SPEEDSCOPE_SCHEMA, "shared": {"frames": frames}, "profiles": profiles, "name": name,
            "activeProfileIndex": 0, "exporter": f"pyinterpose {__version__}"}


def _speedscope_frame(text: str) -> dict:
    """``file.py:12 in fn`` -> name fn, file file.py, line 12; other frames: the text as the name."""
    head, sep, func = text.partition(" in ")
    if sep and ":" in head:
        file, _, line = head.rpartition(":")
        if line.isdigit():
            return {"name": func, "file": file, "line": int(line)}
    return {"name": text}


def write_speedscope(moments: list[Moment], path: str, name: str = "pyinterpose") -> dict[str, Any]:
    obj = speedscope(moments, name)
    with atomic_output(path, "w", encoding="utf-8") as f:
        json.dump(obj, f, separators=(",", ":"))
    return {"profiles": [m.name for m in moments], "frames": len(obj["shared"]["frames"]),
            "bytes": [m.live_bytes for m in moments]}


# ------------------------------------------------------------------------------------------ HTML
def _tree(m: Moment) -> dict:
    root = {"name": "all", "bytes": 0, "children": {}}
    for fr, v in zip(m.stacks["frames"], m.stacks["bytes"]):
        v = int(v)
        root["bytes"] += v
        node = root
        for text in fr:
            node = node["children"].setdefault(text, {"name": text, "bytes": 0, "children": {}})
            node["bytes"] += v
    return root


def _fmt(n: int) -> str:
    return fmt_bytes(n)


def svg(m: Moment, gid: str) -> str:
    """The moment's flame graph as inline SVG (root on top)."""
    root = _tree(m)
    total = max(root["bytes"], 1)
    rects: list[str] = []
    depth_max = 0

    def walk(node: dict, x: float, depth: int) -> None:
        nonlocal depth_max
        w = node["bytes"] / total
        if w * WIDTH < MIN_PX:
            return
        depth_max = max(depth_max, depth)
        label = f"{node['name']} \u2014 {_fmt(node['bytes'])} ({100 * node['bytes'] / total:.1f} %)"
        hue = 10 + (sum(map(ord, node["name"])) * 7) % 45
        rects.append(f'<g class="fl" data-x="{x:.6f}" data-w="{w:.6f}" data-d="{depth}">'
                     f'<title>{html.escape(label)}</title>'
                     f'<rect x="{x * WIDTH:.2f}" y="{depth * ROW}" width="{max(w * WIDTH - 0.5, 0.1):.2f}" '
                     f'height="{ROW - 1}" fill="hsl({hue},85%,{62 if depth else 70}%)"></rect>'
                     f'<text x="{x * WIDTH + 3:.2f}" y="{depth * ROW + 12}">{html.escape(_clip(node["name"], w))}'
                     f'</text></g>')
        cx = x
        for child in sorted(node["children"].values(), key=lambda c: (-c["bytes"], c["name"])):
            walk(child, cx, depth + 1)
            cx += child["bytes"] / total

    walk(root, 0.0, 0)
    h = (depth_max + 1) * ROW
    return (f'<svg class="flame" id="{html.escape(gid)}" viewBox="0 0 {WIDTH} {h}" width="100%" '
            f'preserveAspectRatio="none" style="height:{h}px" role="img" '
            f'aria-label="{html.escape(m.title)}">{"".join(rects)}</svg>')


def _clip(text: str, w: float) -> str:
    room = int(w * WIDTH / 7)
    if room < 3:
        return ""
    return text if len(text) <= room else text[:max(room - 1, 1)] + "\u2026"


FLAME_CSS = (".flame{display:block;font:11px ui-monospace,monospace;margin:6px 0 14px}"
             ".flame text{pointer-events:none;fill:#111}.flame g.fl{cursor:pointer}"
             ".flame g.fl:hover rect{stroke:#111;stroke-width:.6}")

# Zoom: a click on a frame stretches it to the full width; its ancestors stay (full width), what is
# outside its range is hidden; a click on the root (or Escape) shows everything again.
FLAME_JS = r"""
(function(){
function clip(t,w){var n=Math.floor(w/7);return n<3?"":(t.length<=n?t:t.slice(0,n-1)+"\u2026");}
function zoom(svg,x0,w0,d0){var W=svg.viewBox.baseVal.width;
 svg.querySelectorAll("g.fl").forEach(function(g){var x=+g.dataset.x,w=+g.dataset.w,d=+g.dataset.d;
  var inside=x>=x0-1e-9&&x+w<=x0+w0+1e-9, above=d<d0&&x<=x0+1e-9&&x+w>=x0+w0-1e-9;
  var r=g.querySelector("rect"),t=g.querySelector("text");
  if(!(inside||above)){g.style.display="none";return;}
  g.style.display="";var nx=above?0:(x-x0)/w0*W,nw=above?W:w/w0*W;
  r.setAttribute("x",nx);r.setAttribute("width",Math.max(nw-0.5,0.1));t.setAttribute("x",nx+3);
  if(!t.dataset.full)t.dataset.full=g.querySelector("title").textContent.split(" \u2014 ")[0];
  t.textContent=clip(t.dataset.full,nw);});}
document.querySelectorAll("svg.flame").forEach(function(svg){
 svg.addEventListener("click",function(e){var g=e.target.closest("g.fl");if(!g)return;
  if(+g.dataset.d===0)zoom(svg,0,1,0);else zoom(svg,+g.dataset.x,+g.dataset.w,+g.dataset.d);});});
document.addEventListener("keydown",function(e){if(e.key==="Escape")
 document.querySelectorAll("svg.flame").forEach(function(s){zoom(s,0,1,0);});});
})();
"""


def section_html(moments: list[Moment]) -> list[str]:
    """The section's fragments: one graph per moment (peak first, then each OOM), with the script."""
    out = []
    for k, m in enumerate(moments):
        n = len(m.stacks)
        out.append(f'<h3>{html.escape(m.title)}: {html.escape(_fmt(m.live_bytes))} live in '
                   f'{n:,} call stack{"" if n == 1 else "s"}</h3>')
        if len(m.stacks) == 0:
            out.append('<div class="note">no device bytes live at this moment</div>')
            continue
        out.append(svg(m, f"flame-{k}"))
    out.append(f"<style>{FLAME_CSS}</style><script>{FLAME_JS}</script>")
    return out


# ------------------------------------------------------------------------------------- the reporter
FLAME_EXPLAIN = ("Flame graphs of the device bytes live at the peak, and at each out-of-memory failure: each"
                 " rectangle is a frame, as wide as the bytes live under it (root on top). Click a frame to zoom"
                 " on it, the root or Escape to zoom out. Export them with"
                 " `pyinterpose export --format folded|speedscope`.")


def fill_flame(s, ctx) -> None:
    ms = moments(ctx.trace)
    ctx.heads["flame"] = [{"moment": m.name, "live_bytes": m.live_bytes, "stacks": int(len(m.stacks))} for m in ms]
    s.html += section_html(ms)


def _has_stacks(ctx) -> bool:
    return has_stacks(ctx)


FLAME = Reporter("flame", "Live memory by call stack", fill_flame, explain=FLAME_EXPLAIN, applies=_has_stacks)
