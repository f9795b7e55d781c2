"""Kernels loaded and unloaded at run time (XLA's autotuner, Triton, cuBLAS's
lazy loading): simcuda hands out an unloaded kernel's CUfunction/CUkernel
address again for a kernel with another parameter layout, and the shim must
scan each launch with the layout of the kernel launched — never crash, never
report the old kernel's accesses.  Ground truth: what tests/c/shim_modules.c
says each launch passed."""
from __future__ import annotations

import json

import pyinterpose
import pytest
from conftest import last_json_line

pytestmark = pytest.mark.slow   # every test here captures, replays or loads whole traces (> a few s)


def _truth(path):
    with open(path) as fh:
        return [json.loads(line) for line in fh if line.strip()]


def test_load_launch_unload_from_8_threads(capture, cbuild, tmp_path):
    prog = cbuild("shim_modules")
    out = str(tmp_path / "truth.jsonl")
    path, cp = capture([prog, out, "150", "8"], timeout=300)
    assert cp.returncode == 0, (cp.returncode, cp.stderr[-2000:])
    totals = last_json_line(cp.stdout)
    truth = _truth(out)
    assert len(truth) == 8
    tr = pyinterpose.load(path)
    assert tr.counts["launch"] == totals["launches"] == 8 * 150 * 2
    assert tr.counts["access"] == totals["accesses"]
    assert tr.counts["failure"] == 0
    addr = tr.blocks.set_index("block_id")["address"]
    acc = tr.accesses.assign(address=tr.accesses["block_id"].map(addr))
    touched = acc.groupby("seq")["address"].apply(lambda s: sorted(int(a) for a in s)).to_dict()
    owner = {}
    reused = 0
    for th in truth:
        la = tr.launches[tr.launches["tid"] == th["tid"]].sort_values("seq")
        assert len(la) == len(th["launches"])
        for (_, row), (name, handle, addrs) in zip(la.iterrows(), th["launches"]):
            assert row["kernel_name"] == name, (row["kernel_name"], name)
            assert touched.get(row["seq"], []) == sorted(addrs), name
            if owner.get(handle, name) != name:
                reused += 1
            owner[handle] = name
    # only a test if handles were in fact handed to other kernels
    assert reused > 100, reused


def test_failed_allocations_record_the_request_not_garbage(capture, cbuild):
    """A failed cudaMallocPitch leaves *pitch alone: the failure's size is w*h."""
    path, cp = capture([cbuild("shim_failures")])
    assert cp.returncode == 0, cp.stderr
    truth = last_json_line(cp.stdout)
    f = pyinterpose.load(path).failures.sort_values("seq")
    assert f["api"].tolist() == ["cudaMallocPitch", "cudaMalloc"]
    assert int(f["size"].iloc[0]) == truth["w"] * truth["h"]
    assert int(f["size"].iloc[1]) == truth["size"]
