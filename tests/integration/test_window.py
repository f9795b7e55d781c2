"""Capture windows, the flight recorder and the whole run's growth, on simcuda, against the workload's own
truth (pyinterpose.examples.simleak: a slow leak and a late OOM; ``simtrain --leak``)."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

import pyinterpose
from pyinterpose.analysis.summary import summarize

LEAK = [sys.executable, "-m", "pyinterpose.examples.simtrain", "--leak"]


def _run(tmp_path, name, run_args, prog_args, check_status=0):
    out = str(tmp_path / f"{name}.pit")
    truth = str(tmp_path / f"{name}.json")
    cmd = [sys.executable, "-m", "pyinterpose", "run", "-f", "-o", out, "--simulated-gpu", *run_args,
           "--", *LEAK, *prog_args, "--truth", truth]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert p.returncode == check_status, p.stderr
    with open(truth) as f:
        return out, json.load(f), p.stderr


def _live_at_failure(trace) -> list[tuple[int, int]]:
    """(address, size) of every device block live when the first allocation failed, from the trace."""
    f = trace.failures.iloc[0]
    b = trace.blocks
    b = b[(b["pid"] == f["pid"]) & b["counts_device"].to_numpy(bool)]
    live = (b["seq_alloc"] < f["seq"]) & (~b["freed"] | (b["seq_free"] > f["seq"]))
    return sorted(zip(b.loc[live, "address"].astype("int64").tolist(), b.loc[live, "size"].astype("int64").tolist()))


def _class_bytes(entry) -> dict:
    return {r["class"]: r["bytes"] for r in entry["by_lifetime_class"]} if isinstance(
        entry["by_lifetime_class"], list) else entry["by_lifetime_class"]


@pytest.mark.parametrize("steps", [pytest.param(600, id="600"), pytest.param(3000, id="3000", marks=pytest.mark.slow)])
def test_flight_recorder_explains_the_oom_as_a_full_capture(tmp_path, steps):
    oom = steps - 100
    fr, truth_fr, err = _run(tmp_path, "fr", ["--flight-recorder", "20"], ["--steps", str(steps), "--oom-step", str(oom)],
                             check_status=1)
    full, truth_full, _ = _run(tmp_path, "full", [], ["--steps", str(steps), "--oom-step", str(oom)], check_status=1)
    assert f"flight recorder dumped to {fr[:-4]}-dump1.pit" in err        # the dump at the OOM, named
    t_fr, t_full = pyinterpose.load(fr), pyinterpose.load(full)
    # the live set at the failure, byte for byte, against the program's own list (addresses of its run)
    want_fr = sorted((a, n) for a, n in truth_fr["oom"]["live"])
    assert _live_at_failure(t_fr) == want_fr
    assert _live_at_failure(t_full) == sorted((a, n) for a, n in truth_full["oom"]["live"])
    # and the explanations agree (addresses differ between two runs; everything else is the same)
    e_fr = summarize(t_fr)["oom"][0]
    e_full = summarize(t_full)["oom"][0]
    for k in ("live_bytes", "live_blocks", "requested_bytes", "shortfall_bytes", "by_call_site", "outcome"):
        assert e_fr[k] == e_full[k], k
    assert e_fr["live_bytes"] == truth_fr["oom"]["live_bytes"]
    # "since step S began": S is the run's step in both (the recorder's trace starts at step oom - 19)
    assert e_fr["since_last_boundary"]["step"] == e_full["since_last_boundary"]["step"] == oom
    assert _class_bytes(e_fr) == _class_bytes(e_full)
    assert _class_bytes(e_fr)["leak"] == truth_fr["leaked_blocks"] * truth_fr["leak_bytes"]
    # the recorder kept 20 steps, the full capture all of them
    assert len(t_fr.markers) == 20
    assert len(t_full.markers) == oom + 1
    # the dump at the OOM holds the same explanation
    t_dump = pyinterpose.load(fr[:-4] + "-dump1.pit")
    assert _live_at_failure(t_dump) == want_fr


def test_growth_names_the_leak_and_its_rate(tmp_path):
    fr, truth, _ = _run(tmp_path, "g", ["--flight-recorder", "5"], ["--steps", "2000"])
    s = summarize(pyinterpose.load(fr))
    g = s["growth"]
    assert g["bytes_per_step"] == pytest.approx(truth["leak_per_step"], rel=0.02)
    (leak,) = g["leaks"]
    assert leak["call_site"].endswith(f"in {truth['leak_function']}")
    assert leak["grew_bytes"] == (truth["leaked_blocks"] - 1) * truth["leak_bytes"]   # since the first row's end
    assert leak["bytes_per_step"] == pytest.approx(truth["leak_per_step"], rel=0.02)
    w = s["window"]
    assert w["steps_in_run"] == truth["steps"]
    assert (w["first_step"], w["last_step"]) == (truth["steps"] - 5, truth["steps"] - 1)
    # at the window's start: weights + the leak so far (activations are freed within each step)
    leaked_before = len([k for k in range(truth["steps"] - 5) if k % truth["leak_every"] == truth["leak_every"] - 1])
    assert w["live_bytes_at_start"] == truth["weights_bytes"] + leaked_before * truth["leak_bytes"]
    p = g["processes"][0]
    assert p["peak_bytes"] == truth["peak_live_bytes"]


@pytest.mark.parametrize("how", ["cudaProfilerApi", "markers", "steps"])
def test_window_peak_and_snapshot_equal_the_truth(tmp_path, how):
    run_args = ["--steps", "400:700"] if how == "steps" else ["--capture-range", how]
    prog = ["--steps", "1000"] + ([] if how == "steps" else
                                 ["--window", "400:700", "--window-api", "profiler" if how == "cudaProfilerApi" else "markers"])
    out, truth, _ = _run(tmp_path, how, run_args, prog)
    t = pyinterpose.load(out)
    s = summarize(t)
    if how == "steps":   # the program opens no window itself: the truth of its loop at those steps
        full_peak = None
    else:
        assert s["peak_live_bytes"] == truth["window"]["peak"]
        full_peak = truth["window"]["peak"]
    w = s["window"]
    assert (w["first_step"], w["last_step"], w["steps_in_run"]) == (400, 699, 1000)
    assert w["live_bytes_at_start"] == truth["weights_bytes"] + 4 * truth["leak_bytes"]   # leaks at 99..399
    assert len(t.markers) == 300       # markers inside the window (Start/Stop come right after a marker)
    # blocks of the snapshot keep their original allocation times (before the window's start)
    w0 = t.meta["window"][0]["processes"][0]["windows"][0]["start_ns"] - t.meta["t0_ns"]
    snap = t.blocks[t.blocks["t_alloc"] < w0]
    assert (snap["t_free"] > w0).all()   # live at the start; freed at the program's end (frees still written)
    assert snap["freed"].all() and truth["live_at_end"] > 0
    assert int(snap["size"].sum()) == w["live_bytes_at_start"]
    assert sorted(snap["size"].tolist()) == sorted([1 << 20, 4 << 20, 4 << 20] + [truth["leak_bytes"]] * 4)
    # what the shim wrote outside the window (the ring's count less the file's): per step 13 records of the
    # allocation stream (a marker, 4 x ALLOC+SITE+FREE) and the device clock's 4 memset records; every window
    # is gated in the shim too, --steps by the shim's own count of markers (no MEMSET and ACCESS records:
    # 8 more per step otherwise)
    tr = t.meta["trailer"]
    per_outside_step = (tr["events_written"] - tr["events_in_file"]) / 700
    assert per_outside_step < 21
    if how == "steps":   # the shim's gate lost nothing the drain keeps: each step as in a full capture
        full, _, _ = _run(tmp_path, "full", [], ["--steps", "1000"])
        assert _ops_per_step(t, range(400, 699), 400) == _ops_per_step(pyinterpose.load(full), range(400, 699), 0)
    # the whole run's history is there beyond the window
    g = s["growth"]["processes"][0]
    assert g["peak_bytes"] == truth["peak_live_bytes"] and g["first_step"] == 0 and g["last_step"] == 998
    if full_peak is not None:
        assert s["peak_live_bytes"] <= truth["peak_live_bytes"]


def _start(tmp_path, run_args, prog_args):
    out = str(tmp_path / "sig.pit")
    wd = tmp_path / "wait"
    wd.mkdir()
    cmd = [sys.executable, "-m", "pyinterpose", "run", "-f", "-o", out, "--simulated-gpu", *run_args,
           "--", *LEAK, *prog_args, "--wait-dir", str(wd), "--truth", str(tmp_path / "sig.json")]
    return out, wd, subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _ready(wd, step, proc, timeout=120):
    path = wd / f"ready-{step}"
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline
        time.sleep(0.02)
    return json.loads(path.read_text())


def _live_at_end(trace, pid) -> list[tuple[int, int]]:
    b = trace.blocks
    b = b[(b["pid"] == pid) & ~b["freed"] & b["counts_device"].to_numpy(bool)]
    return sorted(zip(b["address"].astype("int64").tolist(), b["size"].astype("int64").tolist()))


def test_sigusr1_dumps_while_the_program_goes_on(tmp_path):
    out, wd, proc = _start(tmp_path, ["--flight-recorder", "10"], ["--steps", "800", "--wait-steps", "500"])
    try:
        info = _ready(wd, 500, proc)
        dump = out[:-4] + "-dump1.pit"
        time.sleep(0.3)                      # the drain has the records up to the wait
        proc.send_signal(signal.SIGUSR1)
        deadline = time.monotonic() + 60
        while not os.path.exists(dump) or pyinterpose.load(dump).meta.get("trailer") is None:
            assert time.monotonic() < deadline
            time.sleep(0.05)
        (wd / "go-500").write_text("")
        _, err = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err
    assert f"flight recorder dumped to {dump} (SIGUSR1)" in err
    t = pyinterpose.load(dump)
    assert _live_at_end(t, info["pid"]) == sorted((a, n) for a, n in info["live"])
    s = summarize(t)
    assert s["window"]["last_step"] == 500 and s["window"]["first_step"] == 491
    assert s["window"]["steps_in_run"] == 501
    t_end = pyinterpose.load(out)                     # the program went on to its end
    assert summarize(t_end)["window"]["steps_in_run"] == 800


def test_kill9_of_the_program_still_writes_the_recorder(tmp_path):
    out, wd, proc = _start(tmp_path, ["--flight-recorder", "10"], ["--steps", "800", "--wait-steps", "300"])
    try:
        info = _ready(wd, 300, proc)
        time.sleep(0.3)
        os.kill(info["pid"], signal.SIGKILL)
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 128 + signal.SIGKILL, err
    t = pyinterpose.load(out)
    assert _live_at_end(t, info["pid"]) == sorted((a, n) for a, n in info["live"])
    s = summarize(t)
    assert (s["window"]["first_step"], s["window"]["last_step"], s["window"]["steps_in_run"]) == (291, 300, 301)
    assert s["growth"]["processes"][0]["last_step"] == 299


def test_sigusr2_toggles_a_signal_window(tmp_path):
    out, wd, proc = _start(tmp_path, ["--capture-range", "signal"], ["--steps", "600", "--wait-steps", "200,400"])
    try:
        info = {}
        for step in (200, 400):
            info[step] = _ready(wd, step, proc)
            proc.send_signal(signal.SIGUSR2)
            time.sleep(0.3)
            (wd / f"go-{step}").write_text("")
        _, err = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err
    t = pyinterpose.load(out)
    s = summarize(t)
    assert (s["window"]["first_step"], s["window"]["last_step"]) == (200, 399)
    assert s["window"]["live_bytes_at_start"] == info[200]["live_bytes"]
    # blocks live at the window's end, from the trace, are the program's own list there
    m = t.markers["t"].max()
    b = t.blocks[t.blocks["counts_device"].to_numpy(bool)]
    live = b[(b["t_alloc"] <= m) & (~b["freed"] | (b["t_free"] > m))]
    assert sorted(zip(live["address"].astype("int64"), live["size"].astype("int64"))) == \
        sorted((a, n) for a, n in info[400]["live"])
    # the shim is gated too (run sets the ring header's drain_window): outside the window it wrote only the
    # allocation stream and the device clock (17 records a step; a full step is 25: test_window_peak...)
    tr = t.meta["trailer"]
    assert (tr["events_written"] - tr["events_in_file"]) / 400 < 21
    # ... and inside it, every step holds what a full capture's step holds, record kind by record kind
    full, _, _ = _run(tmp_path, "full", [], ["--steps", "600"])
    # (the window opened during step 200, after its marker: the trace's first marker begins step 201)
    assert _ops_per_step(t, range(201, 400), 201) == _ops_per_step(pyinterpose.load(full), range(201, 400), 0)
    assert s["peak_live_bytes"] == _peak_in_steps(pyinterpose.load(full), 200, 400)


@pytest.mark.slow
def test_sigusr2_while_the_program_runs_gates_the_shim_without_losing_a_record(tmp_path):
    """Signals that land while the program runs (no wait at the edges): the shim's gate opens before the
    signal's time and closes after it, so every complete step inside the window holds what a full capture's
    step holds, and the blocks live at the window's end are the full capture's."""
    steps = 40000   # long enough that both signals land inside the loop on an idle machine too (4,000 steps took ~0.3 s)
    out, wd, proc = _start(tmp_path, ["--capture-range", "signal"], ["--steps", str(steps), "--wait-steps", "0"])
    try:
        _ready(wd, 0, proc)
        (wd / "go-0").write_text("")
        for _ in range(2):
            time.sleep(0.15)
            proc.send_signal(signal.SIGUSR2)
        _, err = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err
    t = pyinterpose.load(out)
    s = summarize(t)
    first, last = s["window"]["first_step"], s["window"]["last_step"]
    assert 0 < first and last < steps - 1 and last - first > 10   # both signals landed inside the run
    w = t.meta["window"][0]["processes"][0]["windows"][0]
    t0 = t.meta["t0_ns"]
    marks = np.sort(t.markers["t"].to_numpy())
    step0 = first if marks[0] == w["start_ns"] - t0 else first + 1     # opened on a marker, or inside a step
    full, _, _ = _run(tmp_path, "full", [], ["--steps", str(steps)])
    tf = pyinterpose.load(full)
    inside = range(step0, step0 + len(marks) - 1)
    assert _ops_per_step(t, inside, step0) == _ops_per_step(tf, inside, 0)
    # the shim wrote the allocation stream only outside the window (17 records a step instead of 25)
    tr, trf = t.meta["trailer"], tf.meta["trailer"]
    outside = steps - (last - first + 1)
    assert (tr["events_written"] - tr["events_in_file"]) / outside < 21
    assert trf["events_written"] - tr["events_written"] > 6 * outside


def _ops_per_step(trace, steps, step0) -> list[tuple]:
    """Per step k in ``steps`` (from the trace's markers for step k and k+1; its first marker begins step
    ``step0``): how many launches, copies and memsets (by op), block accesses and allocations it holds."""
    marks = np.sort(trace.markers["t"].to_numpy())
    out = []
    for k in steps:
        lo, hi = marks[k - step0], marks[k - step0 + 1]

        def n(df, col="t"):
            return int(((df[col] >= lo) & (df[col] < hi)).sum())
        cp = trace.copies[(trace.copies["t"] >= lo) & (trace.copies["t"] < hi)]
        out.append((k, n(trace.launches), cp["op"].value_counts().sort_index().to_dict(), n(trace.accesses),
                    n(trace.blocks, "t_alloc")))
    return out


def _peak_in_steps(trace, a, b) -> int:
    """The highest live bytes between step a's marker and step b's, replayed from the trace's blocks."""
    marks = np.sort(trace.markers["t"].to_numpy())
    lo, hi = marks[a], marks[b]
    bl = trace.blocks[trace.blocks["counts_device"].to_numpy(bool)]
    t_alloc = bl["t_alloc"].to_numpy()
    t_free = np.where(bl["freed"].to_numpy(bool), bl["t_free"].to_numpy(), np.iinfo(np.int64).max)
    size = bl["size"].to_numpy().astype(np.int64)
    times = np.unique(np.concatenate([[lo], t_alloc[(t_alloc >= lo) & (t_alloc < hi)]]))
    return int(max(size[(t_alloc <= x) & (t_free > x)].sum() for x in times))


