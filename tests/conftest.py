"""Shared fixtures: built native pieces, compiled C test programs, captures."""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# pytest run as a background job starts with SIGINT ignored, and an ignored signal stays ignored in every
# program a test starts (a handled one is reset to the default by exec): handle it here, so the programs
# under test get the default SIGINT (Python's KeyboardInterrupt) as a user's would.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


@pytest.fixture(autouse=True)
def own_home(tmp_path_factory, monkeypatch):
    """Every test runs with its own home and cache folder: nothing the user's own runs left there (a
    `pyinterpose bandwidth` measurement, a config) reaches a test, and no test leaves anything for another."""
    home = tmp_path_factory.mktemp("home")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("XDG_CACHE_HOME", str(home / ".cache"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(home / ".config"))
    monkeypatch.delenv("PYINTERPOSE_CACHE_DIR", raising=False)
    return home


def native_dir() -> str:
    from pyinterpose.capture.run import NATIVE

    return NATIVE


@pytest.fixture(scope="session")
def native():
    d = native_dir()
    if not os.path.exists(os.path.join(d, "libpyinterpose.so")):
        pytest.fail(f"native libraries not built in {d}: pip install . (or python pyinterpose/_build.py)")
    return d


@pytest.fixture(scope="session")
def cc():
    c = shutil.which(os.environ.get("CC", "cc")) or shutil.which("gcc")
    if not c:
        pytest.skip("no C compiler")
    return c


@pytest.fixture(scope="session")
def cbuild(tmp_path_factory, native, cc):
    """Compile tests/c/NAME.c against simcuda; returns the path of the binary/library."""
    out = tmp_path_factory.mktemp("cbin")
    cache = {}

    def build(name: str, shared: bool = False, link_cudart: bool = True) -> str:
        if name in cache:
            return cache[name]
        src = os.path.join(ROOT, "tests", "c", name + ".c")
        target = str(out / (("lib" + name + ".so") if shared else name))
        cmd = [cc, "-O1", "-g", "-D_GNU_SOURCE", "-I" + os.path.join(ROOT, "native", "include"),
               "-I" + os.path.join(ROOT, "native", "simcuda"), "-o", target, src]
        if shared:
            cmd[1:1] = ["-shared", "-fPIC"]
        if link_cudart:
            sim = os.path.join(native, "simcuda")
            cmd += ["-L" + sim, "-l:libcudart.so.13", "-Wl,-rpath," + sim]
        cmd += ["-ldl", "-lpthread"]
        subprocess.run(cmd, check=True)
        cache[name] = target
        return target

    return build


# Real-GPU traces: the full shipped set beside the checkout, else the copies committed in samples/
# (PYINTERPOSE_GPU_TRACES=DIR puts another directory first).
GPU_TRACE_DIRS = [d for d in (os.environ.get("PYINTERPOSE_GPU_TRACES", ""),
                              os.path.join(ROOT, "..", "shared", "data", "gpu-traces"),
                              os.path.join(ROOT, "..", "..", "shared", "data", "gpu-traces"),
                              os.path.join(ROOT, "samples")) if d]


def gpu_trace(name: str) -> str:
    """Path of a real-GPU trace (or its ``.truth.json``); skips the test with the reason when absent."""
    for d in GPU_TRACE_DIRS:
        p = os.path.join(d, name)
        if os.path.exists(p):
            return p
    pytest.skip(f"real-GPU trace {name} is neither in ../shared/data/gpu-traces/ nor in samples/")


def run_cli(*args, env=None, timeout=300, input=None):
    """Run ``python -m pyinterpose ARGS``; returns CompletedProcess (text)."""
    e = dict(os.environ)
    if env:
        e.update(env)
    return subprocess.run([sys.executable, "-m", "pyinterpose", *args], capture_output=True, text=True,
                          env=e, timeout=timeout, input=input)


def log_fanned_tasks(monkeypatch, module, name: str, log: str, fields: tuple[int, int]) -> None:
    """Replace the fan-out task ``module.name`` by one that first appends its item's two ``fields`` (a
    range's bounds) to the file ``log``: a Dask worker runs a copy of the task, so it says what it ran
    through a file."""
    real = getattr(module, name)

    def logged(item, log=log, real=real, fields=fields):
        with open(log, "a") as f:
            f.write(f"{item[fields[0]]} {item[fields[1]]}\n")
        return real(item)
    monkeypatch.setattr(module, name, logged)


@pytest.fixture
def capture(tmp_path):
    """capture(cmd, *run_options) -> (trace_path, CompletedProcess) using --simulated-gpu."""
    def _capture(cmd, *opts, name="t.pit", env=None, timeout=300):
        out = str(tmp_path / name)
        cp = run_cli("run", "-q", "--simulated-gpu", "-o", out, *opts, "--", *cmd, env=env, timeout=timeout)
        return out, cp

    return _capture


def last_json_line(text: str) -> dict:
    for line in reversed(text.strip().splitlines()):
        line = line.strip()
        if line.startswith("{"):
            return json.loads(line)
    raise AssertionError(f"no JSON line in output: {text!r}")


def fake_trace_files(monkeypatch, made: dict):
    """Make the CLI's trace loader return in-memory traces for the given names."""
    def fake_load(path, quiet=False):
        if path not in made:
            from pyinterpose.errors import TraceError
            raise TraceError(f"no such trace file: {path}")
        return made[path]

    monkeypatch.setattr("pyinterpose.cli._args.load_trace", fake_load)
    return made


# The start of a test program driving simcuda directly (run with ``ctypes`` imported): the runtime and
# driver loaded, device 0, the CUmemLocation struct ``Loc``, and ``f``: a kernel "use" taking one
# pointer (the block it touches, for the residency model).
SIMCUDA_USE_KERNEL = r"""
from pyinterpose.examples._simlib import load_simcuda
cu, rt = load_simcuda()
rt.cudaSetDevice(0)
assert cu.cuInit(0) == 0
class Loc(ctypes.Structure):
    _fields_ = [("type", ctypes.c_int), ("id", ctypes.c_int)]
fn = ctypes.CFUNCTYPE(None, ctypes.POINTER(ctypes.c_void_p))(lambda params: None)
f = ctypes.c_void_p()
offs = (ctypes.c_size_t * 1)(0); sizes = (ctypes.c_size_t * 1)(8)
assert cu.simcuRegisterKernel(b"use", fn, 1, offs, sizes, ctypes.byref(f)) == 0
"""
