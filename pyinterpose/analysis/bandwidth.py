"""Host<->device bandwidth: the PCIe table, measurements, their cache, and which figure the swap model uses.

The swap model (``pyinterpose.analysis.swap``) needs, per direction, a bandwidth
and a fixed latency: a transfer of ``n`` bytes costs ``latency + n / bandwidth``.
:func:`resolve_bandwidth` picks the figure, in this order:

1. given (``--bandwidth GBPS``; 1 GB/s = 1e9 bytes/s),
2. a measurement (``pyinterpose bandwidth``) cached for the trace's GPU (by UUID;
   ``"simulated"`` for traces taken with ``--simulated-gpu``),
3. the theoretical host-link figure NVML gave at capture (``trace.meta["nvml"]``):
   C2C when the GPU has it, else PCIe from the link's *max* generation and width
   (not for ``--simulated-gpu`` traces: NVML describes the real GPU, not the simulated one).

With none of those it raises :class:`PyinterposeError` — no made-up number.
The latency is ``--latency-us`` when given, else the measured one, else
:data:`DEFAULT_LATENCY_S` (said in ``source``).
"""
from __future__ import annotations

import ctypes
import ctypes.util
import glob
import json
import os
import statistics
import sys
import time
from dataclasses import asdict, dataclass

from ..errors import PyinterposeError
from ..units import PCIE_LANE_BYTES_PER_S, pcie_bytes_per_s  # noqa: F401  (part of this module's API)
from ..outfile import atomic_output

GB = 1e9
MiB = 1 << 20

#: Fixed cost per transfer when nothing better is known: ~SINGA's fitted host-to-device
#: constant on PCIe x16 with pinned memory (9.7 us; its device-to-host fit was 47 us).
DEFAULT_LATENCY_S = 10e-6
SIMULATED_KEY = "simulated"


@dataclass(frozen=True)
class Bandwidth:
    """Per-direction link model: transfer time = latency_s + bytes / bytes_per_s."""

    h2d_bytes_per_s: float
    d2h_bytes_per_s: float
    latency_s: float
    source: str

    def h2d_seconds(self, nbytes):
        return self.latency_s + nbytes / self.h2d_bytes_per_s

    def d2h_seconds(self, nbytes):
        return self.latency_s + nbytes / self.d2h_bytes_per_s

    def as_dict(self) -> dict:
        return asdict(self)


# ---- cache of measurements -------------------------------------------------------------

def cache_file() -> str:
    """``$PYINTERPOSE_CACHE_DIR`` or ``$XDG_CACHE_HOME/pyinterpose`` or ``~/.cache/pyinterpose``."""
    d = os.environ.get("PYINTERPOSE_CACHE_DIR")
    if not d:
        base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
        d = os.path.join(base, "pyinterpose")
    return os.path.join(d, "bandwidth.json")


def load_measurements(path: str | None = None) -> dict:
    """{key (GPU uuid or "simulated"): measurement dict}; {} when absent or unreadable."""
    path = path or cache_file()
    try:
        with open(path) as f:
            data = json.load(f)
        return data if isinstance(data, dict) else {}
    except (OSError, ValueError):
        return {}


def save_measurement(m: dict, path: str | None = None) -> str:
    """Store ``m`` under its ``key``; returns the cache path."""
    path = path or cache_file()
    os.makedirs(os.path.dirname(path), exist_ok=True)
    data = load_measurements(path)
    data[m["key"]] = m

    with atomic_output(path, "w") as f:
        json.dump(data, f, indent=1, sort_keys=True)
    return path


# ---- the trace's GPU and the resolution order -------------------------------------------

def _is_simulated(meta: dict) -> bool:
    for k in ("simulated_gpu", "simulated"):
        if meta.get(k):
            return True
    return False


def trace_device(trace) -> int:
    """CUDA ordinal the trace's main process allocated on (0 when unknown)."""
    b = trace.blocks
    pid = trace.main_pid
    if len(b) == 0 or pid is None:
        return 0
    dev = b.loc[b["pid"] == pid, "device"]
    dev = dev[dev >= 0]
    return int(dev.value_counts().idxmax()) if len(dev) else 0


def trace_gpu_keys(trace) -> list[str]:
    """Cache keys that identify the trace's GPU, best first."""
    meta = trace.meta or {}
    if _is_simulated(meta):
        return [SIMULATED_KEY]
    dev = trace_device(trace)
    keys: list[str] = []
    for g in meta.get("gpus") or []:
        if isinstance(g, dict) and g.get("uuid") and g.get("index", dev) == dev:
            keys.append(str(g["uuid"]))
    nvml = meta.get("nvml") or {}
    for d in nvml.get("devices") or []:
        if d.get("uuid") and d.get("index") == dev:
            keys.append(str(d["uuid"]))
    return list(dict.fromkeys(keys))


