"""The one place where every command's flags are checked.

Numbers: ``number(...)`` / ``count(...)`` / ``byte_count`` are argparse ``type=`` functions; a bad value
(not a number, nan/inf, out of range) becomes one line ``pyinterpose: error: CMD: argument --X: ...`` and
exit status 2 (see :class:`Parser`).

Paths: a command lists the attributes that are files it writes with ``p.set_defaults(outputs=(...))``
(and has ``-f/--force``); :func:`check_outputs` runs for every command before it starts work and refuses a
missing directory, a directory, an unwritable place, or an existing file without ``-f`` — one line, exit 2.
Commands that pick an output name themselves call :func:`check_output` with it.
"""
from __future__ import annotations

# Lazy imports (in functions): `pyinterpose --help` loads every cli module, so analyses/reports load on use.

import argparse
import math
import os
import re
import sys

from ..errors import PyinterposeError, TraceError

INT64_MAX = 2**63 - 1
USAGE_EXIT = 2


class Parser(argparse.ArgumentParser):
    """argparse with one-line errors (no usage dump) and exit status 2; subparsers inherit it."""

    def error(self, message: str):  # noqa: D401 - argparse API
        cmd = self.prog.split(" ", 1)[1] + ": " if " " in self.prog else ""
        self.exit(USAGE_EXIT, f"pyinterpose: error: {cmd}{message}\n")


def _fmt(x) -> str:
    return f"{x:g}" if isinstance(x, float) else str(x)


def number(lo: float | None = None, hi: float | None = None, lo_open: bool = False, integer: bool = False):
    """An argparse type: a finite number (an integer with ``integer``) in [lo, hi] ((lo, hi] with lo_open)."""
    what = "an integer" if integer else "a number"

    def parse(text: str):
        s = str(text).strip()
        try:
            v = int(s, 10) if integer else float(s)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not {what}: {text!r}") from None
        if not integer and not math.isfinite(v):
            raise argparse.ArgumentTypeError(f"must be a finite number (got {text})")
        if lo is not None and (v <= lo if lo_open else v < lo):
            raise argparse.ArgumentTypeError(f"must be {'>' if lo_open else '>='} {_fmt(lo)} (got {text})")
        if hi is not None and v > hi:
            raise argparse.ArgumentTypeError(f"must be <= {_fmt(hi)} (got {text})")
        return v

    return parse


def count(lo: int = 0, hi: int = INT64_MAX):
    """An integer flag in [lo, hi]."""
    return number(lo, hi, integer=True)


# the shared ranges (one definition per kind of flag)
bandwidth_gbps = number(1e-6, 1e6)          # GB/s per direction: 1 kB/s .. 1 PB/s
latency_us = number(0.0, 1e9)               # microseconds per transfer (up to 1000 s)
time_limit_s = number(0.0, 1e6, lo_open=True)
fraction = number(0.0, 1.0)

_UNITS = {"": 1, "b": 1, "k": 1e3, "kb": 1e3, "m": 1e6, "mb": 1e6, "g": 1e9, "gb": 1e9, "t": 1e12, "tb": 1e12,
          "kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30, "tib": 1 << 40}


def parse_bytes(text: str) -> int:
    """'1073741824', '1GiB', '512 MiB', '1.5GB' -> bytes (0 .. 2**63-1)."""
    if str(text).strip().startswith("-"):
        raise PyinterposeError(f"a byte count cannot be negative: {text!r}")
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+(?:e[0-9]+)?)\s*([a-zA-Z]*)\s*", str(text))
    if not m or m.group(2).lower() not in _UNITS:
        raise PyinterposeError(f"not a byte count: {text!r} (examples: 1073741824, 512MiB, 1.5GB)")
    unit = _UNITS[m.group(2).lower()]
    digits = m.group(1)
    if re.fullmatch(r"[0-9]+", digits) and isinstance(unit, int):
        v = int(digits) * unit  # exact for plain integers
    else:
        f = float(digits) * unit
        if not math.isfinite(f) or f > INT64_MAX:
            raise PyinterposeError(f"byte count out of range: {text!r} (at most {INT64_MAX})")
        v = int(f)
    if v > INT64_MAX:
        raise PyinterposeError(f"byte count out of range: {text!r} (at most {INT64_MAX})")
    return v


def byte_count(lo: int = 0):
    """An argparse type: a byte count with optional unit, in [lo, 2**63-1]."""
    def parse(text: str) -> int:
        try:
            v = parse_bytes(text)
        except PyinterposeError as e:
            raise argparse.ArgumentTypeError(str(e)) from None
        if v < lo:
            raise argparse.ArgumentTypeError(f"must be >= {lo} bytes (got {text})")
        return v

    return parse


