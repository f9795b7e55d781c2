"""Issue 30, progress: every long command shows a progress bar on stderr when stderr is a terminal
(run here under a pseudo-terminal from Python's ``pty`` module), and nothing at all when it is a pipe;
stdout, and ``--json``, are the same byte for byte either way."""
from __future__ import annotations

import os
import pty
import re
import subprocess
import sys

import pytest

from conftest import gpu_trace

ANSI = re.compile(rb"\x1b\[[0-9;?]*[A-Za-z]")
TRACE = "torch-cnn-blocks.pit"


def _run(argv: list[str], tty: bool) -> tuple[bytes, bytes, int]:
    """(stdout, stderr, exit status): stdout always a pipe, stderr a pty or a pipe."""
    cmd = [sys.executable, "-m", "pyinterpose", *argv]
    env = {**os.environ, "COLUMNS": "120"}
    if not tty:
        p = subprocess.run(cmd, capture_output=True, env=env, timeout=600)
        return p.stdout, p.stderr, p.returncode
    master, slave = pty.openpty()
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=slave, stdin=subprocess.DEVNULL, env=env)
    os.close(slave)
    err = b""
    while True:
        try:
            chunk = os.read(master, 1 << 16)
        except OSError:          # EIO: the child closed its end
            break
        if not chunk:
            break
        err += chunk
    os.close(master)
    out = p.stdout.read()
    p.stdout.close()
    return out, err, p.wait(timeout=600)


def _cases(tmp):
    t = gpu_trace(TRACE)
    return [
        (["summary", t], "summarising"),
        (["iterations", t], "finding iterations"),
        (["access", t, "--bandwidth", "16"], "analysing accesses"),
        (["pools", t, "--time-limit", "1", "--strategies", "pytorch,bfc"], "simulating pool strategies"),   # (its seconds column varies run to run)
        (["swap", t, "--bandwidth", "16"], "scheduling swaps"),
        (["fit", t, "--capacity", "1GiB"], "fitting"),
        (["export", t, "--format", "csv", "-o", str(tmp / "b.csv"), "-f"], "writing csv"),
        (["export", t, "--format", "memory-viz", "-o", str(tmp / "s.pickle"), "-f"], "writing memory-viz"),
        (["export", t, "--format", "perfetto", "-o", str(tmp / "p.json"), "-f"], "writing perfetto"),
    ]


@pytest.mark.slow
def test_a_terminal_shows_each_commands_bar_and_a_pipe_nothing(tmp_path):
    for argv, step in _cases(tmp_path):
        out_tty, err_tty, rc_tty = _run(argv, tty=True)
        out_pipe, err_pipe, rc_pipe = _run(argv, tty=False)
        assert rc_tty == 0 and rc_pipe == 0, (argv, err_tty[-400:], err_pipe[-400:])
        text = ANSI.sub(b"", err_tty).decode("utf-8", "replace")
        assert step in text, (argv, text[-600:])          # the command's own step, on stderr
        assert "\x1b" not in err_pipe.decode("utf-8", "replace"), argv
        assert step.encode() not in err_pipe, argv        # a pipe: no bar at all
        assert b"\x1b" not in out_tty and out_tty.strip(), argv
        if argv[0] != "pools":                             # pools prints each strategy's seconds
            assert out_tty == out_pipe, argv              # stdout the same either way


@pytest.mark.slow
def test_json_output_is_unchanged_and_gets_no_bar(tmp_path):
    t = gpu_trace(TRACE)
    for argv in (["summary", t, "--json"], ["iterations", t, "--json"],
                 ["export", t, "--format", "csv", "-o", str(tmp_path / "b.csv"), "-f", "--json"]):
        out_tty, err_tty, rc_tty = _run(argv, tty=True)
        out_pipe, err_pipe, rc_pipe = _run(argv, tty=False)
        assert rc_tty == 0 and rc_pipe == 0
        assert out_tty == out_pipe, argv
        assert b"\x1b" not in err_tty and err_pipe == err_tty, argv      # --json: no bar even on a terminal
