"""The HTML report and compare page open in a real headless browser (Chromium) with no
console errors, every image decoded, and the page's render marker set.

Skipped where Chromium is absent (install: apt-get install -y chromium)."""
from __future__ import annotations

import os
import re
import shutil
import subprocess

import pytest

from pyinterpose.analysis.compare import compare
from pyinterpose.report import compare_view, html
from pyinterpose.report.synthetic import training_trace

from conftest import gpu_trace

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser") or (
    "/usr/bin/chromium" if os.path.exists("/usr/bin/chromium") else None)
pytestmark = [pytest.mark.slow,  # every test here captures or drives a browser (> a few s)
              pytest.mark.skipif(CHROMIUM is None, reason="Chromium not installed (apt-get install -y chromium): "
                                                          "headless browser test skipped")]
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--no-first-run", "--enable-logging=stderr", "--v=0"]


@pytest.fixture(autouse=True)
def _no_cached_bandwidth(monkeypatch, tmp_path):
    monkeypatch.setenv("PYINTERPOSE_CACHE_DIR", str(tmp_path))


def chromium(tmp_path, *args) -> subprocess.CompletedProcess:
    prof = tmp_path / "profile"
    prof.mkdir(exist_ok=True)
    return subprocess.run([CHROMIUM, *FLAGS, f"--user-data-dir={prof}", *args], capture_output=True,
                          text=True, timeout=120)


def check_page(tmp_path, page: str, name: str) -> None:
    path = tmp_path / name
    path.write_text(page, encoding="utf-8")
    n_img = page.count("<img ")
    r = chromium(tmp_path, "--dump-dom", path.as_uri())
    assert r.returncode == 0, r.stderr[-2000:]
    body = re.search(r"<body[^>]*>", r.stdout)
    assert body, r.stdout[:500]
    assert 'data-render="ok"' in body.group(0), body.group(0)
    assert f'data-images="{n_img}/{n_img}"' in body.group(0)
    console = [ln for ln in r.stderr.splitlines() if ":CONSOLE" in ln]
    assert console == [], console
    shot = tmp_path / (name + ".png")
    r = chromium(tmp_path, "--window-size=1200,3000", f"--screenshot={shot}", path.as_uri())
    assert r.returncode == 0 and shot.exists()
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 20_000


def test_marker_detects_a_broken_page(tmp_path):
    """The oracle itself: a page with a broken image and a script error fails the checks."""
    from pyinterpose.report.html import _SCRIPT

    page = (f'<!DOCTYPE html><html><body><img src="data:image/png;base64,AAAA">'
            f'<script>{_SCRIPT}</script><script>undefinedFunction()</script></body></html>')
    path = tmp_path / "bad.html"
    path.write_text(page)
    r = chromium(tmp_path, "--dump-dom", path.as_uri())
    assert 'data-render="broken"' in r.stdout
    assert any(":CONSOLE" in ln and "undefinedFunction" in ln for ln in r.stderr.splitlines())


def test_report_renders_in_chromium(tmp_path):
    tr = training_trace(iterations=6, step_ns=200_000)
    check_page(tmp_path, html.render(html.build(tr, bandwidth=16)), "report.html")


def test_compare_page_renders_in_chromium(tmp_path):
    cmp = compare([training_trace(iterations=4), training_trace(iterations=4, act=2 << 20)], ["a", "b"],
                  bandwidth=16, pools=False)
    check_page(tmp_path, compare_view.render_html(cmp), "compare.html")


# ---------------------------------------------------------------------------------------------
# The interactive memory timeline on the shipped real-GPU traces, driven like a user would:
# DevTools protocol over a pipe (tests/integration/cdp.py), real wheel and mouse events.

import json  # noqa: E402

import numpy as np  # noqa: E402

import pyinterpose  # noqa: E402
from pyinterpose.trace.model import peak_live_bytes  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
REAL = ["torch-cnn-blocks.pit", "torch-transformer-reserved.pit", "jax-attn-blocks.pit", "loader-blocks.pit"]


def artifacts_dir(tmp_path) -> str:
    d = os.environ.get("PYINTERPOSE_ARTIFACTS") or str(tmp_path / "artifacts")
    os.makedirs(d, exist_ok=True)
    return d


