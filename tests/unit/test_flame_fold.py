"""analysis.flame.fold: the blocks live at a moment summed per call stack (and per process when the trace holds
several), checked against sums written here from the blocks' own columns."""
from __future__ import annotations

import numpy as np

from pyinterpose.analysis.flame import fold
from pyinterpose.report.synthetic import training_trace


def _trace(two_processes: bool):
    tr = training_trace(iterations=30)
    if two_processes:
        pid = tr.blocks["pid"].to_numpy().copy()
        pid[1::2] = pid[0] + 7                     # every other block in a second process
        tr.blocks["pid"] = pid
    return tr


def test_fold_sums_each_process_and_owner():
    for two in (False, True):
        tr = _trace(two)
        b = tr.blocks
        n = len(b)
        rng = np.random.default_rng(4)
        per_block = np.where(rng.random(n) < 0.3, rng.integers(1, 1 << 20, n), 0).astype(np.int64)
        out = fold(tr, per_block)
        assert int(out["bytes"].sum()) == int(per_block.sum())
        assert int(out["blocks"].sum()) == int((per_block > 0).sum())
        heads = {f[0] for f in out["frames"]}
        pids = b["pid"].to_numpy()
        if two:
            # one head per process, and each process' bytes are its blocks'
            assert heads == {f"process {p}" for p in np.unique(pids[per_block > 0])}
            for p in np.unique(pids):
                got = int(out["bytes"][[f[0] == f"process {p}" for f in out["frames"]]].sum())
                assert got == int(per_block[pids == p].sum())
        else:
            assert not any(h.startswith("process ") for h in heads)
