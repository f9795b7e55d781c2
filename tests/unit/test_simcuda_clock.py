"""simcuda's device clock and simulated CUPTI (native/simcuda/device, native/simcuda/cupti), checked with a
C program (tests/c/simcuda_clock.c) that uses them as a real program and a CUPTI client do, against
simcuda's own device log (SIMCUDA_DEVICE_LOG) and the durations the program set itself."""
from __future__ import annotations

import glob
import os
import shutil
import subprocess

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CDIR = os.path.join(ROOT, "tests", "c")
INCLUDES = ["-I" + os.path.join(ROOT, "native", "include"), "-I" + os.path.join(ROOT, "native", "simcuda")]
OFFSET = 1700000000000000000  # simcu_hook.h's default CUPTI clock offset

pytestmark = [pytest.mark.slow,  # compiles and runs C programs on simcuda (> a few s)
              pytest.mark.skipif(shutil.which("cc") is None, reason="needs a C compiler")]


@pytest.fixture(scope="module")
def libs(tmp_path_factory):
    from pyinterpose._build import build_native

    out = str(tmp_path_factory.mktemp("native"))
    try:
        build_native(out, only=["simcuda"])
    except FileNotFoundError:
        pass
    simdir = os.path.join(out, "simcuda")
    for name in ("libcuda.so.1", "libcupti.so.13", "libcupti.so"):
        assert os.path.exists(os.path.join(simdir, name)), name
    return simdir


@pytest.fixture(scope="module")
def exe(libs, tmp_path_factory):
    # no rpath: the library path decides which libcuda/libcupti the program gets (as --simulated-gpu does)
    path = str(tmp_path_factory.mktemp("clock") / "simcuda_clock")
    subprocess.run(["cc", "-O1", "-g", "-D_GNU_SOURCE", *INCLUDES, "-o", path, os.path.join(CDIR, "simcuda_clock.c"),
                    "-L" + libs, "-l:libcuda.so.1", "-ldl", "-lpthread"], check=True, capture_output=True)
    return path


def _run(exe, libdir, *args, env=None):
    e = {k: v for k, v in os.environ.items()
         if not k.startswith(("SIMCUDA_", "SIMCUPTI_", "SIMCLOCK_")) and k != "LD_PRELOAD"}
    e["LD_LIBRARY_PATH"] = libdir
    e.update(env or {})
    cp = subprocess.run([exe, *args], env=e, capture_output=True, text=True, timeout=60)
    assert cp.returncode == 0, cp.stdout + cp.stderr
    return cp.stdout.splitlines()


def _log(path):
    rows = []
    with open(path) as f:
        for line in f:
            if line.startswith("#"):
                continue
            p = line.rstrip("\n").split("\t")
            rows.append(dict(op=p[0], pid=int(p[1]), tid=int(p[2]), corr=int(p[3]), device=int(p[4]),
                             stream=int(p[5]), enqueue=int(p[6]), start=int(p[7]), end=int(p[8]),
                             start_cupti=int(p[9]), end_cupti=int(p[10]), graph_id=int(p[11]),
                             node_id=int(p[12]), bytes=int(p[13]), name=p[14]))
    return rows


def _records(lines):
    recs = {"kernel": [], "memcpy": [], "memset": [], "extcorr": [], "api": []}
    for line in lines:
        p = line.split()
        if p[0] != "rec":
            continue
        kind = p[1]
        if kind in ("kernel", "memcpy", "memset"):
            r = dict(sub=int(p[2]), corr=int(p[3]), start=int(p[4]), end=int(p[5]), stream=int(p[6]),
                     graph_id=int(p[7]), node_id=int(p[8]), rest=p[9:])
        elif kind == "extcorr":
            r = dict(ext_kind=int(p[2]), corr=int(p[3]), ext=int(p[4]))
        else:
            r = dict(api_kind=int(p[2]), cbid=int(p[3]), corr=int(p[4]), start=int(p[5]), end=int(p[6]), tid=int(p[7]))
        recs[kind].append(r)
    return recs


