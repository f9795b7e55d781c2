"""A long trace's swap problem in files (issue 30, ``swap/ondisk.py``): the same arrays mapped from files
give every answer of the problem held in memory, and the clock's replay ops and host times made a piece
at a time are their whole-array definitions (``tests/integration/test_swap_ondisk_clock.py``)."""
from __future__ import annotations

import os

import numpy as np
import pandas as pd
import pytest

import pyinterpose
from pyinterpose.analysis import swap
from pyinterpose.analysis.swap import ondisk
from pyinterpose.trace import pages

from test_swap import BW, _blocks, _iv, _random_problem
from test_swap_memory import _long_trace_paths

SAMPLES = os.path.join(os.path.dirname(__file__), "..", "..", "samples")


def _on_disk(monkeypatch, on: bool) -> None:
    monkeypatch.setattr(ondisk, "ON_DISK_CANDIDATES", -1 if on else 1 << 40)
    monkeypatch.setattr(ondisk, "MIN_BYTES", 0)       # the samples' arrays are small: every one in a file


def _mapped(a) -> bool:
    return pages._file_map(np.asarray(a)) is not None


def _answers(t, p):
    ev = swap.analyse(t, problem=p)
    return (ev.as_dict(), ev.schedule_table(), swap.pareto(t, problem=p), swap.candidate_table(p))


@pytest.mark.parametrize("sample", ["torch-cnn-blocks.pit", "jax-attn-blocks.pit"])
def test_a_problem_on_disk_gives_the_in_memory_answers(monkeypatch, sample):
    """evaluate (every strategy, both modes, two runs at a time), its schedules, the budget sweep and
    the candidate table of a sample's problem in files equal those of the problem in memory; the
    problem's arrays and what the runs keep are file maps, and their pages are given back."""
    monkeypatch.setattr(swap, "LONG_CANDIDATES", -1)      # the long trace's runs at any size
    _long_trace_paths(monkeypatch, True)
    got = {}
    for on in (False, True):
        _on_disk(monkeypatch, on)
        t = pyinterpose.load(os.path.join(SAMPLES, sample))
        p = swap.problem_for(t, bandwidth=16.0)
        assert ondisk.is_on_disk(p) == on
        arrays = [p.steps_t, p.live, p.lo_iv, p.hi_iv, p.ops["start"], p.ops["dur"],
                  *(p.candidates[k] for k in ("block_id", "size", "start_t", "end_t", "iteration", "prev_op",
                                              "next_op", "straddles_peak"))]
        assert all(_mapped(a) for a in arrays) == on
        got[on] = _answers(t, p)
        if on:
            kept = [v for k, v in p.memo.items() if isinstance(v, np.ndarray) and len(v)]
            assert kept and all(_mapped(a) for a in kept)
            int(np.asarray(p.live).sum())                # read again: resident until given back
            assert ondisk.release(p) > 0
    (ev_a, sched_a, par_a, cand_a), (ev_b, sched_b, par_b, cand_b) = got[False], got[True]
    assert ev_b == ev_a and par_b == par_a
    assert ev_b["candidates"] > 0
    pd.testing.assert_frame_equal(sched_b, sched_a)
    pd.testing.assert_frame_equal(cand_b, cand_a)


@pytest.mark.parametrize("seed", range(4))
def test_random_problems_on_disk_run_as_in_memory(monkeypatch, seed):
    """Every strategy's result (peak after, stall, schedule) of random problems, on disk and in memory,
    with one worker and two."""
    monkeypatch.setattr(swap, "LONG_CANDIDATES", -1)

    def results(on: bool, workers: int):
        _on_disk(monkeypatch, on)
        monkeypatch.setattr(swap, "LONG_WORKERS", workers)
        p = _random_problem(np.random.default_rng(300 + seed), n_blocks=40)
        assert ondisk.is_on_disk(p) == on and _mapped(p.candidates["start_t"]) == on
        ev = swap.analyse(None, problem=p)
        return [(r.strategy, r.mode, r.peak_after, r.stall_ns, r.schedule.to_dict("list")) for r in ev.results]

    want = results(False, 2)
    assert results(True, 2) == want
    assert results(True, 1) == want


def _wide_problem(rng, n_blocks):
    """test_swap._random_problem's blocks and intervals over 20 s instead of 1 s: thousands of steps (the
    hot steps' live bytes span whole pages)."""
    rows, iv = [], []
    for b in range(n_blocks):
        a = int(rng.integers(0, 20000))
        f = a + int(rng.integers(20, 2000))
        size = int(rng.integers(1, 8))
        rows.append((b, size, a, f))
        pts = np.sort(rng.choice(np.arange(a + 1, f), size=int(rng.integers(1, 6)), replace=False))
        iv += [(b, size, int(s), int(e)) for s, e in zip(pts[:-1], pts[1:])]
    return swap.prepare_tables(_blocks(rows), _iv(iv), BW, min_size=1)