def _nvml_host_link(trace) -> tuple[float, float, str] | None:
    nvml = (trace.meta or {}).get("nvml") or {}
    if not nvml.get("available"):
        return None
    devs = nvml.get("devices") or []
    if not devs:
        return None
    dev = trace_device(trace)
    d = next((x for x in devs if x.get("index") == dev), devs[0])
    c2c = d.get("c2c") or {}
    if c2c.get("bytes_per_s"):
        bw = float(c2c["bytes_per_s"])
        return bw, bw, f"NVML C2C link of {d.get('name', 'GPU')}: {c2c.get('basis', '')}"
    p = d.get("pcie") or {}
    h2d, d2h = p.get("h2d_bytes_per_s"), p.get("d2h_bytes_per_s")
    if not h2d or not d2h:
        return None
    return float(h2d), float(d2h), f"NVML {d.get('name', 'GPU')}: {p.get('basis', 'PCIe link')}"


def resolve_bandwidth(trace=None, gbps: float | None = None, latency_us: float | None = None,
                      cache_path: str | None = None) -> Bandwidth:
    """Pick the link model for ``trace``: given > cached measurement > NVML (see module doc)."""
    if latency_us is not None and latency_us < 0:
        raise PyinterposeError(f"--latency-us must be >= 0 (got {latency_us})")
    lat_given = None if latency_us is None else latency_us * 1e-6
    lat_note = "" if lat_given is not None else f"; latency {DEFAULT_LATENCY_S * 1e6:g} us (default)"
    lat_src = f"; latency {latency_us:g} us (given)" if lat_given is not None else ""
    if gbps is not None:
        if not gbps > 0:
            raise PyinterposeError(f"--bandwidth must be > 0 GB/s (got {gbps})")
        return Bandwidth(gbps * GB, gbps * GB, DEFAULT_LATENCY_S if lat_given is None else lat_given,
                         f"given: {gbps:g} GB/s per direction{lat_note}{lat_src}")
    if trace is None:
        raise PyinterposeError("no bandwidth: pass --bandwidth GBPS")
    cached = load_measurements(cache_path)
    for key in trace_gpu_keys(trace):
        m = cached.get(key)
        if m and m.get("h2d_bytes_per_s") and m.get("d2h_bytes_per_s"):
            lat = lat_given if lat_given is not None else float(m.get("latency_s", DEFAULT_LATENCY_S))
            what = ("simulated GPU (host memcpy speed)" if m.get("simulated")
                    else f"{m.get('name') or 'GPU'} ({key})")
            return Bandwidth(float(m["h2d_bytes_per_s"]), float(m["d2h_bytes_per_s"]), lat,
                             f"measured {'simulated ' if m.get('simulated') else ''}on {what} at "
                             f"{m.get('measured_at', '?')}{lat_src}")
    if _is_simulated(trace.meta or {}):   # NVML describes the real GPU, not the simulated one
        raise PyinterposeError(
            "no bandwidth for this simulated-GPU trace: run `pyinterpose bandwidth --simulated-gpu` "
            "or pass --bandwidth GBPS")
    link = _nvml_host_link(trace)
    if link is not None:
        h2d, d2h, src = link
        return Bandwidth(h2d, d2h, DEFAULT_LATENCY_S if lat_given is None else lat_given,
                         src + lat_note + lat_src)
    raise PyinterposeError(
        "no bandwidth for this trace: it has no NVML link info and no measurement is cached for its GPU; "
        "run `pyinterpose bandwidth` on that machine or pass --bandwidth GBPS")


# ---- measuring through the CUDA runtime (ctypes) ----------------------------------------

H2D, D2H = 1, 2  # cudaMemcpyHostToDevice, cudaMemcpyDeviceToHost


def simulated_runtime_dir() -> str:
    return os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "_native", "simcuda")


def _load_cudart(simulated: bool) -> tuple[ctypes.CDLL, str]:
    if simulated:
        d = simulated_runtime_dir()
        rt, drv = os.path.join(d, "libcudart.so.13"), os.path.join(d, "libcuda.so.1")
        if not os.path.exists(rt):
            raise PyinterposeError("simulated CUDA runtime not built: run `python pyinterpose/_build.py simcuda`")
        try:
            if os.path.exists(drv):  # so the runtime's dlopen("libcuda.so.1") finds the simulated driver
                ctypes.CDLL(drv, mode=ctypes.RTLD_GLOBAL)
            return ctypes.CDLL(rt, mode=ctypes.RTLD_GLOBAL), rt
        except OSError as e:
            raise PyinterposeError(f"cannot load the simulated CUDA runtime: {e}") from e
    names = ["libcudart.so.13", "libcudart.so.12", "libcudart.so.11.0", "libcudart.so"]
    found = ctypes.util.find_library("cudart")
    if found:
        names.insert(0, found)
    for p in sys.path:
        names += sorted(glob.glob(os.path.join(p, "nvidia", "*", "lib", "libcudart.so*")), reverse=True)
    errors = []
    for n in names:
        try:
            return ctypes.CDLL(n, mode=ctypes.RTLD_GLOBAL), n
        except OSError as e:
            errors.append(str(e))
    raise PyinterposeError("no GPU to measure: no CUDA runtime (libcudart) could be loaded; "
                           "pass --simulated-gpu to exercise the simulated runtime, or give swap --bandwidth GBPS")


