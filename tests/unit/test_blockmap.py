"""The shim's live-block map (native/shim/blockmap.c) against a plain reference
(tests/c/blockmap_check.c): every lookup right, concurrent use safe, and memory
bounded by the live blocks when a long run keeps using fresh addresses."""
from __future__ import annotations

import os
import re
import subprocess

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _build(cc, tmp_path, name, flags):
    exe = str(tmp_path / name)
    cmd = [cc, *flags, "-D_GNU_SOURCE", "-I" + os.path.join(ROOT, "native", "shim"),
           "-I" + os.path.join(ROOT, "native", "include"), "-o", exe,
           os.path.join(ROOT, "native", "shim", "blockmap.c"), os.path.join(ROOT, "tests", "c", "blockmap_check.c"),
           "-lpthread"]
    cp = subprocess.run(cmd, capture_output=True, text=True)
    return exe if cp.returncode == 0 else None


@pytest.mark.slow
def test_lookups_match_and_memory_stays_bounded(cc, tmp_path):
    exe = _build(cc, tmp_path, "blockmap_check", ["-O2"])
    assert exe
    cp = subprocess.run([exe, "1000000"], capture_output=True, text=True, timeout=300)
    assert cp.returncode == 0, cp.stderr
    growth = int(re.search(r"rss_growth_kib=(-?\d+)", cp.stdout).group(1))
    # ~1 M inserts at ever-fresh addresses, a few hundred blocks live: the table
    # must not keep every granule ever used (it grew by 66 MiB when it did)
    assert growth < 16 * 1024, growth


@pytest.mark.slow
def test_under_address_sanitizer(cc, tmp_path):
    exe = _build(cc, tmp_path, "blockmap_check_asan", ["-O1", "-g", "-fsanitize=address,undefined",
                                                        "-fno-sanitize-recover=all"])
    if not exe:
        pytest.skip("the compiler has no AddressSanitizer")
    env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
    cp = subprocess.run([exe, "100000"], capture_output=True, text=True, timeout=300, env=env)
    assert cp.returncode == 0, cp.stderr[-3000:]
