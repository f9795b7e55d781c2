"""The CLI keeps freed memory for reuse (cli.keep_freed_memory): a large array is served
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
    from pyinterpose.cli import keep_freed_memory
    assert keep_freed_memory()
n = 256 << 20                  # above glibc's largest dynamic mmap threshold (32 MiB)
a = np.ones(n, np.uint8)
live = libc.mallinfo()
del a
freed = libc.mallinfo()
print(json.dumps({"mmapped_live": live.hblkhd, "heap_free_after": freed.fordblks}))
"""


def _info(tuned: bool) -> dict:
    out = subprocess.run([sys.executable, "-c", CODE, "1" if tuned else "0"], capture_output=True, text=True,
                         check=True)
    return json.loads(out.stdout)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc mallopt is Linux-only")
def test_large_arrays_come_from_the_heap_and_stay_there_when_freed():
    n = 256 << 20
    untuned, tuned = _info(False), _info(True)
    # control: by default the array is its own mapping, and freeing it hands it back to the kernel
    assert untuned["mmapped_live"] >= n and untuned["heap_free_after"] < n // 2
    # tuned: served from the heap, and its bytes are still there (free) for the next array
    assert tuned["mmapped_live"] < n // 2 and tuned["heap_free_after"] >= n
