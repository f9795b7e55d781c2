"""Trace.derived: a derived table is computed once per trace and key, and forgotten when a table of
the trace is replaced; find_iterations and the live-bytes events go through it; the merged event
order and the masked peaks equal the sorting ones."""
from __future__ import annotations

import dataclasses

import numpy as np
import pandas as pd

from pyinterpose.analysis.iterations import find_iterations
from pyinterpose.trace.model import (Trace, event_order, live_bytes_curve, live_events, peak_live_bytes,
                                     peak_live_bytes_of)


def _loop_trace(steps: int = 12) -> Trace:
    rows, seq, t = [], 1, 0
    for _ in range(steps):
        for size in (1 << 20, 3 << 20, 2 << 20):
            rows.append({"pid": 1, "size": size, "t_alloc": t, "t_free": t + 5, "seq_alloc": seq, "seq_free": seq + 1,
                         "kind": "device", "api": "cudaMalloc", "address": 0x1000 * seq, "freed": True})
            seq += 2
            t += 10
    return Trace.from_tables(blocks=pd.DataFrame(rows))


def test_computed_once_per_key():
    tr = _loop_trace()
    calls = []
    assert tr.derived(("test", 1), lambda: calls.append(1) or "a") == "a"
    assert tr.derived(("test", 1), lambda: calls.append(1) or "b") == "a"
    assert tr.derived(("test", 2), lambda: calls.append(1) or "c") == "c"
    assert len(calls) == 2


def test_threads_asking_for_one_key_compute_it_once():
    """The report builds the timeline and the pools on a side thread while its own thread
    analyses the accesses: a key both ask for is computed once, the second waits for it; a key
    that asks for another one, and forget() while another thread adds keys, work too."""
    import threading
    import time

    tr = _loop_trace()
    calls, started = [], threading.Event()

    def slow():
        calls.append(threading.current_thread().name)
        started.set()
        time.sleep(0.3)
        return tr.derived(("test", "inner"), lambda: calls.append("inner") or 7) + 1

    got = {}
    threads = [threading.Thread(target=lambda n=n: got.__setitem__(n, tr.derived(("test", "outer"), slow)), name=n)
               for n in ("a", "b", "c")]
    threads[0].start()
    started.wait(5)
    for t in threads[1:]:
        t.start()
    stop = threading.Event()

    def churn():                     # keys added and forgotten meanwhile
        k = 0
        while not stop.is_set():
            tr.derived(("churn", k), lambda: k)
            k += 1
    c = threading.Thread(target=churn)
    c.start()
    for _ in range(200):
        tr.forget("churn")
    for t in threads:
        t.join(10)
    stop.set()
    c.join(10)
    assert got == {"a": 8, "b": 8, "c": 8}
    assert calls == ["a", "inner"]             # computed once, by the first thread


def test_replacing_a_table_forgets():
    tr = _loop_trace()
    assert tr.derived(("test",), lambda: len(tr.blocks)) == 36
    tr.blocks = tr.blocks.iloc[:6].reset_index(drop=True)
    assert tr.derived(("test",), lambda: len(tr.blocks)) == 6


def test_find_iterations_is_shared():
    tr = _loop_trace()
    it = find_iterations(tr)
    assert it.count >= 10 and it.period_allocs == 3
    assert find_iterations(tr) is it
    assert find_iterations(tr, tr.main_pid) is it
    assert find_iterations(tr, min_steps=4) is not it          # other arguments, other result


def test_event_order_is_lexsort():
    rng = np.random.default_rng(7)
    for _ in range(200):
        nf, na = int(rng.integers(0, 40)), int(rng.integers(0, 40))
        t = np.concatenate([rng.integers(0, 15, nf), np.sort(rng.integers(0, 15, na))])
        d = np.concatenate([-rng.integers(0, 4, nf), rng.integers(0, 4, na)])
        o1, o2 = np.lexsort((d, t)), event_order(t, d, nf)
        assert sorted(o2.tolist()) == list(range(nf + na))
        assert (t[o1] == t[o2]).all() and (d[o1] == d[o2]).all()


def test_masked_peaks_equal_sorted_ones():
    rng = np.random.default_rng(3)
    n = 300
    ta = np.sort(rng.integers(0, 1000, n))
    tr = Trace.from_tables(blocks=pd.DataFrame({
        "pid": rng.integers(1, 4, n), "size": rng.integers(1, 1 << 20, n), "t_alloc": ta,
        "t_free": ta + rng.integers(0, 300, n), "seq_alloc": np.arange(n), "seq_free": np.arange(n) + 5,
        "kind": rng.choice(["device", "host"], n), "api": "cudaMalloc", "freed": rng.random(n) < 0.9}))
    b = tr.blocks
    t, d, _ = live_events(tr)
    ct, cl = live_bytes_curve(b)
    assert (t == ct).all() and (np.cumsum(d) == cl).all()
    assert peak_live_bytes_of(tr) == peak_live_bytes(b)
    for p in (1, 2, 3):
        m = (b["pid"] == p).to_numpy()
        assert peak_live_bytes_of(tr, m) == peak_live_bytes(b[m])


