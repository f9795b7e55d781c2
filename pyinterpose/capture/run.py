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
from ..installation import NATIVE, SHIM, SIMCUDA, not_built_message
from ..trace import records
from ..trace.writer import TraceWriter
from . import gpuclock
from .drain import Drain
from .ring import DEFAULT_LEASE_S


# --view blocks: make every tensor/buffer its own CUDA allocation (DESIGN §3).
BLOCKS_KNOBS = {
    "PYTORCH_CUDA_ALLOC_CONF": "backend:cudaMallocAsync",
    "PYTORCH_ALLOC_CONF": "backend:cudaMallocAsync",
    "XLA_PYTHON_CLIENT_ALLOCATOR": "platform",
    "XLA_PYTHON_CLIENT_PREALLOCATE": "false",
    "TF_GPU_ALLOCATOR": "cuda_malloc_async",
}
# CUDA graphs (XLA's command buffers, torch.cuda.graph, reduce-overhead) are left on in every view: the shim
# records what is captured into a graph and the reader expands each replay (trace/graphs.py).  Older
# versions set XLA_FLAGS=--xla_gpu_enable_command_buffer= here, changing the program they measured.
CUDA_GRAPHS_NOTE = ("left on (XLA command buffers included): captured calls are graph nodes, every replay is "
                    "expanded into its nodes' accesses and memory blocks")
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
    return dict(BLOCKS_KNOBS)


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
        from . import nvml  # lazy: nvml.py loads pandas, not wanted at every run's start
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


_FRAMEWORK_DISTS = ("torch", "jax", "jaxlib", "tensorflow", "cupy")


def framework_versions(argv: list[str], env: dict[str, str]) -> dict[str, str]:
    """Versions of the frameworks installed for the program's Python, when the program is this very
    interpreter (``python`` of the same environment: the same site-packages), read from the
    installed packages' metadata (no import, no process started); {} otherwise: another Python's
    packages are not this one's to report."""
    if not argv:
        return {}
    exe = argv[0] if os.sep in argv[0] else shutil.which(argv[0], path=env.get("PATH"))
    if not exe or not os.path.basename(exe).startswith("python"):
        return {}
    if os.path.dirname(os.path.abspath(exe)) != os.path.dirname(os.path.abspath(sys.executable)):
        return {}
    from importlib import metadata

    out = {}
    for dist in _FRAMEWORK_DISTS:
        try:
            out[dist] = metadata.version(dist)
        except Exception:  # noqa: BLE001 - not installed, or unreadable metadata: not reported
            continue
    return out


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


CAPTURE_INCOMPLETE_EXIT = 3  # the program exited 0 but the capture did not record all of it


def _nested_session(env: dict[str, str]) -> str | None:
    """The session of an enclosing ``pyinterpose run`` (this run was started under one), if any."""
    s = env.get("PYINTERPOSE_SESSION")
    return s if s else None


def _spawn(argv, env, cwd=None) -> int:
    """Start the program, forward signals, wait; its exit status (128+N when killed by signal N)."""
    with _SignalForwarder() as fwd:
        try:
            proc = subprocess.Popen(argv, env=env, cwd=cwd)
        except OSError as e:
            raise PyinterposeError(f"cannot start {argv[0]}: {e.strerror or e}", exit_code=127)
        fwd.attach(proc)
        while True:
            try:
                rc = proc.wait()
                break
            except KeyboardInterrupt:  # pragma: no cover (handler swallows SIGINT)
                continue
    return rc if rc >= 0 else 128 - rc


def ring_folder_prefix(session: str, pid: int) -> str:
    """The name a run's private folder starts with: its session and the pid of `run` (``r<pid>``), so that
    a later run can tell the folder of a dead run from a live one's."""
    return f"pyinterpose-{session}-r{pid}-"


def _pid_namespace() -> str | None:
    try:
        return os.readlink("/proc/self/ns/pid")
    except OSError:
        return None


