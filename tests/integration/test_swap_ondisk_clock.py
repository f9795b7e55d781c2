"""The device clock's replay ops and host times made a piece at a time (issue 30, ``Clock.replay_ops``,
``Clock.host_times``) are their whole-array definitions, written here from the docstrings with numpy, and
a device-clock problem in files (``swap/ondisk.py``) gives the in-memory answers: simtrain on simcuda with
an H100-like device clock (several streams, ops without device times)."""
from __future__ import annotations

import importlib.util

import numpy as np
import pandas as pd
import pytest

import pyinterpose
from conftest import run_cli
from pyinterpose.analysis import clock as clock_mod
from pyinterpose.analysis import swap
from pyinterpose.analysis.swap import ondisk
from pyinterpose.trace import pages

pytestmark = [pytest.mark.slow,  # a capture
              pytest.mark.skipif(importlib.util.find_spec("pyinterpose.examples.simtrain") is None,
                                 reason="pyinterpose.examples.simtrain not in this build")]


@pytest.fixture(scope="module")
def device_path(tmp_path_factory):
    out = str(tmp_path_factory.mktemp("ondisk_clock") / "t.pit")
    cp = run_cli("run", "-q", "--simulated-gpu", "-o", out, "--", "python", "-m", "pyinterpose.examples.simtrain",
                 "--framework", "torch", "--device-time", "h100-like", "--steps", "12")
    assert cp.returncode == 0, cp.stderr
    return out


def _clock(path):
    t = pyinterpose.load(path)
    c = clock_mod.clock_of(t, t.main_pid)
    assert c.device
    return t, c


@pytest.mark.parametrize("piece", [1, 3, 1000, 1 << 20])
def test_replay_ops_in_pieces_are_their_definition(monkeypatch, device_path, piece):
    """start = the device start where the op has device times, else its host position (the frontier of
    the last op before it, or its own time); dur = end - start where timed, else 0 (float64); stream =
    each handle's rank among the distinct handles (int32)."""
    t, c = _clock(device_path)
    o = c.ops
    # every fifth op without device times (simcuda times every op): their host positions are read
    start, end = np.asarray(o.start).copy(), np.asarray(o.end).copy()
    start[::5] = end[::5] = -1
    # and three streams (simtrain launches on one): handles below and above its own
    stream = np.asarray(o.stream).copy()
    stream[1::3], stream[2::7] = 7, stream[0] + 4096
    c._ops = o = clock_mod.Ops(np.asarray(o.seq), np.asarray(o.t), start, end, stream)
    monkeypatch.setattr(clock_mod, "REPLAY_PIECE", piece)
    got = c.replay_ops()
    seq, tt, fr = np.asarray(o.seq), np.asarray(o.t), np.asarray(o.frontier)
    timed = np.asarray(o.timed)
    assert len(seq) > 300 and not timed.all() and len(np.unique(stream)) == 3
    k = np.searchsorted(seq, seq, side="left") - 1
    host = np.maximum(tt, np.where(k >= 0, fr[np.maximum(k, 0)], -1))
    handles = sorted(set(stream.tolist()))
    rank = {h: i for i, h in enumerate(handles)}
    np.testing.assert_array_equal(got["seq"], seq)
    np.testing.assert_array_equal(got["start"], np.where(timed, start, host).astype(np.float64))
    np.testing.assert_array_equal(got["dur"], np.where(timed, end - start, 0).astype(np.float64))
    np.testing.assert_array_equal(got["stream"], np.array([rank[h] for h in stream.tolist()], np.int32))
    assert got["stream"].dtype == np.int32 and got["start"].dtype == np.float64


@pytest.mark.parametrize("piece", [1, 7, 1 << 20])
def test_host_times_in_pieces_are_the_whole_ones(monkeypatch, device_path, piece):
    """The blocks' allocations on the device clock: the later of the allocation's own time and the
    frontier of the last op before it."""
    t, c = _clock(device_path)
    c.ops            # the ops made (as the swap preparation has them): host_times reads them
    monkeypatch.setattr(clock_mod, "REPLAY_PIECE", piece)
    b = t.blocks
    sq, ta = b["seq_alloc"].to_numpy(np.int64), b["t_alloc"].to_numpy(np.int64)
    got = c.host_times(sq, ta)
    seq, fr = np.asarray(c.ops.seq), np.asarray(c.ops.frontier)
    k = np.searchsorted(seq, sq, side="left") - 1
    want = np.array([max(x, int(fr[i]) if i >= 0 else -1) for x, i in zip(ta.tolist(), k.tolist())], np.int64)
    assert len(sq) > 3 * 7 and (got > ta).any()
    np.testing.assert_array_equal(got, want)


def test_a_device_clock_problem_on_disk_gives_the_in_memory_answers(monkeypatch, device_path):
    """The swap evaluation, its schedules and the sweep of the device-clock trace, its problem in files
    (the ops, the candidates, the steps) and in memory."""
    monkeypatch.setattr(swap, "LONG_CANDIDATES", -1)
    monkeypatch.setattr(ondisk, "MIN_BYTES", 0)
    got = {}
    for on in (False, True):
        monkeypatch.setattr(ondisk, "ON_DISK_CANDIDATES", -1 if on else 1 << 40)
        tr = pyinterpose.load(device_path)
        p = swap.problem_for(tr, bandwidth=16.0)
        assert ondisk.is_on_disk(p) == on
        assert (pages._file_map(np.asarray(p.ops["start"])) is not None) == on
        ev = swap.analyse(tr, problem=p)
        got[on] = (ev.as_dict(), ev.schedule_table(), swap.pareto(tr, problem=p))
    assert got[True][0] == got[False][0] and got[True][2] == got[False][2]
    assert got[True][0]["clock"] != "cpu" and got[True][0]["candidates"] > 0
    pd.testing.assert_frame_equal(got[True][1], got[False][1])
