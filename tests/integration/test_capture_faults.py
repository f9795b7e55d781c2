"""Issue 12: the capture never harms the program and never passes a broken trace off as a good one.

Each fault is made with the real mechanism: a small tmpfs on /dev/shm (or on the trace's folder) in a
private mount namespace (``unshare -m``; skipped where the machine cannot make one), ``ulimit -f``
(RLIMIT_FSIZE), a SIGKILLed ``run`` that is left a zombie or reaped, SIGINT, a nested run.  The ground
truth is what simtrain / the C workload say they did.
"""
from __future__ import annotations

import json
import os
import resource
import shutil
import signal
import subprocess
import sys
import time

import pytest

import pyinterpose
from conftest import ROOT, gpu_trace, run_cli
from pyinterpose.trace.reader import read_file

pytestmark = pytest.mark.slow   # every test here captures, replays or loads whole traces (> a few s)

SIMTRAIN = [sys.executable, "-m", "pyinterpose.examples.simtrain"]


def _env(**extra):
    e = dict(os.environ)
    e["PYTHONPATH"] = ROOT + os.pathsep + e.get("PYTHONPATH", "")
    e.update(extra)
    return e


def _cli_cmd(*args) -> list[str]:
    return [sys.executable, "-m", "pyinterpose", *args]


def _can_unshare() -> str | None:
    if not shutil.which("unshare"):
        return "no unshare(1) on this machine"
    cp = subprocess.run(["unshare", "-m", "--propagation", "private", "sh", "-c",
                         "mount -t tmpfs -o size=1m tmpfs /mnt 2>/dev/null || mount -t tmpfs -o size=1m tmpfs /tmp"],
                        capture_output=True, text=True)
    if cp.returncode != 0:
        return f"cannot make a private mount namespace with a tmpfs here ({(cp.stderr or '').strip()[:120]})"
    return None


needs_mountns = pytest.mark.skipif(_can_unshare() is not None, reason=str(_can_unshare()))


