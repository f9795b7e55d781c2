"""``run --live``: a terminal view of the job while it runs (rich's Live, on stderr), built on the per-step
history the drain keeps anyway (pyinterpose/capture/window.py): per process, its step, live and reserved
bytes, the step's peak, the growth so far (bytes per step, a least-squares line through the live bytes
at step boundaries) and the call sites holding the most live bytes.  It reads the drain's state from a
thread of its own a few times a second; the program pays nothing more."""
from __future__ import annotations

import sys
import threading

import numpy as np


def _fmt(n: float) -> str:
    n = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"


def growth_so_far(rows: list[list[int]]) -> float | None:
    """Bytes per step through the live bytes at the end of each history row (None: under two rows)."""
    if len(rows) < 2:
        return None
    a = np.asarray(rows, dtype=np.float64)
    x = a[:, 0] + a[:, 1]
    if np.ptp(x) == 0:
        return None
    return float(np.polyfit(x, a[:, 5], 1)[0])


def call_site_name(proc, sid: int) -> str:
    """The first frame outside allocation helpers: frames that are the innermost of several sites whose
    next frame differs are skipped (a program's own malloc wrapper)."""
    frames = proc.site_frames(sid)
    if not frames:
        return f"{proc.strings.get(proc.sites[sid][0], '?') or '?'} (no stack)"
    callers: dict[str, set] = {}
    for other in range(len(proc.sites)):
        fr = proc.site_frames(other)
        for k in range(len(fr) - 1):
            callers.setdefault(fr[k], set()).add(fr[k + 1])
    k = 0
    while k < len(frames) - 1 and len(callers.get(frames[k], ())) >= 2:
        k += 1
    return frames[k]


def snapshot(windows, top: int = 5) -> list[dict]:
    """What the view shows, per process (a pure read of the drain's state)."""
    out = []
    for pid, p in sorted(list(windows.procs.items())):
        rows = list(p.history.rows)
        cur = p.history.cur
        sites = sorted(((b, s) for s, b in list(p.site_bytes.items()) if b > 0 and s >= 0), reverse=True)[:top]
        out.append({"pid": pid, "step": p.step, "live": p.live_bytes, "reserved": p.reserved_bytes,
                    "peak": p.peak, "step_peak": cur[7] if cur else None, "growth": growth_so_far(rows),
                    "sites": [(call_site_name(p, s), b) for b, s in sites]})
    return out


def render(snap: list[dict]):
    from rich.table import Table  # lazy: rich only for the live terminal view

    t = Table(title="pyinterpose --live", expand=False)
    for c in ("pid", "step", "live", "reserved", "peak", "growth/step", "top call sites (live bytes)"):
        t.add_column(c, justify="left" if c.startswith("top") else "right")
    for r in snap:
        g = r["growth"]
        sites = "\n".join(f"{_fmt(b):>10}  {name}" for name, b in r["sites"]) or "-"
        t.add_row(str(r["pid"]), str(max(r["step"], 0)), _fmt(r["live"]), _fmt(r["reserved"]), _fmt(r["peak"]),
                  "-" if g is None else f"{'+' if g >= 0 else '-'}{_fmt(abs(g))}", sites)
    if not snap:
        t.add_row("-", "-", "-", "-", "-", "-", "waiting for the program's first CUDA call")
    return t


class LiveView:
    def __init__(self, interval_s: float = 0.25, stream=None):
        self.interval_s = interval_s
        self.stream = stream or sys.stderr
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.frames = 0

    def start(self, drain) -> None:
        drain.windows.names = True
        self.windows = drain.windows
        self._thread = threading.Thread(target=self._loop, name="pyinterpose-live", daemon=True)
        self._thread.start()

    def _safe(self):
        for _ in range(5):
            try:
                return snapshot(self.windows)
            except RuntimeError:        # a dict changed size under us (the drain's thread): try again
                continue
        return None

    def _loop(self) -> None:
        from rich.console import Console  # lazy: rich only for the live terminal view
        from rich.live import Live  # lazy: rich only for the live terminal view

        con = Console(file=self.stream)
        with Live(render([]), console=con, auto_refresh=False, transient=False, redirect_stdout=False,
                  redirect_stderr=False) as live:
            while True:
                snap = self._safe()
                if snap is not None:
                    live.update(render(snap), refresh=True)
                    self.frames += 1
                if self._stop.wait(self.interval_s):
                    snap = self._safe()
                    if snap is not None:
                        live.update(render(snap), refresh=True)
                    break

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
