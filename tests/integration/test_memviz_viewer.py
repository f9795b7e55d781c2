"""Our memory-viz export opens in PyTorch's viewer: the viewer's annotate step, segment replay and
timeline building (re-implemented from its behaviour in memviz_viewer.js) run in headless
Chromium on the export of the shipped real traces, against what PyTorch itself recorded."""
from __future__ import annotations

import json
import os
import pickle

import numpy as np
import pytest

import pyinterpose
from pyinterpose.analysis import guarded
from pyinterpose.report import memory_viz
from pyinterpose.report.synthetic import training_trace
from pyinterpose.trace.model import peak_live_bytes

from cdp import CHROMIUM, Browser
from conftest import gpu_trace

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
pytestmark = [pytest.mark.slow,  # every test here captures or drives a browser (> a few s)
              pytest.mark.skipif(CHROMIUM is None, reason="Chromium not installed: headless viewer test skipped")]


def _export(tr) -> dict:
    cl = guarded.block_classes(tr, iters=guarded.iterations(tr).value)
    snap = memory_viz.snapshot(tr, classes=cl.value)
    # what the viewer's unpickler hands to its JS: the same values as JSON (tuples become lists)
    return pickle.loads(pickle.dumps(snap, protocol=4))


def _page(tmp_path, snaps: dict) -> str:
    js = open(os.path.join(HERE, "memviz_viewer.js"), encoding="utf-8").read()
    data = json.dumps(snaps).replace("</", "<\\/")
    p = tmp_path / "viewer.html"
    p.write_text(f"<!DOCTYPE html><html><body><script>{js}</script>"
                 f"<script>window.SNAPS = {data};</script></body></html>", encoding="utf-8")
    return p.as_uri()


RUN = """(function(name){
  var s = window.SNAPS[name], V = window.memvizViewer;
  try { V.annotate(s); } catch (e) { return {error: String(e)}; }
  var out = {categories: s.categories, devices: []};
  for (var d = 0; d < s.device_traces.length; d++) {
    var n = s.device_traces[d].length, mid = Math.floor(n / 2);
    while (mid > 0 && s.device_traces[d][mid].action !== 'alloc') mid--;  // a point between whole steps
    out.devices.push({events: n, end: V.replay(s, d, n - 1), start: V.replay(s, d, -1),
                      mid: V.replay(s, d, mid),
                      blocks: V.timeline(s, d, false), segments: V.timeline(s, d, true),
                      hover: s.device_traces[d].map(function (e) { return V.formatFrames(e.frames); })});
  }
  return out;
})(%s)"""


def _run(b, name):
    return b.eval(RUN % json.dumps(name))


def test_viewer_reimplementation_fails_without_unknown(tmp_path):
    """The oracle: categories without 'unknown' stop the viewer (as upstream); an export
    from before this fix is such a snapshot."""
    snap = _export(training_trace(iterations=3))
    stripped = json.loads(json.dumps(snap))
    for dt in stripped["device_traces"]:
        for e in dt:
            if e.get("category") == "unknown":
                del e["category"]
    broken = json.loads(json.dumps(snap))
    broken["segments"].pop()  # a live block whose segment is missing
    with Browser(str(tmp_path / "profile")) as b:
        b.open(_page(tmp_path, {"good": snap, "stripped": stripped, "broken": broken}))
        assert "error" not in _run(b, "good")
        assert "TypeError" in _run(b, "stripped")["error"]
        r = b.eval("(function(){var s=window.SNAPS.broken;window.memvizViewer.annotate(s);"
                   "try{window.memvizViewer.replay(s,0,-1);return 'ok';}catch(e){return String(e);}})()")
        assert "TypeError" in r


def _truth(name):
    with open(gpu_trace(name.replace(".pit", ".truth.json"))) as f:
        return json.load(f)


@pytest.mark.parametrize("name", ["torch-cnn-blocks.pit", "torch-cnn-reserved.pit"])
def test_export_of_real_trace_opens_in_viewer(tmp_path, name):
    src = gpu_trace(name)
    tr = pyinterpose.load(src)
    truth = _truth(name)
    snap = _export(tr)
    with Browser(str(tmp_path / "profile")) as b:
        b.open(_page(tmp_path, {"s": snap}))
        r = _run(b, "s")
        assert b.console_errors() == []
    assert "error" not in r, r
    dev = r["devices"][0]
    db = tr.device_blocks
    from pyinterpose.analysis.owners import allocator_mask
    db = tr.blocks[allocator_mask(tr)]      # the snapshot holds the allocator's requests only, as PyTorch's does
    live_end = int(db.loc[~db["freed"], "size"].sum())
    assert dev["end"]["reserved"] == live_end
    assert dev["start"]["reserved"] == 0 and dev["start"]["allocated"] == 0
    assert dev["blocks"]["min_colour"] >= 0 and dev["segments"]["min_colour"] >= 0
    reported = truth["pytorch_reported"]
    if tr.meta.get("view") == "reserved":
        assert dev["segments"]["max_size"] == peak_live_bytes(db)
        # segments are PyTorch's own: their peak is its max_memory_reserved, to the byte
        assert dev["segments"]["max_size"] == reported["max_memory_reserved"]
        assert dev["end"]["reserved"] == reported["memory_reserved_end"]
        # the reserved view cannot see tensors: each segment is shown as one block that fills it (the
        # viewer's first tab, the block timeline, draws the reserve), and every hover says so
        assert dev["end"]["allocated"] == dev["end"]["reserved"]
        assert dev["blocks"]["elements"] == dev["segments"]["elements"] > 0
        assert dev["blocks"]["max_size"] == dev["segments"]["max_size"]
        assert all("reserved view: this block is the whole segment" in h for h in dev["hover"])
        assert r["categories"] == []            # no categories: the viewer colours each segment apart
    else:
        assert "unknown" in r["categories"]
        assert dev["blocks"]["max_size"] == peak_live_bytes(db)
        assert dev["end"]["allocated"] == live_end
    # absolute time: the events fall within the steps PyTorch timed (unix us)
    steps = truth["step_bounds_unix_us"]        # both torch truths time their steps
    t_us = np.array([e["time_us"] for e in snap["device_traces"][0]], dtype=np.int64)
    lo, hi = steps[0][0], steps[-1][1]
    assert lo - 60_000_000 <= t_us.min() and t_us.max() <= hi + 60_000_000
    inside = ((t_us >= lo) & (t_us <= hi)).mean()
    assert inside > 0.5, inside


