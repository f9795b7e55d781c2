"""`pyinterpose demo`: a real capture of simtrain on simcuda, analysed and reported end to end."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest

pytestmark = pytest.mark.slow   # every test here captures, replays or loads whole traces (> a few s)

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
NATIVE = os.path.join(ROOT, "pyinterpose", "_native")
needs_native = pytest.mark.skipif(
    not (os.path.exists(os.path.join(NATIVE, "libpyinterpose.so")) and os.path.exists(os.path.join(NATIVE, "libsimtrain.so"))),
    reason="native libraries not built (python pyinterpose/_build.py)")


def run_cli(*args, cwd, timeout=120):
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""),
               PYINTERPOSE_CACHE_DIR=str(cwd))
    return subprocess.run([sys.executable, "-m", "pyinterpose", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=timeout)


@needs_native
def test_demo_captures_analyses_and_reports(tmp_path):
    r = run_cli("demo", "-o", "out", "--json", cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-3000:]
    d = json.loads(r.stdout.strip().splitlines()[-1])
    trace_path = os.path.join(tmp_path, d["trace"])
    report_path = os.path.join(tmp_path, d["report"])
    assert os.path.exists(trace_path) and os.path.exists(report_path)
    # headlines agree with an independent reading of the captured trace
    sys.path.insert(0, ROOT)
    import pyinterpose
    from pyinterpose.trace.model import peak_live_bytes

    tr = pyinterpose.load(trace_path)
    h = d["headlines"]
    assert h["peak_live_bytes"] == peak_live_bytes(tr.blocks) > 0
    assert h["blocks"] == int(tr.blocks["counts_device"].sum())
    assert h["iterations"]["source"] == "auto" and h["iterations"]["count"] >= 3
    assert h["access"]["intervals"] > 0
    assert d["bandwidth_assumed_gbps"] in (None, 16.0)
    page = open(report_path, encoding="utf-8").read()
    from pyinterpose.report.timeline import chart_js

    assert chart_js() is not None                # uplot-python: a dependency
    assert page.count(chart_js()) == 1 and 'class="pit-tl"' in page   # inlined verbatim (its text names URLs
    page = page.replace(chart_js(), "")                                # it never loads)
    assert "https://" not in page and "http://" not in page
    # four figures; three when no runnable swap schedule lowers the peak (the demo runs on simcuda's
    # device clock, where a block's kernels run back to back: at 16 GB/s no swap-out ends before the
    # block's next access), and the swap section then says so
    figures = len(re.findall(r'src="data:image/svg\+xml;base64,', page))
    assert figures >= 4 or (figures == 3 and "Pareto curve not applicable: no budget lowers the peak" in page)
    # the terminal form prints the summary and where the report went
    r = run_cli("demo", "-o", "out2", cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "peak live bytes" in r.stdout and "Report:" in r.stdout and "iterations found" in r.stdout


def test_demo_sample_without_samples_is_a_clear_error(tmp_path):
    from pyinterpose.cli import demo

    if demo.sample_traces():
        pytest.skip("a sample trace is committed; the error path does not apply")
    r = run_cli("demo", "--sample", "-o", "out", cwd=tmp_path)
    assert r.returncode == 2
    assert r.stderr.count("\n") == 1 and "no sample trace" in r.stderr


@pytest.fixture(scope="module")
def captured(tmp_path_factory):
    """Two real captures on simcuda: torch-like (cudart PLT) and jax-like (dlopen + dlsym)."""
    if not os.path.exists(os.path.join(NATIVE, "libpyinterpose.so")):
        pytest.skip("native libraries not built (python pyinterpose/_build.py)")
    d = tmp_path_factory.mktemp("captures")
    out = {}
    for fw in ("torch", "jax"):
        p = d / f"{fw}.pit"
        r = run_cli("run", "--simulated-gpu", "-o", str(p), "--", sys.executable, "-m",
                    "pyinterpose.examples.simtrain", "--framework", fw, "--steps", "8", cwd=d)
        assert r.returncode == 0, r.stderr[-3000:]
        out[fw] = str(p)
    return d, out


def test_exports_of_a_real_capture(captured):
    d, files = captured
    sys.path.insert(0, ROOT)
    import pickle

    import pyinterpose
    from pyinterpose.report.memory_viz import check_consistency
    from pyinterpose.trace.model import peak_live_bytes

    tr = pyinterpose.load(files["torch"])
    r = run_cli("export", files["torch"], "--format", "perfetto", "-o", "t.json", "--json", cwd=d)
    assert r.returncode == 0, r.stderr[-2000:]
    doc = json.load(open(d / "t.json"))
    live = [e["args"]["live_bytes"] for e in doc["traceEvents"] if e["ph"] == "C" and "live_bytes" in e["args"]]
    assert max(live) == peak_live_bytes(tr.blocks)
    assert sum(e["ph"] == "X" for e in doc["traceEvents"]) >= 3  # iteration slices
    r = run_cli("export", files["torch"], "--format", "memory-viz", "-o", "t.pickle", cwd=d)
    assert r.returncode == 0, r.stderr[-2000:]
    snap = pickle.load(open(d / "t.pickle", "rb"))
    check_consistency(snap)
    n_alloc = sum(e["action"] == "alloc" for dt in snap["device_traces"] for e in dt)
    assert n_alloc == int(tr.blocks["counts_device"].sum())
    r = run_cli("export", files["torch"], "--format", "csv", "-o", "t.csv", cwd=d)
    assert r.returncode == 0 and sum(1 for _ in open(d / "t.csv")) == len(tr.blocks) + 1


def test_compare_two_frameworks(captured):
    d, files = captured
    r = run_cli("compare", files["torch"], files["jax"], "--json", "--bandwidth", "16", "--no-pools",
                "-o", "cmp.html", cwd=d)
    assert r.returncode == 0, r.stderr[-2000:]
    rows = json.loads(r.stdout)["traces"]
    assert [row["framework"] for row in rows] == ["pytorch", "jax"]  # one name per framework (owners.allocator)
    assert all(row["peak_live_bytes"] > 0 and row["iterations"] >= 3 for row in rows)
    assert (d / "cmp.html").exists()


# ---- issue 12 row 1: the README's commands from the clone root -----------------------------------------
def _unbuilt_clone(tmp_path):
    """A copy of the source tree without any build output (what `git clone` gives): run from its root,
    `python -m` imports this copy first."""
    import shutil

    clone = tmp_path / "clone"
    shutil.copytree(os.path.join(ROOT, "pyinterpose"), clone / "pyinterpose",
                    ignore=shutil.ignore_patterns("_native", "_core*", "__pycache__", "*.so"))
    shutil.copy(os.path.join(ROOT, "pyproject.toml"), clone / "pyproject.toml")
    launcher = tmp_path / "bin" / "pyinterpose"  # like the installed console script: not in the clone
    launcher.parent.mkdir()
    launcher.write_text("import sys\nfrom pyinterpose.cli import main\nsys.exit(main())\n")
    return clone, str(launcher)


def _env_installed(tmp_path):
    return dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""),
                PYINTERPOSE_CACHE_DIR=str(tmp_path))


@needs_native
def test_demo_from_the_clone_root_uses_the_installed_build(tmp_path):
    clone, launcher = _unbuilt_clone(tmp_path)
    r = subprocess.run([sys.executable, launcher, "demo", "--json"], cwd=clone, env=_env_installed(tmp_path),
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    d = json.loads(r.stdout.strip().splitlines()[-1])
    assert d["complete"] is True
    assert os.path.getsize(os.path.join(clone, d["trace"])) > 1000
    # the command `demo` suggests when a capture fails works from here too
    out = tmp_path / "try.pit"
    r = subprocess.run([sys.executable, launcher, "run", "-q", "--simulated-gpu", "-o", str(out), "--", sys.executable,
                        "-m", "pyinterpose.examples.simtrain", "--framework", "torch", "--steps", "3"],
                       cwd=clone, env=_env_installed(tmp_path), capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]


@needs_native
def test_python_m_demo_in_an_unbuilt_clone_says_what_helps(tmp_path):
    clone, _ = _unbuilt_clone(tmp_path)
    r = subprocess.run([sys.executable, "-m", "pyinterpose", "demo"], cwd=clone, env=_env_installed(tmp_path),
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    line = [l for l in r.stderr.splitlines() if "error" in l]
    assert len(line) == 1 and "not built" in line[0] and "reinstall" not in line[0]
    assert "installed `pyinterpose` command" in line[0]
    left = [f for _, _, fs in os.walk(clone / "pyinterpose-demo") for f in fs] if (clone / "pyinterpose-demo").exists() else []
    assert left == []  # no empty trace left behind


def test_demo_sample_suggests_an_export_path_under_the_current_directory(tmp_path):
    """The sample trace may live in site-packages (or the source tree): the suggested export goes to
    the output directory under the current one, not next to the sample."""
    from pyinterpose.cli import demo

    if not demo.sample_traces():
        pytest.skip("no sample trace committed")
    env_cols = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = "400"                      # one line per suggestion
    try:
        r = run_cli("demo", "--sample", "-o", "out", cwd=tmp_path, timeout=300)
    finally:
        if env_cols is None:
            os.environ.pop("COLUMNS")
        else:
            os.environ["COLUMNS"] = env_cols
    assert r.returncode == 0, r.stderr[-3000:]
    m = re.search(r"pyinterpose export \S+ --format perfetto -o (\S+)", r.stdout)
    assert m, r.stdout[-2000:]
    target = os.path.realpath(os.path.join(tmp_path, m.group(1)))
    assert target.startswith(os.path.realpath(tmp_path) + os.sep), target
    assert target == os.path.realpath(tmp_path / "out" / "torch-cnn-blocks.perfetto.json")


def test_demo_snapshot_reads_in_pytorchs_own_viewer(captured):
    """PyTorch's memory_viz (only where torch is installed) reads the exported snapshot: one cudaMalloc per
    device block."""
    import pickle

    import pyinterpose

    mv = pytest.importorskip("torch.cuda._memory_viz")
    d, files = captured
    r = run_cli("export", files["torch"], "--format", "memory-viz", "-o", "viz.pickle", cwd=d)
    assert r.returncode == 0, r.stderr[-2000:]
    snap = pickle.load(open(d / "viz.pickle", "rb"))
    mv.segsum(snap)
    assert mv.trace(snap).count("cudaMalloc(") == int(pyinterpose.load(files["torch"]).blocks["counts_device"].sum())