def _remove_stale_ring_dirs(where: str | None) -> None:
    """Remove the folders that runs killed with their program left behind (nobody was left to remove
    them): those named by :func:`ring_folder_prefix` whose `run` pid no longer exists here.  Only folders
    of this pid namespace's runs can be judged; a live pid (or one reused) keeps its folder."""
    import re
    import tempfile

    d = where or tempfile.gettempdir()
    try:
        names = os.listdir(d)
    except OSError:
        return
    pat = re.compile(r"pyinterpose-[0-9a-f]{12}-r(\d+)-")
    for n in names:
        m = pat.match(n)
        if not m:
            continue
        try:
            os.kill(int(m.group(1)), 0)
            continue                     # alive (or not ours to signal: EPERM): keep
        except ProcessLookupError:
            pass
        except (PermissionError, OverflowError, OSError):
            continue
        path = os.path.join(d, n)
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path, ignore_errors=True)


def _make_ring_dir(session: str, ring_dir: str | None) -> tuple[str | None, str | None]:
    """A private directory for file-backed rings and the shim's "not recorded" notes: (path, None), or
    (None, why it could not be made)."""
    import tempfile

    _remove_stale_ring_dirs(ring_dir)
    try:
        return tempfile.mkdtemp(prefix=ring_folder_prefix(session, os.getpid()), dir=ring_dir), None
    except OSError as e:
        where = ring_dir or tempfile.gettempdir()
        return None, (f"no ring folder: cannot create one in {where} ({e.strerror or e}): a process with no room "
                      "for its ring in /dev/shm was neither recorded nor reported")


