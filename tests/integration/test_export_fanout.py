"""Issue 30: the csv export of one trace fanned out per iteration range (report.csv_ranges) on the local
pool and on a Dask cluster gives the very bytes of the serial export, which is pandas' ``to_csv`` of the
blocks table; and ``fanout.row_ranges`` cuts the blocks' rows into gapless ranges at iteration starts."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import types

import numpy as np
import pytest

from tests.conftest import ROOT, log_fanned_tasks

SAMPLES = ["torch-cnn-blocks.pit", "jax-attn-blocks.pit", "loader-blocks.pit", "graphs-blocks.pit",
           "torch-cnn-reserved.pit"]


@pytest.fixture(scope="module")
def cached(tmp_path_factory):
    """The samples copied with their columnar caches written beside them (what the workers read)."""
    from pyinterpose.trace import reader

    d = tmp_path_factory.mktemp("fanexport")
    mp = pytest.MonkeyPatch()
    mp.setenv("PYINTERPOSE_CACHE_MIN_BYTES", "0")
    out = {}
    for name in SAMPLES:
        path = str(d / name)
        shutil.copy(os.path.join(ROOT, "samples", name), path)
        reader.load(path)
        out[name] = path
    mp.undo()
    return out


def _read(p):
    with open(p, "rb") as f:
        return f.read()


def _serial(trace, out):
    from pyinterpose.analysis import guarded
    from pyinterpose.report import exports

    exports.export(trace, "csv", out)
    classes = guarded.block_classes(trace, iters=guarded.iterations(trace).value).value
    # the serial export is pandas' text of the blocks table (independent of the fast writer)
    assert _read(out) == exports.blocks_table(trace, classes).to_csv(index=False).encode()
    return _read(out)


@pytest.mark.parametrize("name", SAMPLES)
def test_csv_fanned_out_on_the_pool_is_the_serial_csv(name, cached, tmp_path, monkeypatch):
    from pyinterpose.analysis import fanout
    from pyinterpose.report import exports
    from pyinterpose.trace import reader

    monkeypatch.setenv("PYINTERPOSE_CACHE_MIN_BYTES", "0")
    trace = reader.load(cached[name])
    serial = _serial(trace, str(tmp_path / "serial.csv"))
    seen = []
    real = fanout.fan_map
    monkeypatch.setattr(fanout, "fan_map", lambda fn, items: seen.append([it[3:5] for it in items]) or real(fn, items))
    with fanout.using(None, 3):                     # below PYINTERPOSE_FANOUT_MIN_BLOCKS: serial, no task
        exports.export(trace, "csv", str(tmp_path / "small.csv"))
    assert seen == [] and _read(tmp_path / "small.csv") == serial
    monkeypatch.setenv("PYINTERPOSE_FANOUT_MIN_BLOCKS", "0")
    for workers in (2, 3):
        out = str(tmp_path / f"fan{workers}.csv")
        with fanout.using(None, workers):
            exports.export(trace, "csv", out)
        assert len(seen[-1]) >= 2, "the export did not fan out"
        assert _read(out) == serial
    assert sorted(os.listdir(tmp_path)) == ["fan2.csv", "fan3.csv", "serial.csv", "small.csv"]   # no part left


def test_csv_fanned_out_on_dask_is_the_serial_csv(cached, tmp_path, monkeypatch):
    distributed = pytest.importorskip("distributed")
    from pyinterpose.analysis import fanout
    from pyinterpose.report import csv_ranges, exports
    from pyinterpose.trace import reader

    monkeypatch.setenv("PYINTERPOSE_CACHE_MIN_BYTES", "0")
    monkeypatch.setenv("PYINTERPOSE_FANOUT_MIN_BLOCKS", "0")
    log = str(tmp_path / "tasks")
    real = csv_ranges.csv_range_task
    log_fanned_tasks(monkeypatch, csv_ranges, "csv_range_task", log, (3, 4))
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=False, protocol="tcp",
                                  host="127.0.0.1", dashboard_address=None) as cluster:
        for name in ("torch-cnn-blocks.pit", "jax-attn-blocks.pit"):
            trace = reader.load(cached[name])
            serial = _serial(trace, str(tmp_path / "serial.csv"))
            if os.path.exists(log):
                os.unlink(log)
            with fanout.using(cluster.scheduler_address, None):
                exports.export(trace, "csv", str(tmp_path / "dask.csv"))
            assert _read(tmp_path / "dask.csv") == serial
            ranges = sorted(tuple(map(int, x.split())) for x in open(log).read().splitlines())
            assert len(ranges) >= 2 and ranges[0][0] == 0 and ranges[-1][1] == len(trace.blocks)
            assert all(a[1] == b[0] for a, b in zip(ranges, ranges[1:]))
            assert os.stat(tmp_path / "dask.csv").st_mode == os.stat(tmp_path / "serial.csv").st_mode

        def failing(item, real=real):
            if item[3] > 0:
                raise OSError(28, "No space left on device")
            return real(item)
        monkeypatch.setattr(csv_ranges, "csv_range_task", failing)
        before = sorted(os.listdir(tmp_path))
        with fanout.using(cluster.scheduler_address, None), pytest.raises(OSError):
            exports.export(trace, "csv", str(tmp_path / "failed.csv"))
        assert sorted(os.listdir(tmp_path)) == before          # no output, no part left


def test_export_cli_workers_gives_the_serial_file(cached, tmp_path):
    path = cached["torch-cnn-blocks.pit"]
    env = dict(os.environ, PYTHONPATH=ROOT, PYINTERPOSE_CACHE_MIN_BYTES="0")
    outs = {}
    for label, extra, more in (("serial", [], {}), ("fan", ["--workers", "2"], {"PYINTERPOSE_FANOUT_MIN_BLOCKS": "0"})):
        out = str(tmp_path / f"{label}.csv")
        r = subprocess.run([sys.executable, "-m", "pyinterpose", "export", path, "--format", "csv", "-o", out,
                            *extra], capture_output=True, text=True, env={**env, **more}, timeout=300, cwd=ROOT)
        assert r.returncode == 0, r.stderr[-2000:]
        outs[label] = _read(out)
    assert outs["fan"] == outs["serial"] and outs["serial"].count(b"\n") == 6844 + 1


def test_row_ranges_cover_the_rows_and_cut_at_iteration_starts(cached):
    from pyinterpose.analysis import fanout
    from pyinterpose.analysis.iterations import find_iterations
    from pyinterpose.trace import reader

    trace = reader.load(cached["torch-cnn-blocks.pit"])
    nb = len(trace.blocks)
    it = find_iterations(trace)
    assert it.count >= 19                               # the workload ran 20 steps
    seq = trace.blocks["seq_alloc"].to_numpy()
    starts = set(int(r) for r in np.searchsorted(seq, it.boundaries[1:-1], side="left"))
    for n in range(1, 8):
        ranges = fanout.row_ranges(trace, n)
        assert ranges[0][0] == 0 and ranges[-1][1] == nb and 1 <= len(ranges) <= n
        assert all(lo < hi for lo, hi in ranges) and all(a[1] == b[0] for a, b in zip(ranges, ranges[1:]))
        cuts = [lo for lo, _ in ranges[1:]]
        assert set(cuts) <= starts, (n, cuts)
        if n > 1:
            assert len(ranges) >= 2
    # fewer iterations than ranges: equal cuts
    few = types.SimpleNamespace(count=2, boundaries=it.boundaries[:3])
    assert fanout.row_ranges(trace, 4, iters=few) == [(0, round(nb / 4)), (round(nb / 4), round(nb / 2)),
                                                      (round(nb / 2), round(3 * nb / 4)), (round(3 * nb / 4), nb)]
    none = types.SimpleNamespace(count=0, boundaries=np.zeros(0, np.int64))
    assert fanout.row_ranges(trace, 3, iters=none) == [(0, round(nb / 3)), (round(nb / 3), round(2 * nb / 3)),
                                                       (round(2 * nb / 3), nb)]
    assert fanout.row_ranges(trace, 1) == [(0, nb)]


def test_exports_fan_out_from_their_own_threshold(cached, tmp_path, monkeypatch):
    """fanout.EXPORT_MIN_BLOCKS, not the analyses' MIN_BLOCKS, decides for the csv ranges (without the env)."""
    from pyinterpose.analysis import fanout
    from pyinterpose.report import exports
    from pyinterpose.trace import reader

    monkeypatch.setenv("PYINTERPOSE_CACHE_MIN_BYTES", "0")
    monkeypatch.delenv("PYINTERPOSE_FANOUT_MIN_BLOCKS", raising=False)
    trace = reader.load(cached["torch-cnn-blocks.pit"])
    nb = len(trace.blocks)
    assert nb < fanout.MIN_BLOCKS < fanout.EXPORT_MIN_BLOCKS
    seen = []
    real = fanout.fan_map
    monkeypatch.setattr(fanout, "fan_map", lambda fn, items: seen.append(len(items)) or real(fn, items))
    with fanout.using(None, 2):
        assert not fanout.fannable(trace, 2)                   # the analyses' threshold: 1 M blocks
        monkeypatch.setattr(fanout, "EXPORT_MIN_BLOCKS", nb + 1)
        exports.export(trace, "csv", str(tmp_path / "a.csv"))
        assert seen == []
        monkeypatch.setattr(fanout, "EXPORT_MIN_BLOCKS", nb)
        exports.export(trace, "csv", str(tmp_path / "b.csv"))
        assert seen == [2] and _read(tmp_path / "a.csv") == _read(tmp_path / "b.csv")
        monkeypatch.setenv("PYINTERPOSE_FANOUT_MIN_BLOCKS", str(nb + 1))     # the env overrides it
        assert not fanout.fannable(trace, 2, fanout.EXPORT_MIN_BLOCKS)
