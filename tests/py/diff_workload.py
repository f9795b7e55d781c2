"""Allocations from known lines whose sizes depend on the variant, for the ``diff`` tests.

    python diff_workload.py a|b

Variant a: weights 8 MiB (@weights), activations 4 MiB (@acts), a scratch buffer 2 MiB (@scratch).
Variant b: weights 8 MiB, activations 6 MiB (grew), no scratch (vanished), a cache 3 MiB (@cache, appeared).
Nothing is freed, so the live set at the peak is everything.  Prints one JSON line: each allocation's
line tag, function, line number and size.
"""
import ctypes
import json
import os
import sys

HERE = os.path.abspath(__file__)
LINE = {}
for _no, _text in enumerate(open(HERE), 1):
    if "# @" in _text and not _text.lstrip().startswith(("LINE", "for", "if")):
        LINE[_text.split("# @")[1].split()[0]] = _no

rt = ctypes.CDLL("libcudart.so.13")
rt.cudaMalloc.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_size_t]
MiB = 1 << 20
out = []


def weights(n):
    p = ctypes.c_void_p()
    assert rt.cudaMalloc(ctypes.byref(p), n) == 0  # @weights
    out.append({"tag": "weights", "function": "weights", "size": n})


def acts(n):
    p = ctypes.c_void_p()
    assert rt.cudaMalloc(ctypes.byref(p), n) == 0  # @acts
    out.append({"tag": "acts", "function": "acts", "size": n})


def scratch(n):
    p = ctypes.c_void_p()
    assert rt.cudaMalloc(ctypes.byref(p), n) == 0  # @scratch
    out.append({"tag": "scratch", "function": "scratch", "size": n})


def cache(n):
    p = ctypes.c_void_p()
    assert rt.cudaMalloc(ctypes.byref(p), n) == 0  # @cache
    out.append({"tag": "cache", "function": "cache", "size": n})


variant = sys.argv[1]
weights(8 * MiB)
acts((4 if variant == "a" else 6) * MiB)
if variant == "a":
    scratch(2 * MiB)
else:
    cache(3 * MiB)
for o in out:
    o["line"] = LINE[o["tag"]]
print(json.dumps({"allocs": out}))
