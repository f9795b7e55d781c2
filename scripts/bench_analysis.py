#!/usr/bin/env python3
"""Every analysis command and export on large simtrain traces: wall time and peak RSS.

Builds the traces itself (``pyinterpose run --simulated-gpu`` around
``simtrain --framework F --steps S``, S calibrated so the trace holds about N
events), caches them in ``--cache DIR``, then runs each command as a child
process and reads its wall time and peak RSS (``os.wait4`` rusage of that
child alone).  Prints one JSON object.  ``load`` reads the trace file (the reader, no cache);
``cache`` loads it and writes the columnar cache beside it (``<trace>.picache/``); the other
commands then read that cache (memory-mapped), or the file itself with ``--no-cache``.  The
100 M-event run of issue 30: ``--events 10000000,100000000 --timeout 900``.

    python scripts/bench_analysis.py [--events 1000000,10000000] [--framework torch[,jax]]
        [--cache DIR] [--commands load,cache,summary,...] [--timeout S] [--out FILE] [--no-cache]

With one framework the JSON holds ``traces`` (per event count) and ``growth``; with several
(``--framework torch,jax``) it holds ``frameworks: {name: {traces, growth}}`` and ``all_ok`` over all.

Targets (issue 15, 2-core development machine, 10 M events): load <= 5 s; every
analysis command <= 10 s (swap: all strategies, both modes); report and exports
<= 15 s; peak RSS <= 2 GB; growth from the smallest to the largest trace no
worse than x12 per 10x events.  ``ok`` judges wall time; ``cpu_s`` (user + sys of
the child) and ``loadavg`` are recorded beside it because wall time on a shared
machine measures the other tenants too.
"""
from __future__ import annotations

import argparse
import glob
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BW = "25"

# name -> (argv after `python -m pyinterpose`, with {trace} and {out}; target seconds)
COMMANDS = {
    "load": (None, 5),
    "cache": (None, 5),
    "summary": (["summary", "{trace}", "--json"], 10),
    "iterations": (["iterations", "{trace}", "--json"], 10),
    "access": (["access", "{trace}", "--json", "--bandwidth", BW], 10),
    "pools": (["pools", "{trace}", "--json"], 10),
    "swap": (["swap", "{trace}", "--json", "--bandwidth", BW], 10),
    "compare": (["compare", "{trace}", "{trace}", "--json", "--bandwidth", BW], 10),
    # fit's heaviest path: a capacity below the captured need, so that it tries the knobs, the planned
    # pool and host swapping (on a card of the table the captured allocator fits and nothing else runs)
    "fit": (["fit", "{trace}", "--json", "--capacity", "24MiB", "--bandwidth", BW], 10),
    "plan": (["plan", "{trace}", "-o", "{out}.plan.json", "-f", "--json"], 10),
    "diff": (["diff", "{trace}", "{trace}", "--json"], 10),
    "report": (["report", "{trace}", "-o", "{out}.html", "-f", "--bandwidth", BW], 15),
    "export-memory-viz": (["export", "{trace}", "--format", "memory-viz", "-o", "{out}.pickle", "-f"], 15),
    "export-perfetto": (["export", "{trace}", "--format", "perfetto", "-o", "{out}.json", "-f"], 15),
    "export-csv": (["export", "{trace}", "--format", "csv", "-o", "{out}.csv", "-f"], 15),
    "export-minimalloc": (["export", "{trace}", "--format", "minimalloc", "-o", "{out}.mm.csv", "-f"], 15),
    "export-folded": (["export", "{trace}", "--format", "folded", "-o", "{out}.folded", "-f"], 15),
    "export-speedscope": (["export", "{trace}", "--format", "speedscope", "-o", "{out}.speedscope.json", "-f"], 15),
}
LOAD_CODE = ("import sys, pyinterpose; t = pyinterpose.load(sys.argv[1]); "
             "print(len(t.blocks), len(t.accesses), len(t.launches))")
