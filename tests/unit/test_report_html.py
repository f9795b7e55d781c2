"""The HTML report: self-contained, every figure a decodable PNG, sections degrade one by one."""
from __future__ import annotations

import base64
import json
import re

import numpy as np

import pytest

from pyinterpose.cli import main
from pyinterpose.analysis import guarded
from pyinterpose.report import html
from pyinterpose.report.synthetic import training_trace
from conftest import fake_trace_files

SVG_HEAD = b"<svg"
MiB = 1 << 20


@pytest.fixture(autouse=True)
def _no_cached_bandwidth(monkeypatch, tmp_path):
    monkeypatch.setenv("PYINTERPOSE_CACHE_DIR", str(tmp_path))


def images(page: str) -> list[bytes]:
    from pyinterpose.report.timeline import chart_js

    page = page.replace(chart_js(), "")        # uplot-python (a dependency): never None
    return [base64.b64decode(m) for m in re.findall(r'src="data:image/svg\+xml;base64,([A-Za-z0-9+/=]+)"', page)]


def assert_self_contained(page: str) -> None:
    from pyinterpose.report.timeline import chart_js

    assert page.startswith("<!DOCTYPE html>")
    lib = chart_js()
    # the charting library is inlined verbatim from the installed uplot-python package, once per page that
    # draws a timeline (its text names URLs, e.g. the SVG namespace, but loads nothing: the browser test
    # checks requests)
    assert lib is not None and page.count(lib) == ("<div class=\"pit-tl\"" in page)
    page = page.replace(lib, "")
    # no external resource of any kind: scripts, styles, fonts, images, frames
    assert not re.search(r'<(script|img|link|iframe|source)[^>]+(src|href)="(?!data:|#)', page)
    assert "url(" not in page and "@import" not in page and "@font-face" not in page
    assert "http://" not in page and "https://" not in page


@pytest.mark.slow
def test_report_is_self_contained_with_decodable_figures():
    tr = training_trace(iterations=6, step_ns=200_000)
    rep = html.build(tr, bandwidth=16)
    page = html.render(rep)
    assert_self_contained(page)
    imgs = images(page)
    # sizes, ATI, pools, swap Pareto (memory over time is the interactive timeline)
    assert len(imgs) == 4
    assert page.count('<div class="pit-tl"') == 1
    for png in imgs:
        assert SVG_HEAD in png[:500] and png.rstrip().endswith(b"</svg>") and len(png) > 2000
    ids = [s.id for s in rep.sections]
    assert ids == ["memory", "iterations", "sizes", "access", "pools", "fit", "swap", "blocks"]
    for sid in ids:
        assert f'<section id="{sid}">' in page
    assert 'data-render' in page  # the marker script the browser test reads


@pytest.mark.slow
def test_headlines_are_hand_computed_numbers():
    tr = training_trace(iterations=6, step_ns=200_000)
    rep = html.build(tr, bandwidth=16)
    h = rep.headlines
    assert h["peak_live_bytes"] == 84 * MiB
    assert h["blocks"] == 4 + 4 + 6 * 12
    assert h["iterations"]["source"] == "markers" and h["iterations"]["period_allocs"] == 12
    # classes at the peak: weights + optimizer persistent (48 MiB), activations + a gradient per-iteration
    assert h["lifetimes"]["peak_by_class"] == {"persistent": 48 * MiB, "per_iteration": 36 * MiB}
    assert h["sizes"]["max"] == 8 * MiB
    # pools: both bounds are the 84 MiB peak (the steady step holds it); no strategy beats its bound
    assert h["pools"]["bound_bytes"] == h["pools"]["bound_whole_run_bytes"] == 84 * MiB
    assert h["pools"]["ratio_to_bound"] and all(r >= 1.0 for r in h["pools"]["ratio_to_bound"].values())
    # swap: the no-overhead plans cannot go below the floor nor above the peak
    assert h["swap"]["floor"] <= h["swap"]["best_no_overhead"]["peak_after"] <= 84 * MiB
    json.dumps(h)  # plain JSON types only


@pytest.mark.slow
def test_memory_section_uses_classes_and_nvml():
    tr = training_trace(iterations=4)
    rep = html.build(tr)
    mem = next(s for s in rep.sections if s.id == "memory")
    assert not mem.notes and len(mem.html) == 1 and not mem.figures
    p = json.loads(re.search(r'<script type="application/json" class="pit-tl-data">(.*?)</script>',
                             mem.html[0]).group(1))
    # classes in stacking order, one event per alloc and per free, iterations as event indices
    from pyinterpose.report.data import CLASS_ORDER
    assert p["names"]["cls"][:1] == ["persistent"] and "per_iteration" in p["names"]["cls"]
    assert p["names"]["cls"] == sorted(p["names"]["cls"], key=CLASS_ORDER.index)
    assert p["events"] == 8 + 4 * 12 * 2 and p["blocks"] == 8 + 4 * 12
    bt = guarded.iterations(tr).value.boundaries_t
    assert len(p["iters"]) == len(bt) >= 2 and p["iters"] == sorted(p["iters"])
    assert len(p["nvml"]["x"]) == len(tr.nvml)
    # peak: 2nd iteration, first gradient allocated after 16 forward events (t = 45..60 us) -> 61 us
    assert ("GPU 0 peak live", "84.0 MiB at 61.0 us") in mem.facts
    assert dict(rep.facts)["NVML peak used"] == "396.0 MiB"


