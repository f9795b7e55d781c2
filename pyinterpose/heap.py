"""The heap settings every analysing process runs with (the CLI at start, a Dask worker per task).

Below every layer: imports nothing of pyinterpose."""
from __future__ import annotations

import sys

# glibc mallopt parameters (malloc.h)
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD, _M_ARENA_MAX = -1, -3, -8


def keep_freed_memory() -> bool:
    """Let glibc reuse freed memory instead of handing it back to the kernel (this process only).

    The analyses make many short-lived arrays of tens to hundreds of MB.  By default
    glibc serves each from a fresh ``mmap`` and unmaps it on free, so every one is
    page-faulted and zeroed again by the kernel: at 10 M events that was 3-4.5 s of
    system time per command.  Raising the mmap and trim thresholds keeps freed memory
    in the heap for the next array; peak RSS is unchanged (the arrays were live at the
    peak anyway).  One arena for every thread: the analyses' worker threads (swap
    schedules) would otherwise each get an arena of their own, whose heaps are too small
    for such arrays, so theirs were mapped and unmapped every time (about 4 s of system
    time in ``swap`` at 10 M events) and the memory they free could not serve the main
    thread.  Not applied to ``run``, whose program is a child process (exec resets
    malloc settings); ignored where the C library has no ``mallopt``.  Returns whether
    the settings took."""
    mallopt = _libc("mallopt")
    if mallopt is None:
        return False
    ok = mallopt(_M_MMAP_THRESHOLD, 1 << 30) == 1
    ok = mallopt(_M_ARENA_MAX, 1) == 1 and ok
    return bool(mallopt(_M_TRIM_THRESHOLD, (1 << 31) - 1) == 1 and ok)


def give_back() -> bool:
    """Hand the heap's free pages back to the kernel now (glibc ``malloc_trim(0)``), for a long
    command between steps of different shapes (issue 30): :func:`keep_freed_memory` keeps freed
    memory resident for the next arrays, so without this a step's peak stays in the process's RSS
    through the next steps, and the next step's arrays rarely fit the holes the last one left.
    Returns whether it ran (False where the C library has no ``malloc_trim``)."""
    trim = _libc("malloc_trim")
    if trim is None:
        return False
    trim(0)
    return True


def _libc(name: str):
    """The C library's function ``name`` (glibc on Linux), or None where there is none."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        import ctypes
        return getattr(ctypes.CDLL(None), name)
    except (OSError, AttributeError):
        return None
