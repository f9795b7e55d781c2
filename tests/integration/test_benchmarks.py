"""Every benchmark under scripts/ runs as its docstring says, from the checkout, with its smallest
settings (a few seconds each), and prints the JSON it promises.  Run from a temporary directory
(not the checkout) so nothing relies on the working directory."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

pytestmark = pytest.mark.slow   # every test here captures, replays or loads whole traces (> a few s)

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
NATIVE = os.path.join(ROOT, "pyinterpose", "_native")
needs_native = pytest.mark.skipif(not os.path.exists(os.path.join(NATIVE, "libpyinterpose.so")),
                                  reason="native libraries not built (pip install -e .)")


def bench(script, *args, cwd, timeout=120):
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}   # the scripts find the checkout
    r = subprocess.run([sys.executable, os.path.join(ROOT, "scripts", script), *args], cwd=cwd, env=env,
                       capture_output=True, text=True, timeout=timeout)
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout), r.stderr


@needs_native
@pytest.mark.skipif(shutil.which("cc") is None, reason="no C compiler")
def test_bench_capture_two_repeats(tmp_path):
    """The simtrain part repeats each capture; the second must not trip on the first's trace."""
    d, _ = bench("bench_capture.py", "--rounds", "2", "--steps", "5", "--repeats", "2", cwd=tmp_path)
    assert d["benchmark"] == "capture_overhead_simcuda" and d["lost_events"] == 0
    paths = d["simtrain"]["paths"]
    assert set(paths) == {"torch", "jax", "tf"} and all(p["events"] > 0 for p in paths.values())


@needs_native
def test_bench_capture_python_stacks(tmp_path):
    d, _ = bench("bench_capture.py", "--python-stacks", "--rounds", "2", "--allocs", "20", "--depth", "5",
                 cwd=tmp_path)
    assert d["benchmark"] == "python_stacks_simcuda" and d["rounds"] == 2 and d["allocs_per_block"] == 20
    assert d["stacks_python"]["stack_depth_recorded"] >= 5
    assert d["stacks_python"]["lost_events"] == 0 == d["stacks_none"]["lost_events"]


SMALL_POOLS = ("--sizes", "300", "--random", "200", "--hard", "20", "--holes", "0", "--seeds", "1",
               "--time-limit", "1")


def test_bench_pools_minimalloc_from_a_given_dir(tmp_path):
    data = tmp_path / "mm"
    data.mkdir()
    # a tiny instance in MiniMalloc's format: three buffers, two overlapping in time
    (data / "A.1048576.csv").write_text("id,lower,upper,size\n0,0,10,524288\n1,5,15,524288\n2,15,20,1048576\n")
    d, _ = bench("bench_pools.py", *SMALL_POOLS, "--minimalloc", str(data), cwd=tmp_path)
    assert d["minimalloc_dir"] == str(data)
    assert d["minimalloc"]["A"]["status"] == "found" and d["minimalloc"]["A"]["height"] == 1 << 20
    assert d["sizes"]["300"]["blocks"] > 0 and d["random"]["buffers"] == 200 and len(d["hard"]) == 1


def test_bench_pools_says_when_minimalloc_is_absent(tmp_path, monkeypatch):
    """The default places are next to the checkout; when none holds the instances the JSON and
    stderr say so (no silent skip).  A copy of the script in an empty tree has none of them."""
    tree = tmp_path / "clone"
    (tree / "scripts").mkdir(parents=True)
    shutil.copy(os.path.join(ROOT, "scripts", "bench_pools.py"), tree / "scripts")
    env = dict(os.environ, PYTHONPATH=ROOT)
    r = subprocess.run([sys.executable, str(tree / "scripts" / "bench_pools.py"), *SMALL_POOLS], cwd=tmp_path,
                       env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    d = json.loads(r.stdout)
    assert "not found in" in d["minimalloc"]["skipped"]
    assert "MiniMalloc's instances" in r.stderr and "--minimalloc DIR" in r.stderr
    r = subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "bench_pools.py"), *SMALL_POOLS,
                        "--minimalloc", str(tmp_path / "nowhere")], capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "nowhere" in r.stderr


def test_bench_pools_finds_the_shared_instances_beside_the_checkout():
    shared = os.path.join(os.path.dirname(ROOT), "shared", "data", "dsa-minimalloc")
    if not os.path.exists(os.path.join(shared, "A.1048576.csv")):
        pytest.skip("no ../shared/data/dsa-minimalloc beside this checkout")
    sys.path.insert(0, os.path.join(ROOT, "scripts"))
    try:
        import bench_pools
    finally:
        sys.path.pop(0)
    assert bench_pools.minimalloc_dir(None)[0] == shared


