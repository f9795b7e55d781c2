"""simtrain — training-like workloads on simcuda through each framework's real
CUDA call path, with a truth file that says exactly what they did.

    python -m pyinterpose.examples.simtrain --framework torch|jax|tf [--steps N]
        [--workers K] [--noise F] [--noise-kinds extra,missing,stream2] [--truth FILE.json] [--layers L]
        [--seed S] [--device-time off|h100-like]
        [--oom near|final [--oom-step S] [--oom-truth FILE.jsonl]] [--graphs [WARMUP]]
        [--outside-bytes N] [--oom-neighbour N] [--oom-retry release|smaller]   (simaside.py)
    python -m pyinterpose.examples.simtrain --leak ...   (a slow leak and a late OOM: see simleak.py)

With SIMCUDA_CHECK=1, every block's contents are checked before it is freed (simtrain.h): a block
overwritten while live ends the run with an error (exit status 1).

torch: libcudart through the PLT (cudaMallocAsync/cudaFreeAsync when
PYTORCH_CUDA_ALLOC_CONF or PYTORCH_ALLOC_CONF has backend:cudaMallocAsync, else
cudaMalloc/cudaFree), cudaLaunchKernel, cudaMemcpyAsync, cudaMemsetAsync;
jax: dlopen libcuda + dlsym (cuMemAlloc_v2, cuLaunchKernel with packed and
plain arguments, ...); tf: dlopen libcuda + cuGetProcAddress_v2
(cuMemAllocFromPoolAsync, cuLaunchKernelEx, ...).  The loop itself is C
(native/simtrain); ``--workers K`` forks K children (no exec) that run the same
loop, and the truth is summed over all processes.

``--device-time h100-like`` gives the kernels device durations on simcuda's device clock, host dispatch
work before each launch and a synchronisation per step, so that the GPU timeline lags the CPU's as on
the H100 (docs/simcuda-device-clock.md); the default ``off`` leaves every time as before.

Truth keys: framework, steps, workers, layers, seed, noise, allocs, frees, bytes,
accesses, launches, allocs_per_step (one regular step of one process), by_api
(exact names called), noise_steps, pids, peaks (each process's peak live device bytes, in
the order of pids); device_time when it is not off; failed_allocs with --oom; result_hashes (per
process: a hash of the trained weights' and moments' first values, comparable between runs with
SIMCUDA_CHECK=1, which zeroes the values the kernels read first).
``--ranks N``: a job of N rank processes (pyinterpose.examples.simranks).

CUDA graphs (``--graphs [WARMUP]``, torch path with ``PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync``):
WARMUP eager steps (default 2), then one step captured into a graph (its cudaMallocAsync/cudaFreeAsync
become memory nodes, nothing runs at capture) and every later step one replay (cudaGraphLaunch), as
``torch.cuda.graph`` / ``torch.compile(mode="reduce-overhead")`` do.  The truth counts what ran:
``allocs``, ``accesses``, ``launches``, ... are totals over the eager steps and the replays (the capture
counts nothing); ``graphs`` holds warmup_steps, replays and what one replay does (allocs, frees, bytes,
accesses, launches).  ``by_api`` counts calls made (the captured ones once, cudaGraphLaunch per replay).

Out of memory (``--oom``): at step S (default the last) the loop puts a few blocks in its
allocator's cache (allocated, freed by the program, kept from CUDA), then asks for more than the
device has free (a batch too large); the request fails, the cached blocks are released for real
(cudaFree / cuMemFree_v2 / cuMemFreeAsync), and the same request is tried again -- what PyTorch's
caching allocator does, and XLA's retry after collecting garbage.  ``near``: the retry succeeds and
the run goes on (a near OOM); ``final``: it fails too, the program prints the framework's
out-of-memory error and exits with status 1.  ``--oom-truth FILE`` gets one JSON line per failed
request with the live set at that moment (see native/simtrain/simtrain_oom.c).  The device's
size is SIMCUDA_MEMORY_BYTES; when it is not set, --oom sets it to 256 MiB (the retry of a near
OOM allocates most of the device in host memory).
"""
from __future__ import annotations

import argparse
import ctypes
import json
import os
import sys

from pyinterpose.errors import PyinterposeError
from pyinterpose.examples import simranks
from pyinterpose.examples._simlib import (COUNTERS, DEVICE_TIMES, FRAMEWORKS, OOM_DEFAULT_DEVICE_BYTES, OOM_MODES,
                                          bind_simtrain, run_once)
from pyinterpose.examples import simaside

NOISE_KINDS = {"extra": 1, "missing": 2, "stream2": 4}


