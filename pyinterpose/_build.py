"""Build every native piece of pyinterpose.

* ``ffibuilder`` — the cffi extension ``pyinterpose._core`` (ring drain, the
  exact planner's search loop, the swap scheduler's greedy loop and the simulated allocators).  Used by setup.py's ``cffi_modules``.
* ``build_native(outdir)`` — plain shared libraries that must *not* be Python
  extensions: the preload shim ``libpyinterpose.so`` (no NEEDED on libcudart,
  libcuda or libpython), the simulated CUDA runtime/driver
  (``simcuda/libcudart.so.13``, ``simcuda/libcuda.so.1``), the simulated CUPTI
  (``simcuda/libcupti.so.13``, with ``libcupti.so`` beside it) and the simtrain
  workload core ``libsimtrain.so``.

No CUDA toolkit is needed: the CUDA types come from native/include/pi_cuda.h.

Developer use (no pip):  ``python pyinterpose/_build.py`` builds everything in
place (``pyinterpose/_native`` and ``pyinterpose/_core*.so``).
"""
from __future__ import annotations

import glob
import os
import re
import shutil
import subprocess
import sys
import sysconfig

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NATIVE = os.path.join(ROOT, "native")
INCLUDE = os.path.join(NATIVE, "include")

CFLAGS = ["-O2", "-g", "-fPIC", "-Wall", "-Wextra", "-Wno-unused-parameter",
          "-fno-strict-aliasing", "-D_GNU_SOURCE", "-std=gnu11", "-I" + INCLUDE]


def _cc() -> list[str]:
    cc = os.environ.get("CC") or sysconfig.get_config_var("CC") or "cc"
    return cc.split()[:1] if shutil.which(cc.split()[0]) else ["cc"]


def _sources(sub: str) -> list[str]:
    return sorted(glob.glob(os.path.join(NATIVE, sub, "*.c")))


# folders compiled into a library besides its own (simcuda's device clock lives in the driver)
EXTRA_SOURCES = {"simcuda/driver": ["simcuda/device"]}
# second names for a library (a symlink beside it): the names a program dlopen()s
LINKS = {"simcuda/libcupti.so.13": ["simcuda/libcupti.so"]}


# name in outdir -> (source folder, version script or None, soname or None, extra link args)
LIBRARIES = [
    ("libpyinterpose.so", "shim", "shim/shim.map", "libpyinterpose.so",
     ["-ldl", "-lpthread", "-lrt"]),
    ("simcuda/libcuda.so.1", "simcuda/driver", "simcuda/driver/libcuda.map", "libcuda.so.1",
     ["-ldl", "-lpthread"]),
    ("simcuda/libcupti.so.13", "simcuda/cupti", "simcuda/cupti/libcupti.map", "libcupti.so.13",
     ["-ldl", "-lpthread"]),
    ("simcuda/libcudart.so.13", "simcuda/runtime", "simcuda/runtime/libcudart.map",
     "libcudart.so.13", ["-ldl", "-lpthread"]),
    ("libsimnccl.so", "simnccl", None, "libsimnccl.so",
     ["-L{out}/simcuda", "-l:libcudart.so.13", "-Wl,-rpath,$ORIGIN/simcuda", "-lpthread"]),
    ("libpireplay.so", "replay", None, "libpireplay.so",
     ["-L{out}/simcuda", "-l:libcudart.so.13", "-l:libcuda.so.1", "-Wl,-rpath,$ORIGIN/simcuda", "-lpthread"]),
    ("libsimtrain.so", "simtrain", None, "libsimtrain.so",
     ["-L{out}/simcuda", "-l:libcudart.so.13", "-Wl,-rpath,$ORIGIN/simcuda", "-ldl",
      "-lpthread", "-lm"]),
]