def _device_records_match_log(recs, log):
    """every kernel/memcpy/memset record equals simcuda's own line for that op: same correlation id,
    stream, and start/end on the CUPTI clock, to the nanosecond"""
    by_key = {}
    for row in log:
        by_key.setdefault((row["corr"], row["node_id"]), []).append(row)
    n = 0
    for kind in ("kernel", "memcpy", "memset"):
        for r in recs[kind]:
            rows = by_key[(r["corr"], r["node_id"])]
            assert len(rows) == 1
            row = rows[0]
            assert row["op"].startswith(kind)
            assert (r["start"], r["end"], r["stream"], r["graph_id"]) == \
                (row["start_cupti"], row["end_cupti"], row["stream"], row["graph_id"])
            n += 1
    assert n == len(log)


def test_cupti_records_equal_device_log(exe, libs, tmp_path):
    log_path = str(tmp_path / "dev.log")
    lines = _run(exe, libs, "cupti", "full", env={"SIMCUDA_DEVICE_LOG": log_path})
    assert lines[-1] == "ok cupti"
    log, recs = _log(log_path), _records(lines)
    assert [r["op"] for r in log] == ["kernel"] * 3 + ["memcpy_htod", "memset", "kernel", "kernel", "kernel"]
    _device_records_match_log(recs, log)
    # durations the program set: 1 ms per function (k_one_ms), 2 ms for one launch, 0 by default
    dur = {r["corr"]: r["end"] - r["start"] for r in log}
    assert [dur[c] for c in (1, 2, 3, 6, 7)] == [1000000, 1000000, 1000000, 2000000, 0]
    # in stream order: each op starts when the previous one on its stream ended, never before its enqueue
    for a, b in zip(log[:2], log[1:3]):
        assert b["start"] == max(a["end"], b["enqueue"])
    assert all(r["start"] >= r["enqueue"] for r in log)
    # the legacy stream (7) waits for the other blocking stream, and that stream for it
    # (max with its own enqueue: a host preempted for milliseconds may enqueue after the device is idle)
    legacy = next(r for r in log if r["corr"] == 6)
    assert legacy["stream"] == 7
    assert legacy["start"] == max(legacy["enqueue"], max(r["end"] for r in log if r["corr"] < 6))
    after = next(r for r in log if r["corr"] == 7)
    assert after["start"] == max(after["enqueue"], legacy["end"])
    # cuLaunchKernel_ptsz(NULL): the thread's per-thread default stream, a blocking stream of its own
    ptds = next(r for r in log if r["corr"] == 8)
    assert ptds["stream"] not in (7, 13) and ptds["start"] >= legacy["end"]
    # the external ids pushed around each call pair with CUPTI's correlation ids; none for the last call
    ext = {r["ext"]: r["corr"] for r in recs["extcorr"]}
    assert ext == {100: 1, 101: 2, 102: 3, 200: 4, 300: 5, 400: 6, 700: 8}
    assert all(r["ext_kind"] == 3 for r in recs["extcorr"])  # CUSTOM0
    assert sorted(r["corr"] for r in recs["api"]) == list(range(1, 9))
    assert {r["cbid"] for r in recs["api"]} == {307, 277, 216}  # cuLaunchKernel, cuMemcpyHtoDAsync_v2, cuMemsetD8Async
    k = recs["kernel"][0]
    assert k["sub"] == 10 and k["rest"][1:] == ["2", "32"]  # CONCURRENT_KERNEL, grid.x, block.x
    m = recs["memcpy"][0]
    assert m["sub"] == 1 and m["rest"] == ["1048576", "2", "3"]  # HtoD, bytes, pinned -> device
    # the CUPTI clock is CLOCK_MONOTONIC + the offset
    done = next(line.split() for line in lines if line.startswith("done"))
    # cuCtxSynchronize returned only when the device clock had passed every op's end (read after it)
    assert int(done[1]) >= max(r["end"] for r in log)
    assert abs(int(done[2]) - int(done[1]) - OFFSET) < 20_000_000  # two reads, maybe preempted between
    # all delivered on the flush (the main thread): nothing was dropped
    assert not any(line.startswith("dropped") for line in lines)


