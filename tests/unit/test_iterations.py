"""Iteration detection against synthetic training loops with known period and step count.

``training_trace`` is also imported by test_lifetimes.py / test_access_analyze.py.
"""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from pyinterpose.analysis.iterations import find_iterations, find_period
from pyinterpose.trace.model import Trace


class _Gen:
    def __init__(self, seed, pid=100):
        self.rng = np.random.default_rng(seed)
        self.seq = 0
        self.t = 0
        self.pid = pid
        self.blocks: list[dict] = []
        self.accesses: list[tuple] = []
        self.live: dict[int, dict] = {}

    def tick(self):
        s = self.seq
        self.seq += 1
        self.t += int(self.rng.integers(1_000, 5_000))
        return s

    def alloc(self, size, tag):
        s = self.tick()
        b = {"block_id": len(self.blocks), "pid": self.pid, "size": int(size), "t_alloc": self.t,
             "seq_alloc": s, "t_free": -1, "seq_free": -1, "kind": "device", "api": "cudaMalloc",
             "freed": False, "tag": tag}
        self.blocks.append(b)
        self.live[b["block_id"]] = b
        return b["block_id"]

    def free(self, bid):
        s = self.tick()
        b = self.live.pop(bid)
        b["t_free"], b["seq_free"], b["freed"] = self.t, s, True

    def launch(self, *bids):
        s = self.tick()
        for b in bids:
            self.accesses.append((b, self.pid, s, self.t, 0))

    def trace(self):
        end_seq, end_t = self.seq + 1, self.t + 1
        for b in self.live.values():
            b["t_free"], b["seq_free"] = end_t, end_seq
        blocks = pd.DataFrame(self.blocks)
        acc = pd.DataFrame(self.accesses, columns=["block_id", "pid", "seq", "t", "kernel"])
        return Trace.from_tables(blocks=blocks, accesses=acc)


def training_trace(steps=30, layers=6, warmup=1, noise=0.0, seed=0, same_layers=False,
                   teardown=True, noise_at_start=False):
    """A PyTorch-like training loop.  Returns (trace, truth) where truth has
    period_allocs, count, starts (seq of the first allocation of each steady step),
    noisy (indices of steady steps with an extra alloc/free pair)."""
    g = _Gen(seed)
    rng = g.rng
    act = [4096 * 64] * layers if same_layers else [int(4096 * rng.integers(8, 200)) for _ in range(layers)]
    wsz = [int(512 * rng.integers(1, 400)) for _ in range(layers)]
    work = [1 << 20] * layers if same_layers else [int(1024 * rng.integers(1, 2000)) for _ in range(layers)]
    weights = [g.alloc(w, "weight") for w in wsz]
    opt: list[int] = []
    starts, noisy, allocs_per_step = [], [], []
    for step in range(steps):
        g.t += 2_000_000                                      # data loading
        n0 = len(g.blocks)
        steady = step >= warmup
        noise_layer = int(rng.integers(0, layers)) if (steady and rng.random() < noise) else -1
        if steady and noise_layer >= 0 and noise_at_start:
            e = g.alloc(int(rng.integers(1, 1 << 16)) * 8, "noise")
            g.launch(e)
            g.free(e)
            noise_layer = -2
        x = g.alloc(1 << 22, "input")
        if steady:
            starts.append(g.blocks[x]["seq_alloc"])
        g.launch(x)
        acts, prev = [], x
        for li in range(layers):
            a = g.alloc(act[li], "activation")
            if not steady:                                    # autotuning: try workspaces
                for k in range(3):
                    tw = g.alloc(work[li] * (k + 2), "autotune")
                    g.launch(weights[li], prev, tw)
                    g.free(tw)
            ws = g.alloc(work[li], "workspace")
            g.launch(weights[li], prev, a, ws)
            g.free(ws)
            if li == noise_layer:
                e = g.alloc(int(rng.integers(1, 1 << 16)) * 8, "noise")
                g.launch(e)
                g.free(e)
            acts.append(a)
            prev = a
        loss = g.alloc(4, "loss")
        g.launch(prev, loss)
        grad_out = g.alloc(act[-1], "grad")
        g.launch(loss, grad_out)
        grads = []
        for li in reversed(range(layers)):
            gw = g.alloc(wsz[li], "wgrad")
            gin = g.alloc(act[li - 1] if li else 1 << 22, "grad")
            g.launch(weights[li], acts[li], grad_out, gw, gin)
            g.free(acts[li])
            g.free(grad_out)
            grad_out = gin
            grads.append(gw)
        g.free(grad_out)
        if step == 0:
            opt = [g.alloc(w, "optstate") for w in wsz for _ in range(2)]
        for li, gw in enumerate(reversed(grads)):
            g.launch(weights[li], gw, opt[2 * li], opt[2 * li + 1])
            g.free(gw)
        g.free(loss)
        g.free(x)
        if steady:
            allocs_per_step.append(len(g.blocks) - n0)
            if noise_layer != -1:
                noisy.append(len(starts) - 1)
    if teardown:
        for b in weights + opt:
            g.free(b)
    tr = g.trace()
    period = int(np.median(allocs_per_step)) if allocs_per_step else 0
    return tr, {"period_allocs": period, "count": steps - warmup, "starts": np.array(starts),
                "noisy": noisy, "tags": [b["tag"] for b in g.blocks]}


