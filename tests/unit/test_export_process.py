"""memory-viz exports one process: a PyTorch snapshot describes one allocator, and two
processes on one GPU can hand out the same addresses (loader-blocks.pit: a training
process and a worker, captured on an H100), which one snapshot cannot tell apart."""
import pickle

import numpy as np
import pytest

import pyinterpose
from pyinterpose.errors import PyinterposeError
from pyinterpose.report import memory_viz
from pyinterpose.report.exports import export, snapshot_process
from conftest import gpu_trace, run_cli


@pytest.fixture(scope="module")
def loader():
    return pyinterpose.load(gpu_trace("loader-blocks.pit"))


def _device_pids(tr):
    b = tr.blocks[tr.blocks["counts_device"]]
    return sorted(int(p) for p in b["pid"].unique())


def test_whole_multi_process_trace_is_not_one_snapshot(loader):
    # control: the trace really holds device memory of several processes whose addresses collide
    assert len(_device_pids(loader)) >= 2
    with pytest.raises(AssertionError):
        memory_viz.check_consistency(memory_viz.snapshot(loader))


def test_default_export_is_the_main_process_and_replays(loader, tmp_path):
    out = tmp_path / "s.pickle"
    info = export(loader, "memory-viz", str(out))
    main = loader.main_pid
    assert info["pid"] == main and info["other_processes"] == [p for p in _device_pids(loader) if p != main]
    snap = pickle.loads(out.read_bytes())           # our own file
    memory_viz.check_consistency(snap)
    # the segments are exactly the main process's allocator blocks alive at the end (the trace's own pid column)
    view, _, _ = snapshot_process(loader)
    assert (view.blocks["pid"] == main).all()
    assert len(snap["segments"]) == len(memory_viz.snapshot(view)["segments"])
    main_addr = set(loader.blocks.loc[loader.blocks["pid"] == main, "address"].astype(np.int64).tolist())
    assert {s["address"] for s in snap["segments"]} <= main_addr


def test_each_other_process_exports_on_its_own(loader, tmp_path):
    for pid in _device_pids(loader):
        out = tmp_path / f"{pid}.pickle"
        info = export(loader, "memory-viz", str(out), pid=pid)
        assert info["pid"] == pid and pid not in info["other_processes"]
        memory_viz.check_consistency(pickle.loads(out.read_bytes()))


def test_single_process_trace_is_untouched():
    tr = pyinterpose.load(gpu_trace("torch-cnn-blocks.pit"))
    view, pid, others = snapshot_process(tr)
    assert view is tr and others == [] and pid == tr.main_pid


@pytest.mark.slow
def test_unknown_pid_is_one_line_error(loader, tmp_path):
    with pytest.raises(PyinterposeError):
        snapshot_process(loader, 999_999_999)
    r = run_cli("export", gpu_trace("loader-blocks.pit"), "--format", "memory-viz", "--pid", "999999999",
                "-o", str(tmp_path / "x.pickle"))
    assert r.returncode != 0 and "Traceback" not in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and "no process 999999999" in r.stderr


@pytest.mark.slow
def test_cli_says_which_process_was_exported(tmp_path):
    r = run_cli("export", gpu_trace("loader-blocks.pit"), "--format", "memory-viz", "-o", str(tmp_path / "x.pickle"))
    assert r.returncode == 0, r.stderr
    assert "a snapshot holds one process" in r.stdout and "--pid" in r.stdout
