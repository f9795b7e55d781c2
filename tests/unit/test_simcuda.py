"""simcuda: the simulated CUDA driver and runtime, exercised by C programs that
use them the way real programs do (PLT, dlopen + dlsym, cuGetProcAddress, a
dlsym-overriding interposer)."""
from __future__ import annotations

import os
import re
import shutil
import subprocess

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CDIR = os.path.join(ROOT, "tests", "c")
INCLUDES = ["-I" + os.path.join(ROOT, "native", "include"), "-I" + os.path.join(ROOT, "native", "simcuda")]

pytestmark = [pytest.mark.slow,  # compiles and runs C programs on simcuda (> a few s)
              pytest.mark.skipif(shutil.which("cc") is None, reason="needs a C compiler")]


@pytest.fixture(scope="module")
def libs(tmp_path_factory):
    """Build libcuda.so.1 / libcudart.so.13 with the project's build into a private folder."""
    from pyinterpose._build import build_native

    out = str(tmp_path_factory.mktemp("native"))
    try:
        build_native(out, only=["simcuda"])
    except FileNotFoundError:  # headers copied after the build; not ours to need
        pass
    simdir = os.path.join(out, "simcuda")
    assert os.path.exists(os.path.join(simdir, "libcuda.so.1"))
    assert os.path.exists(os.path.join(simdir, "libcudart.so.13"))
    return simdir


def _cc(libs, tmp_path, src, out, extra=()):
    exe = str(tmp_path / out)
    cmd = ["cc", "-O1", "-g", "-D_GNU_SOURCE", *INCLUDES, "-o", exe, os.path.join(CDIR, src), *extra]
    subprocess.run(cmd, check=True, capture_output=True)
    return exe


def _run(exe, *args, env=None, libdir=None):
    e = {k: v for k, v in os.environ.items() if not k.startswith("SIMCUDA_") and k != "LD_PRELOAD"}
    if libdir:
        e["LD_LIBRARY_PATH"] = libdir
    e.update(env or {})
    return subprocess.run([exe, *args], env=e, capture_output=True, text=True, timeout=60)


@pytest.fixture(scope="module")
def driver_exe(libs, tmp_path_factory):
    return _cc(libs, tmp_path_factory.mktemp("drv"), "simcuda_driver.c", "simcuda_driver",
               ["-L" + libs, "-l:libcuda.so.1", "-Wl,-rpath," + libs])


@pytest.mark.parametrize("case,env", [
    ("basics", {"SIMCUDA_DEVICES": "3"}),
    ("oom", {"SIMCUDA_MEMORY_BYTES": str(1 << 20)}),
    ("managed", {}),
    ("vmm", {}),
    ("launch", {}),
    ("fork", {}),
    ("misc", {}),
])
def test_driver_through_plt(driver_exe, case, env):
    r = _run(driver_exe, case, env=env)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == f"ok {case}"


def test_driver_basics_fails_with_wrong_device_count(driver_exe):
    # the program checks the device count against SIMCUDA_DEVICES=3: with the
    # default of 1 it must fail, so the check is real
    r = _run(driver_exe, "basics")
    assert r.returncode == 1
    assert "n = 1, expected 3" in r.stderr


def test_oom_case_needs_the_capacity(driver_exe):
    r = _run(driver_exe, "oom")  # 16 GiB default: the second allocation succeeds
    assert r.returncode == 1
    assert "CUDA_ERROR_OUT_OF_MEMORY" not in r.stdout


def test_dlopen_and_get_proc_address(libs, tmp_path):
    exe = _cc(libs, tmp_path, "simcuda_procaddr.c", "simcuda_procaddr", ["-ldl"])
    r = _run(exe, libdir=libs)
    assert r.returncode == 0, r.stderr
    assert "ok procaddr" in r.stdout


@pytest.fixture(scope="module")
def runtime_exe(libs, tmp_path_factory):
    return _cc(libs, tmp_path_factory.mktemp("rt"), "simcuda_runtime.c", "simcuda_runtime",
               ["-L" + libs, "-l:libcudart.so.13", "-Wl,-rpath," + libs, "-ldl"])


RT_ENV = {"SIMCUDA_DEVICES": "2", "SIMCUDA_MEMORY_BYTES": str(1 << 20)}


def test_runtime_through_plt(libs, runtime_exe):
    # the runtime has no NEEDED libcuda: it must find libcuda.so.1 by dlopen
    r = _run(runtime_exe, env=RT_ENV, libdir=libs)
    assert r.returncode == 0, r.stderr
    assert "ok runtime" in r.stdout


def _system_has_libcuda() -> bool:
    out = subprocess.run(["ldconfig", "-p"], capture_output=True, text=True).stdout if shutil.which("ldconfig") else ""
    return "libcuda.so.1" in out


