"""``pyinterpose run``: start a program with the shim preloaded and capture it.

The parent (this process) never loads the shim.  It creates a session id,
puts the shim first in ``LD_PRELOAD`` of the child, sets the view's framework
knobs, drains every ring of the session into the trace while the child runs,
forwards SIGINT/SIGTERM, and returns the child's exit status.
"""
from __future__ import annotations

import os
import platform
import secrets
import shutil
import signal
import subprocess
import sys
import time

from .. import __version__
from ..errors import PyinterposeError
from . import records
from .drain import Drain

NATIVE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "_native")
SHIM = os.path.join(NATIVE, "libpyinterpose.so")
SIMCUDA = os.path.join(NATIVE, "simcuda")

# --view blocks: make every tensor/buffer its own CUDA allocation (DESIGN §3).
BLOCKS_KNOBS = {
    "PYTORCH_CUDA_ALLOC_CONF": "backend:cudaMallocAsync",
    "PYTORCH_ALLOC_CONF": "backend:cudaMallocAsync",
    "XLA_PYTHON_CLIENT_ALLOCATOR": "platform",
    "XLA_PYTHON_CLIENT_PREALLOCATE": "false",
    "TF_GPU_ALLOCATOR": "cuda_malloc_async",
}
XLA_FLAG = "--xla_gpu_enable_command_buffer="
VIEWS = ("blocks", "reserved")
STACKS = ("python", "native", "none")  # --stacks: what the shim records per allocation (native/shim/site.c)


def default_output(argv: list[str]) -> str:
    prog = os.path.basename(argv[0]) if argv else "run"
    if prog.startswith("python") and len(argv) > 1:
        prog = "python-" + os.path.basename(argv[2] if argv[1] == "-m" and len(argv) > 2 else argv[1])
    prog = "".join(c if c.isalnum() or c in "-_." else "_" for c in prog)[:40]
    return f"pyinterpose-{prog}-{os.getpid()}.pit"


def view_environment(view: str, env: dict[str, str]) -> dict[str, str]:
    """The knobs ``view`` sets (only those it changes), given the child environment."""
    if view == "reserved":
        return {}
    knobs = dict(BLOCKS_KNOBS)
    flags = env.get("XLA_FLAGS", "")
    if XLA_FLAG not in flags.split():
        knobs["XLA_FLAGS"] = (flags + " " + XLA_FLAG).strip()
    return knobs


def _resolve_program(argv: list[str], env: dict[str, str]) -> None:
    prog = argv[0]
    if os.sep in prog:
        if not os.path.exists(prog):
            raise PyinterposeError(f"program not found: {prog}", exit_code=127)
        if not os.access(prog, os.X_OK):
            raise PyinterposeError(f"program is not executable: {prog}", exit_code=126)
    elif shutil.which(prog, path=env.get("PATH")) is None:
        raise PyinterposeError(f"program not found on PATH: {prog}", exit_code=127)


def _nvml_start():
    try:
        from . import nvml
    except ImportError:
        return {"available": False, "reason": "pyinterpose.capture.nvml not available"}, None
    info = nvml.link_info()
    sampler = None
    if info.get("available"):
        sampler = nvml.NvmlSampler()
        sampler.start()
    return info, sampler


class _SignalForwarder:
    """Forward SIGINT/SIGTERM to the child.  A Ctrl-C typed at the terminal
    already reaches the child (same foreground process group), so SIGINT is
    forwarded only when it did not come from the terminal."""

    def __init__(self):
        self.proc: subprocess.Popen | None = None
        self.pending: list[int] = []  # signals that arrived before the child existed
        self.old = {}

    def __enter__(self):
        for sig in (signal.SIGINT, signal.SIGTERM):
            self.old[sig] = signal.signal(sig, self._handle)
        return self

    def _handle(self, signum, frame):
        if signum == signal.SIGINT and _terminal_foreground():
            return
        if self.proc is None:
            self.pending.append(signum)
            return
        try:
            self.proc.send_signal(signum)
        except ProcessLookupError:
            pass

    def attach(self, proc: subprocess.Popen) -> None:
        self.proc = proc
        for signum in self.pending:
            proc.send_signal(signum)

    def __exit__(self, *exc):
        for sig, h in self.old.items():
            signal.signal(sig, h)


def _terminal_foreground() -> bool:
    try:
        fd = os.open("/dev/tty", os.O_RDONLY)
    except OSError:
        return False
    try:
        return os.tcgetpgrp(fd) == os.getpgrp()
    except OSError:
        return False
    finally:
        os.close(fd)


