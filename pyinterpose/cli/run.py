"""pyinterpose run [-o FILE] [-f] [--view blocks|reserved] [--no-access] [--simulated-gpu] [--stacks python|native|none] [--gpu-clock auto|cupti|off] [--ring-dir DIR] [--apply PLAN] [--capture-range cudaProfilerApi|markers|signal | --steps A:B | --flight-recorder N] [--live] -- CMD ..."""
from __future__ import annotations

# Lazy imports (in functions): `pyinterpose --help` loads every cli module, so analyses/reports load on use.

import argparse
import os

from ..errors import PyinterposeError
from . import _args as A


def register(sub) -> None:
    p = sub.add_parser(
        "run", help="run a program under the profiler and write a trace",
        description="Run CMD with the CUDA interposer preloaded and write one trace file.",
        usage="pyinterpose run [-o FILE] [-f] [--view blocks|reserved] [--no-access] [--simulated-gpu] "
              "[--stacks python|native|none] [--gpu-clock auto|cupti|off] [--ring-dir DIR] [--apply plan.json] "
              "[--capture-range cudaProfilerApi|markers|signal | --steps A:B | --flight-recorder N] [--live] "
              "-- CMD ...",
        epilog="Exit status: the program's own (128+N when killed by signal N); 3 when the program exited 0 "
               "but the capture is incomplete (a process could not be recorded, events were lost, or the "
               "trace could not be written) -- one line on stderr says what; 4 when --gpu-clock cupti was asked, the "
               "program exited 0, and a process that ran kernels or copies got no device clock.")
    p.add_argument("-o", "--output", metavar="FILE", type=_output_template,
                   help="trace file (default: pyinterpose-<prog>-<pid>.pit); a template for a job's nodes: "
                        "{host}, {pid}, {rank}, {local_rank}, {world_size}, e.g. trace-{host}-{rank}.pit")
    p.add_argument("-f", "--force", action="store_true", help="overwrite the trace file if it exists")
    p.add_argument("--view", choices=["blocks", "reserved"], default="blocks",
                   help="blocks: make each tensor its own CUDA allocation (framework knobs set and recorded); "
                        "reserved: leave the framework's allocator alone (default: blocks)")
    p.add_argument("--no-access", action="store_true", help="do not scan kernel arguments for block accesses")
    p.add_argument("--simulated-gpu", action="store_true",
                   help="put simcuda (the simulated CUDA runtime and driver) on the library path")
    p.add_argument("--stacks", choices=["python", "native", "none"], default="python",
                   help="call stack recorded with each allocation: the thread's Python stack, the native "
                        "return-address chain, or none (the calling library is always recorded) "
                        "(default: python)")
    p.add_argument("--gpu-clock", choices=["auto", "cupti", "off"], default="auto",
                   help="device timestamps of kernels, copies and memsets through CUPTI: auto (when libcupti "
                        "is there and free), cupti (required: the run still runs, but exits 4 and says so "
                        "when a process got none), off (never load CUPTI) (default: auto)")
    p.add_argument("--ring-dir", metavar="DIR",
                   help="where rings go when /dev/shm has no room (default: $TMPDIR); a private folder is made "
                        "and removed there")
    p.add_argument("--apply", metavar="PLAN",
                   help="serve the program's allocations from the arena of a plan file (pyinterpose plan TRACE "
                        "-o plan.json; docs/apply.md); requests the plan does not know go to the real allocator")
    p.add_argument("--capture-range", choices=["cudaProfilerApi", "markers", "signal"], default=None,
                   help="record only inside windows: between cudaProfilerStart/cuProfilerStart and their Stop, "
                        "between pyinterpose.start() and pyinterpose.stop(), or toggled by SIGUSR2 to run; each "
                        "window opens with a snapshot of every block live then, and the trace keeps the whole "
                        "run's per-step history")
    p.add_argument("--steps", metavar="A:B", default=None,
                   help="record only steps A to B-1 (steps begin at pyinterpose.mark_step() markers)")
    p.add_argument("--flight-recorder", metavar="N", type=A.count(1, 1 << 20), default=None,
                   help="keep only the last N steps in full (plus the blocks live when the oldest began) and the "
                        "whole run's per-step history; written at exit (even when the program is killed), on "
                        "SIGUSR1 to run and at the first out-of-memory failure as -o's path with -dumpK before "
                        "the extension")
    p.add_argument("--live", action="store_true",
                   help="a live terminal view while the program runs: step, live and reserved bytes per process, "
                        "growth so far, top call sites (needs the per-step history: with --flight-recorder, "
                        "--capture-range or --steps; alone it implies --flight-recorder 20)")
    p.add_argument("--ring-records", type=A.count(64, 1 << 30), default=None, help=argparse.SUPPRESS)
    p.add_argument("-q", "--quiet", action="store_true", help="do not print where the trace went")
    p.add_argument("cmd", nargs=argparse.REMAINDER, metavar="CMD", help="the program and its arguments")
    p.set_defaults(func=_run, outputs=(("output", "-o"),))


def _output_template(text: str) -> str:
    from ..capture.output import expand

    try:
        return expand(text)
    except PyinterposeError as e:
        raise argparse.ArgumentTypeError(str(e).replace(f"-o {text}: ", "", 1))


def _run(args) -> int:
    from ..capture.run import capture

    cmd = list(args.cmd)
    if cmd and cmd[0] == "--":
        cmd = cmd[1:]
    if args.ring_dir is not None and not os.path.isdir(args.ring_dir):
        raise PyinterposeError(f"--ring-dir {args.ring_dir}: not a directory")
    if args.ring_dir is not None:
        _check_writable_dir(args.ring_dir)
    flight = args.flight_recorder
    live = None
    if args.live:
        from ..capture.live import LiveView

        if flight is None and args.capture_range is None and args.steps is None:
            flight = 20
        live = LiveView()
    return capture(cmd, output=args.output, view=args.view, access=not args.no_access,
                   simulated_gpu=args.simulated_gpu, quiet=args.quiet, ring_records=args.ring_records,
                   stacks=args.stacks, force=args.force, ring_dir=args.ring_dir, gpu_clock=args.gpu_clock,
                   after=explain_oom, apply=args.apply, capture_range=args.capture_range, steps=args.steps,
                   flight_recorder=flight, live=live)


def explain_oom(output: str, procs: list[dict]) -> None:
    """After the program: when an allocation failed for lack of memory, a compact explanation on
    stderr (never changes run's exit status; a failure to explain is one line)."""
    import sys

    if not sum(int(p.get("oom_failures") or 0) for p in procs) or not os.path.exists(output):
        return
    try:
        from .. import load
        from ..analysis.oom import explain
        from ..report.oom_text import compact

        lines = compact(explain(load(output)), output)
    except Exception as e:  # noqa: BLE001 - the trace is written; the explanation is a bonus
        lines = [f"pyinterpose: allocations failed for lack of memory; no explanation ({type(e).__name__}: {e}); "
                 f"try: pyinterpose summary {output}"]
    sys.stderr.write("\n".join(lines) + "\n")
    sys.stderr.flush()


def _check_writable_dir(path: str) -> None:
    """Refuse a --ring-dir where no folder can be created, before the program starts (a real probe: the
    permission bits say nothing for root or on a read-only file system)."""
    import tempfile

    try:
        os.rmdir(tempfile.mkdtemp(prefix=".pyinterpose-probe-", dir=path))
    except OSError as e:
        raise PyinterposeError(f"--ring-dir {path}: cannot create a ring folder there ({e.strerror or e})") from None
