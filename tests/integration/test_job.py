"""Many traces as one job (pyinterpose.analysis.job): one trace per rank written through a `run -o`
template, analysed on the local process pool, in this process and on a local Dask cluster — the
same result every way, and each rank's figures equal to its own truth."""
from __future__ import annotations

import json
import os
import sys

import pytest

from conftest import run_cli
from pyinterpose.analysis import job

pytestmark = pytest.mark.slow   # every test here captures, replays or loads whole traces (> a few s)

SIMTRAIN = [sys.executable, "-m", "pyinterpose.examples.simtrain"]


@pytest.fixture(scope="module")
def job_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("job")
    for r in range(3):
        env = {"RANK": str(r), "WORLD_SIZE": "3", "LOCAL_RANK": "0"}
        cp = run_cli("run", "-q", "--simulated-gpu", "-o", str(d / "trace-{host}-{rank}.pit"), "--", *SIMTRAIN,
                     "--steps", "5", "--layers", str(2 + 2 * r), "--truth", str(d / f"truth-{r}.json"), env=env)
        assert cp.returncode == 0, cp.stderr
    return d


def _truths(d):
    out = {}
    for r in range(3):
        with open(d / f"truth-{r}.json") as f:
            out[r] = json.load(f)
    return out


def test_template_names_one_trace_per_rank(job_dir):
    import platform

    names = sorted(f for f in os.listdir(job_dir) if f.endswith(".pit"))
    assert names == [f"trace-{platform.node()}-{r}.pit" for r in range(3)]


def test_local_pool_and_inline_agree_and_match_the_truth(job_dir):
    paths = job.expand_paths([str(job_dir)])
    pooled = job.analyse_job(paths, max_workers=2)
    inline = job.analyse_job(paths, max_workers=1)
    assert pooled == inline
    truths = _truths(job_dir)
    assert [r["rank"] for r in pooled["per_rank"]] == [0, 1, 2]
    for r in pooled["per_rank"]:
        t = truths[r["rank"]]
        assert r["pid"] == t["pids"][0] and r["peak_live_bytes"] == t["peaks"][0]
        assert r["iterations"] == t["steps"] == 5
    peaks = sorted(t["peaks"][0] for t in truths.values())
    assert pooled["ranks"]["imbalance"] == peaks[2] / peaks[1] and pooled["ranks"]["max_rank"] == 2
    # a glob names the same job
    assert job.expand_paths([str(job_dir / "trace-*.pit")]) == paths


def test_local_dask_cluster_gives_the_same_result(job_dir):
    distributed = pytest.importorskip("distributed")
    paths = job.expand_paths([str(job_dir)])
    local = job.analyse_job(paths, max_workers=2)
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=False, protocol="tcp", host="127.0.0.1",
                                  dashboard_address=None) as cluster:
        on_dask = job.analyse_job(paths, scheduler=cluster.scheduler_address)
        # the CLI with --scheduler and with the environment variable
        cp = run_cli("summary", str(job_dir), "--json", "--scheduler", cluster.scheduler_address, timeout=120)
        assert cp.returncode == 0, cp.stderr
        cp_env = run_cli("summary", str(job_dir), "--json", env={job.SCHEDULER_ENV: cluster.scheduler_address},
                         timeout=120)
        assert cp_env.returncode == 0, cp_env.stderr
    assert on_dask == local
    assert json.loads(cp.stdout) == json.loads(cp_env.stdout) == json.loads(json.dumps(local))


def test_bad_job_inputs_are_one_line_errors(tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    for args in (["summary", str(empty), str(empty)], ["summary", str(tmp_path / "nope-*.pit"), "x"],
                 ["summary", str(tmp_path / "a.pit"), str(tmp_path / "b.pit")]):
        cp = run_cli(*args)
        assert cp.returncode != 0 and "Traceback" not in cp.stderr and cp.stderr.count("\n") == 1, cp.stderr
    cp = run_cli("summary", str(empty), "--scheduler", "tcp://127.0.0.1:9", timeout=120)
    assert cp.returncode != 0 and "Traceback" not in cp.stderr, cp.stderr


def test_report_and_compare_take_the_folder(job_dir, tmp_path):
    truths = _truths(job_dir)
    out = tmp_path / "job.html"
    cp = run_cli("report", str(job_dir), "-o", str(out), "--json", "--workers", "1")
    assert cp.returncode == 0, cp.stderr
    heads = json.loads(cp.stdout)["headlines"]
    assert [r["peak_live_bytes"] for r in heads["per_rank"]] == [truths[r]["peaks"][0] for r in range(3)]
    page = out.read_text()
    # three rank rows and the device row (all three ranks share the one simulated GPU)
    assert page.count("GPU-73696d63-7564-612d-0000-000000000001") == 4 and "imbalance" in page
    cp = run_cli("compare", str(job_dir), "--no-pools", "--no-swap", "--json")
    assert cp.returncode == 0, cp.stderr
    rows = json.loads(cp.stdout)["traces"]
    assert [t["label"] for t in rows] == sorted(f for f in os.listdir(job_dir) if f.endswith(".pit"))
    assert [t["ranks"] for t in rows] == [[0], [1], [2]]
