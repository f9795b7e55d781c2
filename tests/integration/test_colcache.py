"""The memory-mapped columnar cache (pyinterpose.trace.colcache): a trace read from its cache gives the
very tables, and every command the very output, of the trace read from the file (``--no-cache``)."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest

from tests.conftest import ROOT

SAMPLES = ["graphs-blocks.pit", "jax-attn-blocks.pit", "jax-attn-reserved.pit", "loader-blocks.pit",
           "torch-cnn-blocks.pit", "torch-cnn-reserved.pit"]
COMMANDS = [["summary", "--json"], ["iterations", "--json"], ["access", "--json", "--bandwidth", "25"],
            ["pools", "--json"], ["swap", "--json", "--bandwidth", "25"]]


def _cli(args, env):
    e = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""), **env)
    r = subprocess.run([sys.executable, "-m", "pyinterpose", *args], capture_output=True, text=True, env=e,
                       timeout=600, cwd=ROOT)
    assert r.returncode == 0, r.stderr[-2000:]
    return r.stdout


def _tables_equal(a, b):
    from pyinterpose.trace import colcache

    for name in colcache.TABLES:
        x, y = getattr(a, name), getattr(b, name)
        assert list(x.columns) == list(y.columns), name
        assert [str(d) for d in x.dtypes] == [str(d) for d in y.dtypes], name
        pd.testing.assert_frame_equal(x, y, check_exact=True, obj=name)
    assert a.kernels == b.kernels and a.meta == b.meta and a.counts == b.counts and a.warnings == b.warnings


def _load_both(path, monkeypatch):
    from pyinterpose.trace import colcache, reader

    monkeypatch.setenv("PYINTERPOSE_CACHE_MIN_BYTES", "0")
    monkeypatch.setenv("PYINTERPOSE_NO_CACHE", "1")
    fresh = reader.load(path)
    assert not os.path.exists(colcache.cache_dir(path))          # --no-cache writes nothing
    monkeypatch.delenv("PYINTERPOSE_NO_CACHE")
    first = reader.load(path)                                    # reads the file, writes the cache
    assert os.path.exists(os.path.join(colcache.cache_dir(path), "manifest.json"))
    cached = colcache.read(path)
    assert cached is not None
    again = reader.load(path)
    return fresh, first, cached, again


@pytest.mark.parametrize("name", SAMPLES)
def test_cached_tables_are_the_files_tables(name, tmp_path, monkeypatch):
    from pyinterpose.trace import colcache

    path = str(tmp_path / name)
    shutil.copy(os.path.join(ROOT, "samples", name), path)
    fresh, first, cached, again = _load_both(path, monkeypatch)
    _tables_equal(fresh, first)
    _tables_equal(fresh, cached)
    _tables_equal(fresh, again)
    # the big columns are memory-mapped from the cache, copy-on-write: a change stays in this process
    size = cached.blocks["size"].to_numpy()
    maps, b = [], size
    while b is not None:
        maps += [b] if isinstance(b, np.memmap) else []
        b = getattr(b, "base", None)
    assert len(maps) == 1 and maps[0].mode == "c"            # private: a write never reaches the file
    if len(size):
        maps[0][0] += 1
        assert colcache.read(path).blocks["size"].iloc[0] == fresh.blocks["size"].iloc[0]


def test_stale_or_foreign_cache_is_not_used(tmp_path, monkeypatch):
    from pyinterpose.trace import colcache, reader

    path = str(tmp_path / "t.pit")
    shutil.copy(os.path.join(ROOT, "samples", "torch-cnn-blocks.pit"), path)
    _load_both(path, monkeypatch)
    man = os.path.join(colcache.cache_dir(path), "manifest.json")
    m = json.load(open(man))
    m["key"]["reader"] = "another reader"
    json.dump(m, open(man, "w"))
    assert colcache.read(path) is None                          # made by other code: not used
    reader.load(path)                                           # rebuilt
    assert colcache.read(path) is not None
    with open(path, "ab") as f:                                 # the trace changed (size, mtime)
        f.write(b"\0")
    assert colcache.read(path) is None
    # a cache folder that is damaged is ignored, and the trace still loads
    shutil.rmtree(colcache.cache_dir(path))
    reader.load(path)
    os.remove(os.path.join(colcache.cache_dir(path), "blocks.0.npy"))
    assert colcache.read(path) is None
    assert len(reader.load(path).blocks) > 0


def test_every_field_of_the_trace_is_stored():
    """A table or field added to Trace must be added to the cache too (else it would come back empty)."""
    import dataclasses

    from pyinterpose.trace import colcache
    from pyinterpose.trace.model import Trace

    assert {f.name for f in dataclasses.fields(Trace)} == set(colcache.TABLES) | colcache.OTHER_FIELDS
    assert {"blocks", "accesses", "launches", "gpu_activity"} <= set(colcache.TABLES)
    t = Trace.from_tables()
    assert all(isinstance(getattr(t, n), pd.DataFrame) for n in colcache.TABLES)


def test_small_traces_get_no_cache_by_default(tmp_path, monkeypatch):
    from pyinterpose.trace import colcache, reader

    monkeypatch.delenv("PYINTERPOSE_CACHE_MIN_BYTES", raising=False)
    path = str(tmp_path / "t.pit")
    shutil.copy(os.path.join(ROOT, "samples", "torch-cnn-blocks.pit"), path)
    reader.load(path)
    assert os.path.getsize(path) < colcache.MIN_BYTES and not os.path.exists(colcache.cache_dir(path))


def _results(text):
    """A command's JSON less what measures this machine rather than the trace, different from one run to the
    next: pools' ``seconds`` (how long each strategy took) and the exact planner's ``nodes`` (how far its
    time-limited search got; its answer is compared)."""
    def strip(x):
        if isinstance(x, dict):
            return {k: strip(v) for k, v in x.items() if k not in ("seconds", "nodes")}
        return [strip(v) for v in x] if isinstance(x, list) else x
    return strip(json.loads(text))


def _commands_equal(path):
    env = {"PYINTERPOSE_CACHE_MIN_BYTES": "0"}
    for cmd in COMMANDS:
        args = [cmd[0], path, *cmd[1:]]
        fresh = _cli(args + ["--no-cache"], env)
        assert not os.path.exists(path + ".picache")
        first = _cli(args, env)                                 # writes the cache
        assert os.path.exists(path + ".picache/manifest.json")
        cached = _cli(args, env)                                # reads it
        assert _results(fresh) == _results(first) == _results(cached), cmd
        shutil.rmtree(path + ".picache")


@pytest.mark.slow
@pytest.mark.parametrize("name", SAMPLES)
def test_commands_from_cache_match_the_file_samples(name, tmp_path):
    path = str(tmp_path / name)
    shutil.copy(os.path.join(ROOT, "samples", name), path)
    _commands_equal(path)


@pytest.mark.slow
@pytest.mark.parametrize("steps", [60, 4600])     # the demo's size, and about 1 M events
def test_commands_from_cache_match_the_file_simtrain(steps, tmp_path, capture):
    path, cp = capture([sys.executable, "-m", "pyinterpose.examples.simtrain", "--framework", "torch",
                        "--steps", str(steps)], timeout=600)
    assert cp.returncode == 0, cp.stderr[-2000:]
    if steps > 1000:
        events = json.loads(_cli(["summary", path, "--json", "--no-cache"], {}))["counts"]["events"]
        assert events > 1_000_000
    _commands_equal(path)


def test_no_progress_bar_off_a_terminal(tmp_path):
    path = str(tmp_path / "t.pit")
    shutil.copy(os.path.join(ROOT, "samples", "torch-cnn-blocks.pit"), path)
    e = dict(os.environ, PYTHONPATH=ROOT)
    r = subprocess.run([sys.executable, "-m", "pyinterpose", "summary", path], capture_output=True, text=True,
                       env=e, timeout=300, cwd=ROOT)
    assert r.returncode == 0 and r.stderr == "" and "reading" not in r.stdout


def test_progress_bar_reports_the_read(tmp_path, monkeypatch):
    from pyinterpose.trace import progress, reader

    seen = []

    class Bar:
        def __enter__(self):
            return lambda fraction, description=None: seen.append((fraction, description))

        def __exit__(self, *a):
            return False

    monkeypatch.setattr(progress, "bar", lambda description, enabled: Bar())
    monkeypatch.setenv("PYINTERPOSE_NO_CACHE", "1")
    path = str(tmp_path / "t.pit")
    shutil.copy(os.path.join(ROOT, "samples", "torch-cnn-blocks.pit"), path)
    reader.load(path, progress=True)
    assert seen[-1] == (1.0, "building the tables")
    fr = [f for f, _ in seen]
    assert fr == sorted(fr) and all(0 <= f <= 1 for f in fr)


@pytest.fixture(scope="module")
def ranks_trace(tmp_path_factory):
    d = tmp_path_factory.mktemp("ranks")
    path = str(d / "ranks.pit")
    e = dict(os.environ, PYTHONPATH=ROOT)
    r = subprocess.run([sys.executable, "-m", "pyinterpose", "run", "-q", "--simulated-gpu", "-o", path, "--",
                        sys.executable, "-m", "pyinterpose.examples.simtrain", "--ranks", "3", "--steps", "7",
                        "--truth", str(d / "truth.json")], capture_output=True, text=True, env=e, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    return path, json.load(open(d / "truth.json"))


def test_one_trace_fans_out_per_process_on_the_pool_and_on_dask(ranks_trace, monkeypatch):
    """summary of one 3-rank trace: per-rank iterations computed one task per process (local pool, and a
    local Dask cluster) equal the serial run's and the workload's own step count."""
    from pyinterpose.analysis import fanout
    from pyinterpose.analysis.summary import summarize
    from pyinterpose.trace import reader

    path, truth = ranks_trace
    monkeypatch.setenv("PYINTERPOSE_CACHE_MIN_BYTES", "0")
    monkeypatch.setenv("PYINTERPOSE_FANOUT_MIN_BLOCKS", "0")
    trace = reader.load(path)                          # writes the cache the workers read
    serial = summarize(trace)
    assert len(serial["per_rank"]) == 3 and [r["iterations"] for r in serial["per_rank"]] == [truth["steps"]] * 3
    calls = []
    real = fanout.iterations_task
    monkeypatch.setattr(fanout, "iterations_task", lambda item: calls.append(item) or real(item))
    with fanout.using(None, 1):                        # one worker: serial, no task
        assert summarize(trace) == serial and calls == []
    monkeypatch.setattr(fanout, "iterations_task", real)
    with fanout.using(None, 2):
        assert fanout._fannable(trace, 3)
        assert summarize(trace) == serial
    distributed = pytest.importorskip("distributed")
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=False, protocol="tcp",
                                  host="127.0.0.1", dashboard_address=None) as cluster:
        log = path + ".tasks"                          # the task is serialized to the workers: they log to a file

        def logged(item, log=log, real=real):
            with open(log, "a") as f:
                f.write(f"{item[1]}\n")
            return real(item)
        monkeypatch.setattr(fanout, "iterations_task", logged)
        with fanout.using(cluster.scheduler_address, None):
            assert summarize(trace) == serial
        assert sorted(int(x) for x in open(log).read().split()) == sorted(r["pid"] for r in serial["per_rank"])
        cp = subprocess.run([sys.executable, "-m", "pyinterpose", "summary", path, "--json", "--scheduler",
                             cluster.scheduler_address], capture_output=True, text=True, timeout=300, cwd=ROOT,
                            env=dict(os.environ, PYTHONPATH=ROOT))
        assert cp.returncode == 0, cp.stderr[-2000:]
        assert json.loads(cp.stdout)["per_rank"] == json.loads(json.dumps(serial["per_rank"]))
