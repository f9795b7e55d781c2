"""pyinterpose: a GPU-memory profiler for deep-learning training under any framework.

Public API::

    import pyinterpose
    trace = pyinterpose.load("run.pit")     # -> Trace (pandas tables)
    pyinterpose.mark_step()                 # in the profiled program: iteration marker
    pyinterpose.start(); pyinterpose.stop() # a capture window (run --capture-range markers)
"""
from __future__ import annotations

# Lazy imports (in functions): a profiled program imports this for mark_step/start/stop; keep it light.

__version__ = "0.1.0"

from .errors import PyinterposeError, TraceError  # noqa: E402


def __getattr__(name):  # Trace pulls in pandas: import it only when asked for
    if name == "Trace":
        from .trace.model import Trace

        return Trace
    raise AttributeError(name)


def load(path: str, progress: bool = False) -> "Trace":
    """Read a trace file written by ``pyinterpose run`` into a :class:`Trace`."""
    from .trace.reader import load as _load

    return _load(path, progress=progress)


def mark_step(label: str = "step") -> bool:
    """Record an iteration marker in the trace (no-op when not running under pyinterpose).

    Returns True when the marker was recorded."""
    from .capture.marker import mark

    return mark(label)


def start() -> bool:
    """Open a capture window here (``pyinterpose run --capture-range markers``; no-op when not running
    under pyinterpose).  Returns True when the shim recorded it."""
    from .capture.marker import window

    return window(True)


def stop() -> bool:
    """Close the capture window opened by :func:`start`."""
    from .capture.marker import window

    return window(False)


__all__ = ["load", "mark_step", "start", "stop", "Trace", "PyinterposeError", "TraceError", "__version__"]
