"""issue 15: a --scheduler nobody listens on fails within a few seconds, with one line (was 21 s)."""
from __future__ import annotations

import socket
import time


def test_unreachable_scheduler_fails_fast(tmp_path):
    from conftest import run_cli

    s = socket.socket()
    s.bind(("127.0.0.1", 0))          # a port of ours with nobody listening: connections are refused
    port = s.getsockname()[1]
    t0 = time.monotonic()
    import os
    from conftest import ROOT

    traces = [os.path.join(ROOT, "samples", n) for n in ("graphs-blocks.pit", "loader-blocks.pit")]
    cp = run_cli("summary", *traces, "--scheduler", f"tcp://127.0.0.1:{port}")
    took = time.monotonic() - t0
    s.close()
    assert cp.returncode == 2, cp.stderr
    assert len(cp.stderr.strip().splitlines()) == 1 and f"127.0.0.1:{port}" in cp.stderr, cp.stderr
    # refused by the probe, not Dask's client timing out after 20 s (no wall-clock bound: the machine's
    # load decides how long Python takes to start)
    assert "refused" in cp.stderr.lower() and "20 s" not in cp.stderr, (took, cp.stderr)
