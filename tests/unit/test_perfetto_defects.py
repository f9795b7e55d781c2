"""Issue 24, item 10: the Perfetto export's slices do not overlap, any cap is spread over the run and said,
no time is negative, and an incomplete trace is marked in the file and on stderr.

Ground truth: the iteration boundaries given (nanoseconds), the launches table, the NVML samples given.
The overlap is checked the way a viewer computes it, in floating point: ``ts + dur`` against the next ``ts``.
"""
from __future__ import annotations

import json
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

import pyinterpose
from conftest import gpu_trace, run_cli
from pyinterpose.analysis import guarded
from pyinterpose.report import perfetto
from pyinterpose.report.synthetic import training_trace


def _slices(doc):
    return sorted((e for e in doc["traceEvents"] if e["ph"] == "X"), key=lambda e: e["ts"])


def _overlaps(sl) -> int:
    return sum(1 for a, b in zip(sl, sl[1:]) if a["ts"] + a["dur"] > b["ts"])


def test_back_to_back_iterations_never_overlap_by_rounding():
    """Boundaries at arbitrary nanoseconds far from 0 (a run minutes long): before, ts = b/1000 and
    dur = (b' - b)/1000 as decimals made ts + dur > next ts for a share of them (a staircase)."""
    rng = np.random.default_rng(5)
    bt = np.cumsum(rng.integers(1_000_000, 50_000_000, 2000)) + 123_456_789_012
    it = SimpleNamespace(count=len(bt) - 1, boundaries_t=bt, pid=100)
    tr = training_trace(iterations=3)
    for doc in (perfetto.chrome_trace(tr, iterations=it),
                json.loads(perfetto.chrome_trace_json(tr, iterations=it)[0])):
        sl = _slices(doc)
        assert len(sl) == len(bt) - 1
        assert _overlaps(sl) == 0
        assert all(a["ts"] + a["dur"] == b["ts"] for a, b in zip(sl, sl[1:]))      # back to back, exactly
        assert all(isinstance(s["ts"], int) and isinstance(s["dur"], int) for s in sl)
        # each slice is within a microsecond of its boundaries
        assert all(abs(s["ts"] * 1000 - int(b)) < 1000 for s, b in zip(sl, bt))
        assert perfetto.validate(doc) == []


def test_validate_finds_overlapping_slices_and_negative_times():
    """The oracle used below: a staircase and a time before the start are errors."""
    doc = {"traceEvents": [
        {"name": "a", "ph": "X", "pid": 1, "tid": 0, "ts": 0.1, "dur": 0.2},
        {"name": "b", "ph": "X", "pid": 1, "tid": 0, "ts": 0.3, "dur": 1},
        {"name": "c", "ph": "X", "pid": 1, "tid": 0, "ts": 0.35, "dur": 0.1},      # nested in b: fine
        {"name": "m", "ph": "C", "pid": 1, "ts": -0.5, "args": {"x": 1}}]}
    errs = perfetto.validate(doc)
    assert len(errs) == 2, errs
    assert any("event 1: X slice overlaps" in e for e in errs)          # 0.1 + 0.2 > 0.3 as floats
    assert any("event 3: ts -0.5 is before the start" in e for e in errs)


def test_real_trace_iterations_do_not_overlap():
    tr = pyinterpose.load(gpu_trace("torch-cnn-blocks.pit"))
    it = guarded.iterations(tr).value
    doc = json.loads(perfetto.chrome_trace_json(tr, iterations=it)[0])
    sl = _slices(doc)
    assert len(sl) == it.count and _overlaps(sl) == 0      # was 4 of 19
    assert perfetto.validate(doc) == []


def test_kernel_cap_spreads_over_the_run_and_says_so():
    tr = training_trace(iterations=8)
    la = tr.launches.sort_values("t")
    n, cap = len(la), 20
    assert n > 4 * cap
    notes: list[str] = []
    doc = perfetto.chrome_trace(tr, max_kernels=cap, notes=notes)
    ts = sorted(e["ts"] for e in doc["traceEvents"] if e.get("cat") == "kernel")
    assert len(ts) == cap
    t0, t1 = la["t"].iloc[0] / 1000, la["t"].iloc[-1] / 1000
    assert ts[0] == t0 and ts[-1] == t1                       # the first and the last launch of the run
    gaps = np.diff(ts)
    assert gaps.max() < 3 * (t1 - t0) / cap                   # spread, not the first 25
    assert any(f"{cap} of {n:,}" in s for s in notes)
    assert doc["otherData"]["notes"] == notes
    text, _ = perfetto.chrome_trace_json(tr, max_kernels=cap)
    assert json.loads(text)["otherData"]["notes"] == notes