def _in_mountns(script: str, timeout=300, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(["unshare", "-m", "--propagation", "private", "sh", "-c", script], capture_output=True,
                          text=True, timeout=timeout, env=_env(**kw))


def _session_rings(session: str) -> list[str]:
    return [n for n in os.listdir("/dev/shm") if n.startswith(f"pyinterpose-{session}-")]


def _summary(path: str) -> dict:
    cp = run_cli("summary", path, "--json")
    assert cp.returncode == 0, cp.stderr
    return json.loads(cp.stdout)


def _q(s: str) -> str:
    return "'" + s.replace("'", "'\\''") + "'"


# ---- issue 11: forked workers ------------------------------------------------------------------------
def test_workers_forked_before_any_cuda_call_are_flagged_forked(tmp_path):
    """simtrain forks its workers before its first CUDA call: the children are still fork children."""
    out, truth_path = str(tmp_path / "t.pit"), tmp_path / "truth.json"
    cp = run_cli("run", "-q", "--simulated-gpu", "-o", out, "--", *SIMTRAIN, "--steps", "5", "--workers", "2",
                 "--truth", str(truth_path))
    assert cp.returncode == 0, cp.stderr
    truth = json.loads(truth_path.read_text())
    procs = {p["pid"]: p for p in _summary(out)["per_process"]}
    parent, workers = truth["pids"][0], truth["pids"][1:]
    assert set(procs) == set(truth["pids"])
    assert procs[parent]["forked"] is False
    assert all(procs[w]["forked"] is True for w in workers)


# ---- rows 2 and 3: no room for a ring ----------------------------------------------------------------
@needs_mountns
def test_small_dev_shm_no_sigbus_every_event_recorded(tmp_path):
    """Row 2 (a container's 64 MiB /dev/shm, scaled down so the test stays short): 5 processes whose rings
    would touch ~12 MiB of a 4 MiB /dev/shm.  Before: SIGBUS.  Now: smaller, fully allocated rings, nothing
    lost, nothing left in /dev/shm."""
    out, truth = tmp_path / "x.pit", tmp_path / "truth.json"
    cmd = " ".join(_q(a) for a in _cli_cmd("run", "-q", "--simulated-gpu", "-o", str(out), "--", "sh", "-c",
                                            " ".join(SIMTRAIN) + f" --steps 400 --workers 4 --truth {truth}"))
    cp = _in_mountns(f"mount -t tmpfs -o size=4m tmpfs /dev/shm && {cmd}; rc=$?; echo left=$(ls -A /dev/shm | wc -l); "
                     "exit $rc")
    assert cp.returncode == 0, cp.stderr[-2000:]
    assert "left=0" in cp.stdout
    t = json.loads(truth.read_text())
    s = _summary(str(out))
    assert s["complete"] is True and s["lost_events"] == 0
    assert s["processes"] == 5 and s["counts"]["alloc"] == t["allocs"] and s["counts"]["launch"] == t["launches"]


@needs_mountns
def test_read_only_dev_shm_falls_back_to_a_file_backed_ring(tmp_path):
    """Row 3 (read-only /dev/shm): the ring goes to the ring directory; the trace is complete."""
    out, truth = tmp_path / "x.pit", tmp_path / "truth.json"
    cmd = " ".join(_q(a) for a in _cli_cmd("run", "-q", "--simulated-gpu", "--ring-dir", str(tmp_path), "-o",
                                            str(out), "--", *SIMTRAIN, "--steps", "30", "--truth", str(truth)))
    cp = _in_mountns(f"mount -t tmpfs -o size=1m,ro tmpfs /dev/shm && {cmd}")
    assert cp.returncode == 0, cp.stderr[-2000:]
    tr = pyinterpose.load(str(out))
    assert tr.meta["complete"], tr.meta["incomplete_reason"]
    assert [p["ring_backing"] for p in tr.meta["trailer"]["processes"]] == ["file"]
    assert tr.counts["alloc"] == json.loads(truth.read_text())["allocs"]
    assert [n for n in os.listdir(tmp_path) if n.startswith("pyinterpose-")] == []  # ring dir removed


def _limit_fsize(nbytes):
    def pre():
        resource.setrlimit(resource.RLIMIT_FSIZE, (nbytes, nbytes))
    return pre


def test_file_size_limit_gets_a_ring_that_fits(tmp_path):
    """Row 3 (ulimit -f 10000): the ring is sized under the limit; every event is recorded."""
    out, truth = str(tmp_path / "x.pit"), tmp_path / "truth.json"
    cp = subprocess.run(_cli_cmd("run", "-q", "--simulated-gpu", "-o", out, "--", *SIMTRAIN, "--steps", "100",
                                 "--truth", str(truth)),
                        capture_output=True, text=True, env=_env(), timeout=300,
                        preexec_fn=_limit_fsize(10000 * 1024))
    assert cp.returncode == 0, cp.stderr
    s = _summary(out)
    assert s["complete"] is True
    assert s["counts"]["alloc"] == json.loads(truth.read_text())["allocs"] > 0


def test_file_size_limit_too_small_for_any_ring_program_runs_and_run_says_so(tmp_path, cbuild):
    """A C program (SIGXFSZ not ignored) under ulimit -f 100 KiB: the shim cannot record it and must not kill
    it; `run` says which process was not recorded and why, exits 3 (the program exited 0)."""
    prog = cbuild("shim_workload")
    out = str(tmp_path / "x.pit")
    cp = subprocess.run(_cli_cmd("run", "--simulated-gpu", "-o", out, "--", prog, "stress", "1000", "1"),
                        capture_output=True, text=True, env=_env(), timeout=300, preexec_fn=_limit_fsize(100 * 1024))
    assert "Traceback" not in cp.stderr
    assert cp.returncode == 3, cp.stderr
    assert "program exited with 0" in cp.stderr
    lines = [l for l in cp.stderr.splitlines() if "capture INCOMPLETE" in l]
    assert len(lines) == 1 and "not recorded" in lines[0] and "file-size limit" in lines[0]
    s = _summary(out)
    assert s["complete"] is False and "not recorded" in s["incomplete_reason"]
    assert len(s["unrecorded_processes"]) == 1


# ---- rows 5 and 6: the drain dies ----------------------------------------------------------------------
@pytest.mark.parametrize("reap", [False, True], ids=["zombie-parent", "reaped"])
def test_killed_run_never_stalls_the_program_and_leaves_no_ring(tmp_path, reap):
    """SIGKILL `run` while the program is under back-pressure: with `run` a zombie (kill(pid, 0) still
    succeeds) or reaped, the program finishes on its own, and its ring is already gone from /dev/shm."""
    out = str(tmp_path / "k.pit")
    p = subprocess.Popen(_cli_cmd("run", "-q", "--simulated-gpu", "--ring-records", "1024", "-o", out, "--",
                                  *SIMTRAIN, "--steps", "20000"),
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=_env(PYINTERPOSE_LEASE_S="1"))
    try:
        session, child, recording, deadline = None, None, False, time.time() + 60
        while time.time() < deadline and not (session and child and recording):
            time.sleep(0.05)
            try:
                raw = read_file(out)
                session, recording = raw.meta["session"], bool(raw.events)  # the drain attached the ring
                kids = open(f"/proc/{p.pid}/task/{p.pid}/children").read().split()
                child = int(kids[0]) if kids else None
            except Exception:  # noqa: BLE001 - not started yet
                continue
        assert session and child and recording, "the capture did not start"
        rings_while_running = _session_rings(session)
        assert open(f"/proc/{child}/stat").read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
        os.kill(p.pid, signal.SIGKILL)
        if reap:
            p.wait()
        deadline = time.time() + 240  # the rest of the loop, unrecorded, even on a loaded machine
        state = "?"
        while time.time() < deadline:
            try:
                state = open(f"/proc/{child}/stat").read().rsplit(")", 1)[1].split()[0]
            except FileNotFoundError:
                state = "gone"
            if state in ("Z", "gone"):
                break
            time.sleep(0.2)
        assert state in ("Z", "gone"), "the program stalled after its drain died"
        assert rings_while_running == []  # unlinked as soon as both sides held the ring
        assert _session_rings(session) == []
    finally:
        if p.poll() is None:
            p.kill()
        p.wait()
        for f in (p.stdout, p.stderr):
            f.close()


# ---- row 7: the trace's disk fills -------------------------------------------------------------------
@needs_mountns
def test_trace_disk_full_program_keeps_running_exit_3_no_traceback(tmp_path):
    disk, truth = tmp_path / "full", tmp_path / "truth.json"
    disk.mkdir()
    out = disk / "x.pit"
    cmd = " ".join(_q(a) for a in _cli_cmd("run", "--simulated-gpu", "-o", str(out), "--", *SIMTRAIN,
                                            "--steps", "150", "--truth", str(truth)))
    cp = _in_mountns(f"mount -t tmpfs -o size=200k tmpfs {disk} && {cmd}; rc=$?; "
                     f"cp {out} {tmp_path}/copy.pit; exit $rc")
    assert "Traceback" not in cp.stderr, cp.stderr
    assert cp.returncode == 3, cp.stderr
    assert json.loads(truth.read_text())["allocs"] > 0  # the program ran to its end
    lines = [l for l in cp.stderr.splitlines() if "capture INCOMPLETE" in l]
    assert len(lines) == 1 and "No space left on device" in lines[0]
    session = read_file(str(tmp_path / "copy.pit")).meta["session"]
    assert _session_rings(session) == []
    s = run_cli("summary", str(tmp_path / "copy.pit"), "--json")
    assert s.returncode == 0 and "warning" in s.stderr and json.loads(s.stdout)["complete"] is False


# ---- row 8: nested run --------------------------------------------------------------------------------
def test_nested_run_records_into_the_outer_trace(tmp_path):
    outer, inner, truth = str(tmp_path / "outer.pit"), str(tmp_path / "inner.pit"), tmp_path / "truth.json"
    cp = run_cli("run", "-q", "--simulated-gpu", "-o", outer, "--", sys.executable, "-m", "pyinterpose", "run",
                 "-o", inner, "--", *SIMTRAIN, "--steps", "10", "--truth", str(truth))
    assert cp.returncode == 0, cp.stderr
    assert "already inside `pyinterpose run`" in cp.stderr
    assert not os.path.exists(inner)
    s = _summary(outer)
    assert s["complete"] is True
    assert s["counts"]["alloc"] == json.loads(truth.read_text())["allocs"] > 0


# ---- row 13: SIGINT -------------------------------------------------------------------------------------
def test_sigint_to_run_ends_the_program_promptly(tmp_path):
    out = str(tmp_path / "i.pit")
    p = subprocess.Popen(_cli_cmd("run", "-q", "--simulated-gpu", "-o", out, "--", *SIMTRAIN, "--steps", "100000",
                                  "--workers", "1"),
                         stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                         env=_env(), start_new_session=True)  # no terminal: run forwards the signal
    try:
        deadline = time.time() + 60
        while time.time() < deadline:
            time.sleep(0.2)
            try:
                if read_file(out).events:  # the loop is running and recorded
                    break
            except Exception:  # noqa: BLE001
                pass
        t0 = time.time()
        p.send_signal(signal.SIGINT)
        rc = p.wait(timeout=60)
        elapsed = time.time() - t0
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
        p.stderr.close()
    assert rc == 130
    assert elapsed < 8, f"exit took {elapsed:.1f} s"  # (before: only when the whole loop had run)


# ---- row 4: an incomplete trace is never silent -----------------------------------------------------
def _cut_trace(tmp_path) -> str:
    """A real capture rewritten as 8 event chunks, then cut inside the 6th: a trace cut short that still holds
    most of its events (as a crash or a full disk leaves it)."""
    import numpy as np

    from pyinterpose.trace.writer import TraceWriter

    out = str(tmp_path / "full.pit")
    cp = run_cli("run", "-q", "--simulated-gpu", "-o", out, "--", *SIMTRAIN, "--steps", "40")
    assert cp.returncode == 0, cp.stderr
    raw = read_file(out)
    split = str(tmp_path / "split.pit")
    w = TraceWriter(split, raw.meta)
    for p in raw.processes:
        w.process(p)
    ends = []
    for pid, parts in raw.events.items():
        for chunk in np.array_split(np.concatenate(parts), 8):
            w.events(pid, chunk)
            ends.append(os.path.getsize(split))
    w.trailer(raw.trailer)
    w.close()
    cut = tmp_path / "half.pit"
    cut.write_bytes(open(split, "rb").read()[: (ends[4] + ends[5]) // 2])
    part, full = pyinterpose.load(str(cut)), pyinterpose.load(out)
    assert 0 < part.counts["alloc"] < full.counts["alloc"]
    return str(cut)


@pytest.mark.parametrize("args", [
    ["summary", "{t}", "--json"], ["iterations", "{t}", "--json"], ["access", "{t}", "--json"],
    ["pools", "{t}", "--json", "--strategies", "cudamalloc"], ["swap", "{t}", "--json", "--bandwidth", "16"],
    ["export", "{t}", "--format", "csv", "-o", "{d}/o.csv", "--json"],
    ["report", "{t}", "-o", "{d}/r.html", "--json", "--bandwidth", "16", "--time-limit", "0.2"],
    ["compare", "{t}", "{t}", "--json", "--no-pools", "--no-swap"],
], ids=lambda a: a[0])
def test_cut_trace_every_command_warns_and_json_says_incomplete(tmp_path, args):
    cut = _cut_trace(tmp_path)
    cp = run_cli(*[a.format(t=cut, d=tmp_path) for a in args])
    assert cp.returncode == 0, cp.stderr
    assert "warning" in cp.stderr and "cut short" in cp.stderr
    d = json.loads(cp.stdout.strip().splitlines()[-1] if args[0] != "summary" else cp.stdout)
    assert d["complete"] is False and "cut short" in d["incomplete_reason"]


def test_shipped_trace_cut_in_half_iterations_says_incomplete(tmp_path):
    src = gpu_trace("torch-cnn-blocks.pit")
    cut = tmp_path / "h.pit"
    cut.write_bytes(open(src, "rb").read()[:326453])
    cp = run_cli("iterations", str(cut), "--json")
    assert cp.returncode == 0 and "warning" in cp.stderr
    assert json.loads(cp.stdout)["complete"] is False


def test_trace_still_being_written_is_not_called_a_crash(tmp_path):
    from pyinterpose.trace.writer import TraceWriter

    path = str(tmp_path / "live.pit")
    w = TraceWriter(path, {"format": "pyinterpose-trace", "t0_ns": 0})
    try:  # another process reads it while the writer holds it
        cp = run_cli("summary", path, "--json")
        assert cp.returncode == 0, cp.stderr
        d = json.loads(cp.stdout)
        assert d["complete"] is False and "still being written" in d["incomplete_reason"]
        assert "crash" not in d["incomplete_reason"]
    finally:
        w.close()
    d = _summary(path)
    assert d["complete"] is False and "did not finish" in d["incomplete_reason"]


# ---- row 9: a read-only directory (root ignores mode bits: a read-only bind mount) -----------------------
@needs_mountns
def test_plan_into_a_read_only_directory_is_one_line(tmp_path):
    src, ro = tmp_path / "in.csv", tmp_path / "ro"
    src.write_text("id,lower,upper,size\na,0,2,8\n")
    ro.mkdir()
    cmd = " ".join(_q(a) for a in _cli_cmd("plan", "--csv", str(src), "--capacity", "100", "-o", str(ro / "o.csv")))
    cp = _in_mountns(f"mount --bind {ro} {ro} && mount -o remount,bind,ro {ro} && {cmd}")
    assert cp.returncode == 2 and "Traceback" not in cp.stderr, cp.stderr
    lines = cp.stderr.strip().splitlines()
    assert len(lines) == 1 and "Read-only file system" in lines[0]


def test_trace_hits_the_file_size_limit_program_keeps_running_exit_3(tmp_path):
    """Row 7 with `ulimit -f` (no mount namespace needed): the trace stops at the limit, the program runs to its
    end, `run` exits 3 with one line and no traceback, no ring is left in /dev/shm."""
    out, truth = str(tmp_path / "x.pit"), tmp_path / "truth.json"
    cp = subprocess.run(_cli_cmd("run", "--simulated-gpu", "-o", out, "--", *SIMTRAIN, "--steps", "400",
                                 "--truth", str(truth)),
                        capture_output=True, text=True, env=_env(), timeout=300, preexec_fn=_limit_fsize(300 * 1024))
    assert "Traceback" not in cp.stderr, cp.stderr
    assert cp.returncode == 3, cp.stderr
    assert json.loads(truth.read_text())["steps"] == 400
    lines = [l for l in cp.stderr.splitlines() if "capture INCOMPLETE" in l]
    assert len(lines) == 1 and "File too large" in lines[0]
    assert _session_rings(read_file(out).meta["session"]) == []
    assert _summary(out)["complete"] is False
