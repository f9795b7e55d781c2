"""Locating and loading the simcuda libraries and libsimtrain.so.

The native folder is ``pyinterpose/_native`` (built by ``python
pyinterpose/_build.py simcuda simtrain``) unless ``PYINTERPOSE_NATIVE_DIR``
names another build.  ``load_simtrain()`` makes sure the *simulated*
``libcuda.so.1`` and ``libcudart.so.13`` are the ones in the process (loaded by
absolute path with RTLD_GLOBAL, so a later ``dlopen("libcuda.so.1")`` by soname
resolves to them) before loading ``libsimtrain.so``.
"""
from __future__ import annotations

import ctypes
import os

from pyinterpose.errors import PyinterposeError

NATIVE_ENV = "PYINTERPOSE_NATIVE_DIR"
OOM_RETRIES = ("release", "smaller")   # simtrain.h oom_retry: what a near OOM retries


def native_dir() -> str:
    """$PYINTERPOSE_NATIVE_DIR, else this package's build; when this package is an unbuilt source tree
    (``python -m`` run from a clone imports ./pyinterpose first), the build of an installed pyinterpose
    found further down sys.path."""
    env = os.environ.get(NATIVE_ENV)
    if env:
        return env
    own = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "_native")
    if os.path.exists(os.path.join(own, "libsimtrain.so")):
        return own
    import sys

    for entry in sys.path:
        cand = os.path.join(os.path.abspath(entry or os.curdir), "pyinterpose", "_native")
        if cand != own and os.path.exists(os.path.join(cand, "libsimtrain.so")):
            return cand
    return own


def simcuda_dir() -> str:
    """The folder holding the simulated libcuda.so.1 and libcudart.so.13."""
    return os.path.join(native_dir(), "simcuda")


def _require(path: str) -> str:
    if not os.path.exists(path):
        raise PyinterposeError(
            f"{path} is missing: build it with `python pyinterpose/_build.py simcuda simtrain`")
    return path


def _already_loaded(soname: str) -> ctypes.CDLL | None:
    try:
        return ctypes.CDLL(soname, mode=os.RTLD_NOLOAD | os.RTLD_GLOBAL)
    except OSError:
        return None


def _load_simulated(soname: str, marker: str) -> ctypes.CDLL:
    lib = _already_loaded(soname)
    if lib is None:
        lib = ctypes.CDLL(_require(os.path.join(simcuda_dir(), soname)), mode=os.RTLD_GLOBAL)
    if not hasattr(lib, marker):
        raise PyinterposeError(f"the {soname} loaded in this process is not simcuda (no {marker})")
    return lib


def load_simcuda() -> tuple[ctypes.CDLL, ctypes.CDLL]:
    """(libcuda, libcudart): the simulated driver and runtime, loaded globally."""
    return _load_simulated("libcuda.so.1", "simcuRegisterKernel"), \
        _load_simulated("libcudart.so.13", "simcudaRegisterFunction")


def load_simtrain() -> ctypes.CDLL:
    load_simcuda()
    return ctypes.CDLL(_require(os.path.join(native_dir(), "libsimtrain.so")), mode=os.RTLD_GLOBAL)


# ---- libsimtrain's interface (native/simtrain/simtrain.h): simtrain and simranks both run it

FRAMEWORKS = ("torch", "jax", "tf")
DEVICE_TIMES = ("off", "h100-like")
MAX_API = 32
COUNTERS = ("allocs", "frees", "bytes", "accesses", "launches", "noise_steps")


OOM_MODES = ("none", "near", "final")
OOM_DEFAULT_DEVICE_BYTES = 256 << 20


class _Config(ctypes.Structure):
    _fields_ = [("framework", ctypes.c_int), ("steps", ctypes.c_int), ("layers", ctypes.c_int),
                ("noise", ctypes.c_double), ("seed", ctypes.c_uint64), ("device_time", ctypes.c_int),
                ("oom", ctypes.c_int), ("oom_step", ctypes.c_int), ("oom_truth", ctypes.c_char_p),
                ("device", ctypes.c_int), ("noise_kinds", ctypes.c_uint), ("oom_retry", ctypes.c_int),
                ("graphs", ctypes.c_int)]


