"""Give freed heap memory back to the system between the steps of a long command.

glibc's ``free`` keeps the memory of freed small and medium blocks (numpy's piece-sized arrays
below its mmap threshold, which grows after each large free, and pandas' objects) in its heap and
arenas: after a streamed pass the process's anonymous RSS stays where the pass left it although
nothing holds the memory any more (measured: ~700 MB after the perfetto export's live-curve pass at
100 M events).  :func:`trim` calls ``malloc_trim(0)``, which returns every whole free page to the
kernel.  It changes no data; without glibc (or with ``PYINTERPOSE_NO_TRIM=1``) it does nothing.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import os

_LIBC = None


def _libc():
    global _LIBC
    if _LIBC is None:
        try:
            lib = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
            f = lib.malloc_trim
            f.argtypes = [ctypes.c_size_t]
            f.restype = ctypes.c_int
            _LIBC = f
        except (OSError, AttributeError):
            _LIBC = False
    return _LIBC


def trim() -> bool:
    """``malloc_trim(0)`` where there is one; True when it gave memory back."""
    if os.environ.get("PYINTERPOSE_NO_TRIM", "") not in ("", "0"):
        return False
    f = _libc()
    return bool(f(0)) if f else False
