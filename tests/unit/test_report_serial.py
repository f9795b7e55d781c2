"""A long run's report runs its analyses one at a time (html.SERIAL_BLOCKS): the same sections as
the threaded build, figure for figure."""
from __future__ import annotations

import pytest

from pyinterpose.report import html
from pyinterpose.report.synthetic import training_trace


@pytest.fixture(autouse=True)
def _no_cached_bandwidth(monkeypatch, tmp_path):
    monkeypatch.setenv("PYINTERPOSE_CACHE_DIR", str(tmp_path))


def _sections(rep):
    # timings (pools' seconds, the swap planner's) differ between any two runs: facts, notes and
    # figures of the sections that hold none
    keep = {"memory", "iterations", "sizes", "access", "blocks"}
    return {s.id: (s.facts, s.notes, s.figures, [(c, t.to_dict()) for c, t in s.tables], s.html)
            for s in rep.sections if s.id in keep}


def _swap_tables(rep):
    # the swap section's strategy table and facts (no wall-clock cell in them)
    s = next(x for x in rep.sections if x.id == "swap")
    return s.facts, s.notes, [(c, t.to_dict()) for c, t in s.tables], s.figures


@pytest.mark.slow
def test_serial_build_equals_threaded(monkeypatch):
    tr = training_trace(iterations=8)
    threaded = html.build(tr, bandwidth=16, time_limit=1.0)
    calls = []
    real = html._in_background
    monkeypatch.setattr(html, "_in_background", lambda fn: calls.append(fn) or real(fn))
    monkeypatch.setattr(html, "SERIAL_BLOCKS", 0)
    from pyinterpose.analysis import intervals
    rows = []
    real_rows = intervals.swap_rows
    monkeypatch.setattr(intervals, "swap_rows", lambda *a: rows.append(r := real_rows(*a)) or r)
    # its swap problem where the swap command puts a long trace's: on disk (here every problem is long)
    from pyinterpose.analysis.swap import ondisk
    monkeypatch.setattr(ondisk, "ON_DISK_CANDIDATES", 0)
    disk = []
    real_put = ondisk.put_on_disk
    monkeypatch.setattr(ondisk, "put_on_disk", lambda p: disk.append(p) or real_put(p))
    import copy
    serial = html.build(copy.copy(tr), bandwidth=16, time_limit=1.0)     # a memo of its own: analysed again
    assert calls == []                       # no worker thread
    assert len(disk) == 1                    # one problem for the evaluation and the sweep, on disk
    assert [r is not None for r in rows] == [True]   # the swap problem read the access pass's rows
    a, b = _sections(threaded), _sections(serial)
    assert set(a) == {"memory", "iterations", "sizes", "access", "blocks"}
    assert a == b
    for k in ("peak_live_bytes", "blocks", "iterations", "lifetimes", "sizes", "access"):
        assert threaded.headlines[k] == serial.headlines[k], k
    # the swap work: two threads through one task list (SwapWork) against the evaluation and then the
    # Pareto sweep, each through its own entry point: the same plans and replays
    assert serial.headlines["swap"]["best_no_overhead"]["peak_after"] > 0
    assert len(serial.headlines["swap_pareto"]) >= 2
    for k in ("swap", "swap_pareto"):
        assert threaded.headlines[k] == serial.headlines[k], k
    assert _swap_tables(threaded) == _swap_tables(serial)
    # the serial build runs the swap work last, after the sections below it: the same sections in the
    # same order, and the headlines' keys in page order all the same
    assert [x.id for x in serial.sections] == [x.id for x in threaded.sections]
    assert "swap" in [x.id for x in serial.sections]
    assert list(serial.headlines) == list(threaded.headlines)


@pytest.mark.slow
@pytest.mark.parametrize("serial", [False, True])
def test_report_makes_no_full_length_tables(monkeypatch, serial):
    """Neither build makes the whole access-intervals table nor the full-length live events (the ATI
    figure, lifetimes and flame read them in pieces); a long run's build has let go of the results only
    its sections read before the swap work (no classify table, no reserved curve kept)."""
    if serial:
        monkeypatch.setattr(html, "SERIAL_BLOCKS", 0)
    tr = training_trace(iterations=8)
    rep = html.build(tr, bandwidth=16, time_limit=1.0)
    assert {"memory", "access", "iterations", "swap"} <= {s.id for s in rep.sections}
    keys = [k for k in tr._derived if isinstance(k, tuple)]
    assert not [k for k in keys if k[0] == "access.intervals" or k == ("model", "live_events")]
    modules = {k[0] for k in keys}
    assert ("lifetimes.classify" in modules) == (not serial)


@pytest.mark.slow
def test_long_run_lets_the_heap_and_the_classify_table_go_early(monkeypatch):
    """A long run hands the heap's free pages back after the accesses (its transient arrays are the
    largest), makes the lifetimes summary right after the classes (no classify table made for it first) and
    then lets the classify table and the heap's free pages go: the timeline and the pools are made without it.  The same headlines as the
    threaded build's (which keeps the classify table to the end)."""
    tr = training_trace(iterations=8)
    threaded = html.build(tr, bandwidth=16, time_limit=1.0)
    tr = training_trace(iterations=8)
    monkeypatch.setattr(html, "SERIAL_BLOCKS", 0)
    seen = []

    def held():
        return any(isinstance(k, tuple) and k[0] == "lifetimes.classify" for k in tr._derived)

    def wrap(mod, name, label):
        real = getattr(mod, name)

        def f(*a, **k):
            seen.append((label, held()))
            return real(*a, **k)
        monkeypatch.setattr(mod, name, f)

    wrap(html, "give_back", "give_back")
    for name in ("iterations", "access", "block_classes", "lifetimes_summary", "pools"):
        wrap(html.guarded, name, name)
    wrap(html, "_timeline_payloads", "timeline")
    serial = html.build(tr, bandwidth=16, time_limit=1.0)
    order = [label for label, _ in seen]
    assert order[:7] == ["iterations", "access", "give_back", "block_classes", "lifetimes_summary",
                         "give_back", "timeline"]
    assert order.index("pools") > order.index("timeline")
    assert dict(seen)["timeline"] is False and dict(seen)["pools"] is False
    for k in ("lifetimes", "iterations", "peak_live_bytes", "access", "sizes", "swap", "swap_pareto"):
        assert threaded.headlines[k] == serial.headlines[k], k
    assert _sections(threaded) == _sections(serial)


@pytest.mark.slow
def test_shorter_run_reads_the_access_pass_rows(monkeypatch):
    """A run shorter than a long one, its access pass not fanned out: the pass writes the rows the swap
    problem reads (the problem's own pass does not run), and the page is the one the problem's own
    pass gives."""
    import contextlib
    import copy

    from pyinterpose.analysis import intervals

    tr = training_trace(iterations=8)
    assert len(tr.blocks) < html.SERIAL_BLOCKS
    rows = []
    real_rows = intervals.swap_rows
    monkeypatch.setattr(intervals, "swap_rows", lambda *a: rows.append(r := real_rows(*a)) or r)
    one = html.build(copy.copy(tr), bandwidth=16, time_limit=1.0)
    assert [r is not None for r in rows] == [True]
    monkeypatch.setattr(intervals, "for_swap", lambda *a: contextlib.nullcontext())
    rows.clear()
    own = html.build(copy.copy(tr), bandwidth=16, time_limit=1.0)
    assert [r is not None for r in rows] == [False]
    assert _sections(one) == _sections(own)
    assert _swap_tables(one) == _swap_tables(own)
    for k in ("swap", "peak_live_bytes", "access"):
        assert one.headlines[k] == own.headlines[k], k
