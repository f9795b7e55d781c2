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

from test_swap import _random_problem
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


def test_a_problem_in_memory_is_never_released():
    """release() touches nothing of a problem held in memory (its arrays are not file maps)."""
    p = _random_problem(np.random.default_rng(7), n_blocks=10)
    assert not ondisk.is_on_disk(p) and ondisk.release(p) == 0