def noise_mask(kinds: str) -> int:
    """--noise-kinds extra,missing,stream2 -> simtrain.h's SIMTRAIN_NOISE_* bits."""
    mask = 0
    for k in (k.strip() for k in kinds.split(",") if k.strip()):
        if k not in NOISE_KINDS:
            raise PyinterposeError(f"--noise-kinds: unknown kind {k!r} (choose from {', '.join(NOISE_KINDS)})")
        mask |= NOISE_KINDS[k]
    return mask or NOISE_KINDS["extra"]


def _merge(parts: list[dict]) -> dict:
    total = {k: sum(p[k] for p in parts) for k in COUNTERS}
    by_api: dict[str, int] = {}
    for p in parts:
        for k, v in p["by_api"].items():
            by_api[k] = by_api.get(k, 0) + v
    total["by_api"] = dict(sorted(by_api.items()))
    total["allocs_per_step"] = parts[0]["allocs_per_step"]
    total["pids"] = [pid for p in parts for pid in p["pids"]]
    total["peaks"] = [p["peak_live_bytes"] for p in parts]   # per process, in the order of pids
    total["result_hashes"] = [p["result_hash"] for p in parts]  # the trained state (SIMCUDA_CHECK=1: comparable)
    if "failed_allocs" in parts[0]:
        total["failed_allocs"] = sum(p["failed_allocs"] for p in parts)
    if "graphs" in parts[0]:
        total["graphs"] = parts[0]["graphs"]   # per process (every process replays the same graph)
    return total


def _child(lib, args, wfd: int) -> None:
    """In a forked child: run, send the truth (or the error) through the pipe, exit."""
    code = 0
    try:  # end with the parent (Linux): an interrupted run leaves no worker behind
        ctypes.CDLL(None, use_errno=True).prctl(1, 2, 0, 0, 0)  # PR_SET_PDEATHSIG, SIGINT
    except (OSError, AttributeError):
        pass
    try:
        msg = {"ok": run_once(lib, *_run_args(args))}
    except BaseException as e:  # noqa: BLE001 - reported to the parent
        msg, code = {"error": str(e)}, 1
    try:
        data = json.dumps(msg).encode()
        with os.fdopen(wfd, "wb") as w:
            w.write(data)
    finally:
        os._exit(code)


def _run_args(args: argparse.Namespace) -> tuple:
    return (args.framework, args.steps, args.layers, args.noise, args.seed, getattr(args, "device_time", "off"),
            getattr(args, "oom", "none"), getattr(args, "oom_step", -1), getattr(args, "oom_truth", None),
            getattr(args, "device", 0), noise_mask(getattr(args, "noise_kinds", "extra")),
            getattr(args, "oom_retry", "release"), getattr(args, "graphs", 0))


def run(args: argparse.Namespace) -> dict:
    """Run the workload in this process and ``args.workers`` forked children (beside the memory of
    --outside-bytes and --oom-neighbour: simaside)."""
    with simaside.Neighbour(getattr(args, "oom_neighbour", 0), getattr(args, "oom_truth", None)), \
            simaside.Outside(args.framework, getattr(args, "outside_bytes", 0), getattr(args, "device", 0)) as outside:
        truth = _run(args)
        truth.update(outside.truth())
    return truth


