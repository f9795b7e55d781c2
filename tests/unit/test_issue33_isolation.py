"""issue 33.9: every test runs with its own home and cache folder (a measured bandwidth cached by the user's
`pyinterpose bandwidth` never reaches a test), and the programs tests start get the default SIGINT even when
pytest itself runs with SIGINT ignored (a background job)."""
from __future__ import annotations

import os
import pwd
import signal
import subprocess
import sys

import pytest

from pyinterpose.analysis.bandwidth import cache_file


def cache_dir() -> str:
    return os.path.dirname(cache_file())


def test_home_and_cache_are_the_tests_own_a(tmp_path):
    assert os.environ["HOME"] != pwd.getpwuid(os.getuid()).pw_dir
    d = cache_dir()
    assert not os.path.exists(d) or not os.listdir(d)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "bandwidth-GPU-x.json"), "w") as f:   # what `pyinterpose bandwidth` leaves
        f.write("{}")


def test_home_and_cache_are_the_tests_own_b():
    d = cache_dir()
    assert not os.path.exists(d) or not os.listdir(d)     # a's file is not here


@pytest.mark.skipif(os.environ.get("PI_TEST_INNER") != "1", reason="run by the test below, in a pytest with SIGINT ignored")
def test_inner_child_gets_default_sigint():
    out = subprocess.run([sys.executable, "-c", "import signal; print(signal.getsignal(signal.SIGINT).__name__)"],
                         capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "default_int_handler"


def test_children_get_default_sigint_under_a_background_pytest():
    here = os.path.abspath(__file__)
    root = os.path.dirname(os.path.dirname(os.path.dirname(here)))
    cp = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                         f"{here}::test_inner_child_gets_default_sigint"],
                        cwd=root, capture_output=True, text=True, env={**os.environ, "PI_TEST_INNER": "1"},
                        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN), timeout=300)
    assert cp.returncode == 0 and "1 passed" in cp.stdout, cp.stdout + cp.stderr