def test_clock_offset_and_drift(exe, libs, tmp_path):
    log_path = str(tmp_path / "dev.log")
    env = {"SIMCUDA_DEVICE_LOG": log_path, "SIMCUPTI_CLOCK_OFFSET_NS": "5000", "SIMCUPTI_CLOCK_DRIFT_PPM": "100"}
    lines = _run(exe, libs, "cupti", "full", env=env)
    log = _log(log_path)
    _device_records_match_log(_records(lines), log)
    for r in log:
        assert r["start_cupti"] == r["start"] + 5000 + int(r["start"] * 100e-6)
    done = next(line.split() for line in lines if line.startswith("done"))
    mono, cupti = int(done[1]), int(done[2])
    assert abs(cupti - (mono + 5000 + mono * 100e-6)) < 20_000_000  # the drift term alone is ~mono / 1e4


def test_external_correlation_needs_driver_or_runtime_activity(exe, libs):
    recs = _records(_run(exe, libs, "cupti", "nodriver"))
    assert recs["extcorr"] == [] and recs["api"] == []
    assert len(recs["kernel"]) == 6  # the device records still come
    # RUNTIME alone: the program's calls are driver calls, so no API records and no pairings either
    recs = _records(_run(exe, libs, "cupti", "runtime"))
    assert recs["extcorr"] == [] and recs["api"] == []
    assert len(recs["kernel"]) == 6


def test_device_records_carry_the_outermost_calls_correlation_id(exe, libs, tmp_path):
    """As real CUPTI (the H100 finding behind the nesting rule of native/shim/cupti_parse.h): a runtime call
    (bracketed through the driver's private table, as libcudart does) and the driver call inside it each get
    a correlation id and an API record of their own kind, the runtime one around the driver one on the same
    thread; the device record carries the runtime call's id; an external id pairs with the API calls begun
    while it was pushed — pushed inside the runtime call, with the driver call's only."""
    log_path = str(tmp_path / "dev.log")
    recs = _records(_run(exe, libs, "cupti", "nested", env={"SIMCUDA_DEVICE_LOG": log_path}))
    log = _log(log_path)
    _device_records_match_log(recs, log)
    rt = [r for r in recs["api"] if r["api_kind"] == 5]     # RUNTIME
    drv = [r for r in recs["api"] if r["api_kind"] == 4]    # DRIVER
    assert len(rt) == 2 and len(drv) == 3                   # the empty runtime call has no record
    for r, d in zip(rt, drv[:2]):
        assert r["start"] <= d["start"] <= d["end"] <= r["end"] and r["tid"] == d["tid"] and r["corr"] != d["corr"]
    kernels = [k["corr"] for k in sorted(recs["kernel"], key=lambda k: k["start"])]
    assert kernels == [rt[0]["corr"], rt[1]["corr"], drv[2]["corr"]]
    pairs = sorted((r["ext"], r["corr"]) for r in recs["extcorr"])
    assert pairs == sorted([(900, drv[0]["corr"]), (901, drv[1]["corr"]), (901, rt[1]["corr"]),
                            (902, drv[2]["corr"])])


def test_small_buffers_drop_and_count(exe, libs, tmp_path):
    log_path = str(tmp_path / "dev.log")
    lines = _run(exe, libs, "cupti", "small", env={"SIMCUDA_DEVICE_LOG": log_path})
    recs = _records(lines)
    dropped = sum(int(line.split()[1]) for line in lines if line.startswith("dropped"))
    assert recs["kernel"] == [] and dropped == 6  # 216-byte kernel records never fit 100-byte buffers
    assert len(recs["memcpy"]) == 1 and len(recs["memset"]) == 1  # 96 and 88 bytes do
    assert len(recs["extcorr"]) == 7
    # full buffers came back from CUPTI's own thread, before the program flushed
    first_done = next(i for i, line in enumerate(lines) if line.startswith("done"))
    assert any(line == "buffer other 88" for line in lines[:first_done])


