"""simleak — a long training-like loop on simcuda with a slow leak and a late out-of-memory failure, and a
truth file that says what it did (``python -m pyinterpose.examples.simtrain --leak ...`` runs it).

    python -m pyinterpose.examples.simtrain --leak [--steps N] [--leak-bytes B] [--leak-every K]
        [--oom-step S] [--window A:B] [--window-api profiler|markers] [--truth FILE.json]
        [--wait-dir D --wait-steps S[,S]] [--ranks N [--oom-rank R]]

Each step begins with ``pyinterpose.mark_step()`` (step k begins at the k-th marker), allocates its
activations (cudaMalloc), writes them (cudaMemset: accesses), and frees them in reverse order.  Every
``--leak-every`` steps (from step ``--leak-every - 1``) it allocates ``--leak-bytes`` in
``_leaky_cache`` and never frees them: a slow leak of leak_bytes / leak_every bytes per step at one call
site.  At ``--oom-step`` it asks for more than the device has free (a batch too large): the request
fails, the program prints an out-of-memory error and exits with status 1 (a final OOM).
``--wait-dir D --wait-steps S`` (tests): at the start of step S, write D/ready-S (pid, step, the live set
as below) and wait for D/go-S.
``--window A:B`` calls cudaProfilerStart at the start of step A and cudaProfilerStop at the start of step
B (``--window-api markers``: pyinterpose.start() / pyinterpose.stop()).

Truth keys: steps (steps begun), leak_bytes, leak_every, leak_per_step, leak_function, weights_bytes,
peak_live_bytes, live_at_end (bytes), window (first_step, last_step, live_at_start, peak) when
--window is given, oom (step, request, live: [[address, size], ...] in allocation order, live_bytes)
when the OOM step is reached.  ``--ranks N``: N rank processes (RANK, LOCAL_RANK, WORLD_SIZE set; only
``--oom-rank`` runs out of memory), the truth is ``{"ranks": [each rank's truth, with "rank"]}``.  Live bytes are the sum of the sizes asked for of the blocks allocated
and not yet freed.
"""
from __future__ import annotations

import argparse
import ctypes
import json
import sys

import pyinterpose
from pyinterpose.errors import PyinterposeError

from ._simlib import load_simcuda

ACTIVATIONS = (3 << 20, 1 << 20, 2 << 20, 512 << 10)   # bytes asked per step, in allocation order
WEIGHTS = (4 << 20, 4 << 20, 1 << 20)
DEFAULT_DEVICE_BYTES = 256 << 20


class _Cuda:
    def __init__(self):
        _, rt = load_simcuda()
        self.rt = rt
        rt.cudaMalloc.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_size_t]
        rt.cudaFree.argtypes = [ctypes.c_void_p]
        rt.cudaMemset.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t]
        rt.cudaMemGetInfo.argtypes = [ctypes.POINTER(ctypes.c_size_t), ctypes.POINTER(ctypes.c_size_t)]
        for f in (rt.cudaMalloc, rt.cudaFree, rt.cudaMemset, rt.cudaMemGetInfo, rt.cudaProfilerStart,
                  rt.cudaProfilerStop):
            f.restype = ctypes.c_int


class Loop:
    """The workload's own bookkeeping: every block it holds (address -> size), live bytes and peaks."""

    def __init__(self, cuda: _Cuda):
        self.cuda = cuda
        self.live: dict[int, int] = {}
        self.live_bytes = 0
        self.peak = 0
        self.window_peak: int | None = None   # peak while a window is open

    def malloc(self, size: int) -> int:
        p = ctypes.c_void_p()
        r = self.cuda.rt.cudaMalloc(ctypes.byref(p), size)
        if r != 0:
            raise MemoryError(r)
        self.live[p.value] = size
        self.live_bytes += size
        self.peak = max(self.peak, self.live_bytes)
        if self.window_peak is not None:
            self.window_peak = max(self.window_peak, self.live_bytes)
        self.cuda.rt.cudaMemset(p, 0, min(size, 256))   # an access (the first bytes: cheap on the host)
        return p.value

    def free(self, ptr: int) -> None:
        if self.cuda.rt.cudaFree(ctypes.c_void_p(ptr)) != 0:
            raise PyinterposeError(f"cudaFree({ptr:#x}) failed")
        self.live_bytes -= self.live.pop(ptr)


def _leaky_cache(loop: Loop, held: list, nbytes: int) -> None:
    """The leak: a buffer kept in a list that nobody ever empties."""
    held.append(loop.malloc(nbytes))


def _activations(loop: Loop) -> None:
    ptrs = [loop.malloc(n) for n in ACTIVATIONS]
    for p in reversed(ptrs):
        loop.free(p)


