"""engine_model.engine_items: the swap engine's moves as native/shim/swap.c makes them (issue 31).

Ground truth: the moves worked out by hand from the engine's rules (docs/swap-run.md, "At run time"), on
small made-up runs of launches keyed (kernel name, ordinal within the iteration)."""
from __future__ import annotations

import numpy as np

from pyinterpose.analysis.swap.engine_model import engine_items
from pyinterpose.analysis.swap.planned import _engines


def _swap(size=100, out=("A", 0), back=("B", 0), before=("C", 0), key=("iteration", 100, 0, 0)):
    return {"request": dict(zip(("phase", "size", "site", "ordinal"), key)), "size": size,
            "out_after": {"kernel": out[0], "ordinal": out[1]}, "in_after": {"kernel": back[0], "ordinal": back[1]},
            "in_before": {"kernel": before[0], "ordinal": before[1]}}


def _run(names, named, swaps, instances, life):
    """names: one kernel name per op (None: a copy), seqs 10, 20, ...; the ordinals count per name and
    restart at a name "|" (an iteration boundary, not an op)."""
    op_key, seqs, count = [], [], {}
    for n in names:
        if n == "|":
            count = {}
            continue
        seqs.append(10 * (len(seqs) + 1))
        if n is None:
            op_key.append(None)
        else:
            op_key.append((n, count.get(n, 0)))
            count[n] = count.get(n, 0) + 1
    return engine_items(swaps, instances, life, op_key, np.asarray(seqs, np.int64),
                        {10 * (q + 1): bs for q, bs in named.items()})


def test_the_planned_iteration_waits_at_in_before():
    # ops: 0 A, 1 X, 2 B, 3 X, 4 C (names block 7)
    items, late, unf, src = _run(["A", "X", "B", "X", "C"], {0: [7], 4: [7]}, [_swap()], [[7]], {7: (5, None)})
    assert items == [(7, 100, 0, 2, 4)] and (late, unf) == (0, 0) and src == [0]


def test_another_iteration_waits_where_it_names_the_block_not_at_in_before():
    # the same keys, but this iteration names the block at op 4 (X), after the swap-in, and never at C
    items, late, unf, _ = _run(["A", "X", "B", "X", "X", "C"], {0: [7], 4: [7]}, [_swap()], [[7]], {7: (5, None)})
    assert items == [(7, 100, 0, 2, 4)] and (late, unf) == (0, 0)
    # ... and a block nobody names again before its free: nobody waits
    items, _, _, _ = _run(["A", "X", "B", "X", "C"], {0: [7]}, [_swap()], [[7]], {7: (5, 45)})
    assert items == [(7, 100, 0, 2, -1)]


def test_a_launch_naming_the_block_before_its_swap_in_brings_it_back_with_it():
    # op 1 (X) names it while away: unforeseen, sent with op 1; B then finds it resident (nothing sent)
    items, late, unf, _ = _run(["A", "X", "B", "C"], {0: [7], 1: [7], 3: [7]}, [_swap()], [[7]], {7: (5, None)})
    assert items == [(7, 100, 0, 1, 1)] and (late, unf) == (0, 1)
    # at the planned in_before with the swap-in not yet sent (B after C here): late, not unforeseen
    items, late, unf, _ = _run(["A", "X", "C", "B"], {0: [7], 2: [7]}, [_swap()], [[7]], {7: (5, None)})
    assert items == [(7, 100, 0, 2, 2)] and (late, unf) == (1, 0)


def test_in_after_before_out_after_sends_nothing_and_the_next_access_waits():
    # this iteration makes B before A: the swap-in finds the block resident; after A it is away until
    # the op that names it (op 3, unforeseen: not C)
    items, late, unf, _ = _run(["B", "A", "X", "X", "C"], {3: [7]}, [_swap()], [[7]], {7: (5, None)})
    assert items == [(7, 100, 1, 3, 3)] and (late, unf) == (0, 1)


def test_a_block_freed_while_away_never_comes_back():
    items, _, _, _ = _run(["A", "X", "B", "C"], {0: [7]}, [_swap()], [[7]], {7: (5, 15)})
    assert items == [(7, 100, 0, -1, -1)]


def test_a_block_whose_buffer_is_still_held_is_not_moved():
    # iteration 0's block 7 lives into iteration 1, where block 8 (the same request) is made: block 8 goes
    # to the program's allocator; block 7 keeps being moved by iteration 1's keys
    names = ["A", "B", "C", "|", "A", "B", "C"]
    named = {0: [7], 2: [7], 3: [8], 5: [7, 8]}
    life = {7: (5, 65), 8: (35, None)}       # ops at seqs 10 .. 60
    items, _, _, _ = _run(names, named, [_swap()], [[7, 8]], life)
    assert items == [(7, 100, 0, 1, 2), (7, 100, 3, 4, 5)]


def test_two_swaps_of_one_request_share_its_buffer():
    s1 = _swap(out=("A", 0), back=("B", 0), before=("C", 0))
    s2 = _swap(out=("C", 0), back=("B", 1), before=("D", 0))
    items, _, _, src = _run(["A", "B", "C", "B", "D"], {0: [7], 2: [7], 4: [7]}, [s1, s2], [[7], [7]],
                            {7: (5, None)})
    assert items == [(7, 100, 0, 1, 2), (7, 100, 2, 3, 4)] and src == [0, 1]


def test_a_late_swap_in_is_sent_from_the_hosts_call_not_the_devices_start():
    # one op timeline: op 0 ends at 100 (the swap-out, 10 ns, ends at 110); op 1 is called at 50 but
    # starts at 100 (the device is behind the host); op 2 is called at 60, starts at 300 and names the
    # block (late: in op == waiting op).  Sent at its call (60), the swap-in starts when the swap-out has
    # ended (110) and lands at 130: before op 2 starts, no wait.  Sent at op 2's start it would land at 320.
    items = [(7, 20, 0, 2, 2)]
    start, dur = np.array([0.0, 100.0, 300.0]), np.array([100.0, 200.0, 10.0])
    t = lambda n: float(n) / 2           # noqa: E731
    t_out = lambda n: 10.0               # noqa: E731
    _, late, stall = _engines(items, start, dur, t_out, t, calls=np.array([0.0, 50.0, 60.0]))
    assert (late, stall) == (0, 0.0)
    _, late, stall = _engines(items, start, dur, t_out, t)
    assert (late, stall) == (1, 10.0)
