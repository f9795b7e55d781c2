"""replay — re-run one process of any trace on simcuda (issue 31).

    python -m pyinterpose.examples.replay TRACE [--pid PID] [--speed X] [--json OUT.json]

The process's device allocations and frees, kernel launches and copies are issued again, in the
recorded order and at the recorded times (the host sleeps until each op's time: the program's own pace),
through the ordinary CUDA runtime, so that ``pyinterpose run`` (and ``run --apply``) see a program like any
other (native/replay/replay.c does the loop):

* allocations with the recorded function's family (``cudaMallocAsync``/``cudaFreeAsync`` for the
  stream-ordered ones, ``cudaMalloc``/``cudaFree``, ``cuMemAlloc_v2``/``cuMemFree_v2``) and size;
* each launch as a kernel registered under the recorded kernel's name, whose arguments are the blocks
  the recorded launch named (its access events), with the recorded device duration — or, on a trace
  without device times, the gap to the next launch or copy (the CPU clock: the program is the stream);
* each copy as a kernel (``pyinterpose_replay_memcpy``) on its stream, naming the block(s) it touched, for the
  recorded time (so the copy engines are left to what is being measured, as the recorded timeline had
  them); ``--copies memcpy`` replays them as ``cudaMemcpyAsync`` between the block(s) and a pinned host
  buffer instead, on simcuda's copy engines.

With ``SIMCUDA_CHECK=1`` every kernel verifies, in every block it touches, the pattern the previous
kernel wrote there (first and last word, one word per MiB), then writes its own: a block served at a
wrong address, overlapping another, or not brought back intact shows as a mismatch (exit status 1).

What is not replayed: host, managed, pitched and VMM allocations (counted in the summary), other
processes of the trace (``--pid``), kernels' work itself.  Arguments beyond 64 blocks are dropped.

The summary (stdout, one line; ``--json`` for a file): ops issued, check errors, the device time from
the first op to the device's end (``device_ns``) against the recorded span (``recorded_ns``), and how
far the host ever was behind its pace (``late_ns``), all on the recorded clock (``--speed`` dilates the
replay: times and the device model's latencies divided by the speed, its bandwidths multiplied).
"""
from __future__ import annotations

import argparse
import ctypes
import json
import os
import sys

import numpy as np

import pyinterpose
from pyinterpose.errors import PyinterposeError
from ._simlib import _require, load_simcuda, native_dir

MAX_ARGS = 64
ASYNC_APIS = ("cudaMallocAsync", "cudaMallocAsync_ptsz", "cudaMallocFromPoolAsync", "cudaMallocFromPoolAsync_ptsz",
              "cuMemAllocAsync", "cuMemAllocAsync_ptsz", "cuMemAllocFromPoolAsync", "cuMemAllocFromPoolAsync_ptsz")
SYNC_APIS = ("cudaMalloc",)
DRIVER_APIS = ("cuMemAlloc_v2", "cuMemAlloc")
ALLOC, FREE, LAUNCH, COPY = 0, 1, 2, 3
API_ASYNC, API_SYNC, API_DRIVER = 0, 1, 2


class _In(ctypes.Structure):
    _fields_ = [("n_ops", ctypes.c_int64)] + \
        [(k, ctypes.POINTER(ctypes.c_int64)) for k in ("kind", "t", "a", "b", "c", "dur", "stream", "acc")] + \
        [("n_slots", ctypes.c_int64), ("n_kernels", ctypes.c_int64), ("n_streams", ctypes.c_int64),
         ("kernel_names", ctypes.POINTER(ctypes.c_char_p)), ("check", ctypes.c_int), ("speed", ctypes.c_double)]


class _Out(ctypes.Structure):
    _fields_ = [(k, ctypes.c_int64) for k in ("allocs", "frees", "launches", "copies", "failed_calls",
                                               "check_errors", "checked_words", "first_error_op")] + \
        [(k, ctypes.c_double) for k in ("device_ns", "host_ns", "late_ns")] + [("latest_op", ctypes.c_int64)]


COPY_KERNEL = "pyinterpose_replay_memcpy"
EXTRA_KERNEL = "pyinterpose_replay_extra"


