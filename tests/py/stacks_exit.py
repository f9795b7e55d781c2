"""Daemon threads allocate (GIL released, through ctypes) in a loop while the
main thread returns and the interpreter finalises around them.  The program must
exit 0 under ``pyinterpose run --stacks python``; prints one JSON line first."""
import ctypes
import json
import threading
import time

rt = ctypes.CDLL("libcudart.so.13")
rt.cudaMalloc.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_size_t]
rt.cudaFree.argtypes = [ctypes.c_void_p]


def spin(size):
    p = ctypes.c_void_p()
    while True:
        rt.cudaMalloc(ctypes.byref(p), size)
        rt.cudaFree(p)


for i in range(4):
    threading.Thread(target=spin, args=(4096 + i,), daemon=True).start()
time.sleep(0.2)
print(json.dumps({"started": 4}), flush=True)