@needs_native
def test_bench_analysis_smallest(tmp_path):
    d, _ = bench("bench_analysis.py", "--events", "3000", "--commands", "load,cache,summary,fit,plan,diff,export-folded,export-speedscope", "--cache",
                 str(tmp_path / "cache"), "--timeout", "60", cwd=tmp_path)
    t = d["traces"]["3000"]
    assert t["trace"]["events"] > 0
    assert all(c["rc"] == 0 for c in t["commands"].values()), t["commands"]
    # the cache step wrote the table cache beside the trace, and summary ran on it
    assert os.path.exists(str(tmp_path / "cache" / "simtrain-torch-3000.pit.picache" / "manifest.json"))
    assert t["commands"]["summary"]["cache"] is True and d["cache"] is True
    assert all(c["rss_anon_mb"] + c["rss_file_mb"] > 0 for c in t["commands"].values())


CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.mark.skipif(CHROMIUM is None, reason="Chromium not installed (apt-get install -y chromium)")
def test_bench_report_smallest(tmp_path):
    sample = os.path.join(ROOT, "samples", "graphs-blocks.pit")
    if not os.path.exists(sample):
        pytest.skip("samples/graphs-blocks.pit not committed")
    d, _ = bench("bench_report.py", sample, "--runs", "1", "--html", str(tmp_path / "r.html"), cwd=tmp_path)
    assert d["file_bytes"] > 0 and len(d["timelines_ms"]) == 1 and d["timelines_ms"][0] > 0


@needs_native
@pytest.mark.skipif(shutil.which("cc") is None, reason="no C compiler")
def test_bench_apply_smallest(tmp_path):
    d, _ = bench("bench_apply.py", "--steps", "3", "--layers", "2", "--iters", "5", "--k", "4", "--repeat", "1",
                 "--workloads", "simtrain-torch", cwd=tmp_path)
    w = d["workloads"]["simtrain-torch"]
    assert w["served"] == w["requests"] > 0 and w["peak_bytes_with_plan"] == w["arena_bytes"]
    for api in ("cudaMalloc", "cudaMallocAsync"):
        assert set(d["alloc_time_ns"][api]) == {"bare", "recorded", "applied"}


@needs_native
def test_bench_fit_smallest(tmp_path):
    sample = os.path.join(ROOT, "samples", "torch-cnn-blocks.pit")
    if not os.path.exists(sample):
        pytest.skip("samples/torch-cnn-blocks.pit not committed")
    d, _ = bench("bench_fit.py", sample, "--runs", "1", cwd=tmp_path)
    assert d["blocks"] > 0 and d["failures"] == 0 and d["captured_need_bytes"] >= d["lower_bound_bytes"] > 0
    assert set(d["median_s"]) == {"load", "explain", "model", "table", "tight"}


@needs_native
def test_bench_job_smallest(tmp_path):
    pytest.importorskip("distributed")
    d, _ = bench("bench_job.py", "--ranks", "2", "--events", "20000", "--cache", str(tmp_path / "cache"),
                 cwd=tmp_path, timeout=300)
    assert d["traces"] == 2 and d["same_result"] is True
    assert [r["executor"] for r in d["runs"]] == ["local", "dask"]
    assert all(sum(w["tasks"] for w in r["workers"]) == 2 and r["max_worker_rss_mb"] > 0 for r in d["runs"])


@needs_native
@pytest.mark.skipif(shutil.which("cc") is None, reason="no C compiler")
def test_bench_gpu_clock_smallest(tmp_path):
    d, _ = bench("bench_gpu_clock.py", "--rounds", "1", "--launches", "2000", "--repeats", "1", cwd=tmp_path)
    assert d["benchmark"] == "device_clock_cost_simcuda"
    assert d["trace"]["auto"]["clock"] == "cupti" and d["trace"]["off"]["clock"] == "cpu"
    assert d["trace"]["auto"]["launches_with_device_time"] == d["trace"]["auto"]["launches"] > 0
    assert set(d["within_target"]) == {"launch_added_ns", "shim_added_ns", "cpu_added_ns"}


@needs_native
def test_bench_graphs_small(tmp_path):
    d, _ = bench("bench_graphs.py", "--steps", "6", "--layers", "2", "--repeat", "1", cwd=tmp_path)
    assert d["matches_truth"] and d["replays"] == 4 and d["expand_s"] >= 0 and "ok" in d


@needs_native
@pytest.mark.slow
def test_bench_swap_run_smallest(tmp_path):
    sample = os.path.join(ROOT, "samples", "torch-cnn-blocks.pit")
    d, _ = bench("bench_swap_run.py", "--trace", sample, "--speed", "0", cwd=tmp_path, timeout=900)
    t = d["traces"]["torch-cnn-blocks.pit"]
    assert all(r["rc"] == 0 for r in t["runs"].values())
    assert t["runs"]["swap_checked"]["check_errors"] == 0 and t["runs"]["swap_checked"]["checked_words"] > 0
    assert t["runs"]["swap"]["prefetches"] > 0
    assert t["swap"]["measured_peak_bytes"] < t["runs"]["none"]["resident_peak_bytes"]
