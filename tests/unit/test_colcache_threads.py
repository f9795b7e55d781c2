"""The table cache read from several threads at once (Dask's threaded workers, the report's side
threads): numpy parses each column file's header with ``ast.literal_eval``, whose AST construction
keeps its recursion depth in state shared by every thread on CPython 3.11 (a ``SystemError``, "AST
constructor recursion depth mismatch", when a garbage collection's finalizer lets another thread parse
in the middle).  Seen once in CI in the Dask fan-out test; here made likely: many reads, a tiny switch
interval, and garbage with finalizers."""
from __future__ import annotations

import gc
import os
import shutil
import sys
import threading
import time

import pyinterpose
from pyinterpose.trace import colcache

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


class _Garbage:
    def __init__(self):
        self.me = self             # a cycle: freed by the collector, which runs the finalizer

    def __del__(self):
        sum(range(50))             # Python code in the middle of whatever the thread was doing


def test_the_cache_read_from_threads_at_once(tmp_path, monkeypatch):
    path = str(tmp_path / "t.pit")
    shutil.copy(os.path.join(ROOT, "samples", "torch-cnn-blocks.pit"), path)
    monkeypatch.setenv("PYINTERPOSE_CACHE_MIN_BYTES", "0")
    pyinterpose.load(path)                     # writes the cache
    assert colcache.read(path) is not None
    errors, reads = [], []

    def reader():
        try:
            end = time.monotonic() + 2.0
            while time.monotonic() < end:
                [_Garbage() for _ in range(30)]
                assert colcache.read(path) is not None
                reads.append(1)
        except Exception as e:     # noqa: BLE001 - every failure is reported below
            errors.append(repr(e))

    old_interval, old_threshold = sys.getswitchinterval(), gc.get_threshold()
    sys.setswitchinterval(1e-6)
    gc.set_threshold(50, 5, 5)
    try:
        threads = [threading.Thread(target=reader) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        sys.setswitchinterval(old_interval)
        gc.set_threshold(*old_threshold)
    assert errors == []
    assert len(reads) > 8
