"""``pyinterpose.mark_step()``: an iteration marker, written by the shim into the ring."""
from __future__ import annotations

import ctypes
import functools


@functools.lru_cache(maxsize=None)
def _mark_fn():
    try:
        fn = ctypes.CDLL(None).pyinterpose_mark  # present only when the shim is preloaded
    except (AttributeError, OSError):
        return None
    fn.argtypes = [ctypes.c_char_p]
    fn.restype = ctypes.c_int
    return fn


def mark(label: str = "step") -> bool:
    fn = _mark_fn()
    return bool(fn and fn(label.encode()))


@functools.lru_cache(maxsize=None)
def _window_fn():
    try:
        fn = ctypes.CDLL(None).pyinterpose_window  # present only when the shim is preloaded
    except (AttributeError, OSError):
        return None
    fn.argtypes = [ctypes.c_int]
    fn.restype = ctypes.c_int
    return fn


def window(on: bool) -> bool:
    """Open (on) or close a capture window (``run --capture-range markers``)."""
    fn = _window_fn()
    return bool(fn and fn(1 if on else 0))