# "load" reads the trace file itself (no cache read or written); "cache" loads it and writes the
# columnar cache beside it (pyinterpose.trace.colcache; removed first); every other command then runs
# on that cache unless --no-cache, which also gives "load" for every command's first step.
NO_CACHE = False
RSS_CAP_MB = 0      # --rss-cap-mb: a child whose RSS passes this is killed (0: never)
KEEP_OUTPUTS = ""   # --keep-outputs: the commands' output files are moved there (e.g. the report, for bench_report.py)
RSS_TARGET_MB = 2048
# issue 30 (traces of 50 M events and more): 60 s per command, 120 s for report and exports, 4 GiB
LONG_EVENTS, LONG_RSS_TARGET_MB = 50_000_000, 4096
GROWTH_TARGET = 12.0


def machine() -> dict:
    cpu = ""
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem = 0
    try:
        for line in open("/proc/meminfo"):
            if line.startswith("MemTotal"):
                mem = int(line.split()[1]) // 1024
    except OSError:
        pass
    return {"cpu": cpu, "cpus": os.cpu_count(), "mem_mb": mem, "python": platform.python_version(),
            "kernel": platform.release()}


def child_env() -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = ROOT + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env


def rss_split(pid: int) -> tuple[int, int]:
    """(RssAnon, RssFile) of a process now, in KiB (0, 0 where /proc does not say)."""
    anon = file = 0
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("RssAnon:"):
                    anon = int(line.split()[1])
                elif line.startswith("RssFile:"):
                    file = int(line.split()[1])
    except (OSError, ValueError):
        pass
    return anon, file


def run_child(argv: list[str], timeout: float, stdout=subprocess.DEVNULL, env: dict | None = None) -> dict:
    """Run argv; wall seconds, peak RSS (MiB) of that child alone, exit code."""
    errf = tempfile.TemporaryFile()
    t0 = time.perf_counter()
    p = subprocess.Popen(argv, stdout=stdout, stderr=errf, env={**child_env(), **(env or {})}, cwd=ROOT)
    deadline = t0 + timeout
    anon = file = 0     # peak anonymous and file-backed (the memory-mapped cache's pages) RSS, sampled
    while True:
        pid, status, ru = os.wait4(p.pid, os.WNOHANG)
        if pid:
            break
        a, f = rss_split(p.pid)
        anon, file = max(anon, a), max(file, f)
        if RSS_CAP_MB and (a + f) > RSS_CAP_MB * 1024:   # a shared machine: never let one child take it all
            p.kill()
            pid, status, ru = os.wait4(p.pid, 0)
            return {"wall_s": round(time.perf_counter() - t0, 2), "rss_mb": round(ru.ru_maxrss / 1024),
                    "rss_anon_mb": round(anon / 1024), "rss_file_mb": round(file / 1024),
                    "cpu_s": round(ru.ru_utime + ru.ru_stime, 2), "rc": None, "killed_over_rss_mb": RSS_CAP_MB,
                    "loadavg": round(os.getloadavg()[0], 1)}
        if time.perf_counter() > deadline:
            p.kill()
            pid, status, ru = os.wait4(p.pid, 0)
            return {"wall_s": round(time.perf_counter() - t0, 2), "rss_mb": round(ru.ru_maxrss / 1024),
                    "cpu_s": round(ru.ru_utime + ru.ru_stime, 2), "rc": None, "timed_out": True}
        time.sleep(0.02)
    wall = time.perf_counter() - t0
    errf.seek(0)
    err = errf.read().decode(errors="replace")
    p.returncode = os.waitstatus_to_exitcode(status)
    out = {"wall_s": round(wall, 2), "rss_mb": round(ru.ru_maxrss / 1024), "rss_anon_mb": round(anon / 1024),
           "rss_file_mb": round(file / 1024), "rc": p.returncode,
           "user_s": round(ru.ru_utime, 2), "sys_s": round(ru.ru_stime, 2),
           "cpu_s": round(ru.ru_utime + ru.ru_stime, 2), "loadavg": round(os.getloadavg()[0], 1)}
    if p.returncode != 0:
        out["stderr"] = err.strip().splitlines()[-1:] if err.strip() else []
    return out