def capture(argv: list[str], output: str | None = None, view: str = "blocks", access: bool = True,
            simulated_gpu: bool = False, quiet: bool = False, ring_records: int | None = None,
            env: dict[str, str] | None = None, stacks: str = "python", cwd: str | None = None,
            force: bool = False, ring_dir: str | None = None, gpu_clock: str = "auto", after=None,
            apply: str | None = None, capture_range: str | None = None, steps: str | None = None,
            flight_recorder: int | None = None, live=None) -> int:
    """Run ``argv`` under the shim, write the trace to ``output``; returns its exit status
    (128+N when killed by signal N), or CAPTURE_INCOMPLETE_EXIT when the program exited 0 but some
    process was not recorded, events were lost or the trace could not be written, or
    gpuclock.GPU_CLOCK_MISSING_EXIT when it exited 0, ``gpu_clock`` is "cupti" and a process that ran
    device work got no device clock.  ``after``: called as ``after(output, procs)`` once the trace is
    written (procs: each process's ring counters, e.g. ``oom_failures``)."""
    _check_options(argv, view, gpu_clock, stacks)
    child_env = dict(os.environ if env is None else env)
    if simulated_gpu:
        child_env["LD_LIBRARY_PATH"] = ":".join(p for p in [SIMCUDA, child_env.get("LD_LIBRARY_PATH", "")] if p)
    outer = _nested_session(child_env)
    if outer:
        # Under another `pyinterpose run`: the program's events go to the enclosing capture (its session,
        # view and drain are already in the environment); this run writes no trace of its own.
        _resolve_program(argv, child_env)
        sys.stderr.write(f"pyinterpose: already inside `pyinterpose run` (session {outer}): the command is "
                         f"recorded into the enclosing trace; {output or 'no separate trace'} is not written\n")
        sys.stderr.flush()
        return _spawn(argv, child_env, cwd)
    _check_built()
    from . import window_run    # lazy: after the check: it reads the record layout, absent from an unbuilt tree

    windows = window_run.configure(capture_range, steps, flight_recorder)   # None: the whole run
    output = output or default_output(argv)
    if os.path.exists(output) and not force:
        raise PyinterposeError(f"-o {output}: file exists; pass -f to overwrite")
    _resolve_program(argv, child_env)
    session = secrets.token_hex(6)
    # the user's own allocator settings, which --view blocks overrides (kept in both views)
    user_env = {k: child_env[k] for k in BLOCKS_KNOBS if k in child_env}
    knobs = view_environment(view, child_env)
    child_env.update(knobs)
    _shim_environment(child_env, session, access, stacks, gpu_clock, ring_records)
    if windows is not None:   # windows the program opens: the shim leaves launches out while closed
        for k in ("PYINTERPOSE_WINDOW_GATE", "PYINTERPOSE_WINDOW_STEPS", "PYINTERPOSE_WINDOW_GATE_FILE"):
            child_env.pop(k, None)
        child_env.update(windows.shim_environment())
    rdir, rdir_error = _make_ring_dir(session, ring_dir)
    if rdir:
        child_env["PYINTERPOSE_RING_DIR"] = rdir
    if windows is not None:   # a signal window: run's word in the ring folder gates the shims too
        child_env.update(windows.open_gate(rdir))
    apply_meta = None
    if apply:   # --apply plan.json: its digest for the shim (pyinterpose.capture.apply)
        from . import apply as applying    # lazy: pandas (the plan's check): not at every run's start
        try:
            apply_meta = applying.prepare(apply, rdir, argv, knobs, child_env)
        except BaseException:
            _remove_dir(rdir)
            raise
    nvml_info, sampler = _nvml_start()
    t0 = time.monotonic_ns()
    meta = _trace_meta(argv, cwd, view, access, stacks, simulated_gpu, gpu_clock, apply_meta, knobs, user_env,
                       session, t0, nvml_info, child_env)
    if windows is not None:
        meta["capture_window"] = windows.describe()
    try:
        writer = TraceWriter(output, meta)
    except OSError as e:
        if sampler:
            sampler.stop()
        _remove_dir(rdir)
        _remove_file(output)
        raise PyinterposeError(f"cannot write trace {output}: {e.strerror or e}")

    drain = Drain(session, writer, ring_dir=rdir, lease_s=_lease_s())
    signals = _attach_windows(drain, windows, output, meta, force, quiet)
    if live is not None:
        live.start(drain)
    drain.start()
    status = 0
    try:
        status = _spawn(argv, child_env, cwd)
    finally:
        procs = drain.finish()
        if live is not None:
            live.stop()     # after the last records: its last frame shows the run's end
        if windows is not None:
            signals.__exit__(None, None, None)
            window_run.finish(windows, writer, drain._write, drain.dumper, procs)
            windows.close_gate()
        unrecorded = drain.unrecorded()
        apply_status = applying.read_status(rdir) if apply else []
        _remove_dir(rdir)
        capture_error = _close_trace(drain, writer, sampler, t0, status, procs, unrecorded, rdir_error)
    if not quiet:
        _print_done(output, procs, writer.events_written, status)
    if apply:
        for line in applying.report(apply, apply_status, quiet):
            sys.stderr.write(line + "\n")
        sys.stderr.flush()
    if after is not None:
        after(output, procs)
    return _exit_status(output, status, procs, unrecorded, capture_error, gpu_clock)


def _trace_meta(argv, cwd, view, access, stacks, simulated_gpu, gpu_clock, apply_meta, knobs, user_env, session,
                t0, nvml_info, child_env) -> dict:
    """The trace's META chunk: the run's command, options, machine and the record layout it was written with."""
    return {
        "format": "pyinterpose-trace", "pyinterpose_version": __version__, "command": list(argv),
        "cwd": os.path.abspath(cwd or os.getcwd()), "view": view, "access": access, "stacks": stacks,
        "site_format": 1, "simulated_gpu": simulated_gpu, "gpu_clock": gpu_clock, "apply": apply_meta,
        "knobs": knobs, "cuda_graphs": CUDA_GRAPHS_NOTE, "user_env": user_env, "session": session, "t0_ns": t0,
        "start_time": time.time(),
        "host": platform.node(), "platform": platform.platform(), "python": sys.version.split()[0],
        "apis": records.api_names(), "kinds": {str(k): v for k, v in records.kinds().items()},
        "record_size": records.event_dtype().itemsize, "nvml": nvml_info,
        "cuda_visible_devices": child_env.get("CUDA_VISIBLE_DEVICES"),
        "gpus": [{"nvml_index": d.get("index"), "name": d.get("name"), "uuid": d.get("uuid")}
                 for d in nvml_info.get("devices", [])] if nvml_info.get("available") else [],
        "frameworks": framework_versions(argv, child_env),
    }


