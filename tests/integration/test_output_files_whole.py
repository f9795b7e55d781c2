"""Issue 24, item 13: an output file is there whole or not at all.

A full disk (made with the real mechanism, RLIMIT_FSIZE: the kernel refuses the write that would pass the
limit), an exception midway, or Ctrl-C (a real SIGINT to the command) during a write leaves no file at the
target path, no temporary file beside it, and an existing target untouched.
"""
from __future__ import annotations

import os
import resource
import signal
import subprocess
import sys
import time

import pytest

from conftest import ROOT, run_cli
from pyinterpose.outfile import atomic_output, atomic_path

pytestmark = pytest.mark.slow   # every test here captures, replays or loads whole traces (> a few s)

SIMTRAIN = [sys.executable, "-m", "pyinterpose.examples.simtrain"]


def _env():
    e = dict(os.environ)
    e["PYTHONPATH"] = ROOT + os.pathsep + e.get("PYTHONPATH", "")
    return e


# ---- the helper ------------------------------------------------------------------------------------------
def test_helper_renames_only_a_complete_file(tmp_path):
    target = tmp_path / "out.txt"
    with atomic_output(str(target)) as f:
        f.write("one\n")
        assert not target.exists()                      # nothing at the target while it is written
        assert len(os.listdir(tmp_path)) == 1 and os.listdir(tmp_path)[0].startswith("out.txt.partial-")
    assert target.read_text() == "one\n" and os.listdir(tmp_path) == ["out.txt"]
    old = os.umask(0o027)
    try:
        with atomic_output(str(tmp_path / "m.txt")) as f:
            f.write("x")
    finally:
        os.umask(old)
    assert (tmp_path / "m.txt").stat().st_mode & 0o777 == 0o640      # as open() would make it, not 0600


def test_helper_writes_through_a_symbolic_link(tmp_path):
    real, link = tmp_path / "real.txt", tmp_path / "link.txt"
    real.write_text("old")
    link.symlink_to(real)
    with atomic_output(str(link)) as f:
        f.write("new")
    assert link.is_symlink() and real.read_text() == "new" and sorted(os.listdir(tmp_path)) == ["link.txt", "real.txt"]


@pytest.mark.parametrize("exc", [OSError(28, "No space left on device"), KeyboardInterrupt()])
def test_helper_failing_midway_leaves_nothing_and_keeps_the_old_file(tmp_path, exc):
    target = tmp_path / "out.csv"
    with pytest.raises(type(exc)):
        with atomic_output(str(target), "wb") as f:
            f.write(b"a,b\n" * 1000)
            raise exc
    assert os.listdir(tmp_path) == []
    target.write_text("old\n")
    with pytest.raises(type(exc)):
        with atomic_path(str(target)) as tmp:
            with open(tmp, "w") as g:
                g.write("half")
            raise exc
    assert os.listdir(tmp_path) == ["out.csv"] and target.read_text() == "old\n"


# ---- every writer, with a real write error ----------------------------------------------------------------
@pytest.fixture(scope="module")
def trace(tmp_path_factory):
    d = tmp_path_factory.mktemp("trace")
    out = str(d / "t.pit")
    cp = run_cli("run", "-q", "--simulated-gpu", "-o", out, "--", *SIMTRAIN, "--steps", "60")
    assert cp.returncode == 0, cp.stderr
    return out


LIMIT = 8 * 1024           # bytes any single file may have (RLIMIT_FSIZE); every output below is larger

WRITERS = {
    "report": ["report", "{t}", "-o", "{o}", "--bandwidth", "16", "--time-limit", "0.2"],
    "perfetto": ["export", "{t}", "--format", "perfetto", "-o", "{o}"],
    "memory-viz": ["export", "{t}", "--format", "memory-viz", "-o", "{o}"],
    "csv": ["export", "{t}", "--format", "csv", "-o", "{o}"],
    "compare": ["compare", "{t}", "{t}", "-o", "{o}", "--no-pools", "--no-swap", "--bandwidth", "16"],
    # 100 GB/s: on simtrain's device clock no swap hides at 16 GB/s (the CSV would be its header alone)
    "swap-schedule": ["swap", "{t}", "--bandwidth", "100", "--schedule-csv", "{o}"],
}


def _limit(nbytes):
    def pre():
        resource.setrlimit(resource.RLIMIT_FSIZE, (nbytes, nbytes))
    return pre


@pytest.mark.parametrize("name", list(WRITERS))
def test_a_write_that_fails_midway_leaves_no_file(tmp_path, trace, name):
    """Before: the first LIMIT bytes stayed at the target (a report that ends mid-script, a CSV that ends
    on a clean row and loads with a fraction of the rows)."""
    full, cut = tmp_path / "full", tmp_path / "cut"
    full.mkdir()
    cut.mkdir()
    args = [a.format(t=trace, o=str(full / "out")) for a in WRITERS[name]]
    cp = run_cli(*args)
    assert cp.returncode == 0, cp.stderr
    assert os.path.getsize(full / "out") > 2 * LIMIT           # the limit falls midway
    args = [a.format(t=trace, o=str(cut / "out")) for a in WRITERS[name]]
    cp = subprocess.run([sys.executable, "-m", "pyinterpose", *args], capture_output=True, text=True,
                        env=_env(), timeout=300, preexec_fn=_limit(LIMIT))
    assert cp.returncode != 0 and "Traceback" not in cp.stderr, cp.stderr
    assert "File too large" in cp.stderr.strip().splitlines()[-1]
    assert os.listdir(cut) == []                                # neither the target nor a temporary file


# ---- Ctrl-C during an export ----------------------------------------------------------------------------
# the export runs in a child with its row formatter slowed down, so that the SIGINT surely comes while the
# file is being written (a real SIGINT, handled by the real CLI)
SLOW = r"""
import sys, time
import pyinterpose.report.csv_fast as c
import pyinterpose.report.pickle_stream as P
orig_rows, orig_flush = c._format_rows, P.PickleStream.flush
def rows(*a):
    time.sleep(0.5)
    return orig_rows(*a)
def flush(self):
    time.sleep(0.5)
    return orig_flush(self)
c._format_rows, P.PickleStream.flush = rows, flush
from pyinterpose.cli import main
sys.exit(main(sys.argv[1:]))
"""


@pytest.mark.parametrize("fmt", ["csv", "memory-viz"])
def test_sigint_during_export_leaves_no_file(tmp_path, trace, fmt):
    out = tmp_path / "o" / "out"
    out.parent.mkdir()
    p = subprocess.Popen([sys.executable, "-c", SLOW, "export", trace, "--format", fmt, "-o", str(out)],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env(),
                         start_new_session=True)
    try:
        deadline = time.time() + 120
        partial = []
        while time.time() < deadline and p.poll() is None:
            partial = [n for n in os.listdir(out.parent) if ".partial-" in n]
            if partial:
                break
            time.sleep(0.005)
        assert partial and p.poll() is None, "the export was not caught writing"
        p.send_signal(signal.SIGINT)
        _, err = p.communicate(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    assert p.returncode == 128 + signal.SIGINT, err
    assert "Traceback" not in err
    assert os.listdir(out.parent) == []
