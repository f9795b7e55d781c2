"""Generated DSA instances and synthetic training traces (tests and benchmarks).

* :func:`hard_instance` — cut a ``width x capacity`` rectangle (time x memory)
  recursively into buffers (optionally deleting some, ``holes``), then shuffle:
  LOAD == capacity and a packing at capacity exists (every buffer at the height it
  was cut from), but nothing in the rows says where, so greedy planners land well
  above LOAD — the kind of instance in MiniMalloc's "challenging" suite.
* :func:`training_trace` — a blocks-view Trace of a training-like loop: persistent
  weights, activations allocated in forward and freed in backward, gradients that
  live into the next step (cross-iteration), a workspace per layer.
"""
from __future__ import annotations

import numpy as np
import pandas as pd


def hard_instance(n: int = 200, capacity: int = 1 << 20, width: int = 1 << 20, grid: int = 1024,
                  seed: int = 0, holes: float = 0.0) -> tuple[pd.DataFrame, np.ndarray]:
    """(problem, offsets of the hidden packing), n buffers (fewer only if the grid
    runs out), coordinates on a ``grid`` x ``grid`` lattice scaled to width x capacity.

    ``holes`` = 0: a perfect tiling (every cross section exactly full: the hardest
    kind, a packing puzzle).  ``holes`` = h > 0: tile into n / (1 - h) pieces, then
    delete pieces at random, never one alive at a protected time column, until n
    are left; LOAD stays == capacity (at that column) while the rest has slack,
    as in MiniMalloc's challenging set (fill 0.58-0.98, full-capacity time 0-59 %)."""
    if not 0.0 <= holes < 1.0:
        raise ValueError("holes must be in [0, 1)")
    rng = np.random.default_rng(seed)
    target = int(round(n / (1.0 - holes)))
    pieces = [(0, grid, 0, grid)]  # (t0, t1, y0, y1) in grid units
    while len(pieces) < target:
        # split the piece with the largest area (ties: first)
        areas = [(t1 - t0) * (y1 - y0) for t0, t1, y0, y1 in pieces]
        k = int(np.argmax(areas))
        t0, t1, y0, y1 = pieces[k]
        can_t, can_y = t1 - t0 >= 2, y1 - y0 >= 2
        if not (can_t or can_y):
            break
        cut_time = can_t and (not can_y or rng.random() < 0.5)
        if cut_time:
            c = int(rng.integers(t0 + 1, t1))
            new = [(t0, c, y0, y1), (c, t1, y0, y1)]
        else:
            c = int(rng.integers(y0 + 1, y1))
            new = [(t0, t1, y0, c), (t0, t1, c, y1)]
        pieces[k:k + 1] = new
    if holes > 0 and len(pieces) > n:
        col = int(rng.integers(0, grid))                       # protected time column
        free = [i for i, p in enumerate(pieces) if not (p[0] <= col < p[1])]
        drop = set(rng.choice(free, size=min(len(free), len(pieces) - n), replace=False).tolist())
        pieces = [p for i, p in enumerate(pieces) if i not in drop]
    perm = rng.permutation(len(pieces))
    sx, sy = width // grid, capacity // grid
    rows = [pieces[i] for i in perm]
    df = pd.DataFrame({
        "id": [str(i) for i in range(len(rows))],
        "lower": np.array([r[0] for r in rows], np.int64) * sx,
        "upper": np.array([r[1] for r in rows], np.int64) * sx,
        "size": np.array([r[3] - r[2] for r in rows], np.int64) * sy,
    })
    return df, np.array([r[2] for r in rows], np.int64) * sy


def training_trace(iterations: int = 5, layers: int = 10, seed: int = 0, pid: int = 100,
                   stream: int = 7):
    """A synthetic blocks-view trace; returns (Trace, list of (seq_lo, seq_hi) per step)."""
    from ...trace.model import Trace

    rng = np.random.default_rng(seed)
    rows = []
    seq = [0]

    def tick():
        seq[0] += 1
        return seq[0]

    def alloc(size):
        rows.append({"size": int(size), "seq_alloc": tick(), "seq_free": -1})
        return len(rows) - 1

    def free(i):
        rows[i]["seq_free"] = tick()

    wsizes = rng.integers(1, 64, layers) * 65536
    asizes = rng.integers(1, 32, layers) * 32768 + 512 * rng.integers(0, 3, layers)
    for s in wsizes:
        alloc(s)  # weights: never freed
    grads_prev: list[int] = []
    bounds = []
    for _ in range(iterations):
        lo = seq[0] + 1
        acts = []
        for l in range(layers):
            acts.append(alloc(asizes[l]))
            ws = alloc(4096 * (l + 1))
            free(ws)
        for g in grads_prev:       # last step's gradients consumed by the optimizer
            free(g)
        grads = []
        for l in reversed(range(layers)):
            grads.append(alloc(wsizes[l]))
            free(acts[l])
        grads_prev = grads         # freed in the next step: cross-iteration blocks
        bounds.append((lo, seq[0] + 1))
    end = seq[0] + 1
    b = pd.DataFrame(rows)
    freed = b["seq_free"] >= 0
    b["freed"] = freed
    b.loc[~freed, "seq_free"] = end
    b["block_id"] = np.arange(len(b))
    b["pid"] = pid
    b["kind"] = "device"
    b["api"] = "cudaMalloc"
    b["stream"] = stream
    b["t_alloc"] = b["seq_alloc"] * 1000
    b["t_free"] = b["seq_free"] * 1000
    b["address"] = 0
    return Trace.from_tables(blocks=b), bounds