def test_synthetic_export_replays_at_every_point(tmp_path):
    tr = training_trace(iterations=4)
    snap = _export(tr)
    with Browser(str(tmp_path / "profile")) as b:
        b.open(_page(tmp_path, {"s": snap}))
        r = _run(b, "s")
    assert "error" not in r, r
    dev = r["devices"][0]
    assert dev["blocks"]["max_size"] == peak_live_bytes(tr.blocks)
    assert dev["mid"]["allocated"] == dev["mid"]["reserved"] > 0   # blocks view: one block per segment


# ---- issue 24, item 11: colours, legends, the opening tab and the hover text ------------------------------
def test_reserved_export_colours_each_segment_and_opens_on_a_drawing(tmp_path):
    """Before: every segment event had category 'unknown', so the segment timeline was one colour, and
    the viewer's first tab (the block timeline) was empty."""
    tr = pyinterpose.load(gpu_trace("torch-cnn-reserved.pit"))
    with Browser(str(tmp_path / "profile")) as b:
        b.open(_page(tmp_path, {"s": _export(tr)}))
        dev = _run(b, "s")["devices"][0]
    seg = dev["segments"]
    assert seg["elements"] > 10
    assert seg["palette_colours"] == 10          # as PyTorch's own snapshots: every segment a colour apart
    assert dev["blocks"]["elements"] == seg["elements"]                 # the opening tab draws the reserve


def test_blocks_export_segment_tab_uses_the_legends_classes(tmp_path):
    """Before: the cached-segment tab drew every segment as 'unknown' under a legend of the lifetime
    classes.  Now a segment carries its block's class: the classes drawn are those of the block tab, and
    the legend names only them (and 'unknown', which the viewer needs in its list)."""
    tr = pyinterpose.load(gpu_trace("torch-cnn-blocks.pit"))
    cl = guarded.block_classes(tr, iters=guarded.iterations(tr).value).value
    with Browser(str(tmp_path / "profile")) as b:
        b.open(_page(tmp_path, {"s": _export(tr)}))
        dev = _run(b, "s")["devices"][0]
    blocks, segs = dev["blocks"], dev["segments"]
    assert segs["used_categories"] == blocks["used_categories"]
    assert len(segs["used_categories"]) >= 2 and set(segs["used_categories"]) <= set(cl.unique()) | {"unknown"}
    assert set(segs["legend"]) - {"unknown"} == set(segs["used_categories"]) - {"unknown"}
    assert segs["palette_colours"] == len(segs["used_categories"])


def test_trace_without_stacks_says_so_on_hover(tmp_path):
    """Before: "<block was allocated before _record_history was enabled>", which is not why."""
    tr = training_trace(iterations=3)
    assert "stack_id" not in tr.blocks or not (tr.blocks["stack_id"] >= 0).any()
    with Browser(str(tmp_path / "profile")) as b:
        b.open(_page(tmp_path, {"s": _export(tr)}))
        dev = _run(b, "s")["devices"][0]
    assert dev["hover"] and all("this trace has no call stacks" in h for h in dev["hover"])
    assert not any("_record_history" in h for h in dev["hover"])


def test_pictures_of_the_exports(tmp_path):
    """Pictures for a person to look at ($PYINTERPOSE_ARTIFACTS, else the test's folder): the block and the
    segment timelines of the reserved and blocks exports, drawn by the re-implementation's rules."""
    out = os.environ.get("PYINTERPOSE_ARTIFACTS") or str(tmp_path)
    os.makedirs(out, exist_ok=True)
    snaps = {"reserved": _export(pyinterpose.load(gpu_trace("torch-cnn-reserved.pit"))),
             "synthetic": _export(training_trace(iterations=4))}
    with Browser(str(tmp_path / "profile"), 1000, 900) as b:
        b.open(_page(tmp_path, snaps))
        b.eval("(function(){['reserved','synthetic'].forEach(function(n){window.memvizViewer.annotate(window.SNAPS[n]);"
               "[false,true].forEach(function(seg){var c=document.createElement('canvas');c.width=960;c.height=260;"
               "c.id=n+(seg?'-segments':'-blocks');document.body.appendChild(c);"
               "window.memvizViewer.draw(window.SNAPS[n],0,seg,c);});});})()")
        for n in ("reserved", "synthetic"):
            for tab in ("blocks", "segments"):
                b.element_screenshot(os.path.join(out, f"memviz-{n}-{tab}.png"), f"#{n}-{tab}")
        assert b.console_errors() == []
