"""Issue 24, items 6-8: the report's memory timeline in headless Chromium.

* one time origin (the start of capture) on the axis, in the hover and in the facts: the block under a time
  is the trace's own ``t_alloc`` (ground truth: the trace's blocks table);
* the minimap's window is where the view is from the first frame on (not a 2-px line at event 0);
* axis labels: every label distinct, never clipped by the canvas, event ticks on whole events, time labels
  in one unit with just enough decimals to tell two ticks at different times apart.

Skipped where Chromium is absent (install: apt-get install -y chromium)."""
from __future__ import annotations

import re
import sys

import numpy as np
import pytest

import pyinterpose
from pyinterpose.report import html

from cdp import CHROMIUM, Browser
from conftest import gpu_trace

pytestmark = [pytest.mark.slow,  # every test here captures or drives a browser (> a few s)
              pytest.mark.skipif(CHROMIUM is None, reason="Chromium not installed: headless browser test skipped")]


@pytest.fixture(autouse=True)
def _no_cached_bandwidth(monkeypatch, tmp_path):
    monkeypatch.setenv("PYINTERPOSE_CACHE_DIR", str(tmp_path))


@pytest.fixture(scope="module")
def demo_trace(tmp_path_factory):
    """A simtrain capture like the demo's (its whole-run view repeated "26 ms" seven times)."""
    from conftest import run_cli

    out = str(tmp_path_factory.mktemp("demo") / "demo.pit")
    cp = run_cli("run", "-q", "--simulated-gpu", "-o", out, "--", sys.executable, "-m",
                 "pyinterpose.examples.simtrain", "--steps", "20")
    assert cp.returncode == 0, cp.stderr
    return out


AXES = """(function(){var tl=document.querySelector('.pit-tl').pitTimeline, u=tl.u, out=[];
  u.axes.forEach(function(ax){
    if (ax.scale !== 'x') return;
    var ctx=u.ctx; ctx.save(); ctx.font = typeof ax.font === 'string' ? ax.font : ax.font[0];
    var n=tl.model.n;
    out.push({side: ax.side, label: ax.label, labels: ax._values.slice(),
              pos: ax._splits.map(function(s){return u.valToPos(s,'x',true);}),
              t: ax._splits.map(function(s){return s>=0 && s<n && s===Math.round(s) ? tl.model.t[s] : null;}),
              widths: ax._values.map(function(v){return ctx.measureText(v).width;}),
              W: ctx.canvas.width});
    ctx.restore();
  });
  return out;})()"""


def _check_axes(axes, what):
    assert len(axes) == 2, what
    for ax in axes:
        shown = [(lab, p, w, t) for lab, p, w, t in zip(ax["labels"], ax["pos"], ax["widths"], ax["t"]) if lab]
        assert len(shown) >= 2, (what, ax)
        labels = [s[0] for s in shown]
        assert len(set(labels)) == len(labels), (what, ax["side"], labels)              # no duplicates
        for lab, p, w, _ in shown:                                                       # never clipped
            assert p - w / 2 >= -0.5 and p + w / 2 <= ax["W"] + 0.5, (what, lab, p, w, ax["W"])
        if ax["side"] == 2:                                    # bottom: event index, whole events only
            assert all(re.fullmatch(r"\d{1,3}(,\d{3})*", lab) for lab in labels), (what, labels)
        else:                                                  # top: time since the start of capture
            assert ax["label"] == "time since the start of capture"
            units = {lab.split()[1] for lab in labels}
            assert len(units) == 1, (what, labels)                                       # one unit
            unit = {"s": 1e9, "ms": 1e6, "us": 1e3, "ns": 1.0}[units.pop()]
            nums = [lab.split()[0] for lab in labels]
            dec = {len(x.split(".")[1]) if "." in x else 0 for x in nums}
            assert len(dec) == 1, (what, labels)
            d = dec.pop()
            ts = [s[3] for s in shown]
            # the labels are the times, rounded
            assert all(abs(float(x) - t / unit) <= 0.5 * 10 ** -d + 1e-9 for x, t in zip(nums, ts)), (what, labels)
            # just enough: one decimal less and two ticks at different times would read the same
            fewer = [f"{t / unit:.{max(d - 1, 0)}f}" for t in ts]
            assert d == 0 or any(a == b for a, b in zip(fewer, fewer[1:])), (what, labels)


def _views(b):
    n = b.eval("document.querySelector('.pit-tl').pitTimeline.model.n")
    yield "opening view (one steady iteration)"
    b.eval("document.querySelector('.pit-tl').pitTimeline.setRange(-0.5, 1e12)")
    yield "whole run"
    for lo, hi in ((n // 2, n // 2 + 4), (n // 3, n // 3 + 30), (10, 300)):
        b.eval(f"document.querySelector('.pit-tl').pitTimeline.setRange({lo}, {min(hi, n - 1)})")
        yield f"events {lo}-{hi}"


@pytest.mark.parametrize("which", ["demo", "torch-cnn-blocks.pit"])
def test_timeline_axes_one_origin_and_minimap_window(tmp_path, demo_trace, which):
    src = demo_trace if which == "demo" else gpu_trace(which)
    tr = pyinterpose.load(src)
    page = tmp_path / "r.html"
    page.write_text(html.render(html.build(tr, bandwidth=16, time_limit=0.5)), encoding="utf-8")
    with Browser(str(tmp_path / "profile"), 1400, 1000) as b:
        b.open(page.as_uri())
        # item 7: at the first frame the minimap's window already covers the opening range
        win = b.eval("window.pitTimelinesReady.then(function(){var tl=document.querySelector('.pit-tl').pitTimeline,"
                     "w=tl.win, m=tl.mini; return {left: parseFloat(w.style.left), width: parseFloat(w.style.width),"
                     "a: m.valToPos(tl.range[0],'x'), b: m.valToPos(tl.range[1],'x'), range: tl.range, n: tl.model.n};})")
        assert win["range"][1] - win["range"][0] < win["n"] / 3          # a part of the run
        assert abs(win["left"] - win["a"]) < 1 and abs(win["width"] - (win["b"] - win["a"])) < 1, win
        assert win["width"] > 4 and win["left"] > 4, win                 # not a 2-px line at event 0

        # item 6: the times the timeline shows are the trace's own, from the start of capture
        m = b.eval("""(function(){var tl=document.querySelector('.pit-tl').pitTimeline, md=tl.model, out=[];
            for (var i=0;i<md.nb;i+=Math.max(1,Math.floor(md.nb/60))) { var d=md.describe(i);
              out.push([d.block, d.alloc_ns, d.free_ns]); }
            return {rows: out, tq: tl.p.tq, peak_t: tl.p.stats.peak_t_ns, peak_at: md.t[tl.p.stats.peak_event]};})()""")
        blocks = tr.blocks.set_index("block_id")
        for bid, a_ns, f_ns in m["rows"]:
            assert abs(a_ns - int(blocks.at[bid, "t_alloc"])) < m["tq"], (bid, a_ns)
            assert (f_ns is not None) == bool(blocks.at[bid, "freed"]), (bid, f_ns)
            assert f_ns is None or abs(f_ns - int(blocks.at[bid, "t_free"])) < m["tq"], (bid, f_ns)
        assert abs(m["peak_at"] - m["peak_t"]) < m["tq"]           # the facts' "peak ... at" is on the axis
        assert min(tr.blocks["t_alloc"]) > 0 and m["rows"][0][1] > 0       # (the two origins differed)

        # item 8: the axis labels in every view
        for what in _views(b):
            _check_axes(b.eval(AXES), f"{which}: {what}")
        assert b.console_errors() == []