# the highest value of the stacked series uPlot was given to draw (series 1..K: the groups'
# cumulative curves, top group first; the NVML and reserved lines follow them)
STACK_TOP = """(function(){var tl=document.querySelector('.pit-tl').pitTimeline, u=tl.u, m=0, k, j;
  for (k=1; k<=tl.stackSeries; k++) for (j=0; j<u.data[k].length; j++)
    if (u.data[k][j]>m) m=u.data[k][j];
  return m;})()"""
OVER = ("(function(){document.querySelector('.pit-tl-main').scrollIntoView({block:'center'});"
        "var r=document.querySelector('.pit-tl-main .u-over').getBoundingClientRect();"
        "return [r.left,r.top,r.width,r.height];})()")

STATE = """(function(){var r=document.querySelector('.pit-tl');var tl=r.pitTimeline;
 return {status:r.getAttribute('data-timeline'), range:tl.range.slice(), n:tl.model.n,
         points:+r.getAttribute('data-points'), ms:+r.getAttribute('data-ms'),
         iters:tl.p.iters.length, device:tl.p.device};})()"""


@pytest.mark.parametrize("name", REAL)
def test_timeline_on_real_trace(tmp_path, name):
    from cdp import Browser

    src = gpu_trace(name)
    tr = pyinterpose.load(src)
    page = tmp_path / (name + ".html")
    page.write_text(html.render(html.build(tr, time_limit=1.0)), encoding="utf-8")
    out = artifacts_dir(tmp_path)
    stem = os.path.splitext(name)[0]
    with Browser(str(tmp_path / "profile"), 1400, 1000) as b:
        b.open(page.as_uri())
        b.eval("window.pitTimelinesReady")
        st = b.eval(STATE)
        assert st["status"] == "ok"
        dev = st["device"]
        db = tr.device_blocks
        db = db[db["device"] == dev]
        assert st["n"] == len(db) + int(db["freed"].sum())     # one event per allocation and per free
        # something is drawn: at least one point per event of the opening range (one steady
        # iteration: JAX's attention step is 3 buffers, 6 events), else more than 10
        assert st["points"] > min(10, st["range"][1] - st["range"][0]), st
        # with two iterations or more it opens on one steady iteration: a small part of the run
        assert st["iters"] < 2 or st["range"][1] - st["range"][0] < st["n"] / 3, st
        if name == "torch-cnn-blocks.pit":
            # the dashed reserved line: PyTorch's caching allocator simulated on the blocks view's requests
            # equals what the native allocator reserved in the same program's reserved-view run
            with open(gpu_trace("torch-cnn-reserved.truth.json")) as f:
                native = json.load(f)["pytorch_reported"]["max_memory_reserved"]
            rl = b.eval("document.querySelector('.pit-tl').pitTimeline.p.reserved_line")
            assert rl is not None and rl["y"] == native and max(rl["ys"]) == native and len(rl["x"]) > 10
            assert "(peak)" not in rl["label"]
        b.screenshot(os.path.join(out, f"{stem}-page.png"))
        b.element_screenshot(os.path.join(out, f"{stem}-timeline.png"), ".pit-tl")

        # the whole run keeps the exact peak (each LOD bin keeps its peak)
        b.eval("document.querySelector('.pit-tl').pitTimeline.setRange(-0.5, 1e12)")
        top = b.eval(STACK_TOP)
        assert top == peak_live_bytes(db)
        if name == "torch-cnn-blocks.pit":
            # the reserved curve drawn (the last series) keeps its peak zoomed out, and it is a curve
            col = b.eval("(function(){var u=document.querySelector('.pit-tl').pitTimeline.u;"
                         "return u.data[u.data.length-1].filter(function(v){return v!==null;});})()")
            assert max(col) == native and min(col) < native

        # zoom with the mouse wheel over the plot: the visible range shrinks around the cursor
        box = b.eval(OVER)
        r0 = b.eval(STATE)["range"]
        b.mouse("mouseWheel", box[0] + box[2] * 0.5, box[1] + box[3] * 0.5, deltaX=0, deltaY=-600)
        for _ in range(50):
            r1 = b.eval(STATE)["range"]
            if r1 != r0:
                break
            b.eval("new Promise(function(r){setTimeout(r,100)})")
        assert r1[1] - r1[0] < r0[1] - r0[0], (r0, r1)

        # drag across the plot: the view becomes the dragged range
        y = box[1] + box[3] * 0.5
        b.mouse("mousePressed", box[0] + box[2] * 0.25, y, button="left", clickCount=1)
        for fx in (0.35, 0.5, 0.65):
            b.mouse("mouseMoved", box[0] + box[2] * fx, y, button="left")
        b.mouse("mouseReleased", box[0] + box[2] * 0.65, y, button="left", clickCount=1)
        r2 = b.eval(STATE)["range"]
        w1 = r1[1] - r1[0]
        assert abs((r2[1] - r2[0]) - 0.4 * w1) < 0.05 * w1 + 2, (r1, r2)
        assert abs(r2[0] - (r1[0] + 0.25 * w1)) < 0.05 * w1 + 2, (r1, r2)

        # drag the minimap's window: the view moves by the same number of events, keeping its width
        win = b.eval("(function(){document.querySelector('.pit-tl-mini').scrollIntoView({block:'center'});"
                     "var r=document.querySelector('.pit-tl-window').getBoundingClientRect();"
                     "var m=document.querySelector('.pit-tl-mini .u-over').getBoundingClientRect();"
                     "return [r.left+r.width/2, r.top+r.height/2, m.width];})()")
        b.mouse("mousePressed", win[0], win[1], button="left", clickCount=1)
        b.mouse("mouseMoved", win[0] - win[2] * 0.1, win[1], button="left")
        b.mouse("mouseReleased", win[0] - win[2] * 0.1, win[1], button="left", clickCount=1)
        r3 = b.eval(STATE)["range"]
        assert abs((r3[1] - r3[0]) - (r2[1] - r2[0])) < 1e-6 * st["n"] + 1e-9, (r2, r3)
        assert r2[0] <= 0.1 * st["n"] or r3[0] < r2[0], (r2, r3)

        # hover: sweep the cursor up the plot at mid-width until a block is read out
        box = b.eval(OVER)
        info = None
        for fy in np.linspace(0.97, 0.05, 24):
            b.mouse("mouseMoved", box[0] + box[2] * 0.5, box[1] + box[3] * float(fy))
            b.eval("new Promise(function(r){requestAnimationFrame(function(){setTimeout(r,30)})})")
            bid = b.eval("document.querySelector('.pit-tl-hover').getAttribute('data-block')")
            if bid is not None:
                info = b.eval("document.querySelector('.pit-tl-hover').innerText")
                break
        assert info is not None, "no block under the cursor anywhere at mid-width"
        row = tr.blocks[tr.blocks["block_id"] == int(bid)]
        assert len(row) == 1
        row = row.iloc[0]
        assert f"{int(row['size']):,} B" in info                 # the size the trace recorded
        assert str(row["api"]) in info                           # the API it came from
        b.element_screenshot(os.path.join(out, f"{stem}-hover.png"), ".pit-tl")

        # the owner stacking draws too, and still adds up to the same peak
        b.eval("document.querySelector('.pit-tl button[data-mode=own]').click()")
        b.eval("document.querySelector('.pit-tl').pitTimeline.setRange(-0.5, 1e12)")
        top = b.eval(STACK_TOP)
        assert top == peak_live_bytes(db)
        if name == "torch-cnn-blocks.pit":
            # the reserved curve drawn (the last series) keeps its peak zoomed out, and it is a curve
            col = b.eval("(function(){var u=document.querySelector('.pit-tl').pitTimeline.u;"
                         "return u.data[u.data.length-1].filter(function(v){return v!==null;});})()")
            assert max(col) == native and min(col) < native
        assert b.console_errors() == []
        # offline: nothing but the file itself and inline data was requested
        assert [u for u in b.requests() if not u.startswith(("file:", "data:", "blob:"))] == []