def _run(args: argparse.Namespace) -> dict:
    lib = bind_simtrain()
    children = []
    for _ in range(args.workers):
        r, w = os.pipe()
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            os.close(r)
            for _pid, other_r in children:
                os.close(other_r)
            _child(lib, args, w)
        os.close(w)
        children.append((pid, r))
    parts, errors = [], []
    try:
        parts.append(run_once(lib, *_run_args(args)))
    except PyinterposeError as e:
        errors.append(str(e))
    for pid, r in children:
        with os.fdopen(r, "rb") as f:
            data = f.read()
        _, status = os.waitpid(pid, 0)
        code = os.waitstatus_to_exitcode(status)
        try:
            msg = json.loads(data) if data else {"error": f"worker {pid} exited with {code} and no report"}
        except ValueError:
            msg = {"error": f"worker {pid} sent a broken report"}
        if "ok" in msg and code == 0:
            parts.append(msg["ok"])
        else:
            errors.append(msg.get("error") or f"worker {pid} exited with {code}")
    if errors:
        raise PyinterposeError("; ".join(errors))
    truth = {"framework": args.framework, "steps": args.steps, "workers": args.workers, "layers": args.layers,
             "seed": args.seed, "noise": args.noise}
    truth.update(_merge(parts))
    if args.device_time != "off":
        truth["device_time"] = args.device_time
    return truth


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m pyinterpose.examples.simtrain",
                                description="training-like workload on simcuda, with a truth file")
    p.add_argument("--framework", choices=FRAMEWORKS, default="torch")
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--workers", type=int, default=0, help="forked worker processes besides this one")
    p.add_argument("--noise", type=float, default=0.0, help="fraction of steps with extra allocations")
    p.add_argument("--noise-kinds", default="extra", metavar="K[,K]",
                   help="what a noisy step does: extra (an evaluation pass or a logging buffer), missing (a "
                        "layer's workspace is not allocated), stream2 (the input is freed on a second stream); "
                        "default extra")
    p.add_argument("--truth", help="write the truth JSON here")
    p.add_argument("--layers", type=int, default=6)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--device-time", choices=DEVICE_TIMES, default="off",
                   help="h100-like: kernels take device time, the GPU lags the CPU as on an H100")
    p.add_argument("--oom", choices=OOM_MODES, default="none",
                   help="run out of device memory at --oom-step: near (the retry after releasing the cache "
                        "succeeds) or final (it fails: out-of-memory error, exit status 1)")
    p.add_argument("--oom-step", type=int, default=-1, help="the step that asks for too much (default: the last)")
    p.add_argument("--oom-truth", metavar="FILE", help="one JSON line per failed request: the live set")
    p.add_argument("--graphs", type=int, nargs="?", const=2, default=0, metavar="WARMUP",
                   help="CUDA graphs (torch path, cudaMallocAsync backend): WARMUP eager steps (default 2), then "
                        "one step captured into a graph and replayed for every later step")
    simranks.add_arguments(p)
    simaside.add_arguments(p)
    args = p.parse_args(argv)
    if args.steps < 1:
        raise PyinterposeError("--steps must be at least 1")
    if args.layers < 1:
        raise PyinterposeError("--layers must be at least 1")
    if args.workers < 0:
        raise PyinterposeError("--workers must be 0 or more")
    simranks.check_arguments(args)
    simaside.check_arguments(args)
    if not 0.0 <= args.noise <= 1.0:
        raise PyinterposeError("--noise must be between 0 and 1")
    noise_mask(args.noise_kinds)
    if not 0 <= args.seed < 2**64:
        raise PyinterposeError("--seed must be between 0 and 2**64-1")
    if args.oom_step >= args.steps:
        raise PyinterposeError(f"--oom-step must be below --steps ({args.steps})")
    if args.oom_step < -1:
        raise PyinterposeError("--oom-step must be 0 or more")
    if args.graphs < 0 or (args.graphs and args.steps <= args.graphs):
        raise PyinterposeError(f"--graphs WARMUP must be 1 or more and below --steps ({args.steps})")
    return args


def main(argv: list[str] | None = None) -> int:
    import signal

    # The loop runs in C: Python would see Ctrl-C/SIGINT only when it returns.  Like a C training loop,
    # let SIGINT end the process at once (exit status 130 for `pyinterpose run`).
    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
        signal.signal(signal.SIGINT, signal.SIG_DFL)
    cli = sys.argv[1:] if argv is None else argv
    if "--leak" in cli:   # the slow-leak, late-OOM loop (its own options and truth): simleak.py
        # lazy: loading simleak up front changes result_hashes between --device-time off and h100-like
        # (tests/unit/test_simtrain_device_time.py): the simulated training hash depends on process layout
        from . import simleak

        return simleak.main(cli)
    try:
        args = parse_args(argv)
        # declare the framework path this process emulates, as a launcher may for a real one: the shim
        # records it (CONTEXT), so the trace says which framework ran whatever the command line was
        os.environ["PYINTERPOSE_FRAMEWORK"] = args.framework
        if args.rank_child:
            return simranks.child_main(args)
        if args.oom != "none":
            os.environ.setdefault("SIMCUDA_MEMORY_BYTES", str(OOM_DEFAULT_DEVICE_BYTES))
        if args.ranks:
            truth = simranks.run_ranks(args)
        else:
            truth = run(args)
    except PyinterposeError as e:
        print(f"simtrain: error: {e}", file=sys.stderr)
        return 1
    if args.truth:
        with open(args.truth, "w") as f:
            json.dump(truth, f, indent=1)
            f.write("\n")
    if args.ranks:
        print(f"simtrain {truth['framework']}: {truth['steps']} steps x {args.ranks} ranks: peaks "
              + ", ".join(str(r["peak_live_bytes"]) for r in truth["ranks"]))
        return 0
    print(f"simtrain {truth['framework']}: {truth['steps']} steps x {len(truth['pids'])} process(es): "
          f"{truth['allocs']} allocs, {truth['frees']} frees, {truth['launches']} launches, "
          f"{truth['accesses']} accesses, {truth['noise_steps']} noisy steps")
    return 0


if __name__ == "__main__":
    sys.exit(main())
