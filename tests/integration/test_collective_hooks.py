"""The collective-library hooks on each resolution path a program can use: dlsym on libcuda (ctypes),
cuGetProcAddress_v2 and cudaGetDriverEntryPointByVersion.  The workload (a Python script on simcuda)
counts its own calls; the trace must hold each of them, under the right kind, counting nothing that
is not this process's memory."""
from __future__ import annotations

import json
import sys

import pytest

import pyinterpose

pytestmark = pytest.mark.slow   # every test here captures, replays or loads whole traces (> a few s)

MiB = 1 << 20

WORKLOAD = r'''
import ctypes, json, os
from ctypes import byref, c_int, c_uint64, c_void_p, c_size_t
cu = ctypes.CDLL("libcuda.so.1")          # every cu* below: dlsym on the handle
rt = ctypes.CDLL("libcudart.so.13")
assert cu.cuInit(0) == 0
ctx = c_void_p()
assert cu.cuDevicePrimaryCtxRetain(byref(ctx), 0) == 0 and cu.cuCtxSetCurrent(ctx) == 0

class Loc(ctypes.Structure): _fields_ = [("type", c_int), ("id", c_int)]
class Prop(ctypes.Structure):
    _fields_ = [("type", c_int), ("handleTypes", c_int), ("loc", Loc), ("meta", c_void_p), ("flags", ctypes.c_char * 8)]
class Access(ctypes.Structure): _fields_ = [("loc", Loc), ("flags", c_int)]
class McProp(ctypes.Structure):
    _fields_ = [("numDevices", ctypes.c_uint), ("size", c_size_t), ("handleTypes", c_uint64), ("flags", c_uint64)]

GetProc = ctypes.CFUNCTYPE(c_int, ctypes.c_char_p, ctypes.POINTER(c_void_p), c_int, c_uint64, ctypes.POINTER(c_int))
getproc = GetProc(("cuGetProcAddress_v2", cu))
def via_getproc(name, *argtypes):
    p = c_void_p(); st = c_int()
    assert getproc(name.encode(), byref(p), 12080, 0, byref(st)) == 0 and p.value
    return ctypes.CFUNCTYPE(c_int, *argtypes)(p.value)
def via_entry_point(name, *argtypes):
    p = c_void_p(); st = c_int()
    assert rt.cudaGetDriverEntryPointByVersion(name.encode(), byref(p), 12080, c_uint64(0), byref(st)) == 0
    return ctypes.CFUNCTYPE(c_int, *argtypes)(p.value)

MiB = 1 << 20
def reserve_map(h, size, off=0):
    va = c_uint64()
    assert cu.cuMemAddressReserve(byref(va), c_size_t(size), c_size_t(0), c_uint64(0), c_uint64(0)) == 0
    assert cu.cuMemMap(c_uint64(va.value), c_size_t(size), c_size_t(off), c_uint64(h), c_uint64(0)) == 0
    return va.value

prop = Prop(1, 1, Loc(1, 0))
h = c_uint64()
assert cu.cuMemCreate(byref(h), c_size_t(4 * MiB), byref(prop), c_uint64(0)) == 0
own = reserve_map(h.value, 4 * MiB)
fd = c_int(-1)
assert cu.cuMemExportToShareableHandle(byref(fd), c_uint64(h.value), 1, c_uint64(0)) == 0      # dlsym path
imports = []
imp_dlsym = c_uint64()
assert cu.cuMemImportFromShareableHandle(byref(imp_dlsym), c_void_p(fd.value), 1) == 0          # dlsym path
imp_gpa = c_uint64()
f = via_getproc("cuMemImportFromShareableHandle", ctypes.POINTER(c_uint64), c_void_p, c_int)
assert f(byref(imp_gpa), c_void_p(fd.value), 1) == 0                                          # cuGetProcAddress
imp_ep = c_uint64()
f = via_entry_point("cuMemImportFromShareableHandle", ctypes.POINTER(c_uint64), c_void_p, c_int)
assert f(byref(imp_ep), c_void_p(fd.value), 1) == 0                                           # entry point
for x in (imp_dlsym, imp_gpa, imp_ep):
    reserve_map(x.value, 4 * MiB)
mc = c_uint64()
create = via_getproc("cuMulticastCreate", ctypes.POINTER(c_uint64), ctypes.POINTER(McProp))
assert create(byref(mc), byref(McProp(1, 2 * MiB, 1, 0))) == 0
bind = via_entry_point("cuMulticastBindMem", c_uint64, c_size_t, c_uint64, c_size_t, c_size_t, c_uint64)
assert bind(mc.value, 0, h.value, 0, 2 * MiB, 0) == 0
reserve_map(mc.value, 2 * MiB)
print(json.dumps({"own": 4 * MiB, "imports": 3, "multicast": 1}))
'''


def test_every_resolution_path_records_the_collective_calls(capture, tmp_path):
    script = tmp_path / "w.py"
    script.write_text(WORKLOAD)
    path, cp = capture([sys.executable, str(script)])
    assert cp.returncode == 0, cp.stderr
    truth = json.loads(cp.stdout.strip().splitlines()[-1])
    tr = pyinterpose.load(path)
    by_api = tr.counts["by_api"]
    assert by_api.get("cuMemImportFromShareableHandle") == truth["imports"] == 3
    assert by_api.get("cuMemExportToShareableHandle") == 1
    assert by_api.get("cuMulticastCreate") == 1 and by_api.get("cuMulticastBindMem") == 1
    kinds = tr.blocks["kind"].astype(str).value_counts().to_dict()
    assert kinds == {"vmm": 1, "vmm_import": 3, "multicast": 1}, kinds
    assert pyinterpose.trace.model.peak_live_bytes(tr.blocks) == truth["own"]