class _Truth(ctypes.Structure):
    _fields_ = [("allocs", ctypes.c_uint64), ("frees", ctypes.c_uint64), ("bytes", ctypes.c_uint64),
                ("accesses", ctypes.c_uint64), ("launches", ctypes.c_uint64),
                ("allocs_per_step", ctypes.c_uint64), ("noise_steps", ctypes.c_uint64),
                ("peak_live_bytes", ctypes.c_uint64), ("by_api", ctypes.c_uint64 * MAX_API),
                ("error", ctypes.c_char * 256), ("failed_allocs", ctypes.c_uint64),
                ("result_hash", ctypes.c_uint64), ("graph_replays", ctypes.c_uint64),
                ("graph_allocs", ctypes.c_uint64), ("graph_frees", ctypes.c_uint64), ("graph_bytes", ctypes.c_uint64),
                ("graph_accesses", ctypes.c_uint64), ("graph_launches", ctypes.c_uint64)]


# --graphs: what one replay of the captured step does (simtrain.h), and how many replays ran
GRAPH_COUNTERS = ("graph_replays", "graph_allocs", "graph_frees", "graph_bytes", "graph_accesses", "graph_launches")


def _bind(lib: ctypes.CDLL) -> ctypes.CDLL:
    lib.simtrain_run.argtypes = [ctypes.POINTER(_Config), ctypes.POINTER(_Truth)]
    lib.simtrain_run.restype = ctypes.c_int
    lib.simtrain_api_count.restype = ctypes.c_int
    lib.simtrain_api_name.argtypes = [ctypes.c_int]
    lib.simtrain_api_name.restype = ctypes.c_char_p
    lib.simtrain_api_class.argtypes = [ctypes.c_int]
    lib.simtrain_api_class.restype = ctypes.c_int
    return lib


def api_classes(lib: ctypes.CDLL) -> dict[str, str]:
    """API name -> 'alloc' | 'free' | 'launch' | 'copy' | 'memset' | 'object' (pool create/destroy) | 'graph'
    (a graph replay)."""
    names = {ord("a"): "alloc", ord("f"): "free", ord("l"): "launch", ord("c"): "copy", ord("m"): "memset",
             ord("o"): "object", ord("g"): "graph"}
    return {lib.simtrain_api_name(i).decode(): names[lib.simtrain_api_class(i)]
            for i in range(lib.simtrain_api_count())}


def bind_simtrain() -> ctypes.CDLL:
    """libsimtrain, loaded (with simcuda) and its functions typed."""
    return _bind(load_simtrain())


def run_once(lib: ctypes.CDLL, framework: str, steps: int, layers: int, noise: float, seed: int,
             device_time: str = "off", oom: str = "none", oom_step: int = -1,
             oom_truth: str | None = None, device: int = 0, noise_kinds: int = 1,
             oom_retry: str = "release", graphs: int = 0) -> dict:
    """Run the loop in this process; its truth (one process)."""
    cfg = _Config(FRAMEWORKS.index(framework), steps, layers, noise, seed, DEVICE_TIMES.index(device_time),
                  OOM_MODES.index(oom), oom_step, oom_truth.encode() if oom_truth else None, device, noise_kinds,
                  OOM_RETRIES.index(oom_retry), graphs)
    t = _Truth()
    if lib.simtrain_run(ctypes.byref(cfg), ctypes.byref(t)) != 0:
        raise PyinterposeError(f"simtrain ({framework}) failed: {t.error.decode(errors='replace')}")
    by_api = {}
    for i in range(lib.simtrain_api_count()):
        if t.by_api[i]:
            by_api[lib.simtrain_api_name(i).decode()] = int(t.by_api[i])
    out = {k: int(getattr(t, k)) for k in COUNTERS}
    out.update(allocs_per_step=int(t.allocs_per_step), by_api=by_api, pids=[os.getpid()],
               peak_live_bytes=int(t.peak_live_bytes), result_hash=f"{int(t.result_hash):016x}")
    if oom != "none":
        out["failed_allocs"] = int(t.failed_allocs)
    if graphs:
        out["graphs"] = {"warmup_steps": graphs, **{k[len("graph_"):]: int(getattr(t, k)) for k in GRAPH_COUNTERS}}
    return out
