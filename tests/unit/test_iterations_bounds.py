"""Iteration detection on the shapes real traces showed (issue 11): the last step must not run to
the end of the trace, and a short training loop after a long autotuning prelude must be found."""
from __future__ import annotations

import numpy as np

from pyinterpose.analysis.iterations import find_iterations
from test_iterations import _Gen

MiB = 1 << 20


def loop_with_late_teardown(steps=12, idle_ns=2_000_000_000):
    """PyTorch shape: each step allocates a batch, activations and gradients; the gradients and the
    loss of a step live until the next step replaces them (cross-iteration).  After the last step
    the program idles, then frees what is left at exit: in the last step, what the autograd graph of
    the final loss still holds (its activations) goes only then."""
    g = _Gen(3)
    w = g.alloc(32 * MiB, "weights")
    keep: list[int] = []
    for step in range(steps):
        g.t += 1_000_000
        for k in keep:                       # last step's grads and loss go now
            g.free(k)
        x = g.alloc(4 * MiB, "input")
        a = g.alloc(8 * MiB, "act")
        g.launch(w, x, a)
        b = g.alloc(2 * MiB, "act")
        g.launch(a, b)
        gr = g.alloc(32 * MiB, "grad")
        loss = g.alloc(4, "loss")
        g.launch(w, a, b, gr, loss)
        if step == steps - 1:
            keep = [gr, loss, b, a, x]
            break
        g.free(b)
        g.free(a)
        g.free(x)
        keep = [gr, loss]
    g.t += idle_ns
    for k in keep:
        g.free(k)
    return g.trace(), None


def test_last_step_is_not_stretched_to_the_end_of_the_trace():
    tr, _ = loop_with_late_teardown()
    it = find_iterations(tr)
    assert it.source == "auto" and it.count >= 10
    d = it.durations_ns
    typical = float(np.median(d[:-1]))
    assert d[-1] < 2 * typical, (d[-1], typical)       # old code: + 2 s of idle time
    assert it.to_dict()["duration_ns"]["cv"] < 0.5


def test_short_loop_after_a_long_autotuning_prelude():
    """JAX shape: hundreds of autotuning allocations in short repeating patterns (period 4), then 20
    training steps of 3 buffers.  The 20 steps are the loop."""
    g = _Gen(5)
    rng = g.rng
    for group in range(40):                       # autotuning: 4 candidate buffers tried, 8 times each
        sizes = [int(s) * MiB for s in rng.integers(8, 100, 4)]
        for _ in range(8):
            bs = [g.alloc(s, "tune") for s in sizes]
            g.launch(*bs)
            for b in bs:
                g.free(b)
    params = g.alloc(64 * MiB, "params")
    starts = []
    for step in range(20):
        g.t += 3_000_000
        a = g.alloc(2 * MiB, "x")
        starts.append(g.blocks[a]["seq_alloc"])
        b = g.alloc(2 * MiB, "y")
        new = g.alloc(300 * MiB, "params")
        g.launch(a, b, params, new)
        g.free(params)
        params = new
        g.free(a)
        g.free(b)
    tr = g.trace()
    it = find_iterations(tr)
    assert it.period_allocs == 3, it.to_dict(per_iteration=False)
    assert it.count >= 17
    assert set(it.boundaries[:-1].tolist()) <= set(starts)