def test_graph_replays_carry_graph_ids(exe, libs, tmp_path):
    log_path = str(tmp_path / "dev.log")
    lines = _run(exe, libs, "cupti", "graph", env={"SIMCUDA_DEVICE_LOG": log_path})
    log, recs = _log(log_path), _records(lines)
    _device_records_match_log(recs, log)
    ext = {r["ext"]: r["corr"] for r in recs["extcorr"]}
    # the captured calls are API calls (external ids 500-502), but run nothing on the device
    captured = {ext[500], ext[501], ext[502]}
    assert not captured & {r["corr"] for r in log}
    # each replay: three ops with the graph launch's correlation id, one executable graph id,
    # the same three node ids in capture order, back to back on the stream
    for launch_ext in (600, 601):
        ops = [r for r in log if r["corr"] == ext[launch_ext]]
        assert [r["op"] for r in ops] == ["kernel", "memset", "kernel"]
        assert len({r["graph_id"] for r in ops}) == 1 and ops[0]["graph_id"] > 0
        assert [r["end"] - r["start"] for r in ops] == [1000000, 0, 300000]
        for a, b in zip(ops, ops[1:]):
            assert b["start"] == max(b["enqueue"], a["end"])
    node_ids = [[r["node_id"] for r in log if r["corr"] == ext[e]] for e in (600, 601)]
    assert node_ids[0] == node_ids[1] and node_ids[0] == sorted(node_ids[0]) and 0 not in node_ids[0]
    assert {r["cbid"] for r in recs["api"] if r["corr"] in (ext[600], ext[601])} == {514}  # cuGraphLaunch


