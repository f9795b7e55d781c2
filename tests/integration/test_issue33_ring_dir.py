"""issue 33.10: a --ring-dir where no file can be created is refused before the program starts: exit 2,
one line, the program never ran (its truth file is not written), no trace."""
from __future__ import annotations

import os
import sys


def test_unwritable_ring_dir_is_refused_before_starting(tmp_path):
    from conftest import run_cli

    truth, out = tmp_path / "truth.json", tmp_path / "t.pit"
    # /proc: a directory in which nobody, root included, can create a file
    cp = run_cli("run", "--simulated-gpu", "--ring-dir", "/proc", "-o", str(out), "--", sys.executable, "-m",
                 "pyinterpose.examples.simtrain", "--steps", "2", "--truth", str(truth))
    assert cp.returncode == 2, cp.stderr
    assert len(cp.stderr.strip().splitlines()) == 1 and "--ring-dir /proc" in cp.stderr, cp.stderr
    assert not truth.exists() and not out.exists() and cp.stdout == ""
    assert not [n for n in os.listdir(tmp_path) if n.startswith("t.pit")]
