"""Flame graphs of live memory by call stack (issue 33 item 17), against what the workloads know.

* simtrain (native stacks): the folded stacks at the peak sum to the peak the program itself
  measured (its truth file), and at each out-of-memory failure to the live set it wrote down;
  every stack runs through the loop's own functions down to its allocation helper.
* stacks_workload.py (Python stacks): each allocation the workload knows it made, from known lines,
  is under a folded stack ending in those very lines, with at least its bytes.
* speedscope: the file follows speedscope's documented format (sampled profiles, frames shared,
  weights in bytes, every index in range).
* the report: one inline SVG graph per moment, no script fetched from anywhere.
"""
from __future__ import annotations

import json
import os
import sys

import pytest

from conftest import ROOT, last_json_line, run_cli

WORKLOAD = os.path.join(ROOT, "tests", "py", "stacks_workload.py")


def _folded(path):
    out = []
    with open(path) as fh:
        for line in fh:
            stack, _, n = line.rstrip("\n").rpartition(" ")
            out.append((stack.split(";"), int(n)))
    return out


@pytest.fixture(scope="module")
def oom_run(tmp_path_factory):
    d = tmp_path_factory.mktemp("flame")
    path, truth, oom_truth = str(d / "t.pit"), str(d / "truth.json"), str(d / "oom.jsonl")
    cp = run_cli("run", "-q", "--simulated-gpu", "--stacks", "native", "-o", path, "--",
                 sys.executable, "-m", "pyinterpose.examples.simtrain", "--steps", "6", "--layers", "4",
                 "--truth", truth, "--oom", "final", "--oom-truth", oom_truth,
                 env={"SIMCUDA_MEMORY_BYTES": str(64 << 20)})
    assert cp.returncode == 1 and "CUDA out of memory" in cp.stderr, cp.stderr[-2000:]
    with open(oom_truth) as fh:
        ooms = [json.loads(x) for x in fh if x.strip()]
    return d, path, ooms


def test_folded_at_peak_sums_to_simtrains_peak_and_runs_through_its_functions(tmp_path):
    path, truth = str(tmp_path / "t.pit"), str(tmp_path / "truth.json")
    cp = run_cli("run", "-q", "--simulated-gpu", "--stacks", "native", "-o", path, "--",
                 sys.executable, "-m", "pyinterpose.examples.simtrain", "--steps", "5", "--layers", "5",
                 "--truth", truth)
    assert cp.returncode == 0, cp.stderr[-2000:]
    with open(truth) as fh:
        peak = json.load(fh)["peaks"][0]
    out = str(tmp_path / "peak.folded")
    cp = run_cli("export", path, "--format", "folded", "-o", out, "--json")
    assert cp.returncode == 0, cp.stderr
    assert json.loads(cp.stdout)["moment"] == "peak"
    rows = _folded(out)
    assert sum(n for _, n in rows) == peak
    for frames, n in rows:
        assert n > 0
        assert frames[-1] == "raw_alloc (libsimtrain.so)"          # innermost: the loop's allocation helper
        assert "simtrain_run (libsimtrain.so)" in frames           # called from the loop
        assert frames.index("simtrain_run (libsimtrain.so)") < len(frames) - 1  # outermost first


def test_folded_at_each_oom_is_the_live_set_simtrain_wrote(oom_run):
    d, path, ooms = oom_run
    assert len(ooms) == 2
    for k, t in enumerate(ooms, 1):
        out = str(d / f"oom{k}.folded")
        cp = run_cli("export", path, "--format", "folded", "--moment", f"oom-{k}", "-o", out, "-f")
        assert cp.returncode == 0, cp.stderr
        assert sum(n for _, n in _folded(out)) == t["live_bytes"] == sum(s for _, s, _ in t["live"])
    cp = run_cli("export", path, "--format", "folded", "--moment", "oom-3", "-o", str(d / "x.folded"))
    assert cp.returncode == 2 and "no moment 'oom-3'" in cp.stderr and "Traceback" not in cp.stderr


def test_speedscope_file_follows_the_documented_format(oom_run):
    d, path, ooms = oom_run
    out = str(d / "t.speedscope.json")
    cp = run_cli("export", path, "--format", "speedscope", "-o", out, "-f")
    assert cp.returncode == 0, cp.stderr
    with open(out) as fh:
        ss = json.load(fh)
    assert ss["$schema"] == "https://www.speedscope.app/file-format-schema.json"
    assert ss["activeProfileIndex"] == 0 and isinstance(ss["exporter"], str)
    frames = ss["shared"]["frames"]
    assert all(isinstance(f["name"], str) and f["name"] for f in frames)
    assert len(ss["profiles"]) == 1 + len(ooms)                 # the peak, then each OOM
    for p, want in zip(ss["profiles"][1:], ooms):
        assert sum(p["weights"]) == want["live_bytes"]
    for p in ss["profiles"]:
        assert p["type"] == "sampled" and p["unit"] == "bytes" and p["startValue"] == 0
        assert len(p["samples"]) == len(p["weights"]) and p["endValue"] == sum(p["weights"])
        assert all(0 <= i < len(frames) for s in p["samples"] for i in s)
        names = [[frames[i]["name"] for i in s] for s in p["samples"]]
        assert all(n[-1] == "raw_alloc (libsimtrain.so)" for n in names)   # root first, leaf last


