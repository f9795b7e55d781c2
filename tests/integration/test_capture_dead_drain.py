"""Issue 24, items 12 and 14: a capture that cannot record says so, and a dead `run` neither freezes the
program for the lease nor leaves its folder behind.

Ground truth: the workload measures its own longest stall (the largest gap between two of its consecutive
cudaMalloc/cudaFree pairs, on its own clock), and the folders in its private $TMPDIR are listed directly.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from conftest import ROOT
from pyinterpose.trace.reader import read_file

pytestmark = pytest.mark.slow   # every test here captures, replays or loads whole traces (> a few s)

# A loop of cudaMalloc/cudaFree pairs on simcuda for DURATION seconds of its own clock; it writes the longest
# gap between two pairs (its stall) and how many pairs it made.
WORKLOAD = r"""
import ctypes, json, sys, time
lib = ctypes.CDLL("libcudart.so.13")
p = ctypes.c_void_p()
duration, out = float(sys.argv[1]), sys.argv[2]
start = last = time.monotonic()
gap, n = 0.0, 0
while last - start < duration:
    lib.cudaMalloc(ctypes.byref(p), ctypes.c_size_t(4096))
    lib.cudaFree(p)
    now = time.monotonic()
    gap, last, n = max(gap, now - last), now, n + 1