@pytest.mark.skipif(_system_has_libcuda(), reason="a real libcuda.so.1 is installed")
def test_runtime_without_driver_reports_insufficient_driver(runtime_exe, tmp_path):
    # only libcudart next to the program, no libcuda.so.1 anywhere on the path
    r = _run(runtime_exe, env=RT_ENV, libdir=str(tmp_path))
    assert r.returncode == 1
    assert "v = 0, expected 13000" in r.stderr  # cudaDriverGetVersion reports no driver


def test_runtime_reaches_driver_through_get_proc_address(libs, runtime_exe, tmp_path):
    """A dlsym-overriding interposer (like the profiler's shim) sees the runtime
    dlsym cuGetProcAddress_v2 once, resolve everything through it (default and
    per-thread tables), and every cudaMalloc / cudaLaunchKernel call the driver
    function it handed out."""
    spy = str(tmp_path / "spy.so")
    subprocess.run(["cc", "-O1", "-shared", "-fPIC", "-D_GNU_SOURCE", *INCLUDES, "-o", spy,
                    os.path.join(CDIR, "simcuda_spy.c"), "-ldl"], check=True, capture_output=True)
    r = _run(runtime_exe, env={**RT_ENV, "LD_PRELOAD": spy, "SIMCUDA_SPY": "1"}, libdir=libs)
    assert r.returncode == 0, r.stderr
    m = re.search(r"spy: dlsym_getproc=(\d+) lookups=(\d+) lookups_ptsz=(\d+) cuMemAlloc=(\d+) "
                  r"cuLaunchKernel=(\d+) cuLaunchKernel_ptsz=(\d+)", r.stderr)
    assert m, r.stderr
    dlsym_getproc, lookups, lookups_ptsz, n_alloc, n_launch, n_launch_ptsz = map(int, m.groups())
    assert dlsym_getproc == 1
    assert lookups_ptsz >= 40 and lookups >= 2 * lookups_ptsz
    assert n_alloc == 2        # cudaMalloc: one success, one out-of-memory
    assert n_launch == 1       # cudaLaunchKernel (the unregistered-stub launch never reaches the driver)
    assert n_launch_ptsz == 1  # cudaLaunchKernel_ptsz -> cuLaunchKernel_ptsz


def _dynsyms(path):
    out = subprocess.run(["nm", "-D", "--defined-only", path], check=True, capture_output=True, text=True).stdout
    return [line.split()[-1] for line in out.splitlines() if line.split()[-2] in ("T", "W", "i")]


def _dynamic(path):
    return subprocess.run(["readelf", "-d", path], check=True, capture_output=True, text=True).stdout


@pytest.mark.skipif(shutil.which("nm") is None or shutil.which("readelf") is None, reason="needs binutils")
def test_library_abi(libs):
    cuda, cudart = os.path.join(libs, "libcuda.so.1"), os.path.join(libs, "libcudart.so.13")
    assert "Library soname: [libcuda.so.1]" in _dynamic(cuda)
    rt = _dynamic(cudart)
    assert "Library soname: [libcudart.so.13]" in rt
    assert "libcuda" not in "".join(l for l in rt.splitlines() if "NEEDED" in l)
    drv = _dynsyms(cuda)
    assert all(s.startswith(("cu", "simcu")) for s in drv), [s for s in drv if not s.startswith("cu")]
    for s in ("cuGetProcAddress", "cuGetProcAddress_v2", "cuGetExportTable", "cuMemAlloc_v2", "cuMemAdvise",
              "cuMemAdvise_v2", "cuMemPrefetchAsync_v2_ptsz", "cuLaunchKernel_ptsz", "cuLaunchKernelEx",
              "cuMemcpyHtoD_v2_ptds", "cuTensorMapEncodeTiled", "simcuRegisterKernel"):
        assert s in drv, s
    rts = _dynsyms(cudart)
    assert rts and all(s.startswith(("cuda", "simcuda", "__cuda")) for s in rts)
    for s in ("cudaMalloc@@libcudart.so.13", "cudaLaunchKernel_ptsz@@libcudart.so.13",
              "cudaGetDriverEntryPointByVersion@@libcudart.so.13", "simcudaRegisterFunction@@libcudart.so.13"):
        assert s in rts, s


def test_modules_and_libraries_reuse_handles(libs, tmp_path):
    exe = _cc(libs, tmp_path, "simcuda_modules.c", "simcuda_modules",
              ["-L" + libs, "-l:libcuda.so.1", "-Wl,-rpath," + libs])
    cp = _run(exe, str(tmp_path / "image.txt"))
    assert cp.returncode == 0 and cp.stdout.strip() == "ok", cp.stdout + cp.stderr
