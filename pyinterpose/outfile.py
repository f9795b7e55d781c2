"""Output files that appear whole or not at all.

Every command that writes a file (report, compare, export in every format, plan, swap's schedule, demo)
writes it through :func:`atomic_output`: into a temporary file beside the target (same directory, so the
final rename never crosses a filesystem), renamed over the target only once everything was written and
closed.  A full disk, a file-size limit, an exception or Ctrl-C midway leaves no file at the target path
(and an existing target untouched) and removes the temporary file.  Only a SIGKILL can leave the temporary
``NAME.partial-XXXXXX`` behind, and its name says what it is.

The trace writer of ``pyinterpose run`` does not use this: its file must survive a crash of the run
itself, chunk by chunk (trace/writer.py).
"""
from __future__ import annotations

import contextlib
import os
import tempfile
from typing import IO, Iterator


def _umask() -> int:
    """The process's umask, read without changing it (os.umask would, for a moment, for every thread)."""
    try:
        with open("/proc/self/status", encoding="ascii", errors="replace") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    return 0o022


@contextlib.contextmanager
def atomic_path(path: str) -> Iterator[str]:
    """A temporary path beside ``path`` to write to; renamed to ``path`` when the block ends normally,
    removed when it raises (any exception, KeyboardInterrupt included).  A ``path`` that is a symbolic
    link keeps it: the file it points to is the one replaced."""
    path = os.path.realpath(path)
    d, base = os.path.split(path)
    fd, tmp = tempfile.mkstemp(prefix=base + ".partial-", dir=d)
    os.close(fd)
    try:
        os.chmod(tmp, 0o666 & ~_umask())      # the mode a plain open() would give, not mkstemp's 0600
        yield tmp
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


@contextlib.contextmanager
def atomic_output(path: str, mode: str = "w", encoding: str | None = None) -> Iterator[IO]:
    """``open(path, mode)`` that only ever leaves a complete file at ``path`` (see the module doc).
    The file is closed (and its last buffer flushed, where a full disk shows) before the rename."""
    if encoding is None and "b" not in mode:
        encoding = "utf-8"
    with atomic_path(path) as tmp:
        f = open(tmp, mode, encoding=encoding)
        try:
            yield f
        finally:
            f.close()