def test_python_stacks_fold_onto_the_lines_the_workload_knows(capture, cbuild, tmp_path):
    from pyinterpose.analysis.flame import at_peak
    import pyinterpose

    helper = cbuild("stacks_helper", shared=True)
    path, cp = capture([sys.executable, WORKLOAD, helper])
    assert cp.returncode == 0, cp.stderr
    truth = last_json_line(cp.stdout)
    tr = pyinterpose.load(path)
    m = at_peak(tr)
    rows = list(zip(m.stacks["frames"], m.stacks["bytes"]))
    main = [t for t in truth["allocs"] if t["kind"] == "python" and t["pid"] == truth["allocs"][0]["pid"]]
    assert main
    checked = 0
    for t in main:
        # truth frames: innermost first, [function, line]; the folded stack: outermost first, "file:line in fn"
        want = [f"stacks_workload.py:{line} in {fn}" for fn, line in reversed(t["frames"])]
        under = [n for fr, n in rows if list(fr[len(fr) - len(want):]) == want]
        if t["size"] in set(tr.blocks.loc[tr.blocks["freed"], "size"].tolist()):
            continue                                               # freed before the peak
        assert sum(under) >= t["size"], (t, want)
        checked += 1
    assert checked >= 3


def test_report_has_an_inline_flame_graph_per_moment(oom_run):
    d, path, ooms = oom_run
    out = str(d / "r.html")
    cp = run_cli("report", path, "-o", out, "-f")
    assert cp.returncode == 0, cp.stderr[-2000:]
    with open(out, encoding="utf-8") as fh:
        page = fh.read()
    assert page.count('<svg class="flame"') == 1 + len(ooms)
    assert 'id="flame"' in page and "<script src" not in page
    assert "raw_alloc (libsimtrain.so)" in page


@pytest.mark.slow
@pytest.mark.skipif(not (__import__("shutil").which("chromium") or os.path.exists("/usr/bin/chromium")),
                    reason="Chromium not installed (apt-get install -y chromium)")
def test_flame_graph_zooms_in_chromium(capture, cbuild, tmp_path):
    """In a real browser: no console error, nothing fetched; a click on a frame stretches it to the full width
    and hides what is outside it, its callers stay full width; Escape shows everything again."""
    import pyinterpose
    from cdp import Browser
    from pyinterpose.report import html

    helper = cbuild("stacks_helper", shared=True)
    path, cp = capture([sys.executable, WORKLOAD, helper])
    assert cp.returncode == 0, cp.stderr
    tr = pyinterpose.load(path)
    page = tmp_path / "flame.html"
    page.write_text(html.render(html.build(tr, bandwidth=16, time_limit=1.0)), encoding="utf-8")
    js_state = ("Array.from(document.querySelectorAll('#flame-0 g.fl')).map(function(g){var r=g.querySelector('rect');"
                "return [g.querySelector('title').textContent.split(' \\u2014 ')[0], +g.dataset.d, g.style.display,"
                " +r.getAttribute('x'), +r.getAttribute('width')];})")
    with Browser(str(tmp_path / "profile"), 1400, 1000) as b:
        b.open(page.as_uri())
        before = b.eval(js_state)
        assert len(before) > 5
        # the frame to zoom on: a frame of `direct` (one of several call paths), not the widest
        target = next(i for i, f in enumerate(before) if f[0].endswith(" in direct") and f[4] < 1100)
        depth = before[target][1]
        b.eval(f"document.querySelectorAll('#flame-0 g.fl')[{target}].dispatchEvent("
               "new MouseEvent('click', {bubbles: true}))")
        after = b.eval(js_state)
        assert after[target][3] == 0 and after[target][4] == pytest.approx(1199.5, abs=0.6)
        shown = [f for f in after if f[2] != "none"]
        hidden = [f for f in after if f[2] == "none"]
        assert hidden and all(f[4] == pytest.approx(1199.5, abs=0.6) for f in shown if f[1] <= depth)
        b.eval("document.dispatchEvent(new KeyboardEvent('keydown', {key: 'Escape'}))")
        reset = b.eval(js_state)
        assert all(f[2] != "none" for f in reset)
        assert [f[4] for f in reset] == pytest.approx([f[4] for f in before], abs=0.02)
        assert b.console_errors() == []
        assert [u for u in b.requests() if not u.startswith(("file:", "data:"))] == []
