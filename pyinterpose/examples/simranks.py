"""simtrain --ranks N: a data-parallel job of N processes on N simulated devices.

    python -m pyinterpose.examples.simtrain --ranks N [--visible-devices] [--imbalance K]
        [--heavy-rank R] [--no-multicast] [--truth FILE.json] [--framework ...] [--steps S] ...

Like ``torchrun --nproc-per-node N``: each rank is its own process (``python -m
pyinterpose.examples.simtrain --rank-child``, exec'ed, so ``pyinterpose run`` records each one) with
``RANK``, ``LOCAL_RANK``, ``WORLD_SIZE``, ``LOCAL_WORLD_SIZE``, ``MASTER_ADDR``/``MASTER_PORT`` set
and ``SIMCUDA_DEVICES`` at least N.  Rank r runs on device ordinal r, or, with
``--visible-devices``, on ordinal 0 of ``CUDA_VISIBLE_DEVICES=r`` (as SLURM binds one GPU per task):
either way physical device r, whose UUID is simcuda's ``GPU-73696d63-7564-612d-...-<r+1>``.

Each rank first brings up the simulated collective library (native/simnccl: a VMM buffer with an
exportable handle mapped twice with overlapping windows, its peers' buffers imported and written to,
an IPC buffer, a private pool, a multicast object), then runs the training loop, then tears the
library down.  Rank ``--heavy-rank`` (default: the last) trains ``--imbalance`` more layers
(default 2): it holds more and peaks higher.

Truth: every rank writes its own (``rank-<r>.json`` in the rendezvous folder), the parent gathers them
into ``--truth``: {"ranks": [{rank, local_rank, world_size, pid, device (the ordinal it used),
physical_device, device_uuid, steps, layers, peak_live_bytes (the library's bytes + the loop's peak:
the library holds its memory for the whole loop), train_peak_bytes, nccl: {owned_bytes,
buffer_bytes, ipc_bytes, pool_bytes, maps_own, imported, ipc_opened, multicast_bytes, verified},
allocs, frees, by_api, ...}], "world_size", "framework", "steps", "heavy_rank"}.
"""
from __future__ import annotations

import ctypes
import json
import os
import shutil
import subprocess
import sys
import tempfile

from pyinterpose.errors import PyinterposeError
from pyinterpose.examples._simlib import bind_simtrain, load_simcuda, native_dir, run_once

MiB = 1 << 20
SIMCUDA_UUID_PREFIX = "GPU-73696d63-7564-612d-"   # "simcuda-" (native/simcuda/driver/core.c)


def simcuda_uuid(physical: int) -> str:
    """The UUID simcuda gives physical device ``physical`` (as nvidia-smi writes UUIDs)."""
    return SIMCUDA_UUID_PREFIX + f"{(physical + 1) >> 48:04x}-{(physical + 1) & ((1 << 48) - 1):012x}"


def add_arguments(p) -> None:
    g = p.add_argument_group("ranks (a data-parallel job of several processes)")
    g.add_argument("--ranks", type=int, default=0, help="start N rank processes on N simulated devices")
    g.add_argument("--visible-devices", action="store_true",
                   help="give rank r CUDA_VISIBLE_DEVICES=r and device 0 (default: device r of all)")
    g.add_argument("--imbalance", type=int, default=2, help="extra layers of the heavy rank (default 2)")
    g.add_argument("--heavy-rank", type=int, default=-1, help="the rank that holds more (default: the last)")
    g.add_argument("--no-multicast", action="store_true", help="no multicast object in the collective library")
    g.add_argument("--nccl-buffer-mib", type=int, default=6, help="collective buffer, MiB (multiple of 2, >= 6)")
    g.add_argument("--rank-child", action="store_true", help=argparse_suppress())
    g.add_argument("--rendezvous", help=argparse_suppress())
    g.add_argument("--device", type=int, default=0,
                   help="device ordinal the loop runs on (default 0; with --ranks: set per rank)")