def capture(path: str, framework: str, steps: int, timeout: float) -> dict:
    argv = [sys.executable, "-m", "pyinterpose", "run", "-q", "--simulated-gpu", "-f", "-o", path, "--",
            sys.executable, "-m", "pyinterpose.examples.simtrain", "--framework", framework,
            "--steps", str(steps)]
    return run_child(argv, timeout)


def trace_events(path: str) -> int:
    out = subprocess.run([sys.executable, "-m", "pyinterpose", "summary", path, "--json"], env=child_env(),
                         capture_output=True, text=True, check=True, cwd=ROOT).stdout
    return int(json.loads(out)["counts"]["events"])


def build(cache: str, framework: str, events: int, timeout: float) -> tuple[str, dict]:
    """The cached trace of about ``events`` events (built on first use)."""
    path = os.path.join(cache, f"simtrain-{framework}-{events}.pit")
    info_path = path + ".json"
    if os.path.exists(path) and os.path.exists(info_path):
        return path, json.load(open(info_path))
    cal = os.path.join(cache, f"calibrate-{framework}.pit")
    r = capture(cal, framework, 200, timeout)
    if r["rc"] != 0:
        raise SystemExit(f"bench_analysis: calibration capture failed: {r}")
    per_step = trace_events(cal) / 200.0
    steps = max(1, round(events / per_step))
    r = capture(path + ".tmp", framework, steps, timeout)
    if r["rc"] != 0:
        raise SystemExit(f"bench_analysis: capture of {steps} steps failed: {r}")
    os.replace(path + ".tmp", path)
    info = {"framework": framework, "steps": steps, "events": trace_events(path),
            "file_mb": round(os.path.getsize(path) / 2**20, 1), "capture": r}
    json.dump(info, open(info_path, "w"))
    return path, info


def time_command(name: str, trace: str, outdir: str, timeout: float, events: int = 0) -> dict:
    argv, target = COMMANDS[name]
    env = {"PYINTERPOSE_NO_CACHE": "1"} if NO_CACHE or name == "load" else {"PYINTERPOSE_CACHE_MIN_BYTES": "0"}
    if argv is None:
        full = [sys.executable, "-c", LOAD_CODE, trace]
        if name == "cache":
            shutil.rmtree(trace + ".picache", ignore_errors=True)
    else:
        out = os.path.join(outdir, os.path.basename(trace) + "." + name)
        full = [sys.executable, "-m", "pyinterpose"] + [a.format(trace=trace, out=out) for a in argv]
    r = run_child(full, timeout, env=env)
    if name != "load":
        r["cache"] = not NO_CACHE
    if argv is not None:   # the outputs (a 10 M memory-viz pickle is ~300 MB) are not kept, unless --keep-outputs
        for f in glob.glob(out + "*"):
            if KEEP_OUTPUTS:
                shutil.move(f, os.path.join(KEEP_OUTPUTS, os.path.basename(f)))
            else:
                os.remove(f)
    rss_target = RSS_TARGET_MB
    if events >= LONG_EVENTS:     # issue 30's targets for long runs
        target, rss_target = (120 if target == 15 else 60), LONG_RSS_TARGET_MB
    r["target_s"], r["target_rss_mb"] = target, rss_target
    r["ok"] = bool(r.get("rc") == 0 and r["wall_s"] <= target and r["rss_mb"] <= rss_target)
    return r