def capture(argv: list[str], output: str | None = None, view: str = "blocks", access: bool = True,
            simulated_gpu: bool = False, quiet: bool = False, ring_records: int | None = None,
            env: dict[str, str] | None = None, stacks: str = "python") -> int:
    """Run ``argv`` under the shim, write the trace to ``output``; returns its exit status
    (128+N when killed by signal N)."""
    if not argv:
        raise PyinterposeError("no command given: pyinterpose run [options] -- CMD ...")
    if view not in VIEWS:
        raise PyinterposeError(f"unknown view {view!r} (choose from {', '.join(VIEWS)})")
    if stacks not in STACKS:
        raise PyinterposeError(f"unknown --stacks {stacks!r} (choose from {', '.join(STACKS)})")
    if not os.path.exists(SHIM):
        raise PyinterposeError(f"the preload library is missing ({SHIM}): reinstall pyinterpose")
    output = output or default_output(argv)
    child_env = dict(os.environ if env is None else env)
    _resolve_program(argv, child_env)
    try:
        from ..trace.writer import TraceWriter
    except ImportError as e:  # pragma: no cover
        raise PyinterposeError(str(e))

    session = secrets.token_hex(6)
    # the user's own allocator settings, which --view blocks overrides (kept in both views)
    user_env = {k: child_env[k] for k in BLOCKS_KNOBS if k in child_env}
    knobs = view_environment(view, child_env)
    child_env.update(knobs)
    preload = [SHIM] + [p for p in child_env.get("LD_PRELOAD", "").replace(":", " ").split() if p]
    child_env["LD_PRELOAD"] = ":".join(preload)
    child_env["PYINTERPOSE_SESSION"] = session
    child_env["PYINTERPOSE_CONSUMER_PID"] = str(os.getpid())
    child_env["PYINTERPOSE_ACCESS"] = "1" if access else "0"
    child_env["PYINTERPOSE_STACKS"] = stacks
    if ring_records:
        child_env["PYINTERPOSE_RING_RECORDS"] = str(int(ring_records))
    if simulated_gpu:
        child_env["LD_LIBRARY_PATH"] = ":".join(p for p in [SIMCUDA, child_env.get("LD_LIBRARY_PATH", "")] if p)

    nvml_info, sampler = _nvml_start()
    t0 = time.monotonic_ns()
    meta = {
        "format": "pyinterpose-trace", "pyinterpose_version": __version__, "command": list(argv),
        "cwd": os.getcwd(), "view": view, "access": access, "stacks": stacks, "site_format": 1, "simulated_gpu": simulated_gpu,
        "knobs": knobs, "user_env": user_env, "session": session, "t0_ns": t0, "start_time": time.time(),
        "host": platform.node(), "platform": platform.platform(), "python": sys.version.split()[0],
        "apis": records.api_names(), "kinds": {str(k): v for k, v in records.kinds().items()},
        "record_size": records.event_dtype().itemsize, "nvml": nvml_info,
        "cuda_visible_devices": child_env.get("CUDA_VISIBLE_DEVICES"),
        "gpus": [{"nvml_index": d.get("index"), "name": d.get("name"), "uuid": d.get("uuid")}
                 for d in nvml_info.get("devices", [])] if nvml_info.get("available") else [],
    }
    try:
        writer = TraceWriter(output, meta)
    except OSError as e:
        if sampler:
            sampler.stop()
        raise PyinterposeError(f"cannot write trace {output}: {e.strerror or e}")

    drain = Drain(session, writer)
    drain.start()
    status = 0
    try:
        with _SignalForwarder() as fwd:
            try:
                proc = subprocess.Popen(argv, env=child_env)
            except OSError as e:
                raise PyinterposeError(f"cannot start {argv[0]}: {e.strerror or e}", exit_code=127)
            fwd.attach(proc)
            while True:
                try:
                    rc = proc.wait()
                    break
                except KeyboardInterrupt:  # pragma: no cover (handler swallows SIGINT)
                    continue
        status = rc if rc >= 0 else 128 - rc
    finally:
        procs = drain.finish()
        nvml_rows = sampler.stop() if sampler else None
        if nvml_rows is not None and len(nvml_rows):
            rows = nvml_rows.copy()
            rows["t"] = rows["t"] - t0
            writer.nvml(list(rows.columns), rows.values.tolist())
        end = time.monotonic_ns()
        written = sum(p["written"] for p in procs)
        lost = sum(p["lost"] for p in procs)
        writer.trailer({"exit_status": status, "end_ns": end, "duration_s": (end - t0) / 1e9,
                        "processes": procs, "events_written": written, "events_lost": lost,
                        "events_in_file": writer.events_written})
        writer.close()
    if not quiet:
        _print_done(output, procs, writer.events_written, status)
    return status


def _print_done(output: str, procs: list[dict], events: int, status: int) -> None:
    lost = sum(p["lost"] for p in procs)
    waits = sum(p["waits"] for p in procs)
    note = f", {lost} LOST" if lost else ", 0 lost"
    if waits:
        note += f", producers waited {waits}x for the drain"
    msg = (f"pyinterpose: wrote {output} ({events} events from {len(procs)} process"
           f"{'es' if len(procs) != 1 else ''}{note}); program exited with {status}\n"
           f"  next: pyinterpose summary {output}\n"
           f"        pyinterpose iterations {output}\n"
           f"        pyinterpose pools {output}\n"
           f"        pyinterpose swap {output} --bandwidth 25\n"
           f"        pyinterpose report {output} -o report.html\n")
    sys.stderr.write(msg)
    sys.stderr.flush()
