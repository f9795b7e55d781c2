"""Out-of-memory failures captured whole, on every allocation API of the hook table (issue 22 item 1).

Ground truth: tests/c/shim_oom.c says which calls it made and what the device had free
(cudaMemGetInfo before them: one 1 MiB block live on a 64 MiB simulated device).  The trace must
hold each failure with its size, API, kind, stream and call site, the device's free/total bytes from
the shim's cuMemGetInfo (none while a stream capture is open), and lose nothing when the program
then exits with an error or crashes; `run`'s exit status is the program's."""
from __future__ import annotations

import signal

import pytest

import pyinterpose
from conftest import last_json_line

pytestmark = pytest.mark.slow   # every test here captures, replays or loads whole traces (> a few s)

ENV = {"SIMCUDA_MEMORY_BYTES": str(64 << 20)}
KIND = {"cudaMalloc": "device", "cudaMallocAsync": "async", "cudaMallocFromPoolAsync": "pool",
        "cudaMallocPitch": "pitch", "cudaMallocManaged": "managed", "cuMemAlloc_v2": "device",
        "cuMemAllocPitch_v2": "pitch", "cuMemAllocManaged": "managed", "cuMemAllocAsync": "async",
        "cuMemAllocFromPoolAsync": "pool", "cuMemCreate": "vmm_create"}
ON_STREAM = {"cudaMallocAsync", "cudaMallocFromPoolAsync", "cuMemAllocAsync", "cuMemAllocFromPoolAsync"}


@pytest.mark.parametrize("how,status", [("ok", 0), ("exit", 1), ("crash", 128 + signal.SIGSEGV)])
def test_every_alloc_api_failure_recorded_whole(capture, cbuild, how, status):
    path, cp = capture([cbuild("shim_oom"), how], "--stacks", "native", env=ENV)
    assert cp.returncode == status, (cp.returncode, cp.stderr[-2000:])
    truth = last_json_line(cp.stdout)
    tr = pyinterpose.load(path)
    f = tr.failures.sort_values("seq").reset_index(drop=True)
    want = truth["failures"]
    assert f["api"].astype(str).tolist() == [w["api"] for w in want]
    assert f["size"].tolist() == [w["size"] for w in want]
    assert (f["op"].astype(str) == "alloc").all() and (f["result"] == 2).all()
    assert f["kind"].astype(str).tolist() == [KIND[w["api"]] for w in want]
    for w, (_, r) in zip(want, f.iterrows()):
        assert int(r["stream"]) == (truth["stream"] if w["api"] in ON_STREAM else 0), w
        if w["capturing"]:   # no CUDA call from the shim while a capture is open
            assert r["free_bytes"] == -1 and r["total_bytes"] == -1, w
        else:
            assert r["total_bytes"] == truth["total"] == 64 << 20, w
            assert r["free_bytes"] == truth["free"], w
            assert r["device"] == w["device"] == 0
        # the call site, as for a block: the calling object, and a native stack in the program
        assert str(r["owner"]) == "shim_oom", w
        assert r["stack_id"] >= 0, w
    assert sum(w["capturing"] for w in want) == 1
    assert tr.counts["failure"] == len(want)
    assert int(tr.processes["lost"].sum()) == 0


def test_failure_on_another_device_records_that_device(capture, cbuild):
    """Two simulated devices: a failure after cudaSetDevice(1) is recorded on device 1 with device 1's free
    bytes (nothing live there), not device 0's."""
    path, cp = capture([cbuild("shim_oom"), "ok", "dev1"], env={**ENV, "SIMCUDA_DEVICES": "2"})
    assert cp.returncode == 0, cp.stderr[-2000:]
    truth = last_json_line(cp.stdout)
    f = pyinterpose.load(path).failures.sort_values("seq")
    last = f.iloc[-1]
    assert truth["failures"][-1]["device"] == 1 and int(last["device"]) == 1
    assert int(last["free_bytes"]) == truth["free1"] == 64 << 20 != truth["free"]
    assert (f["device"].iloc[:-1] == 0).all()