def _window_edge(loop: Loop, api: str, start: bool) -> None:
    if api == "profiler":
        r = (loop.cuda.rt.cudaProfilerStart if start else loop.cuda.rt.cudaProfilerStop)()
        if r != 0:
            raise PyinterposeError(f"cudaProfiler{'Start' if start else 'Stop'} failed: {r}")
    else:
        (pyinterpose.start if start else pyinterpose.stop)()
    loop.window_peak = loop.live_bytes if start else loop.window_peak


def _wait(folder: str, step: int, loop: Loop) -> None:
    """Tests: at the start of ``step`` write ``ready-STEP`` (pid, step, the live set) and wait for ``go-STEP``
    (a signal to `run` or to this process happens meanwhile)."""
    import os
    import time

    info = {"pid": os.getpid(), "step": step, "live_bytes": loop.live_bytes,
            "live": [[a, n] for a, n in loop.live.items()]}
    tmp = os.path.join(folder, f".ready-{step}")
    with open(tmp, "w") as f:
        json.dump(info, f)
    os.replace(tmp, os.path.join(folder, f"ready-{step}"))
    deadline = time.monotonic() + 120
    while not os.path.exists(os.path.join(folder, f"go-{step}")):
        if time.monotonic() > deadline:
            raise PyinterposeError(f"--wait-dir: no go-{step} within 120 s")
        time.sleep(0.01)


def run(args: argparse.Namespace, ready=None) -> tuple[dict, int]:
    """The loop; ``ready``: called once the weights are allocated (the rank processes' barrier)."""
    cuda = _Cuda()
    loop = Loop(cuda)
    truth = {"leak_bytes": args.leak_bytes, "leak_every": args.leak_every,
             "leak_per_step": args.leak_bytes / args.leak_every, "leak_function": "_leaky_cache",
             "weights_bytes": sum(WEIGHTS)}
    weights = [loop.malloc(n) for n in WEIGHTS]
    if ready is not None:
        ready()
    held: list[int] = []
    win = args.window
    status = 0
    step = 0
    waits = set(args.wait_steps)
    for step in range(args.steps):
        pyinterpose.mark_step()
        if step in waits:
            _wait(args.wait_dir, step, loop)
        if win and step == win[0]:
            _window_edge(loop, args.window_api, True)
            truth["window"] = {"first_step": win[0], "last_step": win[1] - 1, "live_at_start": loop.live_bytes}
        if win and step == win[1]:
            truth["window"]["peak"] = loop.window_peak
            _window_edge(loop, args.window_api, False)
            loop.window_peak = None
        if step == args.oom_step:
            free, total = ctypes.c_size_t(), ctypes.c_size_t()
            cuda.rt.cudaMemGetInfo(ctypes.byref(free), ctypes.byref(total))
            request = int(free.value) + (64 << 20)
            truth["oom"] = {"step": step, "request": request, "live_bytes": loop.live_bytes,
                            "live": [[a, n] for a, n in loop.live.items()]}
            try:
                loop.malloc(request)
            except MemoryError:
                print(f"simleak: out of memory at step {step}: tried to allocate {request} bytes "
                      f"({loop.live_bytes} in use)", file=sys.stderr)
                status = 1
                break
            raise PyinterposeError(f"--oom-step {step}: the request of {request} bytes did not fail")
        _activations(loop)
        if step % args.leak_every == args.leak_every - 1:
            _leaky_cache(loop, held, args.leak_bytes)
    else:
        step = args.steps
    if win and "window" in truth and "peak" not in truth["window"]:
        truth["window"]["peak"] = loop.window_peak
        truth["window"]["last_step"] = min(win[1], step + 1) - 1
    truth["steps"] = step + 1 if status else args.steps
    truth["peak_live_bytes"] = loop.peak
    truth["live_at_end"] = loop.live_bytes
    truth["leaked_blocks"] = len(held)
    if status == 0:
        for p in held + weights:
            loop.free(p)
    return truth, status


