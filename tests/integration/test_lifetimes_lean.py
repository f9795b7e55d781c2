"""Issue 30: lifetimes.summary on a long trace (above LEAN_BLOCKS blocks) is made from the blocks' columns
a piece at a time, without classify's table; its answer is the table's, figure for figure — on the
samples, the demo-sized simtrain run, a run of two processes and a synthetic loop with leaks — with the
class codes made in pieces of 1, 7 and many rows."""
from __future__ import annotations

import os
import sys

import numpy as np
import pandas as pd
import pytest

import pyinterpose
from pyinterpose.analysis import lifetimes
from pyinterpose.analysis.iterations import find_iterations
from tests.conftest import ROOT

SAMPLES = ["graphs-blocks.pit", "jax-attn-blocks.pit", "jax-attn-reserved.pit", "loader-blocks.pit",
           "torch-cnn-blocks.pit", "torch-cnn-reserved.pit"]


def _both(tr, monkeypatch, pid=None):
    """(the table's summary, the lean one); the lean one made with classify's table out of reach."""
    it = find_iterations(tr, pid)
    monkeypatch.setattr(lifetimes, "LEAN_BLOCKS", 1 << 62)
    whole = lifetimes.summary(tr, it, pid)
    monkeypatch.setattr(lifetimes, "LEAN_BLOCKS", -1)

    def no_table(*a, **k):
        raise AssertionError("the lean summary made classify's table")
    monkeypatch.setattr(lifetimes, "classify", no_table)
    monkeypatch.setattr(lifetimes, "_classify", no_table)
    try:
        lean = lifetimes.summary(tr, it, pid)
    finally:
        monkeypatch.undo()
    return whole, lean


@pytest.mark.parametrize("rows", ["1", "7", "100000"])
@pytest.mark.parametrize("name", SAMPLES)
def test_lean_summary_is_the_tables_on_the_samples(name, rows, monkeypatch):
    tr = pyinterpose.load(os.path.join(ROOT, "samples", name))
    monkeypatch.setenv("PYINTERPOSE_CHUNK_ROWS", rows)
    whole, lean = _both(tr, monkeypatch)
    assert lean == whole
    assert whole["blocks"] > 0 and whole["peak"]["bytes"] > 0


@pytest.mark.slow
def test_lean_summary_is_the_tables_on_simtrain_and_two_processes(capture, monkeypatch):
    runs = (["--framework", "torch", "--steps", "60"], ["--framework", "jax", "--steps", "40"],
            ["--framework", "torch", "--steps", "30", "--ranks", "2"])
    for k, argv in enumerate(runs):
        path, cp = capture([sys.executable, "-m", "pyinterpose.examples.simtrain", *argv], name=f"t{k}.pit",
                           timeout=600)
        assert cp.returncode == 0, cp.stderr[-2000:]
        tr = pyinterpose.load(path)
        monkeypatch.setenv("PYINTERPOSE_CHUNK_ROWS", "1000")
        pids = tr.pids if "--ranks" in argv else [None]
        assert len(pids) == (2 if "--ranks" in argv else 1)
        for pid in pids:                    # each rank's summary: its own blocks among the other's
            whole, lean = _both(tr, monkeypatch, pid)
            assert lean == whole
            assert whole["iterations"]["count"] > 10 and whole["steady_peak"] is not None


def test_lean_summary_of_one_process_among_two_and_leaks(monkeypatch):
    # a loop of 6 steps in process 1 (per-step blocks, a site that never frees in steps 0-3, a block alive
    # throughout), and process 2's blocks interleaved with them (not counted, not in the peak)
    rows, seq = [], 0
    for step in range(6):
        for k in range(3):
            rows.append((1, seq, seq + 2, True, 1, 8 << k)); seq += 1
            rows.append((2, seq, seq + 5, True, 9, 1 << 20)); seq += 1
        if step < 4:
            rows.append((1, seq, -1, False, 4, 100)); seq += 1
        seq += 3
    rows.insert(0, (1, 0, -1, False, 7, 4096))
    n = len(rows)
    col = {k: np.array([r[i] for r in rows]) for i, k in enumerate(("pid", "sa", "sf", "fr", "sid", "size"))}
    col["sa"][0] = -1                                                        # allocated before the rest
    fr = col["fr"].astype(bool)
    b = pd.DataFrame({"block_id": np.arange(n), "pid": col["pid"], "size": col["size"], "kind": "device",
                      "api": "cudaMalloc", "counts_device": True, "t_alloc": col["sa"] * 10,
                      "t_free": np.where(fr, col["sf"] * 10, 10**6), "seq_alloc": col["sa"],
                      "seq_free": np.where(fr, col["sf"], -1), "freed": fr, "stack_id": col["sid"]})
    b.loc[3, "counts_device"] = False                                        # one block not on the device
    t_peak = _both(pyinterpose.Trace.from_tables(blocks=b), monkeypatch, pid=1)[0]["peak"]["t"]
    # a small block of process 1 freed at the very instant of the peak: not live there
    b = pd.concat([b, pd.DataFrame({"block_id": [n], "pid": [1], "size": [1], "kind": ["device"],
                                    "api": ["cudaMalloc"], "counts_device": [True], "t_alloc": [t_peak - 1],
                                    "t_free": [t_peak], "seq_alloc": [seq], "seq_free": [seq + 1],
                                    "freed": [True], "stack_id": [1]})], ignore_index=True)
    tr = pyinterpose.Trace.from_tables(blocks=b)
    whole, lean = _both(tr, monkeypatch, pid=1)
    assert lean == whole
    assert whole["peak"]["t"] == t_peak
    live = b[(b["pid"] == 1) & b["counts_device"] & (b["t_alloc"] <= t_peak) & ((b["t_free"] > t_peak) | ~b["freed"])]
    assert whole["peak"]["blocks"] == len(live) and n not in live["block_id"].tolist()
    # independent figures: process 1's blocks only
    mine = b[b["pid"] == 1]
    assert whole["blocks"] == int(mine["counts_device"].sum())
    assert whole["other_blocks"] == 1
    assert "leak" in whole["classes"]