def argparse_suppress():
    import argparse

    return argparse.SUPPRESS


def check_arguments(args) -> None:
    if args.device < 0:
        raise PyinterposeError("--device must be 0 or more")
    if args.ranks < 0 or args.ranks > 16:
        raise PyinterposeError("--ranks must be between 1 and 16")
    if args.ranks and args.workers:
        raise PyinterposeError("--ranks and --workers do not go together")
    if args.imbalance < 0:
        raise PyinterposeError("--imbalance must be 0 or more")
    if args.nccl_buffer_mib < 6 or args.nccl_buffer_mib % 2:
        raise PyinterposeError("--nccl-buffer-mib must be an even number of at least 6")
    if args.ranks and args.heavy_rank >= args.ranks:
        raise PyinterposeError("--heavy-rank must be below --ranks")


def _heavy(args, world: int) -> int:
    return args.heavy_rank if args.heavy_rank >= 0 else world - 1


# ---- the parent -------------------------------------------------------------------------------
def _child_argv(args) -> list[str]:
    argv = [sys.executable, "-m", "pyinterpose.examples.simtrain", "--rank-child", "--framework", args.framework,
            "--steps", str(args.steps), "--layers", str(args.layers), "--noise", str(args.noise),
            "--seed", str(args.seed), "--imbalance", str(args.imbalance), "--heavy-rank", str(args.heavy_rank),
            "--nccl-buffer-mib", str(args.nccl_buffer_mib), "--rendezvous", args.rendezvous]
    if args.no_multicast:
        argv.append("--no-multicast")
    return argv


def run_ranks(args) -> dict:
    """Start the ranks, wait for them all, gather their truths."""
    n = args.ranks
    rdv = tempfile.mkdtemp(prefix="simtrain-ranks-")
    args.rendezvous = rdv
    procs = []
    try:
        base = dict(os.environ)
        devices = max(n, int(base.get("SIMCUDA_DEVICES") or 0))
        for r in range(n):
            env = dict(base, RANK=str(r), LOCAL_RANK=str(r), WORLD_SIZE=str(n), LOCAL_WORLD_SIZE=str(n),
                       MASTER_ADDR="127.0.0.1", MASTER_PORT="29500", SIMCUDA_DEVICES=str(devices))
            argv = _child_argv(args)
            if args.visible_devices:
                env["CUDA_VISIBLE_DEVICES"] = str(r)
                argv += ["--device", "0"]
            else:
                env.pop("CUDA_VISIBLE_DEVICES", None)
                argv += ["--device", str(r)]
            procs.append(subprocess.Popen(argv, env=env))
        codes = [p.wait() for p in procs]
        ranks, errors = [], []
        for r, code in enumerate(codes):
            path = os.path.join(rdv, f"rank-{r}.json")
            try:
                with open(path) as f:
                    t = json.load(f)
            except (OSError, ValueError):
                t = {"error": f"rank {r} exited with {code} and wrote no truth"}
            if "error" in t or code != 0:
                errors.append(t.get("error") or f"rank {r} exited with {code}")
            else:
                ranks.append(t)
        if errors:
            raise PyinterposeError("; ".join(errors))
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
        shutil.rmtree(rdv, ignore_errors=True)
    return {"framework": args.framework, "steps": args.steps, "layers": args.layers, "seed": args.seed,
            "noise": args.noise, "world_size": n, "heavy_rank": _heavy(args, n),
            "visible_devices": bool(args.visible_devices), "ranks": ranks,
            "pids": [t["pid"] for t in ranks]}


# ---- a rank ---------------------------------------------------------------------------------------
class _NcclConfig(ctypes.Structure):
    _fields_ = [("rank", ctypes.c_int), ("nranks", ctypes.c_int), ("device", ctypes.c_int),
                ("dir", ctypes.c_char_p), ("buf_bytes", ctypes.c_uint64), ("ipc_bytes", ctypes.c_uint64),
                ("pool_bytes", ctypes.c_uint64), ("multicast", ctypes.c_int), ("timeout_s", ctypes.c_double)]