def build_native(outdir: str, verbose: bool = False, only: list[str] | None = None) -> list[str]:
    """Compile the plain shared libraries into ``outdir``; returns their paths.

    ``only``: restrict to libraries whose source folder starts with one of these
    (``shim``, ``simcuda``, ``simtrain``)."""
    os.makedirs(os.path.join(outdir, "simcuda"), exist_ok=True)
    built = []
    for name, src, vscript, soname, libs in LIBRARIES:
        if only and not any(src.startswith(o) for o in only):
            continue
        sources = _sources(src) + [f for sub in EXTRA_SOURCES.get(src, []) for f in _sources(sub)]
        if not sources:
            continue
        target = os.path.join(outdir, name)
        tmp = target + ".tmp"
        cmd = _cc() + CFLAGS + ["-I" + os.path.join(NATIVE, src), "-I" + os.path.join(NATIVE, "shim"),
                                "-shared", "-o", tmp] + sources
        if soname:
            cmd.append("-Wl,-soname," + soname)
        if vscript and os.path.exists(os.path.join(NATIVE, vscript)):
            cmd.append("-Wl,--version-script=" + os.path.join(NATIVE, vscript))
        cmd += [a.replace("{out}", outdir) for a in libs]
        if verbose:
            print(" ".join(cmd), file=sys.stderr)
        subprocess.run(cmd, check=True)
        os.replace(tmp, target)  # never rewrite a library a running process has mapped
        built.append(target)
        for link in LINKS.get(name, []):
            lpath = os.path.join(outdir, link)
            if not os.path.islink(lpath) or os.readlink(lpath) != os.path.basename(target):
                if os.path.lexists(lpath):
                    os.remove(lpath)
                os.symlink(os.path.basename(target), lpath)
    inc = os.path.join(outdir, "include")
    os.makedirs(inc, exist_ok=True)
    for f in (os.path.join(NATIVE, "shim", "events.h"), os.path.join(NATIVE, "shim", "hooks.def"),
              os.path.join(INCLUDE, "pi_cuda.h")):
        if os.path.exists(f):
            shutil.copy(f, inc)
    return built


def _cdef_block(path: str) -> str:
    with open(path) as f:
        text = f.read()
    m = re.search(r"/\* BEGIN CDEF \*/(.*)/\* END CDEF \*/", text, re.S)
    return m.group(1) if m else text


def _make_ffibuilder(absolute: bool = False):
    """setuptools wants source paths relative to setup.py; the developer build
    (cffi compiling in build/cffi) needs absolute ones."""
    from cffi import FFI  # lazy: only a build needs cffi's compiler front end

    ffi = FFI()
    cdefs = [os.path.join(NATIVE, "capture", "drain.h"), os.path.join(NATIVE, "planner", "planner.h"),
             os.path.join(NATIVE, "swap", "swap.h"), os.path.join(NATIVE, "allocsim", "allocsim.h"),
             os.path.join(NATIVE, "reader", "reader.h")]
    sources = _sources("capture") + _sources("planner") + _sources("swap") + _sources("allocsim") + _sources("reader")
    headers = []
    for h in cdefs:
        if os.path.exists(h):
            ffi.cdef(_cdef_block(h))
            headers.append('#include "%s"' % os.path.relpath(h, NATIVE))
    ffi.set_source(
        "pyinterpose._core",
        "\n".join(headers),
        sources=sources if absolute else [os.path.relpath(p, ROOT) for p in sources],
        include_dirs=[NATIVE, INCLUDE, os.path.join(NATIVE, "shim")],
        extra_compile_args=["-O3", "-std=gnu11", "-D_GNU_SOURCE"],
    )
    return ffi


ffibuilder = _make_ffibuilder()

if __name__ == "__main__":
    # python pyinterpose/_build.py [-v] [core] [shim] [simcuda] [simtrain]   (default: all)
    here = os.path.dirname(os.path.abspath(__file__))
    targets = [a for a in sys.argv[1:] if not a.startswith("-")]
    libs = [t for t in targets if t != "core"]
    if not targets or libs:
        build_native(os.path.join(here, "_native"), verbose="-v" in sys.argv, only=libs or None)
    if targets and "core" not in targets:
        sys.exit(0)
    cwd = os.getcwd()
    os.chdir(ROOT)
    try:
        _make_ffibuilder(absolute=True).compile(tmpdir=os.path.join(ROOT, "build", "cffi"), verbose="-v" in sys.argv)
        for f in glob.glob(os.path.join(ROOT, "build", "cffi", "pyinterpose", "_core*.so")):
            # write beside, then rename: a running process keeps its mapped copy intact
            dst = os.path.join(here, os.path.basename(f))
            shutil.copy(f, dst + ".tmp")
            os.replace(dst + ".tmp", dst)
    finally:
        os.chdir(cwd)
