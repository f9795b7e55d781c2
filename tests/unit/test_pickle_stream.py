"""The streaming pickle writer (report.pickle_stream) and the memory-viz export written with it:
what it writes loads (with CPython's unpickler, and with a reader limited to the opcodes and
limits of PyTorch's JavaScript unpickler) to exactly the objects the object-building
implementation (memory_viz.snapshot) produces, on synthetic and real GPU traces."""
from __future__ import annotations

import io
import pickle
import pickletools

import numpy as np
import pandas as pd
import pytest

import pyinterpose
from pyinterpose.analysis import guarded
from pyinterpose.report import memory_viz
from pyinterpose.report import pickle_stream as P
from pyinterpose.report.synthetic import training_trace
from conftest import gpu_trace

# The opcodes MemoryViz.js's unpickler handles (its switch statement); anything else throws there.
JS_OPS = {"PROTO", "APPEND", "APPENDS", "LIST", "TUPLE", "NEWFALSE", "NEWTRUE", "NONE", "BINGET", "BININT",
          "BININT1", "BININT2", "EMPTY_DICT", "EMPTY_LIST", "FRAME", "LONG1", "LONG_BINGET", "MARK", "MEMOIZE",
          "BINPUT", "LONG_BINPUT", "SETITEMS", "SETITEM", "DICT", "SHORT_BINUNICODE", "BINUNICODE", "STOP",
          "EMPTY_TUPLE", "TUPLE1", "TUPLE2", "TUPLE3", "BINFLOAT"}


def js_subset_load(raw: bytes):
    """A reader with the JS unpickler's subset and limits: only JS_OPS; LONG1 at most 8 bytes (longer
    ones become BigInt there, which the viewer's arithmetic rejects); at most 1000 items per APPENDS /
    SETITEMS (they are spread as call arguments there).  Built from pickletools' opcode stream, not
    from pickle's own loader."""
    stack: list = []
    marks: list[int] = []
    memo: list = []
    for op, arg, pos in pickletools.genops(raw):
        name = op.name
        assert name in JS_OPS, f"opcode {name} at {pos} is not read by the viewer"
        if name == "PROTO":
            assert 2 <= arg <= 4
        elif name in ("BININT", "BININT1", "BININT2"):
            stack.append(arg)
        elif name == "LONG1":
            n = raw[pos + 1]
            assert n <= 8, f"LONG1 of {n} bytes at {pos}"
            stack.append(arg)
        elif name in ("SHORT_BINUNICODE", "BINUNICODE"):
            stack.append(arg)
        elif name in ("NEWTRUE", "NEWFALSE", "NONE"):
            stack.append({"NEWTRUE": True, "NEWFALSE": False, "NONE": None}[name])
        elif name == "EMPTY_DICT":
            stack.append({})
        elif name == "EMPTY_LIST":
            stack.append([])
        elif name == "MARK":
            marks.append(len(stack))
        elif name == "MEMOIZE":
            memo.append(stack[-1])
        elif name in ("BINGET", "LONG_BINGET"):
            stack.append(memo[arg])
        elif name == "APPENDS":
            m = marks.pop()
            items = stack[m:]
            assert len(items) <= 1000
            del stack[m:]
            stack[-1].extend(items)
        elif name == "SETITEMS":
            m = marks.pop()
            items = stack[m:]
            assert len(items) <= 2000
            del stack[m:]
            for k in range(0, len(items), 2):
                stack[-1][items[k]] = items[k + 1]
        elif name in ("TUPLE1", "TUPLE2", "TUPLE3"):
            n = int(name[-1])
            t = tuple(stack[-n:])
            del stack[-n:]
            stack.append(t)
        elif name == "TUPLE":
            m = marks.pop()
            t = tuple(stack[m:])
            del stack[m:]
            stack.append(t)
        elif name == "STOP":
            assert len(stack) == 1 and not marks
            return stack[0]
        else:
            raise AssertionError(f"the test reader does not implement {name}")
    raise AssertionError("no STOP")


def test_generic_objects_roundtrip():
    shared = [{"filename": "a.py", "line": 3, "name": "f"}]
    obj = {"a": [1, 255, 256, 65535, 65536, -1, -(2 ** 31), 2 ** 31, 2 ** 62, -(2 ** 63), 2 ** 63 - 1],
           "s": ["x", "x", "é" * 300, ""], "t": (0, 0), "t1": (1,), "t4": (1, 2, 3, 4), "b": [True, False, None],
           "shared": [shared, shared], "big": list(range(2500)), "d": {str(i): i for i in range(1500)}}
    f = io.BytesIO()
    ps = P.PickleStream(f)
    ps.begin()
    ps.obj(obj)
    ps.end()
    raw = f.getvalue()
    back = pickle.loads(raw)
    assert back == obj
    assert back["shared"][0] is back["shared"][1]
    assert js_subset_load(raw) == obj
    with pytest.raises(ValueError):
        P.int_bytes(2 ** 63)