NCCL_COUNTERS = ("owned_bytes", "buffer_bytes", "ipc_bytes", "pool_bytes", "maps_own", "imported", "ipc_opened",
                 "multicast_bytes", "verified")


class _NcclTruth(ctypes.Structure):
    _fields_ = [(k, ctypes.c_uint64) for k in NCCL_COUNTERS] + [("error", ctypes.c_char * 256)]


def _load_simnccl() -> ctypes.CDLL:
    load_simcuda()
    path = os.path.join(native_dir(), "libsimnccl.so")
    if not os.path.exists(path):
        raise PyinterposeError(f"{path} is missing: build it with `python pyinterpose/_build.py simnccl`")
    lib = ctypes.CDLL(path, mode=os.RTLD_GLOBAL)
    lib.simnccl_init.argtypes = [ctypes.POINTER(_NcclConfig), ctypes.POINTER(_NcclTruth)]
    lib.simnccl_init.restype = ctypes.c_void_p
    lib.simnccl_finalize.argtypes = [ctypes.c_void_p, ctypes.POINTER(_NcclTruth)]
    lib.simnccl_finalize.restype = ctypes.c_int
    return lib


def _rank_env() -> tuple[int, int, int]:
    try:
        return int(os.environ["RANK"]), int(os.environ.get("LOCAL_RANK", "0")), int(os.environ["WORLD_SIZE"])
    except (KeyError, ValueError):
        raise PyinterposeError("--rank-child needs RANK and WORLD_SIZE in the environment")


def rank_once(args) -> dict:
    """This process's part of the job: the library up, the loop, the library down; its truth."""
    rank, local, world = _rank_env()
    nccl = _load_simnccl()
    train = bind_simtrain()
    heavy = _heavy(args, world)
    layers = args.layers + (args.imbalance if rank == heavy else 0)
    cfg = _NcclConfig(rank, world, args.device, args.rendezvous.encode(), args.nccl_buffer_mib * MiB,
                      2 * MiB, 256 << 10, 0 if args.no_multicast else 1, 60.0)
    nt = _NcclTruth()
    comm = nccl.simnccl_init(ctypes.byref(cfg), ctypes.byref(nt))
    if not comm:
        raise PyinterposeError(f"rank {rank}: simnccl: {nt.error.decode(errors='replace')}")
    nccl_truth = {k: int(getattr(nt, k)) for k in NCCL_COUNTERS}
    try:
        t = run_once(train, args.framework, args.steps, layers, args.noise, args.seed, device=args.device)
    finally:
        ft = _NcclTruth()
        rc = nccl.simnccl_finalize(comm, ctypes.byref(ft))
    if rc != 0:
        raise PyinterposeError(f"rank {rank}: simnccl: {ft.error.decode(errors='replace')}")
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    physical = int(visible.split(",")[args.device]) if visible else args.device
    t.update(rank=rank, local_rank=local, world_size=world, pid=os.getpid(), device=args.device,
             physical_device=physical, device_uuid=simcuda_uuid(physical), steps=args.steps, layers=layers,
             train_peak_bytes=t["peak_live_bytes"], peak_live_bytes=t["peak_live_bytes"] + nccl_truth["owned_bytes"],
             nccl=nccl_truth)
    return t


def child_main(args) -> int:
    rank = os.environ.get("RANK", "?")
    path = os.path.join(args.rendezvous or ".", f"rank-{rank}.json")
    try:
        truth = rank_once(args)
        code = 0
    except PyinterposeError as e:
        truth, code = {"error": str(e)}, 1
        print(f"simtrain rank {rank}: error: {e}", file=sys.stderr)
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(truth, f)
    os.replace(tmp, path)
    return code
