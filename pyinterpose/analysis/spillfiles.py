"""Columns of a long trace's pass written to files of this process's own instead of kept in memory
(issue 30): appended a piece at a time in a private folder of ``TMPDIR``, then mapped back
(copy-on-write, read only) and the folder removed at once, so that the files live only while mapped
and go with the process.  A mapped column's pages count in RSS only while touched, and a pass gives
them back a piece at a time (:mod:`..trace.pages`).  Used by the access analysis' per-interval columns
(:mod:`.access_spill`) and the clock's ops on a long trace (:mod:`.clock`)."""
from __future__ import annotations

import os
import shutil
import tempfile

import numpy as np

from ..trace.colcache import NpyAppender, load_npy


class Files:
    """Columns written a piece at a time (:meth:`append`), mapped back by :meth:`finish`."""

    def __init__(self, prefix: str = "pyinterpose-spill-"):
        self.folder = tempfile.mkdtemp(prefix=prefix)
        self.files: dict[str, NpyAppender] = {}

    def add_column(self, name: str, dtype) -> None:
        try:
            self.files[name] = NpyAppender(os.path.join(self.folder, f"{name}.npy"), dtype)
        except OSError:
            self.abort()
            raise

    def append(self, name: str, x: np.ndarray) -> None:
        self.files[name].append(x)

    def finish(self) -> dict:
        """The columns written, mapped; the files removed (they live on while mapped)."""
        try:
            names = {c: f.close() for c, f in self.files.items()}
            return {c: load_npy(os.path.join(self.folder, n), "c") for c, n in names.items()}
        finally:
            shutil.rmtree(self.folder, ignore_errors=True)

    def abort(self) -> None:
        for f in self.files.values():
            try:
                f.f.close()
            except OSError:
                pass
        shutil.rmtree(self.folder, ignore_errors=True)