@pytest.mark.parametrize("seed", range(2))
def test_the_scheduler_gives_back_pages_and_the_answers_stay(monkeypatch, seed):
    """A problem on disk whose hot steps span pages: the scheduler's loop is told to give back the hot
    steps' live bytes once its curve has them, and what it does not read is given back before it (issue
    30); every strategy's result equals the problem in memory's, with one worker and two.  (The replayed
    peak in pieces: test_swap_memory.test_replayed_peak_is_the_sorted_running_sum.)"""
    import sys
    from pyinterpose.analysis.swap import replay as replay_mod

    schedule_mod = sys.modules["pyinterpose.analysis.swap.schedule"]    # (swap.schedule: the function)

    monkeypatch.setattr(swap, "LONG_CANDIDATES", -1)
    monkeypatch.setattr(replay_mod, "PEAK_PIECE", 7)       # (where a replay moves events: in pieces)
    told = []
    real = schedule_mod._release_before_loop

    def spy(*a):
        told.append(real(*a))
        return told[-1]
    monkeypatch.setattr(schedule_mod, "_release_before_loop", spy)

    def results(on: bool, workers: int):
        _on_disk(monkeypatch, on)
        monkeypatch.setattr(swap, "LONG_WORKERS", workers)
        p = _wide_problem(np.random.default_rng(500 + seed), n_blocks=3000)
        assert ondisk.is_on_disk(p) == on
        ev = swap.analyse(None, problem=p)
        return [(r.strategy, r.mode, r.peak_after, r.stall_ns, r.replay.delayed_ops if r.replay else 0,
                 r.schedule.to_dict("list")) for r in ev.results]

    want = results(False, 2)
    assert told and not any(told)                   # in memory: never
    told.clear()
    assert results(True, 2) == want
    assert results(True, 1) == want
    assert any(told)
    assert any(r[1] == "budget" and r[5]["size"] for r in want)        # some runs swap


def test_a_problem_in_memory_is_never_released():
    """release() touches nothing of a problem held in memory (its arrays are not file maps)."""
    p = _random_problem(np.random.default_rng(7), n_blocks=10)
    assert not ondisk.is_on_disk(p) and ondisk.release(p) == 0


@pytest.mark.parametrize("in_alloc_order", [False, True])
@pytest.mark.parametrize("ties", [False, True])
@pytest.mark.parametrize("seed", range(5))
def test_live_steps_are_the_running_sum_after_each_instant(monkeypatch, seed, ties, in_alloc_order):
    """The step function of the blocks' live bytes (the sorted times written into the steps and the deltas
    made from the sort's order a piece at a time): one step per distinct instant, its value the sum of
    every +size at or before it minus every freed block's size at or before it (written from the
    definition with loops); the events' times and deltas in time order."""
    from pyinterpose.analysis.swap import problem as problem_mod

    monkeypatch.setattr(problem_mod, "COLUMN_PIECE", 3)
    import random

    rng = np.random.default_rng(seed)
    n = 40
    if ties:
        t_alloc = rng.integers(0, 30, n)
        t_free = t_alloc + rng.integers(1, 50, n)
    else:                 # every event at an instant of its own
        pairs = np.sort(np.array(random.Random(seed).sample(range(10 ** 9), 2 * n)).reshape(n, 2), axis=1)
        t_alloc, t_free = pairs[:, 0], pairs[:, 1]
    size = rng.integers(1, 1000, n)
    freed = rng.random(n) < 0.7
    if in_alloc_order:    # the blocks in allocation order (a trace's): the allocations need no sort
        o = np.argsort(t_alloc, kind="stable")
        t_alloc, t_free, size, freed = t_alloc[o], t_free[o], size[o], freed[o]
    blocks = pd.DataFrame({"t_alloc": t_alloc, "t_free": t_free, "size": size, "freed": freed})
    steps_t, live, ev_t, ev_d = problem_mod._live_steps(blocks, t_end=int(t_free.max()) + 5)
    events = sorted([(int(t_free[i]), -int(size[i])) for i in range(n) if freed[i]] +
                    [(int(t_alloc[i]), int(size[i])) for i in range(n)], key=lambda e: e[0])
    instants = sorted({e[0] for e in events})
    want = [sum(d for t, d in events if t <= x) for x in instants]
    assert steps_t.tolist() == instants + [max(int(t_free.max()) + 5, instants[-1])]
    assert live.tolist() == want
    assert ev_t.tolist() == [e[0] for e in events]
    d = np.diff(live, prepend=0) if ev_d is None else ev_d
    if ev_d is None:
        assert len(set(ev_t.tolist())) == len(ev_t)
    # the deltas at each instant sum to its step (their order inside an instant is free)
    got = {}
    for t, x in zip(ev_t.tolist(), np.asarray(d).tolist()):
        got[t] = got.get(t, 0) + x
    assert [got[x] for x in instants] == np.diff([0] + want).tolist()


