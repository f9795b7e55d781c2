"""The call-site API on a hand-built trace: frames_of walks the trie innermost
first, call_site names the innermost frame, top_call_sites ranks by bytes live at
the peak (computed by hand below) and by allocation count."""
import pandas as pd

from pyinterpose.trace.model import Trace
from pyinterpose.trace.stacks import call_site, frames_of, top_call_sites


def _trace():
    frames = pd.DataFrame({
        "frame_id": [0, 1, 2, 3],
        "kind": ["python", "python", "python", "native"],
        "filename": ["/x/train.py", "/x/model.py", "/x/model.py", ""],
        "function": ["main", "Net.forward", "Net.head", "<no Python frames>"],
        "line": [10, 20, 30, 0],
        "object": ["", "", "", "libc10_cuda.so"]})
    # 0: main ; 1: main > forward ; 2: main > head ; 3: <no Python frames>
    stacks = pd.DataFrame({"stack_id": [0, 1, 2, 3], "parent_id": [-1, 0, 0, -1], "frame_id": [0, 1, 2, 3]})
    # times: a [0,100) 100 B @forward; b [10,50) 300 B @head; c [20,60) 50 B @forward;
    # d [70,90) 10 B @backward x3 -> peak at t=20: a+b+c = 450 B
    blocks = pd.DataFrame({
        "pid": 1, "kind": "device", "size": [100, 300, 50, 10, 10, 10],
        "t_alloc": [0, 10, 20, 70, 71, 72], "t_free": [100, 50, 60, 90, 91, 92],
        "seq_alloc": [1, 2, 3, 4, 5, 6], "seq_free": [9, 7, 8, 10, 11, 12], "freed": True,
        "stack_id": [1, 2, 1, 3, 3, 3], "owner": ["libffi.so.8"] * 3 + ["libc10_cuda.so"] * 3})
    return Trace.from_tables(blocks=blocks, frames=frames, stacks=stacks)


def test_frames_of_and_call_site():
    tr = _trace()
    assert [f["function"] for f in frames_of(tr, 1)] == ["Net.forward", "main"]
    assert call_site(tr, 2) == "model.py:30 in Net.head"
    assert call_site(tr, 3) == "<no Python frames> libc10_cuda.so"
    assert call_site(tr, -1) == "" and frames_of(tr, -1) == []


def test_top_call_sites_by_peak_and_count():
    tr = _trace()
    peak = top_call_sites(tr, by="peak")
    assert peak["call_site"].tolist() == ["model.py:30 in Net.head", "model.py:20 in Net.forward"]
    got = dict(zip(peak["call_site"], peak["peak_live_bytes"]))
    assert got == {"model.py:30 in Net.head": 300, "model.py:20 in Net.forward": 150}
    assert peak["call_site"].iloc[0] == "model.py:30 in Net.head"
    count = top_call_sites(tr, by="count")
    assert count["call_site"].iloc[0] == "<no Python frames> libc10_cuda.so"
    assert dict(zip(count["call_site"], count["blocks"])) == {
        "<no Python frames> libc10_cuda.so": 3, "model.py:20 in Net.forward": 2, "model.py:30 in Net.head": 1}
    assert count["frames"].iloc[1] == ["model.py:20 in Net.forward", "train.py:10 in main"]


def test_trace_without_stacks_has_the_columns():
    tr = Trace.from_tables(blocks=pd.DataFrame({"pid": [1], "kind": ["device"], "size": [8]}))
    assert tr.blocks["stack_id"].tolist() == [-1] and tr.blocks["owner"].tolist() == [""]
    assert len(top_call_sites(tr)) == 0 and len(tr.frames) == 0 and len(tr.stacks) == 0