def test_a_shallow_copy_has_its_own_memo():
    import copy

    tr = _loop_trace()
    it = find_iterations(tr)
    view = copy.copy(tr)
    view.blocks = tr.blocks.iloc[:9].reset_index(drop=True)
    assert find_iterations(view) is not it
    assert find_iterations(tr) is it            # the original's memo was left alone


def test_forget_drops_one_module_only():
    tr = _loop_trace()
    calls = []
    tr.derived(("access.intervals", 1), lambda: calls.append("iv") or "iv")
    it = find_iterations(tr)
    tr.forget("access.intervals")
    assert find_iterations(tr) is it                      # another module's result is kept
    assert tr.derived(("access.intervals", 1), lambda: calls.append("iv") or "iv2") == "iv2"
    assert calls == ["iv", "iv"]                          # computed again once asked again


def test_classify_is_shared_per_iterations():
    from pyinterpose.analysis.lifetimes import classify, summary

    tr = _loop_trace()
    it = find_iterations(tr)
    c = classify(tr, it)
    assert classify(tr, it) is c and classify(tr) is c     # the report, summary and access share it
    other = find_iterations(tr, min_steps=4)
    assert other is not it and classify(tr, other) is not c
    # and it is what a fresh trace computes
    fresh = _loop_trace()
    pd.testing.assert_frame_equal(classify(fresh, find_iterations(fresh)), c)
    assert summary(tr, it) == summary(fresh, find_iterations(fresh))


def test_summary_curve_from_the_live_events_equals_the_sorted_one():
    """lifetimes.summary reads the process's peak and per-iteration peaks from the trace's live events
    in pieces: they equal those of the blocks' own sorted curve, per process, host blocks mixed in."""
    from pyinterpose.analysis.lifetimes import _peaks, classify, peak, per_iteration_peaks

    rng = np.random.default_rng(5)
    n = 400
    ta = np.sort(rng.integers(0, 5000, n))
    tr = Trace.from_tables(blocks=pd.DataFrame({
        "pid": rng.integers(1, 3, n), "size": rng.integers(1, 1 << 20, n), "t_alloc": ta,
        "t_free": ta + rng.integers(0, 900, n), "seq_alloc": np.arange(n) * 2, "seq_free": np.arange(n) * 2 + 7,
        "kind": rng.choice(["device", "host"], n, p=[0.8, 0.2]), "api": "cudaMalloc",
        "freed": rng.random(n) < 0.9}))
    for pid in (1, 2):
        # four iterations, one of them empty
        it = dataclasses.replace(find_iterations(tr, pid), count=4, boundaries=np.array([0, 200, 200, 500, 790]),
                                 boundaries_t=np.array([0, 1200, 1200, 3000, 4700]))
        c = classify(tr, it, pid)
        pk, per_it = _peaks(tr, c, it, 10)
        curve = live_bytes_curve(c)
        assert pk == peak(c, top=10, curve=curve)
        assert per_it.tolist() == per_iteration_peaks(None, it.boundaries_t, curve=curve).tolist()


def test_forget_on_another_thread_between_store_and_return():
    """A forget() on another thread right after a value is stored (the report's side thread
    forgets the access intervals while the swap thread asks for them) must not turn into a
    KeyError: derived() returns the value it computed, not memo[key] read again.  The memo below
    hands control to a real forgetting thread at that exact moment, so the race is not left to
    chance."""
    import threading

    tr = _loop_trace()
    forgotten = threading.Event()

    class HandsOverAfterStore(dict):
        def __setitem__(self, k, v):
            super().__setitem__(k, v)
            if k == ("racy", 1):
                t = threading.Thread(target=lambda: (tr.forget("racy"), forgotten.set()))
                t.start()
                t.join(5)

    tr.derived(("warm", 0), lambda: 0)                 # owner and tables keys in place
    memo = HandsOverAfterStore(tr._derived)
    tr._derived = memo
    assert tr.derived(("racy", 1), lambda: "value") == "value"
    assert forgotten.is_set() and ("racy", 1) not in memo
    assert tr.derived(("racy", 1), lambda: "again") == "again"   # forgotten: computed again
