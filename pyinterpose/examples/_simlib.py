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
