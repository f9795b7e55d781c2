"""access, swap and compare made a piece of blocks at a time (issue 30) give what one piece gives.

``PYINTERPOSE_CHUNK_ROWS`` (pyinterpose.trace.chunking) sets how many access intervals a piece holds
(pyinterpose.analysis.intervals); set to a few rows it forces hundreds of pieces.  Every figure of
``access``, ``swap`` and ``compare --json`` must be the one a single piece gives, on the demo-sized
simtrain trace, the six samples and (slow) a 1 M-event simtrain trace.  Beside that, the pieces are
checked against an independent reference: the concatenated pieces against the intervals computed
from their definition, and ``access.analyze`` in many pieces against the reference analysis of
tests/unit/test_access_reference.py (which imports nothing it checks), on synthetic traces that take
each path (host blocks between device ones, repeated and unsorted block ids, several processes, the
device clock, repeated touches).
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

from tests.conftest import ROOT

SAMPLES = ["graphs-blocks.pit", "jax-attn-blocks.pit", "jax-attn-reserved.pit", "loader-blocks.pit",
           "torch-cnn-blocks.pit", "torch-cnn-reserved.pit"]
COMMANDS = [["access", "--json", "--bandwidth", "25"], ["swap", "--json", "--bandwidth", "25"],
            ["access", "--json", "--bandwidth", "3", "--ati-quantile", "0.5", "--size-quantile", "0.2"],
            ["swap", "--json", "--bandwidth", "3", "--min-size", "1"]]


def _reference():
    """tests/unit/test_access_reference.py (its reference imports nothing it checks)."""
    unit = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "unit")
    if unit not in sys.path:
        sys.path.insert(0, unit)
    import test_access_reference
    return test_access_reference


def _cli(args, env):
    e = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""), **env)
    r = subprocess.run([sys.executable, "-m", "pyinterpose", *args], capture_output=True, text=True, env=e,
                       timeout=900, cwd=ROOT)
    assert r.returncode == 0, r.stderr[-2000:]
    return r.stdout


def _results(text):
    """A command's JSON less pools' ``seconds`` and the exact planner's ``nodes`` (they measure the
    machine, not the trace: they differ between two runs of the same code)."""
    def strip(x):
        if isinstance(x, dict):
            return {k: strip(v) for k, v in x.items() if k not in ("seconds", "nodes")}
        return [strip(v) for v in x] if isinstance(x, list) else x
    return strip(json.loads(text))


def _pieces_equal_one(path, rows, commands=COMMANDS, compare=True):
    one = {"PYINTERPOSE_CHUNK_ROWS": str(1 << 40)}
    many = {"PYINTERPOSE_CHUNK_ROWS": str(rows)}
    for cmd in commands:
        args = [cmd[0], path, *cmd[1:]]
        a, b = _results(_cli(args, one)), _results(_cli(args, many))
        assert a == b, cmd
    if compare:
        args = ["compare", path, path, "--json", "--bandwidth", "25"]
        a, b = _results(_cli(args, one)), _results(_cli(args, many))
        assert a == b
        assert a["traces"][0]["ati"] is not None and a["traces"][0]["swap"] is not None


@pytest.fixture(scope="module")
def demo_trace(tmp_path_factory):
    d = tmp_path_factory.mktemp("demo")
    path = str(d / "demo.pit")
    r = subprocess.run([sys.executable, "-m", "pyinterpose", "run", "-q", "--simulated-gpu", "-o", path, "--",
                        sys.executable, "-m", "pyinterpose.examples.simtrain", "--framework", "torch",
                        "--steps", "60"], capture_output=True, text=True, timeout=600, cwd=ROOT,
                       env=dict(os.environ, PYTHONPATH=ROOT))
    assert r.returncode == 0, r.stderr[-2000:]
    return path


# ---- the pieces against the intervals' definition -----------------------------------------

def _concat(pieces):
    import pandas as pd
    return pd.concat(list(pieces), ignore_index=True)


@pytest.mark.parametrize("rows", [1, 5, 64])
def test_pieces_are_the_reference_intervals(rows, monkeypatch):
    """The pieces, concatenated, are the intervals computed from their definition (reference), for every
    process and for all of them, with each piece cut between blocks (never inside one block id)."""
    from pyinterpose.analysis import intervals

    ref = _reference()
    monkeypatch.setenv("PYINTERPOSE_CHUNK_ROWS", str(rows))
    tr, _ = ref.training_trace(steps=12, layers=4, warmup=1, noise=0.2, seed=2)
    b = tr.blocks.copy()
    b.loc[b.index[5:9], "block_id"] = int(b["block_id"].iloc[4])          # a run of one id
    traces = [tr, ref.with_host_blocks(tr, 5), ref.with_repeated_touches(tr), ref.random_blocks_trace(3, nb=500),
              ref._rebuild(tr, b), ref.with_device_clock(tr, seed=3, untimed=0.1)]
    for t in traces:
        for pid in [None] + list(t.pids):
            parts = list(intervals.pieces(t, pid))
            want = ref.ref_intervals(t, pid)
            if len(want) > 4 * rows:
                assert len(parts) > 2
            got = _concat(parts) if parts else None
            assert got is not None and len(got) == len(want)
            assert list(got.columns) == list(want.columns)
            for c in want.columns:
                g = got[c].astype(str).to_numpy() if c in ("kind", "block_kind", "api") else got[c].to_numpy()
                assert (g == want[c].to_numpy()).all(), c
            ids = [p["block_id"].to_numpy() for p in parts if len(p)]
            assert all(x[-1] < y[0] for x, y in zip(ids[:-1], ids[1:]))      # one id never in two pieces


@pytest.mark.parametrize("rows", [1, 7, 100])
def test_analyze_in_pieces_same_as_reference(rows, monkeypatch, tmp_path):
    """access.analyze with the intervals in many pieces = the reference analysis, bit for bit, on the
    synthetic traces that take each path."""
    ref = _reference()
    nocache = str(tmp_path / "none.json")
    monkeypatch.setenv("PYINTERPOSE_CHUNK_ROWS", str(rows))
    tr, _ = ref.training_trace(steps=20, layers=4, warmup=1, noise=0.1, seed=5)
    ref.check_variants(tr, nocache)
    b = tr.blocks.sample(frac=1.0, random_state=1)                     # not in block_id order
    ref.check(ref._rebuild(tr, b), bandwidth=12.0, cache_path=nocache)
    ref.check(ref.random_blocks_trace(4, nb=900, host_frac=0.3), bandwidth=None, cache_path=nocache,
              ati_quantile=0.0, size_quantile=1.0, top=3)


def test_swap_problem_in_pieces_same_as_one(monkeypatch):
    """swap's candidates, made from the pieces, are those of one piece, row for row."""
    from pyinterpose.analysis import swap

    ref = _reference()
    tr, _ = ref.training_trace(steps=20, layers=4, warmup=1, noise=0.1, seed=5)
    tr = ref.with_device_clock(ref.with_host_blocks(tr, 7), seed=1, untimed=0.05)
    bw = swap._bandwidth_arg(tr, 8.0, None)
    monkeypatch.setenv("PYINTERPOSE_CHUNK_ROWS", str(1 << 40))
    one = swap.prepare(tr, bw, min_size=0)
    monkeypatch.setenv("PYINTERPOSE_CHUNK_ROWS", "3")
    many = swap.prepare(tr, bw, min_size=0)
    assert len(one.candidates) > 50
    import pandas as pd
    pd.testing.assert_frame_equal(one.candidates, many.candidates, check_exact=True)
    assert np.array_equal(one.lo_iv, many.lo_iv) and np.array_equal(one.hi_iv, many.hi_iv)
    assert (one.peak_before, one.floor) == (many.peak_before, many.floor)


# ---- the commands: many pieces = one --------------------------------------------------------

def test_demo_trace_many_pieces_equal_one(demo_trace):
    _pieces_equal_one(demo_trace, 7)


@pytest.mark.slow
@pytest.mark.parametrize("name", SAMPLES)
def test_samples_many_pieces_equal_one(name, tmp_path):
    path = str(tmp_path / name)
    shutil.copy(os.path.join(ROOT, "samples", name), path)
    _pieces_equal_one(path, 5)


@pytest.mark.slow
def test_million_event_trace_many_pieces_equal_one(tmp_path, capture):
    path, cp = capture([sys.executable, "-m", "pyinterpose.examples.simtrain", "--framework", "torch",
                        "--steps", "4600"], timeout=600)
    assert cp.returncode == 0, cp.stderr[-2000:]
    events = json.loads(_cli(["summary", path, "--json"], {}))["counts"]["events"]
    assert events > 1_000_000
    _pieces_equal_one(path, 5000, commands=COMMANDS[:2])