def run_framework(fw: str, sizes: list[int], names: list[str], cache: str, outdir: str, timeout: float) -> dict:
    """Build (or reuse) the traces of one simtrain call path and time every command on each."""
    out: dict = {"traces": {}}
    for n in sizes:
        path, info = build(cache, fw, n, timeout)
        cmds = {}
        for name in names:
            cmds[name] = time_command(name, path, outdir, timeout, n)
            print(f"# {fw} {n} {name}: {cmds[name]}", file=sys.stderr, flush=True)
        out["traces"][str(n)] = {"trace": info, "commands": cmds}
    if len(sizes) >= 2:
        lo, hi = str(sizes[0]), str(sizes[-1])
        scale = sizes[-1] / sizes[0]
        growth = {}
        for name in names:
            a, b = out["traces"][lo]["commands"][name], out["traces"][hi]["commands"][name]
            g = b["wall_s"] / max(a["wall_s"], 0.01)
            gc = b.get("cpu_s", 0) / max(a.get("cpu_s", 0), 0.01)
            growth[name] = {"x": round(g, 1), "x_cpu": round(gc, 1), "ok": bool(g <= GROWTH_TARGET * scale / 10)}
        out["growth"] = growth
    out["all_ok"] = all(c["ok"] for t in out["traces"].values() for c in t["commands"].values()) and \
        all(g["ok"] for g in out.get("growth", {}).values())
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--events", default="1000000,10000000", help="comma-separated event counts")
    ap.add_argument("--framework", default="torch",
                    help="simtrain call path(s) of the traces, comma-separated from torch, jax, tf (default torch)")
    ap.add_argument("--cache", default=os.path.join(tempfile.gettempdir(), "pyinterpose-bench"),
                    help="directory holding the built traces (reused when present)")
    ap.add_argument("--commands", default=",".join(COMMANDS), help="comma-separated subset of: "
                    + ", ".join(COMMANDS))
    ap.add_argument("--timeout", type=float, default=900, help="seconds per command before it is killed")
    ap.add_argument("--out", help="also write the JSON here")
    ap.add_argument("--rss-cap-mb", type=int, default=0,
                    help="kill a command whose RSS (anonymous + file-backed) passes this many MiB "
                         "(recorded as killed_over_rss_mb; 0: no cap)")
    ap.add_argument("--no-cache", action="store_true",
                    help="every command reads the trace file itself (no columnar cache beside the trace)")
    ap.add_argument("--keep-outputs", metavar="DIR", default="",
                    help="move each command's output files (report HTML, exports) into DIR instead of deleting them")
    args = ap.parse_args()
    global NO_CACHE, RSS_CAP_MB, KEEP_OUTPUTS
    NO_CACHE, RSS_CAP_MB, KEEP_OUTPUTS = args.no_cache, args.rss_cap_mb, args.keep_outputs
    if KEEP_OUTPUTS:
        os.makedirs(KEEP_OUTPUTS, exist_ok=True)
    names = [c for c in args.commands.split(",") if c]
    bad = [c for c in names if c not in COMMANDS]
    if bad:
        print(f"bench_analysis: unknown command(s) {', '.join(bad)}", file=sys.stderr)
        return 2
    frameworks = [f for f in args.framework.split(",") if f]
    bad = [f for f in frameworks if f not in ("torch", "jax", "tf")]
    if bad or not frameworks:
        print(f"bench_analysis: unknown framework(s) {', '.join(bad) or '(none)'} (torch, jax, tf)", file=sys.stderr)
        return 2
    sizes = [int(float(x)) for x in args.events.split(",") if x]
    os.makedirs(args.cache, exist_ok=True)
    outdir = tempfile.mkdtemp(prefix="bench-analysis-out-")
    res = {"benchmark": "analysis", "machine": machine(), "cache": not NO_CACHE,
           "targets": {"load_s": 5, "command_s": 10, "report_export_s": 15, "rss_mb": RSS_TARGET_MB,
                       "growth_per_10x": GROWTH_TARGET}}
    runs = {}
    for fw in frameworks:
        runs[fw] = run_framework(fw, sizes, names, args.cache, outdir, args.timeout)
    if len(frameworks) == 1:
        res["framework"] = frameworks[0]
        res.update(runs[frameworks[0]])
    else:
        res["frameworks"] = runs
    res["all_ok"] = all(r["all_ok"] for r in runs.values())
    shutil.rmtree(outdir, ignore_errors=True)
    text = json.dumps(res, indent=2)
    print(text)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