@pytest.mark.slow
def test_failing_analysis_degrades_only_its_section(monkeypatch):
    def boom(*a, **k):
        raise RuntimeError("kaboom")

    monkeypatch.setattr("pyinterpose.analysis.access.analyze", boom)
    monkeypatch.setattr("pyinterpose.analysis.swap.run_strategy", boom)   # every schedule the report asks for
    tr = training_trace(iterations=4)
    rep = html.build(tr, bandwidth=16)
    by = {s.id: s for s in rep.sections}
    assert any("not available" in n and "kaboom" in n for n in by["access"].notes)
    assert any("not available" in n and "kaboom" in n for n in by["swap"].notes)
    assert not by["access"].figures and not by["swap"].figures
    assert by["memory"].html and by["sizes"].figures
    page = html.render(rep)
    assert "not available: access.analyze failed (RuntimeError: kaboom)" in page


def test_missing_analysis_module_is_a_note(monkeypatch):
    r = guarded._call("no_such_analysis", "run")
    assert not r.ok and r.note.startswith("not available: the no_such_analysis analysis is not in this build")
    r = guarded._call("access", "no_such_function")
    assert not r.ok and "missing" in r.note


def test_empty_trace_still_renders():
    from pyinterpose.trace.model import Trace

    rep = html.build(Trace.from_tables())
    page = html.render(rep)
    assert_self_contained(page)
    mem = next(s for s in rep.sections if s.id == "memory")
    assert any("no device allocations" in n for n in mem.notes)


@pytest.mark.slow
def test_html_escapes_trace_text():
    tr = training_trace(iterations=3)
    tr.meta["command"] = ["<script>alert(1)</script>"]
    page = html.render(html.build(tr))
    assert "<script>alert(1)</script>" not in page and "&lt;script&gt;alert(1)&lt;/script&gt;" in page


@pytest.fixture()
def fake_files(monkeypatch):
    made = {"run.pit": training_trace(iterations=5, step_ns=200_000)}
    return fake_trace_files(monkeypatch, made)