def test_the_problem_stays_in_memory_when_asked_or_when_tmpdir_is_full(monkeypatch):
    """PYINTERPOSE_SWAP_ON_DISK=0 keeps every problem in memory; a TMPDIR that cannot take the files
    (no room for the folder, or for the file's bytes) leaves the arrays in memory, and no folder behind."""
    monkeypatch.setattr(ondisk, "ON_DISK_CANDIDATES", -1)
    assert ondisk.wanted(10)
    monkeypatch.setenv("PYINTERPOSE_SWAP_ON_DISK", "0")
    assert not ondisk.wanted(10 ** 9)
    monkeypatch.delenv("PYINTERPOSE_SWAP_ON_DISK")
    x = np.arange(1 << 18, dtype=np.int64)       # 2 MiB
    assert _mapped(ondisk.to_file(x))
    import errno
    import glob
    import tempfile

    from pyinterpose.analysis import spillfiles

    def full(*a, **k):
        raise OSError(errno.ENOSPC, "No space left on device")

    before = set(glob.glob(os.path.join(tempfile.gettempdir(), "pyinterpose-swap-*")))
    for where in ("append", "mkdtemp"):
        with monkeypatch.context() as m:
            m.setattr(spillfiles.Files, "append", full) if where == "append" else m.setattr(tempfile, "mkdtemp", full)
            y = ondisk.to_file(x)
        assert y is x and not _mapped(y)
    assert set(glob.glob(os.path.join(tempfile.gettempdir(), "pyinterpose-swap-*"))) == before   # no folder left


@pytest.mark.parametrize("seed", range(4))
def test_step_ranges_and_op_indices_made_in_pieces(monkeypatch, seed):
    """The steps inside each interval and each interval's previous and next op, made a piece of 3
    intervals at a time into int32, are numpy's whole-array searches (written here from their
    definitions: the first step at or after the start, the last step ending by the end; the last op
    at or before the start seq, the first at or after the end seq, -1 for none)."""
    from pyinterpose.analysis.swap import problem as problem_mod

    monkeypatch.setattr(problem_mod, "COLUMN_PIECE", 3)
    rng = np.random.default_rng(seed)
    steps_t = np.unique(rng.integers(0, 200, 40))
    a = rng.integers(-5, 210, 17)
    b = a + rng.integers(0, 60, 17)
    lo, hi = problem_mod._steps_inside(steps_t, a, b, np.int32)
    n = len(steps_t) - 1
    want_lo = [min(next((k for k, t in enumerate(steps_t) if t >= x), n + 1), n) for x in a]
    want_hi = [min(max(sum(1 for t in steps_t if t <= y) - 1, l), n) for y, l in zip(b, want_lo)]
    assert lo.dtype == np.int32 and hi.dtype == np.int32
    assert lo.tolist() == want_lo and hi.tolist() == want_hi

    seq = np.unique(rng.integers(0, 300, 50))
    start_seq = rng.integers(-3, 310, 23)
    end_seq = start_seq + rng.integers(0, 40, 23)
    keep = rng.random(23) < 0.6
    iv = pd.DataFrame({"start_seq": start_seq, "end_seq": end_seq})
    prev, nxt = problem_mod._ops_of_intervals({"seq": seq}, iv, keep)
    rows = np.flatnonzero(keep)
    assert prev.tolist() == [sum(1 for s in seq if s <= start_seq[r]) - 1 for r in rows]
    assert nxt.tolist() == [next((k for k, s in enumerate(seq) if s >= end_seq[r]), -1) for r in rows]


@pytest.mark.parametrize("min_size", [1, 1 << 20])
@pytest.mark.parametrize("sample", ["torch-cnn-blocks.pit", "jax-attn-blocks.pit"])
def test_between_intervals_written_to_files_as_they_are_made(sample, min_size):
    """A long trace's candidate intervals written to files a piece at a time (mapped back) are the rows of
    the access intervals table of kind "between" and at least min_size bytes, in its order."""
    from pyinterpose.analysis.access import access_intervals
    from pyinterpose.analysis.swap import problem as problem_mod

    t = pyinterpose.load(os.path.join(SAMPLES, sample))
    pid = t.main_pid
    got = problem_mod._between_intervals(t, pid, min_size, to_files=True)
    assert len(got) and all(_mapped(got[k].to_numpy()) for k in got)
    iv = access_intervals(t, pid)
    want = iv[(iv["kind"].astype(str) == "between").to_numpy() & (iv["size"].to_numpy() >= min_size)]
    for k in got:
        assert got[k].to_numpy().tolist() == want[k].to_numpy().tolist(), k
