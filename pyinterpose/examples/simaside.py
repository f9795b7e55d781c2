"""simtrain's device memory beside its framework loop, for the analyses that must tell the framework's
allocator from everything else (each one a separate option of ``python -m pyinterpose.examples.simtrain``):

``--outside-bytes N``
    the process holds one device block of N bytes, allocated outside the framework allocator's API
    (the way cuBLAS workspaces, NCCL buffers or a CUDA-graph pool come from another library) before the
    loop and freed after it: through the driver (cuMemAlloc_v2) on the torch path, whose allocator is the
    runtime's; through the runtime (cudaMalloc) on the jax and tf paths, whose allocators use the driver.
    The truth gets ``outside_bytes`` and ``outside_address``.

``--oom-neighbour N``
    another process (forked before the loop, before any CUDA call) holds three device blocks of N bytes in
    all (cudaMalloc) from before the loop starts until it ends: the other process live at each of the
    loop's out-of-memory failures.  Its blocks go to ``--oom-truth`` as one line
    ``{"neighbour": pid, "live_bytes": N, "live": [[address, size, "neighbour"], ...]}``.

``--oom-retry smaller`` (with ``--oom near``)
    after the failed request the allocator keeps its cache and asks for a smaller batch (half the free
    memory) instead of releasing the cache and retrying the same size: the request right after the failure
    is a new allocation, so the allocator's reserve changes there.

The blocks are allocated through the process's global symbols, so ``pyinterpose run`` records them.
"""
from __future__ import annotations

import ctypes
import json
import os
import sys

from pyinterpose.errors import PyinterposeError

OOM_RETRIES = ("release", "smaller")


def add_arguments(p) -> None:
    p.add_argument("--outside-bytes", type=int, default=0, metavar="N",
                   help="hold N device bytes outside the framework allocator's API for the whole run")
    p.add_argument("--oom-neighbour", type=int, default=0, metavar="N",
                   help="another process holds N device bytes during the whole loop (written to --oom-truth)")
    p.add_argument("--oom-retry", choices=OOM_RETRIES, default="release",
                   help="after a failed request: release the cache and retry (default) or ask for a smaller "
                        "batch, the cache kept (--oom near only)")


def check_arguments(args) -> None:
    if args.outside_bytes < 0 or args.oom_neighbour < 0:
        raise PyinterposeError("--outside-bytes and --oom-neighbour must be 0 or more")
    if args.oom_neighbour and not args.oom_truth:
        raise PyinterposeError("--oom-neighbour needs --oom-truth (where its blocks are written)")
    if args.oom_retry != "release" and args.oom != "near":
        raise PyinterposeError("--oom-retry smaller needs --oom near")


def _cuda() -> ctypes.CDLL:
    """The process's global scope (the preloaded shim's wrappers first), simcuda loaded into it."""
    from pyinterpose.examples._simlib import load_simcuda

    load_simcuda()
    return ctypes.CDLL(None)


def _alloc(lib: ctypes.CDLL, n: int, driver: bool, device: int = 0) -> int:
    if driver:   # the runtime makes the device's primary context current, as a framework has by then
        p = ctypes.c_uint64(0)
        if lib.cudaSetDevice(device) or lib.cuMemAlloc_v2(ctypes.byref(p), ctypes.c_size_t(n)):
            raise PyinterposeError(f"cuMemAlloc_v2 of {n} bytes failed")
        return int(p.value)
    p = ctypes.c_void_p(0)
    if lib.cudaMalloc(ctypes.byref(p), ctypes.c_size_t(n)):
        raise PyinterposeError(f"cudaMalloc of {n} bytes failed")
    return int(p.value or 0)


def _free(lib: ctypes.CDLL, p: int, driver: bool) -> None:
    rc = lib.cuMemFree_v2(ctypes.c_uint64(p)) if driver else lib.cudaFree(ctypes.c_void_p(p))
    if rc:
        raise PyinterposeError(f"freeing the block at {p:#x} failed ({rc})")


class Outside:
    """--outside-bytes: the block held outside the framework allocator (a context manager)."""

    def __init__(self, framework: str, nbytes: int, device: int = 0):
        self.driver = framework == "torch"
        self.n, self.device, self.address, self.lib = nbytes, device, 0, None

    def __enter__(self):
        if self.n:
            self.lib = _cuda()
            self.address = _alloc(self.lib, self.n, self.driver, self.device)
        return self

    def __exit__(self, *exc):
        if self.address:
            _free(self.lib, self.address, self.driver)
        return False

    def truth(self) -> dict:
        return {"outside_bytes": self.n, "outside_address": self.address} if self.n else {}


class Neighbour:
    """--oom-neighbour: another process holding device blocks while the loop runs (a context manager)."""

    def __init__(self, nbytes: int, truth_path: str | None):
        self.n, self.path, self.pid, self.hold = nbytes, truth_path, 0, -1

    def __enter__(self):
        if not self.n:
            return self
        ready_r, ready_w = os.pipe()
        hold_r, hold_w = os.pipe()
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            os.close(ready_r)
            os.close(hold_w)
            self._child(ready_w, hold_r)
        os.close(ready_w)
        os.close(hold_r)
        self.pid, self.hold = pid, hold_w
        ok = os.read(ready_r, 1) == b"1"
        os.close(ready_r)
        if not ok:
            self._end()
            raise PyinterposeError("the --oom-neighbour process could not allocate its blocks")
        return self

    def _child(self, ready_w: int, hold_r: int) -> None:
        code = 0
        try:
            lib = _cuda()
            sizes = [self.n // 2, self.n // 3]
            sizes.append(self.n - sum(sizes))
            blocks = [(_alloc(lib, s, False), s) for s in sizes if s > 0]
            line = json.dumps({"neighbour": os.getpid(), "live_bytes": sum(s for _, s in blocks),
                               "live": [[a, s, "neighbour"] for a, s in blocks]}) + "\n"
            fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
            os.write(fd, line.encode())
            os.close(fd)
            os.write(ready_w, b"1")
            os.read(hold_r, 1)            # until the loop's process closes its end
            for a, _ in blocks:
                _free(lib, a, False)
        except BaseException:  # noqa: BLE001 - the parent sees no "1" and says so
            code = 1
        os._exit(code)

    def _end(self) -> int:
        os.close(self.hold)
        _, status = os.waitpid(self.pid, 0)
        return os.waitstatus_to_exitcode(status)

    def __exit__(self, *exc):
        if self.pid and self._end() != 0 and exc[0] is None:
            raise PyinterposeError("the --oom-neighbour process failed")
        return False