def test_report_and_summary_show_the_whole_run(tmp_path):
    fr, truth, _ = _run(tmp_path, "r", ["--flight-recorder", "10"], ["--steps", "800"])
    html = str(tmp_path / "r.html")
    p = subprocess.run([sys.executable, "-m", "pyinterpose", "report", fr, "-o", html], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    with open(html) as f:
        text = f.read()
    whole, memory = text.index('id="whole-run"'), text.index('id="memory"')
    assert whole < memory                                    # the whole run's curve above the window's detail
    section = text[whole:memory]
    assert f"{truth['steps']}" in section and f"{truth['steps'] - 10} to {truth['steps'] - 1}" in section
    assert "in _leaky_cache" in section and "<img" in section
    p = subprocess.run([sys.executable, "-m", "pyinterpose", "summary", fr], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    assert f"steps {truth['steps'] - 10} to {truth['steps'] - 1} of {truth['steps']}" in p.stdout
    assert "LEAK simleak.py" in p.stdout


@pytest.mark.parametrize("slow", [pytest.param([], id="together"), pytest.param(["--slow-rank", "0:2"], id="rank0-slow")])
def test_each_rank_dumps_every_rank_at_its_own_oom(tmp_path, slow):
    # rank0-slow: rank 0 starts 2 s late (as under a loaded CI machine, where this once failed: the
    # dump lacked rank 0); the job's start-up barrier keeps every rank in the dump
    out, truth, err = _run(tmp_path, "rk", ["--flight-recorder", "10"],
                           ["--steps", "400", "--ranks", "3", "--oom-rank", "1", "--oom-step", "250", *slow],
                           check_status=1)
    ranks = {t["rank"]: t for t in truth["ranks"]}
    assert "oom" in ranks[1] and "oom" not in ranks[0] and "oom" not in ranks[2]
    dump = out[:-4] + "-dump1.pit"
    assert f"flight recorder dumped to {dump} (an allocation failed for lack of memory)" in err
    assert not os.path.exists(out[:-4] + "-dump2.pit")          # one OOM, one dump
    t = pyinterpose.load(dump)
    s = summarize(t)
    assert sorted(r["rank"] for r in s["per_rank"]) == [0, 1, 2]   # every rank of the job, at that moment
    (entry,) = s["oom"]
    pid1 = next(r["pid"] for r in s["per_rank"] if r["rank"] == 1)
    assert entry["pid"] == pid1
    assert _live_at_failure(t) == sorted((a, n) for a, n in ranks[1]["oom"]["live"])
    w = {p["pid"]: p for p in s["window"]["processes"]}
    assert (w[pid1]["first_step"], w[pid1]["last_step"]) == (241, 250)
    for r in s["per_rank"]:
        assert w[r["pid"]]["steps_in_run"] >= 1 and w[r["pid"]]["last_step"] - w[r["pid"]]["first_step"] <= 9
    # the final trace: every rank to its end (the failing one to its OOM)
    s_end = summarize(pyinterpose.load(out))
    steps = {p["pid"]: p["steps_in_run"] for p in s_end["window"]["processes"]}
    by_rank = {r["rank"]: steps[r["pid"]] for r in s_end["per_rank"]}
    assert by_rank == {0: 400, 1: 251, 2: 400}


DRIVER_PROFILER = r"""
import ctypes
from pyinterpose.examples._simlib import load_simcuda
cu, rt = load_simcuda()
rt.cudaFree(None)
p, q = ctypes.c_void_p(), ctypes.c_void_p()
rt.cudaMalloc(ctypes.byref(q), 3 << 20)          # before the window: in the snapshot
assert cu.cuProfilerStart() == 0                # the driver's own entry point
rt.cudaMalloc(ctypes.byref(p), 1 << 20)
assert cu.cuProfilerStop() == 0
rt.cudaMalloc(ctypes.byref(ctypes.c_void_p()), 5 << 20)   # between the windows: live when the second opens
assert rt.cudaProfilerStart() == 0 and rt.cudaProfilerStop() == 0
rt.cudaFree(p)                                  # a block the trace holds: its free is written
"""


def test_cuProfilerStart_and_cudaProfilerStart_both_open_windows(tmp_path):
    from pyinterpose.trace import records
    from pyinterpose.trace.reader import read_file

    prog = tmp_path / "prof.py"
    prog.write_text(DRIVER_PROFILER)
    out = str(tmp_path / "prof.pit")
    p = subprocess.run([sys.executable, "-m", "pyinterpose", "run", "-q", "-o", out, "--simulated-gpu",
                        "--capture-range", "cudaProfilerApi", "--", sys.executable, str(prog)],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    names = records.api_names()
    recs = np.concatenate([a for arrs in read_file(out).events.values() for a in arrs])
    w = recs[recs["op"] == records.OP.WINDOW]
    assert [(names[int(r["api"])], int(r["flags"])) for r in w] == [("cuProfilerStart", 1), ("cuProfilerStop", 2),
                                                                       ("cudaProfilerStart", 1), ("cudaProfilerStop", 2)]
    t = pyinterpose.load(out)
    # 3 MiB: the first window's snapshot; 1 MiB: inside it; 5 MiB: between the windows, in the second one's snapshot
    assert sorted(t.blocks["size"].tolist()) == [1 << 20, 3 << 20, 5 << 20]
    one = t.blocks[t.blocks["size"] == 1 << 20].iloc[0]
    assert bool(one["freed"])                   # freed after both windows: the free is there
    wins = t.meta["window"][0]["processes"][0]["windows"]
    assert [(w["snapshot_blocks"], w["snapshot_bytes"]) for w in wins] == [(1, 3 << 20), (1, 5 << 20)]