def test_external_ids_are_per_thread(exe, libs, tmp_path):
    log_path = str(tmp_path / "dev.log")
    lines = _run(exe, libs, "threads", env={"SIMCUDA_DEVICE_LOG": log_path})
    tids = {int(p[1]): int(p[2]) for p in (line.split() for line in lines) if p[0] == "thread"}
    tid_of_corr = {r["corr"]: r["tid"] for r in _log(log_path)}
    ext = _records(lines)["extcorr"]
    assert len(ext) == 100 and len({r["corr"] for r in ext}) == 100
    for r in ext:
        assert r["ext"] > 100000  # the innermost id pushed
        assert tid_of_corr[r["corr"]] == tids[(r["ext"] - 100000) // 1000 - 1]


def test_enable_disable_and_kernel_kind(exe, libs):
    recs = _records(_run(exe, libs, "kinds"))
    ext = {r["ext"]: r["corr"] for r in recs["extcorr"]}
    assert sorted(ext) == [1, 2, 3]  # DRIVER off for the 4th call: no external correlation
    kinds = {r["corr"]: r["sub"] for r in recs["kernel"]}
    assert kinds == {ext[1]: 10, ext[3]: 3, ext[3] + 1: 3}  # none while no kernel kind was on
    assert sorted(r["corr"] for r in recs["api"]) == [ext[1], ext[2], ext[3]]


def test_graph_node_callbacks_lead_replays_back_to_captured_calls(exe, libs):
    lines = _run(exe, libs, "graphcb")
    ext_of_node = {int(p[1]): int(p[2]) for p in (line.split() for line in lines) if p[0] == "created"}
    types = [int(p[3]) for p in (line.split() for line in lines) if p[0] == "created"]
    orig_of_clone = {int(p[1]): int(p[2]) for p in (line.split() for line in lines) if p[0] == "cloned"}
    exec_ids = {int(p[3]) for p in (line.split() for line in lines) if p[0] == "cloned"}
    assert sorted(ext_of_node.values()) == [500, 501, 502] and types == [0, 2, 0]  # kernel, memset, kernel
    recs = _records(lines)
    replayed = sorted(recs["kernel"] + recs["memset"], key=lambda r: (r["start"], r["end"]))
    assert len(replayed) == 3
    # record -> executable node -> original node -> the captured call's external id
    assert [ext_of_node[orig_of_clone[r["node_id"]]] for r in replayed] == [500, 501, 502]
    assert {r["graph_id"] for r in replayed} == exec_ids  # the record's graphId is the executable graph's
    graph_id = next(int(line.split()[1]) for line in lines if line.startswith("graph "))
    assert graph_id not in exec_ids


def test_device_clock_api_through_get_proc_address(exe, libs):
    assert _run(exe, libs, "procaddr")[-1] == "ok procaddr"


def test_forked_child_has_only_its_own_records(exe, libs):
    lines = _run(exe, libs, "fork")
    child = lines[lines.index("child"):lines.index("child end")]
    parent = lines[lines.index("parent"):]
    assert [r["ext"] for r in _records(child)["extcorr"]] == [2]
    assert len(_records(child)["kernel"]) == 1
    assert [r["ext"] for r in _records(parent)["extcorr"]] == [1]
    assert len(_records(parent)["kernel"]) == 1


def test_timing_durations_sync_queue_engines_events(exe, libs):
    # self-checked in C: sync blocks until the device end, events measure device time, the third launch
    # on a 2-deep queue waits, copies of one direction share one engine and overlap kernels
    assert _run(exe, libs, "timing", env={"SIMCUDA_QUEUE_DEPTH": "2"})[-1] == "ok timing"


def test_timing_events_exact_when_the_host_stalls(exe, libs):
    # a host descheduled for 30 ms between an event and the next launch (a loaded CI machine did this) still
    # measures exactly the kernels' device time between two events queued behind other work
    lines = _run(exe, libs, "timing", env={"SIMCUDA_QUEUE_DEPTH": "2", "SIMCLOCK_STALL_MS": "30"})
    assert lines[-1] == "ok timing" and not any(x.startswith("stalled") for x in lines)


def test_runtime_path(libs, tmp_path):
    path = str(tmp_path / "simcuda_clock_rt")
    subprocess.run(["cc", "-O1", "-g", "-D_GNU_SOURCE", *INCLUDES, "-o", path, os.path.join(CDIR, "simcuda_clock_rt.c"),
                    "-L" + libs, "-l:libcudart.so.13"], check=True, capture_output=True)
    log_path = str(tmp_path / "dev.log")
    lines = _run(path, libs, env={"SIMCUDA_H2D_GBPS": "0.1", "SIMCUDA_DEVICE_LOG": log_path})
    assert lines[-1] == "ok runtime"
    log = _log(log_path)
    replays = [r for r in log if r["graph_id"]]
    assert len(replays) == 6 and len({r["corr"] for r in replays}) == 3
    assert [r["end"] - r["start"] for r in replays] == [8000000, 4000000] * 3  # 2 and 1 units of 4 ms


def test_cupti_busy(exe, libs):
    lines = _run(exe, libs, "busy", env={"SIMCUPTI_BUSY": "1"})
    # CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED from the activity API and the callback API
    assert lines[:2] == ["register 39", "enable 39"] and "subscribe 39" in lines
    assert "work ok" in lines


def test_cupti_fail_knob(exe, libs):
    lines = _run(exe, libs, "fail", env={"SIMCUPTI_FAIL": "cuptiActivityEnable,cuptiGetTimestamp"})
    assert lines[:4] == ["register 0", "enable 999", "subscribe 0", "timestamp 999"]
    assert "work ok" in lines


def test_cupti_absent(exe, libs, tmp_path):
    bare = tmp_path / "nocupti"
    bare.mkdir()
    shutil.copy(os.path.join(libs, "libcuda.so.1"), bare / "libcuda.so.1")
    # the ld.so cache may know a real libcupti (this machine's CUDA 13 install does): name a missing file
    lines = _run(exe, str(bare), "absent", env={"SIMCLOCK_CUPTI": str(bare / "libcupti.so.13")})
    assert lines[0] == "absent" and "work ok" in lines


TWO_COPIES = r"""
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
int main(void)
{
    void *a = dlopen("libcupti.so.13", RTLD_NOW | RTLD_LOCAL), *b = dlopen("libcupti.so", RTLD_NOW | RTLD_LOCAL);
    int (*ea)(uint32_t) = (int (*)(uint32_t))dlsym(a, "cuptiActivityEnable");
    int (*eb)(uint32_t) = (int (*)(uint32_t))dlsym(b, "cuptiActivityEnable");
    int first = ea(10), second = eb(10);
    printf("%d %d %d\n", a != b, first, second);
    return 0;
}
"""


def test_a_second_copy_of_cupti_does_not_take_the_records(libs, tmp_path):
    # a wheel has libcupti.so and libcupti.so.13 as two files: a program loading both gets two libraries;
    # the second must be refused (CUPTI_ERROR_NOT_INITIALIZED), not silently take the driver's records
    d = tmp_path / "lib"
    d.mkdir()
    for name in ("libcuda.so.1", "libcupti.so.13"):
        shutil.copy(os.path.join(libs, name), d / name)
    shutil.copy(os.path.join(libs, "libcupti.so.13"), d / "libcupti.so")
    src, exe = tmp_path / "two.c", str(tmp_path / "two")
    src.write_text(TWO_COPIES)
    subprocess.run(["cc", "-o", exe, str(src), "-ldl"], check=True, capture_output=True)
    assert _run(exe, str(d)) == ["1 0 15"]


RELOAD = r"""
#include <dlfcn.h>
#include <stdio.h>
#include "pi_cuda.h"
#include "simcuda.h"
CUresult cuInit(unsigned int);
CUresult cuDevicePrimaryCtxRetain(CUcontext *, CUdevice);
CUresult cuCtxSetCurrent(CUcontext);
CUresult cuLaunchKernel(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, CUstream,
                        void **, void **);
static void k(void **p) { (void)p; }
static int enable(void **h)
{
    *h = dlopen("libcupti.so.13", RTLD_NOW | RTLD_LOCAL);
    int (*en)(unsigned) = (int (*)(unsigned))dlsym(*h, "cuptiActivityEnable");
    return en(10);
}
int main(void)
{
    CUcontext c;
    CUfunction f;
    void *h;
    cuInit(0), cuDevicePrimaryCtxRetain(&c, 0), cuCtxSetCurrent(c);
    simcuRegisterKernel("k", k, 0, NULL, NULL, &f);
    int first = enable(&h);
    cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, NULL, NULL, NULL);
    dlclose(h); /* unmapped: the driver must not call it any more */
    cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, NULL, NULL, NULL);
    int again = enable(&h);
    cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, NULL, NULL, NULL);
    printf("%d %d\n", first, again);
    return 0;
}
"""


def test_cupti_unloaded_and_loaded_again(libs, tmp_path):
    src, exe = tmp_path / "reload.c", str(tmp_path / "reload")
    src.write_text(RELOAD)
    subprocess.run(["cc", *INCLUDES, "-o", exe, str(src), "-L" + libs, "-l:libcuda.so.1", "-ldl"], check=True,
                   capture_output=True)
    assert _run(exe, libs) == ["0 0"]


def _real_cupti_include():
    for d in sorted(glob.glob("/usr/local/cuda*/include")) + sorted(
            glob.glob("/usr/local/lib/python3*/*-packages/nvidia/cuda_cupti/include")):
        if os.path.exists(os.path.join(d, "cupti_activity.h")):
            return d
    return None


@pytest.mark.skipif(_real_cupti_include() is None, reason="no CUPTI headers installed")
def test_pi_cupti_layout_matches_real_headers(tmp_path):
    inc = _real_cupti_include()
    path = str(tmp_path / "cupti_layout")
    cp = subprocess.run(["cc", "-D_GNU_SOURCE", "-I" + inc, "-I" + os.path.join(ROOT, "native", "include"), "-o", path,
                         os.path.join(CDIR, "cupti_layout.c")], capture_output=True, text=True)
    assert cp.returncode == 0, cp.stderr
    out = subprocess.run([path], capture_output=True, text=True)
    assert out.returncode == 0 and out.stdout.strip() == "ok layout", out.stdout