# ---------------------------------------------------------------------------------------------- paths
def _probe_writable(path: str) -> str | None:
    """None when ``path`` can be written (created, or opened for writing when it exists); else why not."""
    try:
        if os.path.exists(path):
            fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
            os.close(fd)
        else:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
            os.close(fd)
            os.unlink(path)
    except OSError as e:
        return e.strerror or str(e)
    return None


def check_output(path: str | None, force: bool, flag: str = "-o") -> str | None:
    """Refuse an output file that cannot be written, or that exists without ``-f``.  Returns ``path``."""
    if path is None:
        return None
    if not str(path).strip():
        raise PyinterposeError(f"{flag}: empty file name")
    if os.path.isdir(path):
        raise PyinterposeError(f"{flag} {path}: is a directory (give a file name)")
    parent = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(parent):
        raise PyinterposeError(f"{flag} {path}: directory {parent} does not exist")
    if os.path.lexists(path) and not force:
        raise PyinterposeError(f"{flag} {path}: file exists; pass -f to overwrite")
    why = _probe_writable(path)
    if why:
        raise PyinterposeError(f"{flag} {path}: cannot write here ({why})")
    return path


def check_output_dir(path: str, flag: str = "-o") -> str:
    """Create the output directory if needed and check that files can be written in it."""
    if not str(path).strip():
        raise PyinterposeError(f"{flag}: empty directory name")
    if os.path.exists(path) and not os.path.isdir(path):
        raise PyinterposeError(f"{flag} {path}: exists and is not a directory")
    try:
        os.makedirs(path, exist_ok=True)
    except OSError as e:
        raise PyinterposeError(f"{flag} {path}: cannot create the directory ({e.strerror or e})")
    why = _probe_writable(os.path.join(path, f".pyinterpose-probe-{os.getpid()}"))
    if why:
        raise PyinterposeError(f"{flag} {path}: cannot write in this directory ({why})")
    return path


def check_input(path: str, flag: str = "") -> str:
    """A file that must exist and be readable."""
    label = f"{flag} {path}".strip()
    if os.path.isdir(path):
        raise PyinterposeError(f"{label}: is a directory, not a file")
    try:
        with open(path, "rb"):
            pass
    except FileNotFoundError:
        raise PyinterposeError(f"{label}: no such file") from None
    except OSError as e:
        raise PyinterposeError(f"{label}: cannot read ({e.strerror or e})") from None
    return path


def check_outputs(args) -> None:
    """Run by the CLI for every command: each attribute named in ``args.outputs`` is a file to write."""
    force = bool(getattr(args, "force", False))
    for attr, flag in getattr(args, "outputs", ()):
        check_output(getattr(args, attr, None), force, flag)


def warn(message: str) -> None:
    print(f"pyinterpose: warning: {message}", file=sys.stderr)


def add_site_skip(p) -> None:
    """``--site-skip PATTERN`` (repeatable): the frames taken as allocation helpers, overriding the
    automatic detection (pyinterpose.trace.stacks); ``--site-skip none``: the innermost frame."""
    p.add_argument("--site-skip", action="append", metavar="PATTERN",
                   help="call sites: skip frames whose function, file:function or file matches PATTERN (fnmatch; "
                        "repeatable) instead of the allocation helpers found automatically; 'none': group by the "
                        "innermost frame")


def apply_site_skip(trace, args) -> None:
    """Hand ``--site-skip`` to the trace's call-site grouping (nothing when the option is absent)."""
    patterns = getattr(args, "site_skip", None)
    if patterns:
        from ..trace.stacks import set_site_skip
        set_site_skip(trace, patterns)


def load_trace(path: str, quiet: bool = False):
    """Load a trace (the reader shows its progress bar on a TTY); a missing file is a user error."""
    from ..report.text import is_tty        # rich and pandas: not at CLI start (--help, run)
    from ..trace.reader import load

    if not os.path.exists(path):
        raise TraceError(f"no such trace file: {path} (no such file)")
    trace = load(path, progress=(not quiet) and is_tty(sys.stderr))
    warn_incomplete(trace)
    return trace


def working(args, what: str):
    """A transient progress bar on stderr while a command's analysis runs (``report.text.progress``):
    only when stderr is a terminal and the command prints no JSON; a no-op context otherwise, so
    pipes, files and ``--json`` output never see it.  Yields an object with ``update(fraction=None,
    description=None)`` for the steps the command reports."""
    from ..report.text import progress     # rich: not at CLI start

    return progress(what, enabled=None if not getattr(args, "json", False) else False)


def warn_incomplete(trace) -> None:
    """Every command says on stderr when its trace is incomplete (one line per reason)."""
    for w in trace.warnings:
        print(f"pyinterpose: warning: {trace.path or 'trace'}: {w}", file=sys.stderr)
