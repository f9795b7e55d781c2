"""simcuda keeps freed device buffers for the next allocation of the same size, as a device allocator does.

It once handed every freed multi-MiB buffer back to glibc, which trimmed and regrew its heap, and every byte
touched again was a page fault: a simtrain run spent most of its time in the kernel (the "jax path 35x slower
under the shim" of issue 15 was this, striking bare and shimmed runs alike).  Page faults must not grow with
the number of training steps; without the reuse they grow by about 1,100 per step.
"""
from __future__ import annotations

import importlib.util
import os
import subprocess
import sys

import pytest

pytestmark = [pytest.mark.slow,  # every test here captures or drives a browser (> a few s)
              pytest.mark.skipif(importlib.util.find_spec("pyinterpose.examples.simtrain") is None,
                                reason="pyinterpose.examples.simtrain not in this build")]


def _minor_faults(framework: str, steps: int) -> int:
    proc = subprocess.Popen([sys.executable, "-m", "pyinterpose.examples.simtrain", "--framework", framework,
                             "--steps", str(steps)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    assert proc.returncode == 0, proc.stderr.read().decode()
    proc.stderr.close()
    return usage.ru_minflt


@pytest.mark.parametrize("framework", ["torch", "jax", "tf"])
def test_training_steps_cost_no_page_faults(framework):
    few, many = _minor_faults(framework, 100), _minor_faults(framework, 1500)
    # measured: 6,855-6,861 faults at either length with the reuse; +1.5-1.6 M for 1,400 more steps without it
    assert many - few < 20_000, (few, many)
