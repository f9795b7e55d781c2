"""``pyinterpose demo [--sample]``: capture a simulated training run, analyse it, write the report.

Works on any machine: the run uses simcuda (the simulated CUDA runtime and
driver) and the simtrain example, so no GPU is needed.  ``--sample`` uses a
real-GPU trace committed under samples/ instead."""
from __future__ import annotations

# Lazy imports (in functions): `pyinterpose --help` loads every cli module, so analyses/reports load on use.

import contextlib
import glob
import json
import os
import sys
import time

from ..errors import PyinterposeError
from . import _args as A

FRAMEWORKS = ("torch", "jax", "tf")


def register(sub) -> None:
    p = sub.add_parser("demo", help="capture a simulated training run and write its HTML report",
                       description="Capture a training-like run on the simulated GPU (no GPU needed), print "
                                   "its summary and the analyses' headlines, and write the HTML report.")
    p.add_argument("--sample", action="store_true",
                   help="analyse a committed real-GPU trace from samples/ instead of capturing")
    p.add_argument("--framework", choices=FRAMEWORKS, default=None,
                   help="framework call path simtrain emulates (default torch); with --sample, the sample of "
                        "that framework")
    p.add_argument("-o", "--output-dir", default="pyinterpose-demo",
                   help="directory for the trace and the report (default ./pyinterpose-demo)")
    p.add_argument("--bandwidth", type=A.bandwidth_gbps, default=None, metavar="GBPS",
                   help="host<->device bandwidth for the swap analysis (default: measured/NVML, else 16 GB/s "
                        "assumed for the simulated GPU)")
    p.add_argument("--json", action="store_true", help="print the headlines as one JSON object")
    p.set_defaults(func=run)


DEFAULT_SAMPLE = "torch-cnn-blocks.pit"


def export_path(trace_path: str, output_dir: str) -> str:
    """Where the demo suggests writing the Perfetto export: next to the report, in the output
    directory under the current one, never next to a sample trace installed in site-packages."""
    name = os.path.splitext(os.path.basename(trace_path))[0] + ".perfetto.json"
    return os.path.join(output_dir, name)


def sample_traces() -> list[str]:
    """Committed sample traces (samples/*.pit, README in samples/): installed with the package
    (pyinterpose/_samples), in the source tree, then in the working directory; the PyTorch
    blocks-view sample first."""
    pkg = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    here = os.path.dirname(pkg)
    found: list[str] = []
    for d in (os.path.join(pkg, "_samples"), os.path.join(here, "samples"), os.path.join(os.getcwd(), "samples")):
        for p in sorted(glob.glob(os.path.join(d, "*.pit")), key=lambda p: (os.path.basename(p) != DEFAULT_SAMPLE, p)):
            if os.path.basename(p) not in {os.path.basename(f) for f in found}:
                found.append(os.path.abspath(p))
    return sorted(found, key=lambda p: os.path.basename(p) != DEFAULT_SAMPLE)


def sample_of(samples: list[str], framework: str) -> str:
    """The first sample (blocks view first) whose truth file (NAME.truth.json) says it ran ``framework``."""
    from ..analysis.owners import normalize_framework

    want = normalize_framework(framework)
    found = []
    for p in samples:
        try:
            with open(os.path.splitext(p)[0] + ".truth.json") as f:
                t = json.load(f)
        except (OSError, ValueError):
            continue
        if isinstance(t, dict) and normalize_framework(t.get("framework")) == want:
            found.append((t.get("view") != "blocks", p))
    if not found:
        raise PyinterposeError(f"no {want} sample trace is committed (samples/); run `pyinterpose demo "
                               f"--framework {framework}` without --sample to capture a simulated run")
    return min(found)[1]


@contextlib.contextmanager
def _stdout_to_stderr(on: bool = True):
    """File descriptor 1 goes to stderr meanwhile (the program the capture starts inherits it)."""
    if not on:
        yield
        return
    sys.stdout.flush()
    saved = os.dup(1)
    try:
        os.dup2(2, 1)
        yield
    finally:
        sys.stdout.flush()
        os.dup2(saved, 1)
        os.close(saved)


def simtrain_command(framework: str) -> list[str]:
    return [sys.executable, "-m", "pyinterpose.examples.simtrain", "--framework", framework]