def test_timeline_hover_shows_call_site_and_owner(tmp_path, native, capture):
    """A simtrain capture (with call sites): the block under the cursor reads out the owner
    library and the Python call site the capture recorded for that block."""
    import sys

    from cdp import Browser

    path, cp = capture([sys.executable, "-m", "pyinterpose.examples.simtrain", "--steps", "6"])
    assert cp.returncode == 0, cp.stderr[-2000:]
    tr = pyinterpose.load(path)
    if "stack_id" not in tr.blocks or not (tr.blocks["stack_id"] >= 0).any():
        pytest.skip("this build records no call sites")
    from pyinterpose.trace.stacks import call_site

    page = tmp_path / "st.html"
    page.write_text(html.render(html.build(tr, bandwidth=16, time_limit=1.0)), encoding="utf-8")
    with Browser(str(tmp_path / "profile"), 1400, 1000) as b:
        b.open(page.as_uri())
        b.eval("window.pitTimelinesReady")
        box = b.eval(OVER)
        bid = None
        for fx in (0.5, 0.3, 0.7):
            for fy in np.linspace(0.95, 0.1, 18):
                b.mouse("mouseMoved", box[0] + box[2] * fx, box[1] + box[3] * float(fy))
                b.eval("new Promise(function(r){requestAnimationFrame(function(){setTimeout(r,30)})})")
                bid = b.eval("document.querySelector('.pit-tl-hover').getAttribute('data-block')")
                if bid is not None:
                    break
            if bid is not None:
                break
        assert bid is not None
        info = b.eval("document.querySelector('.pit-tl-hover').innerText")
        assert b.console_errors() == []
    row = tr.blocks[tr.blocks["block_id"] == int(bid)].iloc[0]
    assert call_site(tr, int(row["stack_id"])) in info and "_simlib.py:" in info  # simtrain calls its C loop from examples/_simlib.py
    assert str(row["owner"]) in info