def build_ops(trace, pid: int | None = None, copies_as_kernels: bool = True, extra_launches=()) -> dict:
    """The process's operations as the C loop reads them (arrays in seq order), and what was left out."""
    pid = trace.main_pid if pid is None else int(pid)
    if pid is None:
        raise PyinterposeError("the trace has no process to replay")
    b = trace.blocks
    mine = b["pid"].to_numpy() == pid
    api = b["api"].astype(str).to_numpy()
    fam = np.full(len(b), -1, np.int64)
    fam[np.isin(api, ASYNC_APIS)] = API_ASYNC
    fam[np.isin(api, SYNC_APIS)] = API_SYNC
    fam[np.isin(api, DRIVER_APIS)] = API_DRIVER
    keep = mine & (fam >= 0) & (b["size"].to_numpy() > 0)
    skipped = int((mine & ~keep).sum())
    blk = b[keep]
    n_slots = len(blk)
    slot_of = dict(zip(blk["block_id"].to_numpy().tolist(), range(n_slots)))
    streams: dict[int, int] = {0: 0}

    def sidx(h) -> int:
        return streams.setdefault(int(h), len(streams))

    rows = []   # (seq, kind, t, a, b, c, dur, stream)
    bf = fam[keep]
    for sl, (sa, ta, sz, st, fr, sf, tf, f) in enumerate(zip(
            blk["seq_alloc"].to_numpy(), blk["t_alloc"].to_numpy(), blk["size"].to_numpy(), blk["stream"].to_numpy(),
            blk["freed"].to_numpy(bool), blk["seq_free"].to_numpy(), blk["t_free"].to_numpy(), bf)):
        s = sidx(st) if f == API_ASYNC else 0
        rows.append((int(sa), ALLOC, int(ta), sl, int(sz), int(f), 0, s))
        if fr:
            rows.append((int(sf), FREE, int(tf), sl, 0, int(f), 0, s))
    acc = trace.accesses
    acc = acc[(acc["pid"].to_numpy() == pid) & acc["block_id"].isin(slot_of).to_numpy()]
    by_seq: dict[int, list] = {}
    for sq, bid, fl in zip(acc["seq"].to_numpy().tolist(), acc["block_id"].to_numpy().tolist(),
                           acc["flags"].to_numpy().tolist()):
        by_seq.setdefault(sq, []).append((slot_of[bid], fl))
    L = trace.launches
    L = L[L["pid"].to_numpy() == pid]
    C = trace.copies
    C = C[C["pid"].to_numpy() == pid]
    # the compute timeline: launches and copies in seq order; a duration per launch
    o_seq = np.concatenate([L["seq"].to_numpy(np.int64), C["seq"].to_numpy(np.int64)])
    o_t = np.concatenate([L["t"].to_numpy(np.int64), C["t"].to_numpy(np.int64)])
    ds = np.concatenate([L["dev_start"].to_numpy(np.int64), C["dev_start"].to_numpy(np.int64)])
    de = np.concatenate([L["dev_end"].to_numpy(np.int64), C["dev_end"].to_numpy(np.int64)])
    order = np.argsort(o_seq, kind="stable")
    gap = np.zeros(len(o_seq), np.int64)
    ts = o_t[order]
    if len(ts) > 1:
        gap[order[:-1]] = np.maximum(np.diff(ts), 0)
    device_clock = bool((ds >= 0).any())
    dur = np.where((ds >= 0) & (de >= ds), de - ds, 0 if device_clock else gap)
    names: dict[str, int] = {}
    acc_list: list[int] = []
    dropped_args = 0
    for j, (sq, t, st, kname) in enumerate(zip(L["seq"].to_numpy().tolist(), L["t"].to_numpy().tolist(),
                                               L["stream"].to_numpy().tolist(),
                                               L["kernel_name"].astype(str).tolist())):
        slots = [s for s, _ in by_seq.get(sq, [])]
        dropped_args += max(0, len(slots) - MAX_ARGS)
        slots = slots[:MAX_ARGS]
        k = names.setdefault(kname or f"kernel_{j}", len(names))
        rows.append((int(sq), LAUNCH, int(t), k, len(acc_list), len(slots), int(dur[j]), sidx(st)))
        acc_list += slots
    n_copies_skipped = 0
    nL = len(L)
    for j, (sq, t, st, n) in enumerate(zip(C["seq"].to_numpy().tolist(), C["t"].to_numpy().tolist(),
                                           C["stream"].to_numpy().tolist(), C["size"].to_numpy().tolist())):
        touched = [s for s, _ in by_seq.get(sq, [])][:MAX_ARGS]
        if not touched:
            n_copies_skipped += 1
            continue
        if copies_as_kernels:   # the recorded copy's time on its stream, not the copy engines'
            k = names.setdefault(COPY_KERNEL, len(names))
            rows.append((int(sq), LAUNCH, int(t), k, len(acc_list), len(touched), int(dur[nL + j]), sidx(st)))
            acc_list += touched
            continue
        fl = dict(by_seq.get(sq, []))
        dst = [s for s in touched if fl[s] & 4]
        src = [s for s in touched if fl[s] & 2]
        if dst and src:
            rows.append((int(sq), COPY, int(t), dst[0], src[0], int(n), 0, sidx(st)))
        elif dst:
            rows.append((int(sq), COPY, int(t), dst[0], -1, int(n), 0, sidx(st)))
        else:
            rows.append((int(sq), COPY, int(t), src[0], -1, int(n), 1, sidx(st)))
    for sq, bid in extra_launches:   # launches the recording never had (tests: an access nobody planned for)
        if int(bid) not in slot_of:
            raise PyinterposeError(f"--extra-launch: block {bid} is not a device block of process {pid}")
        at = [r for r in rows if r[0] == int(sq)]
        if not at:
            raise PyinterposeError(f"--extra-launch: no operation at seq {sq}")
        k = names.setdefault(EXTRA_KERNEL, len(names))
        rows.append((int(sq), 9, at[0][2], k, len(acc_list), 1, 0, at[0][7]))
        acc_list.append(slot_of[int(bid)])
    rows.sort(key=lambda r: (r[0], r[1]))
    rows = [r if r[1] != 9 else (r[0], LAUNCH, *r[2:]) for r in rows]
    arr = np.array(rows, np.int64).reshape(-1, 8)
    t = arr[:, 2] - arr[0, 2] if len(arr) else arr[:, 2]
    t = np.maximum.accumulate(t) if len(t) else t     # the pace never goes backwards
    span = 0
    if len(arr):
        last = int(np.flatnonzero(arr[:, 1] == LAUNCH)[-1]) if (arr[:, 1] == LAUNCH).any() else len(arr) - 1
        span = int(t[last] + arr[last, 6])
    return {"pid": pid, "kind": arr[:, 1].copy(), "t": t.copy(), "a": arr[:, 3].copy(), "b": arr[:, 4].copy(),
            "c": arr[:, 5].copy(), "dur": arr[:, 6].copy(), "stream": arr[:, 7].copy(),
            "acc": np.array(acc_list or [0], np.int64), "n_slots": n_slots, "kernel_names": list(names),
            "n_streams": len(streams), "skipped_blocks": skipped, "skipped_copies": n_copies_skipped,
            "dropped_args": dropped_args, "clock": "device" if device_clock else "cpu", "recorded_ns": span}