def capture_simulated(output: str, framework: str, quiet: bool = True) -> None:
    """Capture simtrain on simcuda into ``output``; on failure nothing is left behind."""
    try:
        from ..capture.run import capture
    except ImportError as e:
        raise PyinterposeError(f"capture is not available in this build ({e})")
    import pyinterpose

    output = os.path.abspath(output)
    argv = simtrain_command(framework)
    # The child must import this very pyinterpose, not a source tree that happens to be in the current
    # directory (`python -m` puts the working directory first): it runs in the output folder with this
    # package's parent first on PYTHONPATH.
    env = dict(os.environ)
    pkg_parent = os.path.dirname(os.path.dirname(os.path.abspath(pyinterpose.__file__)))
    env["PYTHONPATH"] = os.pathsep.join([pkg_parent] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    try:
        rc = capture(argv, output, view="blocks", access=True, simulated_gpu=True, quiet=quiet, env=env,
                     cwd=os.path.dirname(output), force=True)
    except BaseException:
        _remove(output)
        raise
    if rc != 0:
        _remove(output)
        raise PyinterposeError(f"the simulated training run failed (exit status {rc}); "
                               f"try: pyinterpose run --simulated-gpu -o {output} -- "
                               f"python -m pyinterpose.examples.simtrain --framework {framework}")
    if not os.path.exists(output):
        raise PyinterposeError(f"the capture wrote no trace at {output}")


def _remove(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass


def run(args) -> int:
    from .. import load
    from ..report import html
    from ..report.text import console, print_json, print_kv, progress

    t_start = time.monotonic()
    A.check_output_dir(args.output_dir)
    con = console()
    if args.sample:
        samples = sample_traces()
        if not samples:
            raise PyinterposeError("no sample trace: no samples/*.pit is committed in this checkout; run "
                                   "`pyinterpose demo` without --sample to capture a simulated run")
        trace_path = samples[0] if args.framework is None else sample_of(samples, args.framework)
        source = f"sample {os.path.basename(trace_path)}"
    else:
        args.framework = args.framework or "torch"
        trace_path = os.path.join(args.output_dir, f"demo-{args.framework}.pit")
        if not args.json:
            con.print(f"Capturing a simulated {args.framework} training run (simcuda, no GPU needed) ...")
        with progress("capturing", enabled=None if not args.json else False):
            with _stdout_to_stderr(args.json):     # --json: stdout holds the JSON object only
                capture_simulated(trace_path, args.framework, quiet=True)
        source = f"simulated {args.framework} run"
    trace = load(trace_path)
    A.warn_incomplete(trace)
    bandwidth = args.bandwidth
    assumed = False
    if bandwidth is None and not args.sample:
        try:
            from ..analysis.bandwidth import resolve_bandwidth
            resolve_bandwidth(trace)
        except Exception:  # no measurement and no NVML link for the simulated GPU
            bandwidth, assumed = 16.0, True
    report_path = os.path.join(args.output_dir, os.path.splitext(os.path.basename(trace_path))[0] + ".html")
    with progress("analysing", enabled=None if not args.json else False) as pr:
        rep = html.build(trace, bandwidth=bandwidth, time_limit=2.0, progress=pr)
    from ..outfile import atomic_output

    with atomic_output(report_path, "w", encoding="utf-8") as f:
        f.write(html.render(rep))
    elapsed = time.monotonic() - t_start
    if args.json:
        print_json({"source": source, "trace": trace_path, "report": report_path, "seconds": round(elapsed, 2),
                    "bandwidth_assumed_gbps": bandwidth if assumed else None, "headlines": rep.headlines},
                   trace=trace)
        return 0
    print_kv(rep.facts, title=f"Summary ({source})", out=con)
    for s in rep.sections:
        facts = list(s.facts)[:12]
        if facts:
            print_kv(facts, title=s.title, out=con)
        for n in s.notes:
            if "not available" in n:
                con.print(f"  {s.title}: {n}")
    if assumed:
        con.print("Swap/ATI assume 16 GB/s per direction (no measurement or NVML link for the simulated GPU).")
    con.print(f"\nTrace:  {trace_path}\nReport: {report_path}  ({elapsed:.1f} s)")
    con.print(f"Next:   pyinterpose summary {trace_path}\n        pyinterpose export {trace_path} "
              f"--format perfetto -o {export_path(trace_path, args.output_dir)}")
    return 0