def _window(text: str) -> tuple[int, int]:
    a, sep, b = text.partition(":")
    try:
        lo, hi = int(a), int(b)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected A:B, got {text!r}")
    if not sep or lo < 0 or hi <= lo:
        raise argparse.ArgumentTypeError(f"expected A:B with 0 <= A < B, got {text!r}")
    return lo, hi


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m pyinterpose.examples.simtrain --leak",
                                description="a long loop with a slow leak and a late OOM, with a truth file")
    p.add_argument("--leak", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--steps", type=int, default=3000)
    p.add_argument("--leak-bytes", type=int, default=256 << 10)
    p.add_argument("--leak-every", type=int, default=100)
    p.add_argument("--oom-step", type=int, default=-1, help="the step that asks for too much (default: none)")
    p.add_argument("--window", type=_window, metavar="A:B")
    p.add_argument("--window-api", choices=("profiler", "markers"), default="profiler")
    p.add_argument("--truth")
    p.add_argument("--ranks", type=int, default=1, help="rank processes (RANK/WORLD_SIZE set), forked")
    p.add_argument("--oom-rank", type=int, default=0, help="with --ranks: the rank that runs out of memory")
    p.add_argument("--slow-rank", type=lambda t: tuple(float(x) for x in t.split(":")), metavar="R:SECONDS",
                   help="with --ranks: rank R sleeps SECONDS before its first CUDA call (tests: a rank slow to start)")
    p.add_argument("--wait-dir", help="with --wait-steps: where ready-S / go-S files go (tests)")
    p.add_argument("--wait-steps", type=lambda t: [int(x) for x in t.split(",") if x], default=[],
                   metavar="S[,S]", help="at the start of each of these steps, write ready-S and wait for go-S")
    args = p.parse_args(argv)
    if args.wait_steps and not args.wait_dir:
        raise PyinterposeError("--wait-steps needs --wait-dir")
    if args.steps < 1 or args.leak_every < 1 or args.leak_bytes < 1:
        raise PyinterposeError("--steps, --leak-every and --leak-bytes must be at least 1")
    return args


def _ranks(args: argparse.Namespace) -> tuple[dict, int]:
    """--ranks N: N processes (rank 0 this one, the others forked before any CUDA call), each with RANK,
    LOCAL_RANK and WORLD_SIZE set, each running the loop; only --oom-rank runs out of memory."""
    import os

    oom_step = args.oom_step
    children, gos = [], []
    rank = 0
    ready_r, ready_w = os.pipe()       # each rank's "my CUDA is up", to rank 0
    go_r = -1
    for r in range(1, args.ranks):
        rfd, wfd = os.pipe()
        gr, gw = os.pipe()             # rank 0's "every rank is up: start", to this rank
        pid = os.fork()
        if pid == 0:
            os.close(rfd)
            os.close(gw)
            for g in gos:
                os.close(g)
            rank, go_r = r, gr
            break
        os.close(wfd)
        os.close(gr)
        children.append((pid, rfd))
        gos.append(gw)
    if rank == 0:
        os.close(ready_w)              # the ranks' copies only: when they all end, rank 0 reads EOF
    else:
        os.close(ready_r)

    def barrier() -> None:
        """A job's start-up barrier (as NCCL's init is): no rank steps before every rank has made its
        first CUDA calls, so a dump at any rank's step sees every rank of the job."""
        if rank:
            os.write(ready_w, b"r")
            os.close(ready_w)
            os.read(go_r, 1)
            os.close(go_r)
            return
        for _ in gos:
            if not os.read(ready_r, 1):
                break                  # a rank ended before it was up: start anyway
        for g in gos:
            try:
                os.write(g, b"g")
            except BrokenPipeError:
                pass
            os.close(g)
        os.close(ready_r)

    os.environ.update(RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(args.ranks))
    args.oom_step = oom_step if rank == args.oom_rank else -1
    if args.slow_rank and int(args.slow_rank[0]) == rank:
        import time
        time.sleep(args.slow_rank[1])
    truth, status = run(args, ready=barrier)
    truth["rank"] = rank
    if rank:
        with os.fdopen(wfd, "w") as w:
            json.dump(truth, w)
        os._exit(status)
    per = [truth]
    for pid, rfd in children:
        with os.fdopen(rfd) as f:
            data = f.read()
        _, st = os.waitpid(pid, 0)
        status = max(status, os.waitstatus_to_exitcode(st))
        per.append(json.loads(data) if data else {"error": f"rank process {pid} sent nothing"})
    return {"ranks": sorted(per, key=lambda t: t.get("rank", -1))}, status


def main(argv: list[str]) -> int:
    import os

    try:
        args = parse_args(argv)
        os.environ.setdefault("SIMCUDA_MEMORY_BYTES", str(DEFAULT_DEVICE_BYTES))
        truth, status = _ranks(args) if args.ranks > 1 else run(args)
    except PyinterposeError as e:
        print(f"simleak: error: {e}", file=sys.stderr)
        return 1
    if args.truth:
        with open(args.truth, "w") as f:
            json.dump(truth, f)
            f.write("\n")
    if status == 0 and args.ranks <= 1:
        print(f"simleak: {truth['steps']} steps, {truth['leaked_blocks']} blocks leaked")
    return status