@pytest.mark.slow
def test_cli_report_writes_file_and_json(fake_files, tmp_path, capsys):
    out = tmp_path / "r.html"
    assert main(["report", "run.pit", "-o", str(out), "--bandwidth", "16", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["output"] == str(out) and d["headlines"]["peak_live_bytes"] == 84 * MiB
    assert_self_contained(out.read_text())
    # refuses to overwrite without -f, one-line error
    assert main(["report", "run.pit", "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "exists" in err
    assert main(["report", "run.pit", "-o", str(out), "-f"]) == 0
    text = capsys.readouterr().out
    assert "peak live bytes" in text and "Report written to" in text and "\x1b[" not in text


def test_cli_report_missing_file(fake_files, capsys):
    assert main(["report", "nope.pit", "-o", "x.html"]) == 2
    assert "no such trace file" in capsys.readouterr().err


@pytest.mark.slow
def test_timeline_reserved_line_is_the_framework_allocators_simulated_peak():
    tr = training_trace(iterations=4, framework="torch")
    rep = html.build(tr, time_limit=1.0)
    mem = next(s for s in rep.sections if s.id == "memory")
    p = json.loads(re.search(r'<script type="application/json" class="pit-tl-data">(.*?)</script>',
                             mem.html[0]).group(1))
    pools = guarded.pools(tr, time_limit=1.0).value
    want = next(r["peak_bytes"] for r in pools["strategies"] if r["strategy"] == "pytorch")
    rl = p["reserved_line"]
    assert rl["y"] == want >= rep.headlines["peak_live_bytes"]
    assert "PyTorch caching" in rl["label"] and "(peak)" not in rl["label"]
    # a curve on the event axis, stepping up to the simulated peak (not a flat line)
    assert len(rl["x"]) == len(rl["ys"]) > 1 and rl["x"] == sorted(set(rl["x"]))
    assert 0 <= rl["x"][0] and rl["x"][-1] < p["events"]
    assert max(rl["ys"]) == want and min(rl["ys"]) < want
    # a reserved view has no such line: its stacked area is the reserve itself
    rv = html.build(training_trace(iterations=4, view="reserved"), time_limit=1.0)
    mem = next(s for s in rv.sections if s.id == "memory")
    assert '"reserved_line"' not in mem.html[0]


def _events_live(tr, device, mask):
    """Bytes live after each timeline event of ``device`` (timeline.payload's order: by
    time, frees first) counting only the blocks in ``mask`` (a bool per trace.blocks row)."""
    bl = tr.blocks
    m = bl["counts_device"].to_numpy(bool) & (bl["device"].to_numpy() == device)
    b = bl[m]
    sel = np.asarray(mask, bool)[m]
    fr = b["freed"].to_numpy(bool)
    t = np.concatenate([b["t_free"].to_numpy(np.int64)[fr], b["t_alloc"].to_numpy(np.int64)])
    is_alloc = np.concatenate([np.zeros(int(fr.sum()), bool), np.ones(len(b), bool)])
    size = np.concatenate([b["size"].to_numpy(np.int64)[fr], b["size"].to_numpy(np.int64)])
    size = size * np.concatenate([sel[fr], sel])
    o = np.argsort(t * 2 + is_alloc, kind="stable")
    return np.cumsum(np.where(is_alloc[o], size[o], -size[o]))


def test_reserved_curve_on_a_real_trace_peaks_at_pytorchs_own_max_reserved():
    """torch-cnn-blocks: the simulated caching allocator's curve peaks at what PyTorch's own
    allocator reported (max_memory_reserved, same program, reserved view), and never drops
    below the bytes its blocks hold at the same event."""
    import pyinterpose
    from conftest import gpu_trace
    from pyinterpose.analysis.owners import allocator_mask
    from pyinterpose.analysis.pools import reserved_curve
    from pyinterpose.report import timeline

    tr = pyinterpose.load(gpu_trace("torch-cnn-blocks.pit"))
    with open(gpu_trace("torch-cnn-reserved.truth.json")) as f:
        native = json.load(f)["pytorch_reported"]["max_memory_reserved"]
    dev = int(tr.device_blocks["device"].iloc[0])
    p = timeline.payload(tr, dev, reserved=reserved_curve(tr, "pytorch"))
    x, ys = np.asarray(p["reserved_line"]["x"]), np.asarray(p["reserved_line"]["ys"])
    assert ys.max() == native and len(ys) > 10
    live = _events_live(tr, dev, allocator_mask(tr))
    q = np.searchsorted(x, np.arange(len(live)), side="right") - 1
    assert (live[q < 0] == 0).all()          # nothing of the allocator is live before the curve starts
    assert (ys[q[q >= 0]] >= live[q >= 0]).all()
    # control: counting every device block (cuBLAS' cuMemAlloc workspaces too), the stack rises above it
    every = _events_live(tr, dev, np.ones(len(tr.blocks), bool))
    assert (ys[q[q >= 0]] < every[q >= 0]).any()


@pytest.mark.slow
def test_without_the_chart_library_the_timeline_is_a_static_figure_with_the_same_facts(monkeypatch):
    tr = training_trace(iterations=4)
    with_lib = next(s for s in html.build(tr).sections if s.id == "memory")
    from pyinterpose.report import timeline

    monkeypatch.setattr(timeline, "chart_js", lambda: None)
    rep = html.build(tr)
    mem = next(s for s in rep.sections if s.id == "memory")
    assert not mem.html and len(mem.figures) == 1
    assert any("uplot-python" in n for n in mem.notes)
    # peak and what is left at the end: the same facts from the static path's own computation
    assert [f for f in mem.facts if f[0].startswith("GPU")] == [f for f in with_lib.facts if f[0].startswith("GPU")]
    assert 'class="pit-tl' not in html.render(rep)


def test_timeline_payload_peak_and_end_match_the_live_bytes_curve():
    from pyinterpose.report import timeline
    from pyinterpose.trace.model import live_bytes_curve

    for tr in (training_trace(iterations=5), training_trace(iterations=3, view="reserved")):
        for dev in sorted(tr.device_blocks["device"].unique()):
            st = timeline.payload(tr, int(dev))["stats"]
            db = tr.device_blocks[tr.device_blocks["device"] == dev]
            t, live = live_bytes_curve(db)
            assert st["peak_bytes"] == int(live.max()) and st["end_bytes"] == int(live[-1])
            assert st["peak_t_ns"] == int(t[int(np.argmax(live))])


def test_matplotlib_is_imported_beside_the_first_analyses():
    """The report's modules load without matplotlib (~0.3 s); the report imports it on a thread of its own
    once its analyses start, and its figures are drawn with it."""
    import subprocess
    import sys

    code = ("import sys, threading\n"
            "import pyinterpose.cli.report, pyinterpose.report.html as h, pyinterpose.report.registry\n"
            "print('before', 'matplotlib' in sys.modules)\n"
            "from pyinterpose.report.synthetic import training_trace\n"
            "h._import_plots_beside()\n"
            "print('thread', any(t.name == 'pyinterpose-import' for t in threading.enumerate()))\n"
            "r = h.build(training_trace(iterations=4), bandwidth=16, time_limit=1.0)\n"
            "print('after', 'matplotlib' in sys.modules, sum(len(s.figures) for s in r.sections) > 0)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.split("\n")[:3] == ["before False", "thread True", "after True True"], out.stdout + out.stderr