def random_trace(n=3000, seed=1):
    """No loop: random sizes, random lifetimes."""
    g = _Gen(seed)
    rng = g.rng
    live = []
    for _ in range(n):
        if live and rng.random() < 0.5:
            g.free(live.pop(int(rng.integers(0, len(live)))))
        else:
            live.append(g.alloc(int(rng.integers(1, 1 << 20)), "random"))
        if live and rng.random() < 0.3:
            g.launch(live[int(rng.integers(0, len(live)))])
    return g.trace()


# ---------------------------------------------------------------------------------------

def test_clean_loop_period_count_boundaries():
    tr, truth = training_trace(steps=25, layers=5, warmup=1, seed=3)
    it = find_iterations(tr)
    assert it.source == "auto"
    assert it.period_allocs == truth["period_allocs"] == 1 + 2 * 5 + 2 + 2 * 5
    assert it.count == truth["count"] == 24
    assert it.boundaries[:-1].tolist() == truth["starts"].tolist()
    assert it.first_steady_seq == truth["starts"][0]
    assert it.stable_fraction == 1.0
    assert len(it.boundaries) == it.count + 1 and np.all(np.diff(it.boundaries) > 0)
    assert np.all(it.durations_ns > 0)
    # the last step ends at its own last free, before the teardown frees of the weights
    weights_free = tr.blocks.loc[tr.blocks["size"].isin(tr.blocks["size"].iloc[:5]) &
                                 (tr.blocks["seq_alloc"] < 5), "seq_free"].min()
    assert it.boundaries[-1] <= weights_free
    lo, hi = it.steady_window()
    assert lo in truth["starts"] and hi > lo


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_noisy_loop(seed):
    tr, truth = training_trace(steps=60, layers=6, warmup=2, noise=0.08, seed=seed)
    assert truth["noisy"], "the fixture must contain noise"
    it = find_iterations(tr)
    assert it.source == "auto"
    assert it.period_allocs == truth["period_allocs"]
    assert it.count == truth["count"]
    assert it.boundaries[:-1].tolist() == truth["starts"].tolist()
    assert not it.exact[truth["noisy"]].any()
    assert it.stable_fraction == pytest.approx(1 - len(truth["noisy"]) / truth["count"])
    assert it.extras[truth["noisy"]].tolist() == [1] * len(truth["noisy"])


def test_noise_between_steps_belongs_to_previous_step():
    tr, truth = training_trace(steps=40, layers=4, warmup=1, noise=0.1, seed=5, noise_at_start=True)
    assert truth["noisy"]
    it = find_iterations(tr)
    assert it.count == truth["count"]
    assert it.boundaries[:-1].tolist() == truth["starts"].tolist()
    # the extra pair sits before the noisy step's first allocation: it ends the previous step
    prev = [k - 1 for k in truth["noisy"] if k > 0]
    assert (it.extras[prev] == 1).all()