def _attach_windows(drain: Drain, windows, output: str, meta: dict, force: bool, quiet: bool):
    """Capture windows / the flight recorder (window_run.py) on the drain; their signal handlers (None: none)."""
    if windows is None:
        return None
    from . import window_run    # lazy: it reads the record layout, absent from an unbuilt tree

    drain.windows = windows
    if windows.mode == "flight":
        drain.dumper = window_run.Dumper(output, meta, windows, force, quiet)
    signals = window_run.Signals(windows, drain.dumper)
    signals.__enter__()
    return signals


def _check_options(argv: list[str], view: str, gpu_clock: str, stacks: str) -> None:
    if not argv:
        raise PyinterposeError("no command given: pyinterpose run [options] -- CMD ...")
    if view not in VIEWS:
        raise PyinterposeError(f"unknown view {view!r} (choose from {', '.join(VIEWS)})")
    if gpu_clock not in gpuclock.MODES:
        raise PyinterposeError(f"unknown --gpu-clock {gpu_clock!r} (choose from {', '.join(gpuclock.MODES)})")
    if stacks not in STACKS:
        raise PyinterposeError(f"unknown --stacks {stacks!r} (choose from {', '.join(STACKS)})")


def _check_built() -> None:
    """The shim and the drain's C copy loop (_core) must be built."""
    if not os.path.exists(SHIM):
        raise PyinterposeError(not_built_message(SHIM))
    try:
        from .. import _core  # noqa: F401  (lazy: compiled: absent from a source tree that is not built)
    except ImportError:
        raise PyinterposeError(not_built_message(os.path.join(os.path.dirname(NATIVE), "_core (cffi extension)")))


def _shim_environment(child_env: dict[str, str], session: str, access: bool, stacks: str, gpu_clock: str,
                      ring_records: int | None) -> None:
    """What the shim reads from the program's environment (native/shim/shim.c), set in ``child_env``."""
    preload = [SHIM] + [p for p in child_env.get("LD_PRELOAD", "").replace(":", " ").split() if p]
    child_env["LD_PRELOAD"] = ":".join(preload)
    child_env["PYINTERPOSE_SESSION"] = session
    child_env["PYINTERPOSE_CONSUMER_PID"] = str(os.getpid())
    child_env["PYINTERPOSE_ACCESS"] = "1" if access else "0"
    child_env["PYINTERPOSE_STACKS"] = stacks
    child_env["PYINTERPOSE_GPU_CLOCK"] = gpu_clock
    if ring_records:
        child_env["PYINTERPOSE_RING_RECORDS"] = str(int(ring_records))
    pidns = _pid_namespace()
    if pidns:
        child_env["PYINTERPOSE_CONSUMER_PIDNS"] = pidns   # the shim sees a dead `run` at once (native/shim)


def _lease_s() -> float:
    try:
        return float(os.environ.get("PYINTERPOSE_LEASE_S", "") or DEFAULT_LEASE_S)
    except ValueError:
        return DEFAULT_LEASE_S


def _close_trace(drain: Drain, writer: TraceWriter, sampler, t0: int, status: int, procs: list[dict],
                 unrecorded: list[dict], rdir_error: str | None) -> str | None:
    """The NVML samples and the trailer written, the trace closed; the capture's error (None: none)."""
    try:
        nvml_rows = sampler.stop() if sampler else None
    except Exception:  # noqa: BLE001 - NVML trouble never costs the trace
        nvml_rows = None
    if nvml_rows is not None and len(nvml_rows):
        rows = nvml_rows.copy()
        rows["t"] = rows["t"] - t0
        drain._write(writer.nvml, list(rows.columns), rows.values.tolist())
    end = time.monotonic_ns()
    written = sum(p["written"] for p in procs)
    lost = sum(p["lost"] for p in procs)
    capture_error = drain.write_error or drain.error
    if rdir_error:
        # a process without a ring could not have said so: the capture cannot be called complete
        capture_error = f"{capture_error}; {rdir_error}" if capture_error else rdir_error
    trailer = {"exit_status": status, "end_ns": end, "duration_s": (end - t0) / 1e9,
               "processes": procs, "events_written": written, "events_lost": lost,
               "events_in_file": writer.events_written, "unrecorded": unrecorded}
    if capture_error:
        trailer["capture_error"] = capture_error
    if drain.write_error:  # one more try: the trailer is small, and the partial chunk was cut off
        drain.write_error = None
        if not drain._write(writer.trailer, trailer):
            capture_error = f"{capture_error}; no trailer"
    else:
        drain._write(writer.trailer, trailer)
        if drain.write_error:
            capture_error = drain.write_error
    writer.close()
    return capture_error


