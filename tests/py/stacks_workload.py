"""Allocations from known lines, for the call-site tests (run under ``pyinterpose run``).

    python stacks_workload.py HELPER_SO [EXT_DIR]

Allocates through simcuda's libcudart: with ctypes from the main thread (nested
functions, a generator), through a C library (``libstacks_helper.so``), from a
Python worker thread, from pthreads that have no Python (one named like PyTorch's
autograd workers), in a forked child, and — when EXT_DIR holds the compiled
``stacks_ext`` module — from a C extension with the GIL held and released.  Each
allocation has a unique size; the lines are found by their ``# @tag`` comments.
Prints one JSON line: what it allocated, from where (innermost frame first), and
which object made the call.
"""
import ctypes
import json
import os
import sys
import threading

HERE = os.path.abspath(__file__)
LINE = {}
for _no, _text in enumerate(open(HERE), 1):
    if "# @" in _text and not _text.lstrip().startswith(("if", "LINE", "for")):
        LINE[_text.split("# @")[1].split()[0]] = _no

rt = ctypes.CDLL("libcudart.so.13")
rt.cudaMalloc.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_size_t]
helper = ctypes.CDLL(sys.argv[1])
helper.helper_alloc.argtypes = [ctypes.c_size_t, ctypes.POINTER(ctypes.c_void_p)]
helper.helper_thread_alloc.argtypes = [ctypes.c_size_t, ctypes.c_int, ctypes.c_char_p,
                                       ctypes.POINTER(ctypes.c_void_p)]
truth = []


def note(size, frames, owner, kind="python", pid=None):
    truth.append({"size": size, "frames": [[f, LINE[t]] for f, t in frames], "owner": owner, "kind": kind,
                  "pid": pid or os.getpid()})


def direct(size):
    p = ctypes.c_void_p()
    rt.cudaMalloc(ctypes.byref(p), size)  # @direct
    return p.value


def via_helper(size):
    p = ctypes.c_void_p()
    helper.helper_alloc(size, ctypes.byref(p))  # @helper
    return p.value


def level3(size):
    return direct(size)  # @level3


def level2(size):
    return level3(size)  # @level2


def level1(size):
    return level2(size)  # @level1


def gen(size):
    yield direct(size)  # @gen


def deep(n, size):
    if n == 0:
        return direct(size)  # @deep0
    return deep(n - 1, size)  # @deepn


def worker(size):
    direct(size)  # @worker


def child_work(size):
    direct(size)  # @child


def ext_gil(ext, size):
    ext.alloc(size)  # @ext_gil


def ext_nogil(ext, size):
    ext.alloc_nogil(size)  # @ext_nogil


def main():
    ffi = "ffi"  # ctypes' calls are made by libffi (or _ctypes when it bundles it)
    direct(10001)  # @main1
    note(10001, [("direct", "direct"), ("main", "main1")], ffi)
    via_helper(10002)  # @main2
    note(10002, [("via_helper", "helper"), ("main", "main2")], "libstacks_helper.so")
    level1(10003)  # @main3
    note(10003, [("direct", "direct"), ("level3", "level3"), ("level2", "level2"), ("level1", "level1"),
                 ("main", "main3")], ffi)
    next(gen(10004))  # @main4
    note(10004, [("direct", "direct"), ("gen", "gen"), ("main", "main4")], ffi)
    deep(40, 10005)  # @main5
    note(10005, [("direct", "direct"), ("deep", "deep0")] + [("deep", "deepn")] * 40 + [("main", "main5")], ffi)
    for i in range(3):
        direct(10010 + i)  # @loop
        note(10010 + i, [("direct", "direct"), ("main", "loop")], ffi)

    t = threading.Thread(target=worker, args=(10020,))
    t.start()
    t.join()
    note(10020, [("direct", "direct"), ("worker", "worker")], ffi)

    out = (ctypes.c_void_p * 4)()
    helper.helper_thread_alloc(10030, 2, None, out)
    truth.append({"size": 10030, "frames": [], "owner": "libstacks_helper.so", "kind": "nopython",
                  "pid": os.getpid(), "count": 2})
    helper.helper_thread_alloc(10031, 1, b"pt_autograd_0", out)
    truth.append({"size": 10031, "frames": [], "owner": "libstacks_helper.so", "kind": "backward",
                  "pid": os.getpid(), "count": 1})

    if len(sys.argv) > 2:
        sys.path.insert(0, sys.argv[2])
        import stacks_ext

        owner = os.path.basename(stacks_ext.__file__)
        ext_gil(stacks_ext, 10040)  # @main_ext1
        note(10040, [("ext_gil", "ext_gil"), ("main", "main_ext1")], owner)
        ext_nogil(stacks_ext, 10041)  # @main_ext2
        note(10041, [("ext_nogil", "ext_nogil"), ("main", "main_ext2")], owner)

    pid = os.fork()
    if pid == 0:
        child_work(10050)  # @main_fork
        os._exit(0)
    os.waitpid(pid, 0)
    note(10050, [("direct", "direct"), ("child_work", "child"), ("main", "main_fork")], ffi, pid=pid)
    print(json.dumps({"allocs": truth, "file": HERE, "python": sys.version}))


if __name__ == "__main__":
    main()
