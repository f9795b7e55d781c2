"""The device clock's record parser (native/shim/cupti_parse.c) on hand-made CUPTI activity buffers
(tests/c/cupti_parse_check.c): records with CUDA 13.0's full sizes, pairings before and after their
activities, a graph replay, another tool's external ids, never-paired activities, the final drain, and the
nesting rule (a runtime call joined through the driver call inside it, its records in every order; what it
must not join; bounded tables)."""
from __future__ import annotations

import os
import subprocess

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.mark.parametrize("flags", [["-O2"], ["-O1", "-g", "-fsanitize=address,undefined",
                                             "-fno-sanitize-recover=all"]], ids=["plain", "asan"])
@pytest.mark.slow
def test_parse_joins_activities_to_their_events(cc, tmp_path, flags):
    exe = str(tmp_path / "cupti_parse_check")
    cmd = [cc, *flags, "-D_GNU_SOURCE", "-I" + os.path.join(ROOT, "native", "shim"),
           "-I" + os.path.join(ROOT, "native", "include"), "-o", exe,
           os.path.join(ROOT, "native", "shim", "cupti_parse.c"), os.path.join(ROOT, "tests", "c", "cupti_parse_check.c")]
    cp = subprocess.run(cmd, capture_output=True, text=True)
    if cp.returncode != 0:
        if "sanitize" in " ".join(flags):
            pytest.skip("the compiler has no sanitizers")
        pytest.fail(cp.stderr)
    run = subprocess.run([exe], capture_output=True, text=True, timeout=60)
    assert run.returncode == 0 and run.stdout.startswith("ok"), run.stdout + run.stderr
