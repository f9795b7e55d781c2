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
from pyinterpose.report import analyses, memory_viz
from pyinterpose.report.synthetic import training_trace
from pyinterpose.trace.model import peak_live_bytes

from cdp import CHROMIUM, Browser
from conftest import gpu_trace

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="Chromium not installed: headless viewer test skipped")


def _export(tr) -> dict:
    cl = analyses.block_classes(tr, iters=analyses.iterations(tr).value)
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
                      blocks: V.timeline(s, d, false), segments: V.timeline(s, d, true)});
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
    assert "unknown" in r["categories"]
    dev = r["devices"][0]
    db = tr.device_blocks
    try:
        from pyinterpose.analysis.owners import allocator_mask
        db = tr.blocks[allocator_mask(tr)]
        exact = True       # the snapshot holds the allocator's requests only, as PyTorch's does
    except ImportError:
        exact = False      # every device block (cuBLAS workspaces etc. too)
    live_end = int(db.loc[~db["freed"], "size"].sum())
    assert dev["end"]["reserved"] == live_end
    assert dev["start"]["reserved"] == 0 and dev["start"]["allocated"] == 0
    assert dev["blocks"]["min_colour"] >= 0 and dev["segments"]["min_colour"] >= 0
    reported = truth["pytorch_reported"]
    if tr.meta.get("view") == "reserved":
        assert dev["segments"]["max_size"] == peak_live_bytes(db)
        if exact:  # segments are PyTorch's own: their peak is its max_memory_reserved, to the byte
            assert dev["segments"]["max_size"] == reported["max_memory_reserved"]
            assert dev["end"]["reserved"] == reported["memory_reserved_end"]
        # the reserved view cannot see tensors: nothing is shown as allocated
        assert dev["end"]["allocated"] == 0 and dev["blocks"]["elements"] == 0
    else:
        assert dev["blocks"]["max_size"] == peak_live_bytes(db)
        assert dev["end"]["allocated"] == live_end
    # absolute time: the events fall within the steps PyTorch timed (unix us)
    steps = truth.get("step_bounds_unix_us")
    if steps:
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