def _ptr(a: np.ndarray):
    return a.ctypes.data_as(ctypes.POINTER(ctypes.c_int64))


def _dilate_device_model(speed: float) -> None:
    """At ``speed`` s != 1 every recorded time is divided by s: the device model's bandwidths are
    multiplied by s and its latencies divided, so that the replay is the recorded run, slowed down."""
    if speed <= 0 or speed == 1:
        return
    for env in ("SIMCUDA_H2D_GBPS", "SIMCUDA_D2H_GBPS", "SIMCUDA_D2D_GBPS", "SIMCUDA_MEMSET_GBPS"):
        if os.environ.get(env):
            os.environ[env] = repr(float(os.environ[env]) * speed)
    for env in ("SIMCUDA_COPY_LATENCY_NS", "SIMCUDA_LAUNCH_LATENCY_NS", "SIMCUDA_FAULT_NS"):
        if os.environ.get(env):
            os.environ[env] = str(int(float(os.environ[env]) / speed))
    if not os.environ.get("SIMCUDA_FAULT_NS"):
        os.environ["SIMCUDA_FAULT_NS"] = str(int(20000 / speed))


def run_ops(ops: dict, check: bool, speed: float = 1.0) -> dict:
    _dilate_device_model(speed)
    load_simcuda()
    lib = ctypes.CDLL(_require(os.path.join(native_dir(), "libpireplay.so")), mode=os.RTLD_GLOBAL)
    lib.pi_replay_run.argtypes = [ctypes.POINTER(_In), ctypes.POINTER(_Out), ctypes.c_char_p, ctypes.c_int]
    arrays = {k: np.ascontiguousarray(ops[k], np.int64) for k in ("kind", "t", "a", "b", "c", "dur", "stream", "acc")}
    names = (ctypes.c_char_p * max(1, len(ops["kernel_names"])))(*[n.encode() for n in ops["kernel_names"]])
    cin = _In(n_ops=len(arrays["kind"]), **{k: _ptr(v) for k, v in arrays.items()}, n_slots=ops["n_slots"],
              n_kernels=len(ops["kernel_names"]), n_streams=ops["n_streams"], kernel_names=names,
              check=1 if check else 0, speed=float(speed))
    out = _Out()
    err = ctypes.create_string_buffer(256)
    if lib.pi_replay_run(ctypes.byref(cin), ctypes.byref(out), err, len(err)) != 0:
        raise PyinterposeError(f"replay: {err.value.decode(errors='replace')}")
    res = {k: getattr(out, k) for k, _ in _Out._fields_}
    if speed > 0:          # back on the recorded clock
        for k in ("device_ns", "host_ns", "late_ns"):
            res[k] *= speed
    return res


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m pyinterpose.examples.replay",
                                 description="re-run one process of a trace on simcuda (see the module docstring)")
    ap.add_argument("trace")
    ap.add_argument("--pid", type=int, default=None, help="process to replay (default: the main one)")
    ap.add_argument("--speed", type=float, default=1.0,
                    help="pace: 1 the recorded times; 0.25 four times slower: every time, duration and latency "
                         "of the device model dilated, bandwidths scaled, the summary's times back on the "
                         "recorded clock (a loaded host keeps its pace); 0 as fast as possible (default 1)")
    ap.add_argument("--json", metavar="OUT", help="write the summary to this file as well")
    ap.add_argument("--extra-launch", action="append", default=[], metavar="SEQ:BLOCK",
                    help="also launch a kernel (pyinterpose_replay_extra) naming block BLOCK (its id in the trace) "
                         "right after the operation at SEQ: an access the recording never had")
    ap.add_argument("--copies", choices=("kernels", "memcpy"), default="kernels",
                    help="replay copies as kernels of their recorded time (default) or as cudaMemcpyAsync")
    args = ap.parse_args(argv)
    try:
        if not os.path.isfile(args.trace):
            raise PyinterposeError(f"{args.trace}: no such trace file")
        trace = pyinterpose.load(args.trace)
        extra = []
        for x in args.extra_launch:
            sq, _, bid = x.partition(":")
            if not (sq.isdigit() and bid.isdigit()):
                raise PyinterposeError(f"--extra-launch {x!r}: give SEQ:BLOCK (two integers)")
            extra.append((int(sq), int(bid)))
        ops = build_ops(trace, args.pid, copies_as_kernels=args.copies == "kernels", extra_launches=extra)
        check = os.environ.get("SIMCUDA_CHECK", "0") not in ("", "0")
        res = run_ops(ops, check, args.speed)
    except PyinterposeError as e:
        print(f"replay: error: {e}", file=sys.stderr)
        return 2
    summary = {"trace": args.trace, "pid": ops["pid"], "clock": ops["clock"], **res,
               "recorded_ns": ops["recorded_ns"], "stall_ns": res["device_ns"] - ops["recorded_ns"],
               "skipped_blocks": ops["skipped_blocks"], "skipped_copies": ops["skipped_copies"],
               "dropped_args": ops["dropped_args"], "check": check}
    line = json.dumps(summary)
    print(line)
    if args.json:
        with open(args.json, "w") as f:
            f.write(line + "\n")
    if res["check_errors"]:
        print(f"replay: {res['check_errors']} pattern mismatches (first at op {res['first_error_op']})",
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
