"""--max-extra (find_iterations' max_extra): a step holding exactly max_extra extra allocations is
still a step of the loop; one more extra breaks the run.  Ground truth: the generator below knows
how many steps it ran and where it put the extras."""
from __future__ import annotations

import numpy as np

from pyinterpose.analysis.iterations import find_iterations
from test_iterations import _Gen

MiB = 1 << 20


def loop_with_noisy_step(steps: int, noisy: int, extras: int):
    """``steps`` identical steps of 8 allocations; step ``noisy`` has ``extras`` odd-sized
    allocations in its middle (freed within the step)."""
    g = _Gen(7)
    g.alloc(64 * MiB, "weights")
    for step in range(steps):
        ids = []
        for k in range(8):
            ids.append(g.alloc((k + 1) * MiB, "act"))
            if step == noisy and k == 3:
                for e in range(extras):
                    g.free(g.alloc((100 + e) * MiB + 4096, "noise"))
        for b in reversed(ids):
            g.free(b)
    return g.trace()


def test_a_step_with_exactly_max_extra_extras_is_matched():
    tr = loop_with_noisy_step(steps=20, noisy=10, extras=2)
    it = find_iterations(tr, max_extra=2)
    assert it.source == "auto" and it.period_allocs == 8
    assert it.count == 20
    assert it.extras.tolist() == [0] * 10 + [2] + [0] * 9
    assert it.exact.tolist() == [True] * 10 + [False] + [True] * 9


def test_one_extra_more_than_max_extra_breaks_the_run():
    tr = loop_with_noisy_step(steps=20, noisy=10, extras=3)
    it = find_iterations(tr, max_extra=2)
    assert it.source == "auto" and it.period_allocs == 8
    assert it.count == 10                  # the longest run: the ten steps before the noisy one
    assert (it.extras == 0).all()
    assert find_iterations(tr, max_extra=3).count == 20


def test_cli_max_extra(monkeypatch, tmp_path, capsys):
    """`pyinterpose iterations --max-extra N` hands N to the matcher."""
    import json

    from pyinterpose.cli import main

    tr = loop_with_noisy_step(steps=20, noisy=10, extras=2)
    monkeypatch.setattr("pyinterpose.cli._args.load_trace", lambda path, quiet=False: tr)
    monkeypatch.setenv("PYINTERPOSE_CACHE_DIR", str(tmp_path))
    for n, count in ((2, 20), (1, 10)):
        assert main(["iterations", "loop.pit", "--max-extra", str(n), "--json"]) == 0
        d = json.loads(capsys.readouterr().out)
        assert d["count"] == count, n
