"""The access analysis' interval pass fanned out per range of blocks (issue 30, pyinterpose.analysis.access_fan):
on the local process pool and on a Dask cluster, with the rows in memory and spilled to files, the
analysis (and ``pyinterpose access --json``) equals the serial run's, figure for figure; the serial run is
itself checked against an independent reference (tests/unit/test_access_reference.py,
tests/integration/test_access_spill.py) and against the workload's own accesses there."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.conftest import ROOT, log_fanned_tasks, run_cli


@pytest.fixture(scope="module")
def long_trace(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("fanaccess") / "t.pit")
    r = run_cli("run", "-q", "--simulated-gpu", "-o", path, "--", sys.executable, "-m",
                "pyinterpose.examples.simtrain", "--steps", "12", env={"PYTHONPATH": ROOT})
    assert r.returncode == 0, r.stderr[-2000:]
    return path


def _setup(monkeypatch, spill: bool):
    from pyinterpose.analysis import access_spill, clock

    monkeypatch.setenv("PYINTERPOSE_CACHE_MIN_BYTES", "0")
    monkeypatch.setenv("PYINTERPOSE_FANOUT_MIN_BLOCKS", "0")
    monkeypatch.setattr(access_spill, "SPILL_ROWS", 0 if spill else 1 << 60)
    monkeypatch.setattr(clock, "SPILL_OPS", 0 if spill else 1 << 60)


def _planned(monkeypatch):
    from pyinterpose.analysis import access_fan

    plans = []
    real = access_fan.plan
    monkeypatch.setattr(access_fan, "plan", lambda *a: plans.append(p := real(*a)) or p)
    return plans


@pytest.mark.parametrize("spill", [False, True])
def test_access_pass_fanned_out_on_the_pool_equals_serial(long_trace, monkeypatch, spill):
    from pyinterpose.analysis import access, fanout
    from pyinterpose.trace import reader

    _setup(monkeypatch, spill)
    trace = reader.load(long_trace)                  # writes the cache the workers read
    plans = _planned(monkeypatch)
    serial = access.analyze(trace, bandwidth=25)
    assert plans == [None]                           # outside fanout.using: serial
    assert serial["intervals"] > 1000 and serial["iterations"]["count"] >= 10
    spilled = []
    real_init = access._StreamedIntervals.__init__

    def init(self, *a, **k):
        real_init(self, *a, **k)
        spilled.append(self.spilled)
    monkeypatch.setattr(access._StreamedIntervals, "__init__", init)
    for workers in (2, 3):
        with fanout.using(None, workers):
            fanned = access.analyze(trace, bandwidth=25)
        ranges, _ = plans[-1]
        assert 2 <= len(ranges) <= workers and ranges[0][0] == 0
        assert all(a[1] == b[0] for a, b in zip(ranges, ranges[1:]))
        assert json.dumps(fanned) == json.dumps(serial)
    assert spilled == [spill, spill]
    with fanout.using(None, 1):                      # one worker: serial
        assert access.analyze(trace, bandwidth=25) == serial and plans[-1] is None


def test_access_pass_fanned_out_on_dask_equals_serial(long_trace, monkeypatch):
    from pyinterpose.analysis import access, access_fan, fanout
    from pyinterpose.trace import reader

    distributed = pytest.importorskip("distributed")
    _setup(monkeypatch, True)
    trace = reader.load(long_trace)
    serial = access.analyze(trace, bandwidth=25)
    env = dict(os.environ, PYTHONPATH=ROOT)
    cli = [sys.executable, "-m", "pyinterpose", "access", long_trace, "--json", "--bandwidth", "25"]
    cp = subprocess.run(cli, capture_output=True, text=True, timeout=300, cwd=ROOT, env=env)
    assert cp.returncode == 0, cp.stderr[-2000:]
    serial_cli = json.loads(cp.stdout)
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=False, protocol="tcp",
                                  host="127.0.0.1", dashboard_address=None) as cluster:
        log = long_trace + ".tasks"                  # the task is serialized to the workers: they log to a file
        log_fanned_tasks(monkeypatch, access_fan, "range_task", log, (2, 3))
        with fanout.using(cluster.scheduler_address, 2):
            assert json.dumps(access.analyze(trace, bandwidth=25)) == json.dumps(serial)
        done = sorted(tuple(map(int, x.split())) for x in open(log).read().splitlines())
        assert len(done) == 2 and done[0][0] == 0 and done[0][1] == done[1][0]
        cp = subprocess.run(cli + ["--scheduler", cluster.scheduler_address], capture_output=True, text=True,
                            timeout=300, cwd=ROOT, env=dict(env, PYINTERPOSE_FANOUT_MIN_BLOCKS="0"))
        assert cp.returncode == 0, cp.stderr[-2000:]
        assert json.loads(cp.stdout) == serial_cli
    cp = subprocess.run(cli + ["--workers", "2"], capture_output=True, text=True, timeout=300, cwd=ROOT,
                        env=dict(env, PYINTERPOSE_FANOUT_MIN_BLOCKS="0"))
    assert cp.returncode == 0, cp.stderr[-2000:]
    assert json.loads(cp.stdout) == serial_cli


def test_local_pool_fans_out_only_where_it_can_pay(long_trace, monkeypatch):
    """On a local pool: not below MIN_BLOCKS blocks, nor on fewer than MIN_CORES cores unless --workers asks."""
    from pyinterpose.analysis import access_fan, fanout
    from pyinterpose.analysis.iterations import find_iterations
    from pyinterpose.trace import reader

    _setup(monkeypatch, False)
    trace = reader.load(long_trace)
    it = find_iterations(trace, None)

    def planned(workers, cores):
        monkeypatch.setattr(os, "cpu_count", lambda: cores)
        with fanout.using(None, workers):
            return access_fan.plan(trace, it.pid, it) is not None
    assert not planned(None, 2) and planned(None, access_fan.MIN_CORES) and planned(2, 2)
    assert not planned(None, 1) and not planned(1, 8)
    monkeypatch.setenv("PYINTERPOSE_FANOUT_MIN_BLOCKS", str(len(trace.blocks) + 1))
    assert not planned(2, 8) and not planned(None, 8)
    monkeypatch.delenv("PYINTERPOSE_FANOUT_MIN_BLOCKS")
    assert len(trace.blocks) < access_fan.MIN_BLOCKS and not planned(None, 8)