@pytest.mark.parametrize("chunk", [1, 7, 1 << 16])
def test_write_rows_equals_objects(chunk):
    """Rows of two shapes interleaved at random, ints of every width (negative, > 2**32, mixed within
    a chunk), across chunk and APPENDS-batch boundaries: the same list as built in Python."""
    rng = np.random.default_rng(1)
    n = 2345
    kind = rng.integers(0, 2, n)
    cols = {"a": rng.integers(-(2 ** 62), 2 ** 62, n), "b": rng.integers(0, 200, n),
            "c": np.where(rng.random(n) < 0.5, rng.integers(0, 60000, n), rng.integers(-5, 2 ** 40, n))}
    f = io.BytesIO()
    ps = P.PickleStream(f)
    ps.begin()
    ps.write(P.EMPTY_LIST + P.MARK)
    names = [f"k{i}" for i in range(300)] + ["x", "y", "z"]   # memo indices above 255 too
    ps.obj(names)
    ix = {s: ps.str_index(s) for s in names}
    cols["r"] = np.array([ix[names[j]] for j in rng.integers(0, len(names), n)], np.int64)
    shapes = [[[(ix["x"], P.Int("a")), (ix["y"], P.Const(ix["k299"]))]],
              [[(ix["x"], P.Int("b")), (ix["k5"], P.Ref("r"))], [(ix["z"], P.Int("c"))], [(ix["k0"], P.Int("a"))]]]
    ps.write(P.EMPTY_LIST)
    items = P.write_rows(ps, shapes, kind, cols, {"r": 4}, chunk=chunk, threads=2 if chunk == 7 else 1)
    ps.write(P.APPENDS)
    ps.end()
    raw = f.getvalue()
    want = []
    for j in range(n):
        if kind[j] == 0:
            want.append({"x": int(cols["a"][j]), "y": "k299"})
        else:
            want += [{"x": int(cols["b"][j]), "k5": names[cols["r"][j] - ix[names[0]]]},
                     {"z": int(cols["c"][j])}, {"k0": int(cols["a"][j])}]
    assert items == len(want)
    assert pickle.loads(raw) == [names, want]
    assert js_subset_load(raw) == [names, want]


def _check(tr, classes=None, tmp_path=None, consistent=True):
    path = tmp_path / "s.pickle"
    info = memory_viz.write_snapshot(tr, str(path), classes=classes)
    raw = path.read_bytes()
    ref = memory_viz.snapshot(tr, classes=classes)
    back = pickle.loads(raw)
    assert back == ref
    assert list(back) == ["segments", "device_traces", "pyinterpose"]
    assert js_subset_load(raw) == ref
    assert info["trace_entries"] == sum(len(d) for d in ref["device_traces"])
    assert info["segments"] == len(ref["segments"])
    if consistent:
        memory_viz.check_consistency(back)
    return ref


def test_snapshot_stream_equals_objects_synthetic(tmp_path):
    tr = training_trace(iterations=4)
    cl = guarded.block_classes(tr, iters=guarded.iterations(tr).value).value
    ref = _check(tr, cl, tmp_path)
    assert sum(len(d) for d in ref["device_traces"]) > 100
    _check(tr, None, tmp_path)


def test_snapshot_stream_reserved_view_and_empty(tmp_path):
    tr = training_trace(iterations=3)
    tr.meta["view"] = "reserved"
    _check(tr, None, tmp_path)
    empty = training_trace(iterations=3)
    from pyinterpose.trace.model import Trace

    e = Trace.from_tables(blocks=empty.blocks.iloc[:0], meta={"view": "blocks"})
    assert _check(e, None, tmp_path) == {"segments": [], "device_traces": [[]],
                                         "pyinterpose": {"generator": "pyinterpose", "view": "blocks",
                                                         "complete": True}}


@pytest.mark.parametrize("name", ["torch-cnn-blocks.pit", "torch-cnn-reserved.pit", "torch-transformer-blocks.pit",
                                  "torch-transformer-reserved.pit", "jax-attn-blocks.pit", "jax-attn-reserved.pit",
                                  "graphs-blocks.pit", "loader-blocks.pit"])
@pytest.mark.slow
def test_snapshot_stream_equals_objects_real_traces(name, tmp_path):
    tr = pyinterpose.load(gpu_trace(name))
    cl = guarded.block_classes(tr, iters=guarded.iterations(tr).value).value
    # loader-blocks: two processes reuse addresses, which the snapshot format cannot tell apart
    ref = _check(tr, cl, tmp_path, consistent=name != "loader-blocks.pit")
    assert any(ref["device_traces"])