def _check(rc: int, what: str) -> None:
    if rc != 0:
        raise PyinterposeError(f"{what} failed (CUDA error {rc})")


def _uuid_and_name(rt, device: int) -> tuple[str | None, str | None]:
    """Device name and NVML-style UUID from cudaGetDeviceProperties (name[256] then uuid[16])."""
    fn = getattr(rt, "cudaGetDeviceProperties_v2", None) or getattr(rt, "cudaGetDeviceProperties", None)
    if fn is None:
        return None, None
    buf = ctypes.create_string_buffer(16384)
    try:
        if fn(buf, ctypes.c_int(device)) != 0:
            return None, None
    except Exception:  # noqa: BLE001
        return None, None
    raw = buf.raw
    name = raw[:256].split(b"\0", 1)[0].decode(errors="replace") or None
    u = raw[256:272].hex()
    uuid = f"GPU-{u[:8]}-{u[8:12]}-{u[12:16]}-{u[16:20]}-{u[20:]}" if any(raw[256:272]) else None
    return uuid, name


def measure(size_bytes: int = 64 * MiB, repeat: int = 10, simulated: bool = False,
            device: int = 0) -> dict:
    """Measure pinned-memory H2D/D2H bandwidth and small-copy latency (wall clock around
    cudaMemcpy + cudaDeviceSynchronize, median of ``repeat``).  Raises PyinterposeError
    when there is no GPU (or, with ``simulated``, no simulated runtime)."""
    if size_bytes <= 0 or repeat <= 0:
        raise PyinterposeError("--size and --repeat must be positive")
    rt, lib = _load_cudart(simulated)
    vp, sz = ctypes.c_void_p, ctypes.c_size_t
    rt.cudaMemcpy.argtypes = [vp, vp, sz, ctypes.c_int]
    rt.cudaMallocHost.argtypes = [ctypes.POINTER(vp), sz]
    rt.cudaMalloc.argtypes = [ctypes.POINTER(vp), sz]
    rt.cudaFree.argtypes = [vp]
    rt.cudaFreeHost.argtypes = [vp]
    count = ctypes.c_int(0)
    rc = rt.cudaGetDeviceCount(ctypes.byref(count))
    if rc != 0 or count.value == 0:
        raise PyinterposeError(f"no CUDA GPU visible (cudaGetDeviceCount returned {rc}, "
                               f"{count.value} devices); nothing to measure")
    _check(rt.cudaSetDevice(ctypes.c_int(device)), f"cudaSetDevice({device})")
    uuid, name = _uuid_and_name(rt, device)
    host, dev = vp(), vp()
    _check(rt.cudaMallocHost(ctypes.byref(host), size_bytes), "cudaMallocHost")
    try:
        _check(rt.cudaMalloc(ctypes.byref(dev), size_bytes), "cudaMalloc")
        try:
            ctypes.memset(host, 1, size_bytes)

            def timed(dst, src, n, kind) -> float:
                t0 = time.perf_counter_ns()
                _check(rt.cudaMemcpy(dst, src, n, kind), "cudaMemcpy")
                _check(rt.cudaDeviceSynchronize(), "cudaDeviceSynchronize")
                return (time.perf_counter_ns() - t0) * 1e-9

            res = {}
            for label, dst, src, kind in (("h2d", dev, host, H2D), ("d2h", host, dev, D2H)):
                timed(dst, src, size_bytes, kind)  # warm-up
                small = statistics.median(timed(dst, src, 8, kind) for _ in range(max(20, repeat)))
                big = statistics.median(timed(dst, src, size_bytes, kind) for _ in range(repeat))
                net = big - small if big > 2 * small else big
                res[label] = (size_bytes / net, small, big)
        finally:
            rt.cudaFree(dev)
    finally:
        rt.cudaFreeHost(host)
    key = SIMULATED_KEY if simulated else (uuid or f"device-{device}")
    return {
        "key": key, "uuid": uuid, "name": "simulated GPU" if simulated else name,
        "device": device, "simulated": bool(simulated), "library": lib,
        "h2d_bytes_per_s": res["h2d"][0], "d2h_bytes_per_s": res["d2h"][0],
        "h2d_latency_s": res["h2d"][1], "d2h_latency_s": res["d2h"][1],
        "latency_s": (res["h2d"][1] + res["d2h"][1]) / 2,
        "h2d_copy_s": res["h2d"][2], "d2h_copy_s": res["d2h"][2],
        "size_bytes": int(size_bytes), "repeat": int(repeat),
        "method": "wall clock around cudaMemcpy + cudaDeviceSynchronize, pinned host memory, median; "
                  "bandwidth = size / (time(size) - time(8 bytes))",
        "measured_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }
