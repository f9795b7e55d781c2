"""Issue 30: the exports written a piece at a time (memory-viz, csv, perfetto) give the same bytes
whatever the piece (``PYINTERPOSE_CHUNK_ROWS`` of a few rows against one piece), and the same
objects as independent routes: the memory-viz pickle loads to what ``memory_viz.snapshot`` builds
object by object (on traces with several devices, physical handles at address 0, equal times and
classes in any order), the csv to pandas' ``to_csv`` of the blocks table, and each perfetto kernel
instant's blocks to the accesses of its launch, found here row by row."""
from __future__ import annotations

import json
import pickle

import numpy as np
import pandas as pd
import pytest

import pyinterpose
from pyinterpose.analysis import guarded
from pyinterpose.trace.pages import release
from pyinterpose.report import exports, memory_viz
from pyinterpose.report.perfetto import write_chrome_trace
from pyinterpose.report.synthetic import training_trace
from pyinterpose.trace.model import Trace
from conftest import gpu_trace

SAMPLES = ("torch-cnn-blocks.pit", "torch-cnn-reserved.pit", "jax-attn-blocks.pit", "jax-attn-reserved.pit",
           "graphs-blocks.pit", "loader-blocks.pit")


def _classes(tr):
    return guarded.block_classes(tr, iters=guarded.iterations(tr).value).value


