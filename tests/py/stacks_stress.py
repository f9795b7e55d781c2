"""Stress for call sites: THREADS Python threads each allocate and free N times
through ctypes at recursion depths 0..6 (size % 7 == depth), all from one line.

    python stacks_stress.py THREADS N

Prints one JSON line: allocations made and the allocating line."""
import ctypes
import json
import sys
import threading

rt = ctypes.CDLL("libcudart.so.13")
rt.cudaMalloc.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_size_t]
rt.cudaFree.argtypes = [ctypes.c_void_p]
LINE = [n for n, t in enumerate(open(__file__), 1) if t.rstrip().endswith("# <- the line")][0]


def alloc(size):
    p = ctypes.c_void_p()
    rt.cudaMalloc(ctypes.byref(p), size)  # <- the line
    return p


def recurse(d, size):
    if d == 0:
        return alloc(size)
    return recurse(d - 1, size)


def work(t, n):
    for i in range(n):
        d = (i + t) % 7
        size = 7 * (1000 + i) + d
        p = recurse(d, size)
        rt.cudaFree(p)


threads = int(sys.argv[1])
n = int(sys.argv[2])
ts = [threading.Thread(target=work, args=(t, n)) for t in range(threads)]
for t in ts:
    t.start()
for t in ts:
    t.join()
print(json.dumps({"allocs": threads * n, "line": LINE}))