json.dump({"max_gap_s": gap, "pairs": n}, open(out, "w"))
"""


def _env(tmpdir, **extra):
    e = dict(os.environ)
    e["PYTHONPATH"] = ROOT + os.pathsep + e.get("PYTHONPATH", "")
    e["TMPDIR"] = str(tmpdir)
    e.pop("PYINTERPOSE_LEASE_S", None)         # the default lease (5 s): the freeze it used to cost
    e.update(extra)
    return e


def _folders(d) -> list[str]:
    return sorted(n for n in os.listdir(d) if n.startswith("pyinterpose-"))


@pytest.mark.parametrize("how", ["zombie-parent", "reaped", "grandchild-zombie-parent"])
def test_killed_run_freezes_the_program_briefly_and_leaves_no_folder(tmp_path, how):
    """SIGKILL `run` while its program is under back-pressure (a 1,024-record ring).  Before: the blocked
    producer waited out the lease and its grace (5 + 1.25 s) and the ring folder stayed in $TMPDIR.  Now
    the drain's death is seen at once: its pid is gone, or the program was re-parented, or `run` is a
    zombie; the folder is removed by the last process of the run."""
    tmpdir = tmp_path / "tmp"
    tmpdir.mkdir()
    script, result, out = tmp_path / "w.py", tmp_path / "w.json", str(tmp_path / "k.pit")
    script.write_text(WORKLOAD)
    cmd = [sys.executable, str(script), "4", str(result)]
    if how.startswith("grandchild"):
        cmd = ["sh", "-c", " ".join(cmd) + "; exit $?"]        # not exec'd: the program is run's grandchild
    p = subprocess.Popen([sys.executable, "-m", "pyinterpose", "run", "-q", "--simulated-gpu", "--ring-records",
                          "1024", "-o", out, "--", *cmd], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         env=_env(tmpdir))
    try:
        deadline = time.time() + 60
        while time.time() < deadline:
            time.sleep(0.05)
            try:
                if read_file(out).events:               # the drain attached the ring and wrote events
                    break
            except Exception:  # noqa: BLE001 - not started yet
                continue
        else:
            pytest.fail("the capture did not start")
        assert _folders(tmpdir) != []                   # the run's own folder, while it runs
        os.kill(p.pid, signal.SIGKILL)
        if how == "reaped":
            p.wait()
        deadline = time.time() + 60
        while not result.exists() and time.time() < deadline:
            time.sleep(0.1)
        assert result.exists(), "the program did not finish"
        time.sleep(0.3)                                 # its exit handlers ran
    finally:
        if p.poll() is None:
            p.kill()
        p.wait()
        for f in (p.stdout, p.stderr):
            f.close()
    r = json.loads(result.read_text())
    print(f"{how}: longest stall of the program {r['max_gap_s']:.3f} s ({r['pairs']} pairs)")
    assert r["max_gap_s"] < 3.0, r      # measured 0.01-0.05 s; was 6.2 s: the lease (5 s) and its grace
    assert _folders(tmpdir) == []


def test_next_run_removes_the_folders_of_dead_runs(tmp_path):
    """A run killed together with its program leaves its folder (nobody is left to remove it): the next run
    removes the folders of runs that are gone, and leaves those of live runs and foreign folders alone."""
    from pyinterpose.capture.run import ring_folder_prefix

    tmpdir = tmp_path / "tmp"
    tmpdir.mkdir()
    dead = subprocess.Popen(["true"])
    dead.wait()                                         # a pid that no longer exists
    stale = tmpdir / (ring_folder_prefix("aaaaaaaaaaaa", dead.pid) + "x1")
    live = tmpdir / (ring_folder_prefix("bbbbbbbbbbbb", os.getpid()) + "x2")
    foreign = tmpdir / "pyinterpose-something-else"
    for d in (stale, live, foreign):
        d.mkdir()
    (stale / "unrecorded-123").write_text("123 1 0 why\texe\n")
    cp = subprocess.run([sys.executable, "-m", "pyinterpose", "run", "-q", "--simulated-gpu", "-o",
                         str(tmp_path / "t.pit"), "--", "true"], capture_output=True, text=True,
                        env=_env(tmpdir), timeout=120)
    assert cp.returncode == 0, cp.stderr
    assert _folders(tmpdir) == sorted([live.name, foreign.name])


def _can_unshare() -> str | None:
    import shutil

    if not shutil.which("unshare"):
        return "no unshare(1) on this machine"
    cp = subprocess.run(["unshare", "-m", "--propagation", "private", "sh", "-c",
                         "mount -t tmpfs -o size=1m,ro tmpfs /mnt"], capture_output=True, text=True)
    return None if cp.returncode == 0 else f"no private mount namespace here ({cp.stderr.strip()[:100]})"


@pytest.mark.skipif(_can_unshare() is not None, reason=str(_can_unshare()))
def test_unusable_dev_shm_and_read_only_ring_dir_is_refused_before_starting(tmp_path):
    """/dev/shm read-only and --ring-dir on a read-only mount: no ring anywhere.  Before issue 33.10: the
    program ran, then `capture INCOMPLETE` and exit 3.  Now the --ring-dir is checked before the program
    starts: one line naming it, exit 2, the program never ran (no truth file), no trace."""
    ro, out, truth = tmp_path / "ro", tmp_path / "x.pit", tmp_path / "truth.json"
    ro.mkdir()
    args = [sys.executable, "-m", "pyinterpose", "run", "--simulated-gpu", "--ring-dir", str(ro), "-o", str(out),
            "--", sys.executable, "-m", "pyinterpose.examples.simtrain", "--steps", "5", "--truth", str(truth)]
    cmd = " ".join("'" + a.replace("'", "'\\''") + "'" for a in args)
    cp = subprocess.run(["unshare", "-m", "--propagation", "private", "sh", "-c",
                         f"mount -t tmpfs -o size=1m,ro tmpfs /dev/shm && mount --bind {ro} {ro} && "
                         f"mount -o remount,bind,ro {ro} && {cmd}"],
                        capture_output=True, text=True, timeout=300, env=_env(tmp_path))
    assert "Traceback" not in cp.stderr, cp.stderr
    assert cp.returncode == 2, cp.stderr
    lines = cp.stderr.strip().splitlines()
    assert len(lines) == 1 and str(ro) in lines[0] and "Read-only file system" in lines[0], cp.stderr
    assert not truth.exists() and not out.exists()