def _twisted() -> Trace:
    """A synthetic trace made awkward: blocks on two devices, a few physical handles at address 0,
    times rounded so that many allocations and frees share an instant, block rows not in time order."""
    tr = training_trace(iterations=5)
    b = tr.blocks.copy()
    n = len(b)
    rows = np.arange(n)
    b["device"] = np.where(rows % 3 == 0, 1, 0).astype(b["device"].dtype)
    b["address"] = np.where(rows % 11 == 5, 0, b["address"].to_numpy()).astype(np.uint64)
    b["t_alloc"] = b["t_alloc"] // 4000 * 4000
    b["t_free"] = np.maximum(b["t_free"] // 4000 * 4000, b["t_alloc"])
    b = b.iloc[np.r_[rows[n // 2:], rows[:n // 2]]].reset_index(drop=True)      # rows out of time order
    return Trace.from_tables(blocks=b, accesses=tr.accesses, launches=tr.launches, meta=dict(tr.meta))


def _snapshot_bytes(tr, classes, path, monkeypatch, rows: int | None) -> bytes:
    if rows is None:
        monkeypatch.delenv("PYINTERPOSE_CHUNK_ROWS", raising=False)
    else:
        monkeypatch.setenv("PYINTERPOSE_CHUNK_ROWS", str(rows))
    memory_viz.write_snapshot(tr, str(path), classes=classes)
    return path.read_bytes()


@pytest.mark.parametrize("shuffle", [False, True])
def test_memory_viz_in_pieces_equals_one_piece_and_the_objects(tmp_path, monkeypatch, shuffle):
    tr = _twisted()
    cl = _classes(tr)
    assert cl is not None and len(cl)
    cl = cl.drop(cl.index[::4])          # blocks without a class: "unknown"
    if shuffle:          # classes whose index is not in block order: looked up through the index
        cl = cl.sample(frac=1.0, random_state=3)
    assert (tr.blocks["device"] == 1).any() and (tr.blocks["address"] == 0).any()
    one = _snapshot_bytes(tr, cl, tmp_path / "one.pickle", monkeypatch, None)
    for rows in (1, 3, 64):
        assert _snapshot_bytes(tr, cl, tmp_path / f"p{rows}.pickle", monkeypatch, rows) == one
    assert pickle.loads(one) == memory_viz.snapshot(tr, classes=cl)
    assert len(pickle.loads(one)["device_traces"]) == 2


@pytest.mark.slow
@pytest.mark.parametrize("name", SAMPLES)
def test_memory_viz_in_pieces_on_the_samples(name, tmp_path, monkeypatch):
    tr = pyinterpose.load(gpu_trace(name))
    view, _, _ = exports.snapshot_process(tr, None)
    cl = _classes(tr)
    one = _snapshot_bytes(view, cl, tmp_path / "one.pickle", monkeypatch, None)
    assert _snapshot_bytes(view, cl, tmp_path / "few.pickle", monkeypatch, 5) == one
    assert pickle.loads(one) == memory_viz.snapshot(view, classes=cl)


@pytest.mark.parametrize("name", [None, "torch-cnn-blocks.pit", "loader-blocks.pit"])
def test_csv_in_pieces_equals_pandas(name, tmp_path, monkeypatch):
    tr = _twisted() if name is None else pyinterpose.load(gpu_trace(name))
    cl = _classes(tr).iloc[1::2]          # every other block without a class: an empty field
    ref = tmp_path / "ref.csv"
    exports.blocks_table(tr, cl).to_csv(ref, index=False)
    for rows in (None, 7):
        if rows is None:
            monkeypatch.delenv("PYINTERPOSE_CHUNK_ROWS", raising=False)
        else:
            monkeypatch.setenv("PYINTERPOSE_CHUNK_ROWS", str(rows))
        p = tmp_path / f"b{rows}.csv"
        exports.write_csv(tr, str(p), classes=cl.sample(frac=1.0, random_state=1) if rows else cl)
        assert p.read_bytes() == ref.read_bytes()


@pytest.mark.parametrize("name", ["torch-cnn-blocks.pit", "graphs-blocks.pit"])
def test_perfetto_in_pieces_and_kernel_blocks_against_the_accesses(name, tmp_path, monkeypatch):
    tr = pyinterpose.load(gpu_trace(name))
    it = guarded.iterations(tr).value
    cl = _classes(tr)
    texts = []
    for rows in (None, 13):
        if rows is None:
            monkeypatch.delenv("PYINTERPOSE_CHUNK_ROWS", raising=False)
        else:
            monkeypatch.setenv("PYINTERPOSE_CHUNK_ROWS", str(rows))
        p = tmp_path / f"p{rows}.json"
        write_chrome_trace(tr, str(p), iterations=it, classes=cl, notes=[], max_kernels=300)
        texts.append(p.read_bytes())
    assert texts[0] == texts[1]
    doc = json.loads(texts[0])
    kernels = [e for e in doc["traceEvents"] if e.get("cat") == "kernel"]
    assert 0 < len(kernels) <= 300
    # the reference, row by row: a launch's accesses (op "launch", same pid and seq) in table order
    acc = tr.accesses
    want: dict[tuple[int, int], list[int]] = {}
    for pid, seq, op, bid in zip(acc["pid"].tolist(), acc["seq"].tolist(), acc["op"].astype(str).tolist(),
                                 acc["block_id"].tolist()):
        if op == "launch":
            want.setdefault((int(pid), int(seq)), []).append(int(bid))
    size = dict(zip(tr.blocks["block_id"].tolist(), tr.blocks["size"].tolist()))
    assert any(want.get((e["args"]["pid"], e["args"]["seq"])) for e in kernels)
    for e in kernels:
        ids = want.get((e["args"]["pid"], e["args"]["seq"]), [])
        assert e["args"]["blocks"] == ids
        assert e["args"]["bytes"] == sum(size.get(i, 0) for i in ids)


def test_release_gives_back_mapped_pages_only(tmp_path):
    a = np.arange(1 << 20, dtype=np.int64)
    np.save(tmp_path / "c.npy", a)
    m = np.asarray(np.load(tmp_path / "c.npy", mmap_mode="c"))
    assert int(m.sum()) == int(a.sum())
    assert release(m) > 0                     # a file map: its pages go
    assert int(m.sum()) == int(a.sum())       # and read back the same
    assert release(m, 10, 20) == 0            # no whole page inside 10 rows
    assert release(a) == 0                    # memory of our own is never touched
    assert int(a.sum()) == (1 << 20) * ((1 << 20) - 1) // 2
    s = pd.Series(m, copy=False)          # a column of a cached table is such a view
    assert release(s.to_numpy(), 0, len(m)) > 0
