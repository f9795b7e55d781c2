"""The CLI keeps freed memory for reuse (pyinterpose.heap.keep_freed_memory): a large array is served
from the heap, and once freed its memory stays in the heap for the next one instead of
being unmapped (and page-faulted and zeroed by the kernel again).  Checked with glibc's
own accounting (mallinfo), in a fresh interpreter each (malloc settings are per process)."""
import json
import subprocess
import sys

import pytest

CODE = r"""
import ctypes, json, sys
import numpy as np

class MallInfo(ctypes.Structure):          # struct mallinfo (glibc): ten ints
    _fields_ = [(f, ctypes.c_int) for f in ("arena", "ordblks", "smblks", "hblks", "hblkhd",
                                             "usmblks", "fsmblks", "uordblks", "fordblks", "keepcost")]
libc = ctypes.CDLL(None)
libc.mallinfo.restype = MallInfo
if sys.argv[1] == "1":
    from pyinterpose.heap import keep_freed_memory
    assert keep_freed_memory()
elif sys.argv[1] == "thresholds":            # the two thresholds only, without one arena
    assert libc.mallopt(-3, 1 << 30) == 1 and libc.mallopt(-1, (1 << 31) - 1) == 1
n = 256 << 20                  # above glibc's largest dynamic mmap threshold (32 MiB)
if sys.argv[2] == "thread":    # made and freed by a worker thread; mallinfo reads the main arena
    import threading
    t = threading.Thread(target=lambda: np.ones(n, np.uint8).sum())
    t.start(); t.join()
    print(json.dumps({"heap_free_after": libc.mallinfo().fordblks}))
    sys.exit(0)
a = np.ones(n, np.uint8)
live = libc.mallinfo()
del a
freed = libc.mallinfo()
print(json.dumps({"mmapped_live": live.hblkhd, "heap_free_after": freed.fordblks}))
"""


def _info(tuned, where: str = "main") -> dict:
    mode = tuned if isinstance(tuned, str) else ("1" if tuned else "0")
    out = subprocess.run([sys.executable, "-c", CODE, mode, where], capture_output=True, text=True, check=True)
    return json.loads(out.stdout)


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc mallopt is Linux-only")
def test_large_arrays_come_from_the_heap_and_stay_there_when_freed():
    n = 256 << 20
    untuned, tuned = _info(False), _info(True)
    # control: by default the array is its own mapping, and freeing it hands it back to the kernel
    assert untuned["mmapped_live"] >= n and untuned["heap_free_after"] < n // 2
    # tuned: served from the heap, and its bytes are still there (free) for the next array
    assert tuned["mmapped_live"] < n // 2 and tuned["heap_free_after"] >= n


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc mallopt is Linux-only")
def test_memory_a_worker_thread_frees_stays_for_the_main_thread():
    n = 256 << 20
    # control: with the thresholds alone, a thread's large array lives in an arena of its own
    # (mapped and unmapped again): none of it is left in the main heap
    assert _info("thresholds", "thread")["heap_free_after"] < n // 2
    # one arena: the thread's array came from the main heap and stays there once freed
    assert _info(True, "thread")["heap_free_after"] >= n


BLAS_CODE = r"""
import json, os, sys
if sys.argv[1] == "1":
    from pyinterpose.cli import _import_numpy_without_blas_threads
    _import_numpy_without_blas_threads()
import numpy
print(json.dumps({"threads": len(os.listdir("/proc/self/task")), "env": os.environ.get("OPENBLAS_NUM_THREADS")}))
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/task")
def test_the_cli_starts_no_blas_threads_and_leaves_the_environment_as_it_was():
    import os

    env = {k: v for k, v in os.environ.items() if k not in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS")}

    def info(flag):
        cp = subprocess.run([sys.executable, "-c", BLAS_CODE, flag], capture_output=True, text=True, env=env,
                            check=True)
        return json.loads(cp.stdout)

    plain, cli = info("0"), info("1")
    assert cli == {"threads": 1, "env": None}        # the program `run` starts sees the user's environment
    # control: numpy alone starts OpenBLAS threads here (one per CPU)
    assert plain["threads"] > 1 or (os.cpu_count() or 1) == 1
