"""A plain ctypes program that runs out of device memory (issue 33.6): ``load_weights`` holds most of
the device, ``forward`` a little, then one request too large fails and the program exits 1.

    SIMCUDA_MEMORY_BYTES=67108864 python oom_ctypes.py

Prints one JSON line (its truth): the bytes each function holds when the request fails."""
import ctypes
import json
import sys

MiB = 1 << 20
rt = ctypes.CDLL("libcudart.so.13")
rt.cudaMalloc.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_size_t]
held = {"load_weights": 0, "forward": 0}
ptrs = []


def _malloc(n, who):
    p = ctypes.c_void_p()
    rc = rt.cudaMalloc(ctypes.byref(p), n)
    if rc == 0:
        held[who] += n
        ptrs.append(p)
    return rc


def load_weights():
    for _ in range(5):
        assert _malloc(8 * MiB, "load_weights") == 0


def forward():
    for _ in range(3):
        assert _malloc(2 * MiB, "forward") == 0


load_weights()
forward()
rc = _malloc(32 * MiB, "forward")
print(json.dumps({"held": held, "failed": rc}))
sys.exit(1 if rc else 0)