def test_identical_layers_do_not_give_a_sub_period():
    tr, truth = training_trace(steps=20, layers=8, warmup=1, seed=4, same_layers=True)
    it = find_iterations(tr)
    assert it.period_allocs == truth["period_allocs"]
    assert it.count == truth["count"]


def test_no_loop_is_reported_as_none():
    it = find_iterations(random_trace())
    assert it.source == "none" and it.count == 0 and it.period_allocs == 0
    assert it.reason
    assert len(it.boundaries) == 0
    lo, hi = it.steady_window()
    assert hi > lo                       # the whole process as the fallback window


def test_too_few_steps_is_none():
    tr, _ = training_trace(steps=3, layers=4, warmup=1, seed=2)
    it = find_iterations(tr)
    assert it.source == "none" and it.count == 0


def test_markers_override():
    tr, truth = training_trace(steps=12, layers=3, warmup=1, seed=6)
    starts = truth["starts"]
    markers = pd.DataFrame({"pid": 100, "seq": starts - 0, "t": np.arange(len(starts)) * 10,
                            "label": "step"})
    tr.markers = Trace.from_tables(markers=markers).markers
    it = find_iterations(tr)
    assert it.source == "markers"
    assert it.count == len(starts) - 1
    assert it.boundaries.tolist() == starts.tolist()
    assert it.period_allocs == truth["period_allocs"]
    assert find_iterations(tr, use_markers=False).source == "auto"


def _brute_period(tok, min_reps=3):
    """SINGA-like oracle: smallest p such that some suffix of >= min_reps periods is p-periodic
    and the suffix starts no later than one third into the sequence."""
    n = len(tok)
    for p in range(1, n // min_reps + 1):
        eq = tok[:-p] == tok[p:]
        # longest all-true suffix of eq
        bad = np.flatnonzero(~eq)
        start = bad[-1] + 1 if len(bad) else 0
        if n - start >= min_reps * p and start <= n // 3:
            return p
    return 0


@pytest.mark.parametrize("seed", range(12))
def test_find_period_matches_brute_force(seed):
    rng = np.random.default_rng(seed)
    P = int(rng.integers(1, 40))
    alphabet = int(rng.integers(2, 6))
    pattern = rng.integers(0, alphabet, P)
    reps = int(rng.integers(6, 20))
    prefix = rng.integers(1000, 10**9, int(rng.integers(0, P + 1)))   # distinct warm-up tokens
    tok = np.concatenate([prefix, np.tile(pattern, reps)]).astype(np.uint64)
    p, _ = find_period(tok, tolerance=0.0)
    assert p == _brute_period(tok)


def test_one_process_among_others_and_the_last_boundary_time():
    """A process's iterations are its own: another process's blocks (a host-side and a device-side
    one in the same tables) change nothing; the last boundary's time is that of the process's last
    allocation or free before the boundary (written out from the blocks, a loop)."""
    tr, truth = training_trace(steps=12, layers=4, warmup=1, seed=5)
    alone = find_iterations(tr, pid=100)
    other = training_trace(steps=7, layers=3, warmup=0, seed=9)[0].blocks.copy()
    other["pid"] = 200
    other["block_id"] += len(tr.blocks)
    host = tr.blocks.iloc[:3].copy()
    host["pid"], host["kind"] = 100, "host"
    host["block_id"] = np.arange(3) + len(tr.blocks) + len(other)
    both = Trace.from_tables(blocks=pd.concat([tr.blocks, other, host], ignore_index=True), accesses=tr.accesses)
    got = find_iterations(both, pid=100)
    assert got.count == alone.count == truth["count"]
    assert got.boundaries.tolist() == alone.boundaries.tolist()
    assert got.boundaries_t.tolist() == alone.boundaries_t.tolist()
    b = tr.blocks
    end = int(got.boundaries[-1]) - 1
    last = max([int(t) for s, t in zip(b["seq_alloc"], b["t_alloc"]) if s <= end] +
               [int(t) for f, s, t in zip(b["freed"], b["seq_free"], b["t_free"]) if f and s <= end])
    assert int(got.boundaries_t[-1]) == last
