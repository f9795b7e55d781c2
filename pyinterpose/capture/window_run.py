"""``run``'s side of capture windows and the flight recorder: the options, the signals (SIGUSR2 toggles a
``--capture-range signal`` window, SIGUSR1 dumps the flight recorder), the dumps, and the side tables
written at the end (pyinterpose/capture/window.py keeps the state)."""
from __future__ import annotations

import os
import signal
import sys
import time

from ..errors import PyinterposeError
from ..trace import records
from .window import CAPTURE_RANGES, Windows
from ..trace.writer import TraceWriter


def parse_steps(text: str) -> tuple[int, int]:
    a, sep, b = text.partition(":")
    try:
        lo, hi = int(a), int(b)
    except ValueError:
        raise PyinterposeError(f"--steps {text}: expected A:B (record steps A to B-1)")
    if not sep or lo < 0 or hi <= lo:
        raise PyinterposeError(f"--steps {text}: expected A:B with 0 <= A < B")
    return lo, hi


def configure(capture_range: str | None, steps: str | None, flight_recorder: int | None) -> Windows | None:
    """The Windows of run's options (None: a full capture).  One of them at most."""
    given = [n for n, v in (("--capture-range", capture_range), ("--steps", steps),
                            ("--flight-recorder", flight_recorder)) if v is not None]
    if len(given) > 1:
        raise PyinterposeError(f"{' and '.join(given)}: choose one (a window, or the flight recorder)")
    if capture_range is not None:
        if capture_range not in CAPTURE_RANGES:
            raise PyinterposeError(f"unknown --capture-range {capture_range!r} (choose from "
                                   f"{', '.join(CAPTURE_RANGES)})")
        return Windows("range", range=capture_range)
    if steps is not None:
        return Windows("range", range="steps", steps=parse_steps(steps))
    if flight_recorder is not None:
        if flight_recorder < 1:
            raise PyinterposeError("--flight-recorder N: N must be at least 1 (steps kept)")
        return Windows("flight", flight_steps=int(flight_recorder))
    return None


def dump_path(output: str, k: int) -> str:
    """``-o``'s path with ``-dumpK`` before the extension: run.pit -> run-dump1.pit."""
    root, ext = os.path.splitext(output)
    return f"{root}-dump{k}{ext}"


class Dumper:
    """Flight-recorder dumps while the program runs: on SIGUSR1 to ``run`` and at each process's first
    allocation that fails for lack of memory (every process of the job is dumped, at that moment: the
    failing rank beside the others).
    Dumps are written from the drain's thread, between batches."""

    def __init__(self, output: str, meta: dict, windows: Windows, force: bool, quiet: bool):
        self.output = output
        self.meta = meta
        self.windows = windows
        self.force = force
        self.quiet = quiet
        self.requested = 0
        self.done = 0
        self.k = 0
        self.oom_dumped: set[int] = set()     # processes whose first OOM was dumped
        self.pending_oom = False
        self.paths: list[str] = []
        self.errors: list[str] = []

    def request(self) -> None:      # signal handler (main thread): only a counter
        self.requested += 1

    def poll(self, drain) -> None:
        """From the drain's loop: the dumps asked for (SIGUSR1) or due (an OOM), each after draining what
        every ring holds up to now (so that all processes are shown at the same moment)."""
        while self.done < self.requested or self.pending_oom:
            drain.poll()
            if self.done < self.requested:
                self.done += 1
                self.dump(_headers(drain), "signal")
            else:
                self.pending_oom = False
                self.dump(_headers(drain), "oom")

    def after_batch(self, drain) -> None:
        """Each process's first out-of-memory failure: a dump of every process (the job at that moment), due
        at the drain's next round."""
        failed = {pid for pid, p in list(self.windows.procs.items()) if p.oom_seen}
        if failed - self.oom_dumped:
            self.oom_dumped |= failed
            self.pending_oom = True

    def dump(self, headers: list[dict], reason: str) -> str | None:
        self.k += 1
        path = dump_path(self.output, self.k)
        try:
            if os.path.exists(path) and not self.force:
                raise OSError(f"{path} exists (pass -f to overwrite)")
            w = TraceWriter(path, dict(self.meta, dump={"k": self.k, "reason": reason}))
            try:
                for h in headers:
                    w.process(h)
                self.windows.dump(w, records.event_dtype())
                w.trailer({"dump": self.k, "reason": reason, "exit_status": None,
                           "end_ns": time.monotonic_ns(), "events_written": w.events_written,
                           "events_lost": 0, "events_in_file": w.events_written, "processes": []})
            finally:
                w.close()
        except OSError as e:
            self.errors.append(f"dump {self.k}: {getattr(e, 'strerror', None) or e}")
            return None
        self.paths.append(path)
        if not self.quiet:
            why = {"signal": "SIGUSR1", "oom": "an allocation failed for lack of memory"}[reason]
            sys.stderr.write(f"pyinterpose: flight recorder dumped to {path} ({why})\n")
            sys.stderr.flush()
        return path


def _headers(drain) -> list[dict]:
    out = []
    for ring in list(drain._rings.values()):
        if getattr(ring, "_announced", False):
            try:
                out.append(ring.header())
            except (OSError, ValueError):
                continue
    return out


class Signals:
    """SIGUSR1 (dump) and SIGUSR2 (toggle a signal window) to ``run`` while the program runs."""

    def __init__(self, windows: Windows, dumper: Dumper | None):
        self.windows = windows
        self.dumper = dumper
        self.old: dict = {}

    def __enter__(self):
        if self.dumper is not None:
            self.old[signal.SIGUSR1] = signal.signal(signal.SIGUSR1, lambda *_: self.dumper.request())
        if self.windows.range == "signal":
            self.old[signal.SIGUSR2] = signal.signal(signal.SIGUSR2, lambda *_: self.windows.signal())
        return self

    def __exit__(self, *exc):
        for sig, h in self.old.items():
            signal.signal(sig, h)


def finish(windows: Windows, writer, write, dumper: Dumper | None = None, procs: list[dict] | None = None) -> None:
    """At the end of the run (the program exited or was killed): a dump still due (an OOM right before the
    end), then the flight recorder's state, or the windows' side tables, into the trace (``write(fn,
    *args)``: the drain's guarded writer call)."""
    if dumper is not None and (dumper.pending_oom or dumper.done < dumper.requested):
        keys = ("pid", "ppid", "exe", "forked", "start_ns", "capacity", "ring", "ring_backing", "ring_reduced")
        heads = [{k: p[k] for k in keys if k in p} for p in procs or []]
        while dumper.done < dumper.requested:
            dumper.done += 1
            dumper.dump(heads, "signal")
        if dumper.pending_oom:
            dumper.pending_oom = False
            dumper.dump(heads, "oom")
    if windows.mode == "flight":
        write(windows.dump, writer, records.event_dtype())
        return
    win, hist = windows.side_tables()
    write(writer.window, win)
    for h in hist:
        write(writer.history, h)
