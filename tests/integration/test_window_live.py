"""``run --live`` in a pseudo-terminal: the view shows the program's own step count, live bytes and leak
(pyinterpose.examples.simleak's truth)."""
from __future__ import annotations

import json
import os
import pty
import re
import select
import subprocess
import sys

import pytest


def _run_in_pty(cmd, timeout=300):
    m, s = pty.openpty()
    env = dict(os.environ, COLUMNS="160", LINES="50", TERM="xterm")
    p = subprocess.Popen(cmd, stdin=s, stdout=s, stderr=s, close_fds=True, env=env)
    os.close(s)
    buf = b""
    while True:
        r, _, _ = select.select([m], [], [], 0.5)
        if r:
            try:
                d = os.read(m, 65536)
            except OSError:
                break
            if not d:
                break
            buf += d
        elif p.poll() is not None:
            break
    p.wait(timeout=timeout)
    os.close(m)
    return p.returncode, re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", buf.decode("utf-8", "replace"))


def test_live_view_in_a_pty(tmp_path):
    out, truth = str(tmp_path / "live.pit"), str(tmp_path / "t.json")
    rc, text = _run_in_pty([sys.executable, "-m", "pyinterpose", "run", "-f", "-o", out, "--simulated-gpu", "--live",
                            "--", sys.executable, "-m", "pyinterpose.examples.simtrain", "--leak", "--steps", "1500",
                            "--truth", truth])
    assert rc == 0, text
    with open(truth) as f:
        t = json.load(f)
    assert "pyinterpose --live" in text
    last = text[text.rindex("pyinterpose --live"):]
    row = re.search(r"│\s*(\d+)\s*│\s*(\d+)\s*│\s*([\d.]+ \w+)\s*│\s*([\d.]+ \w+)\s*│\s*([\d.]+ \w+)\s*│\s*\+([\d.]+) (\w+)", last)
    assert row, last
    assert int(row.group(2)) == t["steps"] - 1                      # the last step began
    # after the program freed everything: nothing live; its peak is the program's
    assert row.group(3) == "0 B"
    assert row.group(5) == f"{t['peak_live_bytes'] / 2**20:.1f} MiB"
    per_step = float(row.group(6)) * {"B": 1, "KiB": 1024}[row.group(7)]
    assert per_step == pytest.approx(t["leak_per_step"], rel=0.05)
    assert "pyinterpose: wrote" in text