def _exit_status(output: str, status: int, procs: list[dict], unrecorded: list[dict], capture_error: str | None,
                 gpu_clock: str) -> int:
    """``run``'s exit status, and the lines that say why it is not the program's own."""
    problems = _capture_problems(procs, unrecorded, capture_error)
    if problems:
        sys.stderr.write(f"pyinterpose: capture INCOMPLETE: {problems}; the trace {output} says so"
                         + (f" (exit status {CAPTURE_INCOMPLETE_EXIT}: the program itself exited 0)"
                            if status == 0 else "") + "\n")
        sys.stderr.flush()
    if problems and status == 0:
        return CAPTURE_INCOMPLETE_EXIT
    no_clock = gpuclock.missing(procs)
    if gpu_clock == "cupti" and no_clock:
        p = no_clock[0]
        sys.stderr.write(f"pyinterpose: --gpu-clock cupti: NO device clock in {len(no_clock)} process"
                         f"{'es' if len(no_clock) != 1 else ''} (pid {p['pid']}: {p.get('clock_reason') or '?'}); "
                         f"the trace {output} has CPU times only"
                         + (f" (exit status {gpuclock.GPU_CLOCK_MISSING_EXIT}: the program itself exited 0)"
                            if status == 0 else "") + "\n")
        sys.stderr.flush()
        if status == 0:
            return gpuclock.GPU_CLOCK_MISSING_EXIT
    return status


def _capture_problems(procs: list[dict], unrecorded: list[dict], error: str | None) -> str:
    """One line: what the capture missed ("" when it recorded everything)."""
    parts = []
    if unrecorded:
        u = unrecorded[0]
        parts.append(f"{len(unrecorded)} process{'es' if len(unrecorded) != 1 else ''} not recorded "
                     f"(pid {u.get('pid')}: {u.get('reason')})")
    lost = sum(p["lost"] for p in procs)
    if lost:
        parts.append(f"{lost} events lost")
    if error:
        parts.append(error)
    return "; ".join(parts)


def _remove_dir(path: str | None) -> None:
    if path:
        shutil.rmtree(path, ignore_errors=True)


def _remove_file(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass


def exit_words(status: int) -> str:
    """'program exited with 0', or 'program killed by SIGSEGV (exit status 139)' for 128+N."""
    if status > 128:
        try:
            return f"program killed by {signal.Signals(status - 128).name} (exit status {status})"
        except ValueError:
            pass
    return f"program exited with {status}"


def _print_done(output: str, procs: list[dict], events: int, status: int) -> None:
    lost = sum(p["lost"] for p in procs)
    waits = sum(p["waits"] for p in procs)
    note = f", {lost} LOST" if lost else ", 0 lost"
    if waits:
        note += f", producers waited {waits}x for the drain"
    msg = (f"pyinterpose: wrote {output} ({events} events from {len(procs)} process"
           f"{'es' if len(procs) != 1 else ''}{note}); {exit_words(status)}\n"
           f"  next: pyinterpose summary {output}\n"
           f"        pyinterpose iterations {output}\n"
           f"        pyinterpose pools {output}\n"
           f"        pyinterpose swap {output} --bandwidth 25\n"
           f"        pyinterpose report {output} -o report.html\n")
    clock = gpuclock.report_line(procs)
    if clock:
        msg = msg.replace("\n", f"\n  {clock}\n", 1)
    sys.stderr.write(msg)
    sys.stderr.flush()