@pytest.mark.parametrize("shuffle", [False, True])
@pytest.mark.parametrize("cap", [5, 10_000])
def test_kernel_rows_are_the_stable_time_sort_taken(shuffle, cap):
    """The launches written: ``sort_values("t", kind="stable")`` (pandas' own, here the reference), all of
    them or ``cap`` spread over the run, in launch tables already in time order and in none (two
    processes' launches interleaved, with equal times)."""
    tr = training_trace(iterations=4)
    la = tr.launches.copy()
    if shuffle:
        rng = np.random.default_rng(3)
        la = la.iloc[rng.permutation(len(la))].reset_index(drop=True)
        la.loc[la.index[::7], "t"] = int(la["t"].iloc[0])            # ties
        tr.launches = la
    want = la.sort_values("t", kind="stable")
    if len(want) > cap:
        want = want.iloc[np.unique(np.linspace(0, len(want) - 1, cap).round().astype(np.int64))]
    notes: list[str] = []
    got = perfetto._kernel_rows(tr, cap, notes)
    assert list(got.columns) == [c for c in perfetto._KERNEL_COLUMNS if c in la.columns]
    for c in got.columns:
        assert got[c].tolist() == want[c].tolist(), c
    assert bool(notes) == (len(la) > cap)


def test_no_cap_no_notes():
    tr = training_trace(iterations=3)
    notes: list[str] = []
    doc = perfetto.chrome_trace(tr, notes=notes)
    assert notes == [] and "notes" not in doc["otherData"] and doc["otherData"]["complete"] is True


def test_nvml_sample_before_the_start_is_placed_at_zero():
    tr = training_trace(iterations=3)
    nv = pd.DataFrame({"t": [-9_000_000, -4_000, 5_000_000], "device": [0, 0, 0],
                       "used_bytes": [1 << 20, 2 << 20, 3 << 20]})
    tr = pyinterpose.Trace.from_tables(blocks=tr.blocks, accesses=tr.accesses, launches=tr.launches,
                                       processes=tr.processes, nvml=nv, meta=tr.meta)
    doc = json.loads(perfetto.chrome_trace_json(tr)[0])
    nvml = [(e["ts"], e["args"]["nvml_used_bytes"]) for e in doc["traceEvents"]
            if e["ph"] == "C" and "nvml_used_bytes" in e["args"]]
    assert nvml == [(0, 2 << 20), (5000.0, 3 << 20)]            # the state at the start, then the sample
    assert min(e["ts"] for e in doc["traceEvents"] if "ts" in e) >= 0
    assert perfetto.validate(doc) == []


def test_incomplete_trace_is_marked_in_the_file():
    tr = training_trace(iterations=3)
    tr.meta["complete"], tr.meta["incomplete_reason"] = False, "trace cut short at byte 1000"
    for doc in (perfetto.chrome_trace(tr), json.loads(perfetto.chrome_trace_json(tr)[0])):
        od = doc["otherData"]
        assert od["complete"] is False and od["incomplete_reason"] == "trace cut short at byte 1000"
        mark = [e for e in doc["traceEvents"] if e.get("cat") == "pyinterpose"]
        assert len(mark) == 1 and mark[0]["s"] == "g" and mark[0]["ts"] == 0
        assert mark[0]["name"].startswith("INCOMPLETE TRACE: trace cut short")
        assert perfetto.validate(doc) == []


@pytest.mark.slow
@pytest.mark.parametrize("fmt", ["perfetto", "memory-viz"])
def test_export_of_a_cut_trace_says_incomplete_on_stderr_and_in_the_file(tmp_path, fmt):
    src = gpu_trace("torch-cnn-blocks.pit")
    cut = tmp_path / "h.pit"
    cut.write_bytes(open(src, "rb").read()[:326453])
    out = tmp_path / "o"
    cp = run_cli("export", str(cut), "--format", fmt, "-o", str(out))
    assert cp.returncode == 0, cp.stderr
    lines = [ln for ln in cp.stderr.splitlines() if "marked INCOMPLETE" in ln]
    assert len(lines) == 1 and str(out) in lines[0], cp.stderr
    if fmt == "perfetto":
        od = json.loads(out.read_text())["otherData"]
        assert od["complete"] is False and "cut short" in od["incomplete_reason"]
    else:
        import pickle  # our own file, written just now (built-in types only)

        snap = pickle.loads(out.read_bytes())
        assert snap["pyinterpose"]["complete"] is False
        frames = snap["device_traces"][0][0]["frames"]
        assert frames[0]["filename"].startswith("INCOMPLETE TRACE")      # shown on every hover
