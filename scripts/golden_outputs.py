"""Record every analysis' ``--json`` output and every export for a set of traces, to compare
a refactor's outputs with the code before it byte for byte.

    python scripts/golden_outputs.py OUT_DIR [TRACE.pit ...]

With no trace given: every ``samples/*.pit`` plus a demo trace captured once on simcuda into
``OUT_DIR/traces/demo-torch.pit`` (reused when it is already there, since a new capture has new
timings).  Writes ``OUT_DIR/<trace>/<command>.json`` (stdout of ``pyinterpose <command> --json``),
the exports as ``OUT_DIR/<trace>/export.<format>``, and ``OUT_DIR/<trace>/<command>.rc`` when a
command exits non-zero (its stderr in ``.err``).  Compare two runs with ``diff -r BEFORE AFTER``.

Fields that depend on the run and not on the analysis are blanked before writing, so the diff
shows only analysis changes: none of the commands below prints wall time except ``report``
(``seconds``) -- see ``VOLATILE``.  Bandwidth is fixed (``--bandwidth 16``) so that no measurement
or NVML link changes the swap and access answers; ``pools`` and ``compare`` run their exact
planner with a time limit, and their answers are the same run to run on these traces (checked by
running this script twice)."""
from __future__ import annotations

import glob
import json
import os
import shutil
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
VOLATILE = {"seconds", "report", "output", "trace"}  # wall time and paths given on the command line

COMMANDS = {
    "summary": ["summary", "{t}", "--json"],
    "iterations": ["iterations", "{t}", "--json"],
    "access": ["access", "{t}", "--json", "--bandwidth", "16"],
    "pools": ["pools", "{t}", "--json", "--capacity", "1GiB"],
    "swap": ["swap", "{t}", "--json", "--bandwidth", "16"],
    "fit": ["fit", "{t}", "--json", "--capacity", "64MiB", "--capacity", "1GiB", "--bandwidth", "16"],
    "compare": ["compare", "{t}", "{t}", "--json", "--bandwidth", "16"],
    "report": ["report", "{t}", "-o", "{d}/report.html", "-f", "--json", "--bandwidth", "16"],
}
EXPORTS = ("perfetto", "memory-viz", "csv", "minimalloc")


def blank(obj):
    if isinstance(obj, dict):
        return {k: ("<volatile>" if k in VOLATILE else blank(v)) for k, v in obj.items()}
    if isinstance(obj, list):
        return [blank(v) for v in obj]
    return obj


def pyinterpose(args: list[str]) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pyinterpose", *args], capture_output=True, text=True, cwd=ROOT)


def record(trace: str, out: str) -> None:
    name = os.path.splitext(os.path.basename(trace))[0]
    d = os.path.join(out, name)
    os.makedirs(d, exist_ok=True)
    for cmd, argv in COMMANDS.items():
        p = pyinterpose([a.format(t=trace, d=d) for a in argv])
        if p.returncode != 0:
            with open(os.path.join(d, cmd + ".rc"), "w") as f:
                f.write(f"{p.returncode}\n")
            with open(os.path.join(d, cmd + ".err"), "w") as f:
                f.write(p.stderr)
        try:
            text = json.dumps(blank(json.loads(p.stdout)), indent=1, sort_keys=True) + "\n"
        except ValueError:
            text = p.stdout
        with open(os.path.join(d, cmd + ".json"), "w") as f:
            f.write(text)
    report = os.path.join(d, "report.html")
    if os.path.exists(report):
        os.unlink(report)  # holds the time it was written: compared through report.json instead
    for fmt in EXPORTS:
        target = os.path.join(d, "export." + fmt)
        p = pyinterpose(["export", trace, "--format", fmt, "-o", target, "-f"])
        if p.returncode != 0:
            with open(target + ".rc", "w") as f:
                f.write(f"{p.returncode}\n{p.stderr}")
    print(name, flush=True)


def main(argv: list[str]) -> int:
    if not argv:
        print(__doc__)
        return 2
    out, traces = argv[0], argv[1:]
    os.makedirs(out, exist_ok=True)
    if not traces:
        demo = os.path.join(out, "traces", "demo-torch.pit")
        if not os.path.exists(demo):
            os.makedirs(os.path.dirname(demo), exist_ok=True)
            p = pyinterpose(["demo", "-o", os.path.dirname(demo), "--json"])
            if p.returncode != 0:
                sys.stderr.write(p.stderr)
                return 1
            for f in glob.glob(os.path.join(os.path.dirname(demo), "*.html")):
                os.unlink(f)
        traces = [demo] + sorted(glob.glob(os.path.join(ROOT, "samples", "*.pit")))
    for t in traces:
        record(os.path.abspath(t), out)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
