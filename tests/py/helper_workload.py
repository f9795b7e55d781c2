"""Allocations that go through the program's own helper, for the call-site tests (run under
``pyinterpose run --stacks python``).

    python helper_workload.py helper|nested|direct

Three callers (``encoder``, ``decoder``, ``head``) allocate, each with its own sizes: through the
helper ``cuda_malloc`` (``helper``), through ``cuda_malloc`` -> ``_raw_malloc`` (``nested``), or
each calling cudaMalloc on its own line (``direct``: no helper).  Prints one JSON line: the mode,
the line of each ``# @tag`` and the sizes each caller allocated."""
import ctypes
import json
import sys

LINE = {}
for _no, _text in enumerate(open(__file__), 1):
    if "# @" in _text and not _text.lstrip().startswith(("if", "LINE")):
        LINE[_text.split("# @")[1].split()[0]] = _no

MODE = sys.argv[1]
rt = ctypes.CDLL("libcudart.so.13")
rt.cudaMalloc.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_size_t]
rt.cudaFree.argtypes = [ctypes.c_void_p]
ptrs = []


def _raw_malloc(n):
    p = ctypes.c_void_p()
    rt.cudaMalloc(ctypes.byref(p), n)  # @raw
    return p


def cuda_malloc(n):
    if MODE == "nested":
        p = _raw_malloc(n)  # @helper_nested
    else:
        p = ctypes.c_void_p()
        rt.cudaMalloc(ctypes.byref(p), n)  # @helper
    return p


def encoder(i):
    if MODE == "direct":
        p = ctypes.c_void_p()
        rt.cudaMalloc(ctypes.byref(p), 1000 + i)  # @encoder_direct
        return p
    return cuda_malloc(1000 + i)  # @encoder


def decoder(i):
    if MODE == "direct":
        p = ctypes.c_void_p()
        rt.cudaMalloc(ctypes.byref(p), 2000 + i)  # @decoder_direct
        return p
    return cuda_malloc(2000 + i)  # @decoder


def head(i):
    if MODE == "direct":
        p = ctypes.c_void_p()
        rt.cudaMalloc(ctypes.byref(p), 3000 + i)  # @head_direct
        return p
    return cuda_malloc(3000 + i)  # @head


for i in range(6):
    ptrs.append(encoder(i))  # @main_encoder
    ptrs.append(decoder(i))
    if i % 2 == 0:
        ptrs.append(head(i))
for p in ptrs:
    rt.cudaFree(p)
print(json.dumps({"mode": MODE, "lines": LINE,
                  "callers": {"encoder": [1000 + i for i in range(6)], "decoder": [2000 + i for i in range(6)],
                              "head": [3000 + i for i in range(0, 6, 2)]}}))