# ---------------------------------------------------------------------------------------------
# A long run's timeline: the curve summarised as min/max per bucket at several zoom levels
# (report/curve_levels.py); the finer level is decoded when the user zooms in.

def _ref_curve(tr, device=0):
    """Live device bytes after every allocation and free (frees first at one instant), from the table."""
    b = tr.blocks
    b = b[(b["device"] == device) & b["counts_device"]]
    ev = []
    for r in b.itertuples():
        ev.append((int(r.t_alloc), 1, int(r.size)))
        if r.freed:
            ev.append((int(r.t_free), 0, -int(r.size)))
    ev.sort(key=lambda e: (e[0], e[1]))
    return np.cumsum([e[2] for e in ev]).astype(np.int64), np.array([e[0] for e in ev], np.int64)


def _ref_buckets(curve, buckets):
    n = len(curve)
    edges = [j * n // buckets for j in range(buckets + 1)]
    return {edges[j]: (int(curve[edges[j]:edges[j + 1]].min()), int(curve[edges[j]:edges[j + 1]].max()))
            for j in range(buckets)}


DRAWN = """(function(){var tl=document.querySelector('.pit-tl').pitTimeline, u=tl.u;
  return {x: Array.from(u.data[0]), hi: Array.from(u.data[1]), lo: Array.from(u.data[2]), range: tl.range.slice(),
          level: document.querySelector('.pit-tl').getAttribute('data-level')};})()"""


def test_summarised_timeline_zooms_into_detail(tmp_path, monkeypatch):
    from cdp import Browser

    monkeypatch.setenv("PYINTERPOSE_TIMELINE_EXACT_MAX", "1000")     # this trace's 72 k events: summarised
    tr = training_trace(iterations=3000)
    curve, times = _ref_curve(tr)
    n = len(curve)
    assert n > 16384                                                 # two levels: 2 048 and 16 384 buckets
    page = tmp_path / "long.html"
    page.write_text(html.render(html.build(tr, bandwidth=16, time_limit=1.0)), encoding="utf-8")
    text = page.read_text(encoding="utf-8")
    assert f"memory curve of GPU 0: {n:,} points" in text and "2 levels of 2,048, 16,384 buckets" in text
    assert "reserved line is drawn flat at the simulated allocator" in text
    out = artifacts_dir(tmp_path)
    with Browser(str(tmp_path / "profile"), 1400, 1000) as b:
        b.open(page.as_uri())
        b.eval("window.pitTimelinesReady")
        root = "document.querySelector('.pit-tl')"
        assert b.eval(f"{root}.getAttribute('data-timeline')") == "ok"
        assert b.eval(f"{root}.getAttribute('data-summary')") == "2"
        # the first view: the whole run at level 0, every bucket's min and max as the reference's
        d = b.eval(DRAWN)
        assert d["level"] == "0"
        ref0 = _ref_buckets(curve, 2048)
        # (the NVML and reserved lines' change points join the x axis: one x may appear twice)
        pts = {x: (lo, hi) for x, lo, hi in zip(d["x"], d["lo"], d["hi"]) if x in ref0}
        assert pts == ref0
        assert max(d["hi"]) == int(curve.max()) == peak_live_bytes(tr.device_blocks)
        # the iteration boundaries, decoded after the first view: the first event at or after each
        for _ in range(100):
            if b.eval(f"{root}.getAttribute('data-iters')") == "ok":
                break
            b.eval("new Promise(function(r){setTimeout(r,50)})")
        from pyinterpose.analysis.iterations import find_iterations
        bt = np.asarray(find_iterations(tr).boundaries_t, np.int64)
        assert len(bt) > 1000
        assert b.eval(f"Array.from({root}.pitTimeline.p.iters)") == np.searchsorted(times, bt, side="left").tolist()
        # the reserved line: flat at the pools analysis' simulated PyTorch peak (no replay for a long run)
        rl = b.eval(f"{root}.pitTimeline.p.reserved_line")
        assert "x" not in rl and rl["y"] > 0
        # level 1 is not decoded before the view needs it
        assert b.eval(f"Object.keys({root}.pitTimeline.model.tiles[1]).length") == 0
        b.element_screenshot(os.path.join(out, "summary-whole-run.png"), ".pit-tl")

        # zoom with the mouse wheel: the view wants level 1, which is decoded and drawn
        box = b.eval(OVER)
        b.mouse("mouseWheel", box[0] + box[2] * 0.5, box[1] + box[3] * 0.5, deltaX=0, deltaY=-600)
        for _ in range(100):
            if b.eval(f"{root}.getAttribute('data-level')") == "1":
                break
            b.eval("new Promise(function(r){setTimeout(r,50)})")
        d = b.eval(DRAWN)
        assert d["level"] == "1", d["level"]
        assert d["range"][1] - d["range"][0] < 0.6 * n
        ref1 = _ref_buckets(curve, 16384)
        drawn = {x: (lo, hi) for x, lo, hi in zip(d["x"], d["lo"], d["hi"]) if x in ref1}
        assert len(drawn) > 1200
        assert all(v == ref1[x] for x, v in drawn.items())
        pts = sorted((x, lo, hi) for x, (lo, hi) in drawn.items())
        # the detail bounds the true curve: every event in view lies within its bucket's min and max
        xs = np.array([p[0] for p in pts])
        for e in range(int(xs[0]), int(xs[-1])):
            j = int(np.searchsorted(xs, e, side="right")) - 1
            assert pts[j][1] <= curve[e] <= pts[j][2]
        b.element_screenshot(os.path.join(out, "summary-zoomed.png"), ".pit-tl")

        # hover reads out the bucket under the cursor, with its exact least and most bytes
        b.mouse("mouseMoved", box[0] + box[2] * 0.5, box[1] + box[3] * 0.9)
        for _ in range(50):
            bk = b.eval("document.querySelector('.pit-tl-hover').getAttribute('data-bucket')")
            if bk:
                break
            b.eval("new Promise(function(r){requestAnimationFrame(function(){setTimeout(r,30)})})")
        level, e0, e1, lo, hi = (int(float(v)) for v in bk.split(":"))
        assert level == 1 and (lo, hi) == ref1[e0]
        assert (lo, hi) == (int(curve[e0:e1 + 1].min()), int(curve[e0:e1 + 1].max()))
        assert f"{hi:,} B" in b.eval("document.querySelector('.pit-tl-hover').innerText")

        # one steady iteration: stored event by event, every event drawn with the curve's exact value
        b.eval(f"{root}.querySelector('button[data-act=steady]').click()")
        assert b.eval(f"{root}.getAttribute('data-exact')") == "1"
        d = b.eval(DRAWN)
        ev = [(int(x), hi) for x, hi in zip(d["x"], d["hi"]) if x == int(x) and d["range"][0] <= x <= d["range"][1]]
        assert len(ev) > 10
        assert all(hi == curve[x] for x, hi in ev)
        assert b.console_errors() == []
        assert [u for u in b.requests() if not u.startswith(("file:", "data:", "blob:"))] == []
