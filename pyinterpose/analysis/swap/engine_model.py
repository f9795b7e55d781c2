"""What the swap engine (native/shim/swap.c) does with one swap in one iteration, as the run's prediction
(:func:`.planned.predict_run`) models it.

The engine does not know which launch will name a block: it sends the block out after the launch
``out_after``, sends it back after the launch ``in_after``, and makes the *first launch that names the
block* afterwards wait for it — whichever launch that is.  ``in_before`` (the launch the planned
iteration needed it at) only tells a late swap-in from an unforeseen access in the engine's counts.  In
an iteration whose accesses differ from the planned one's (a request key naming another tensor there),
the block's next access is not that launch: it may come before the swap-in is sent (the engine sends it
back at once and the launch waits: *unforeseen*), after it (an ordinary wait for the swap-in, at that
launch), or never before the block is freed (nobody waits); the launch keyed ``in_after`` may even come
before the one keyed ``out_after`` there (the swap-in finds the block resident and does nothing), and a
block of the request may find the request's managed buffer still held by the previous one (it is then
served by the program's allocator and never moved).  Until this module the prediction paired each
iteration's three launches and assumed the wait at ``in_before``: on the transformer trace it predicted
17 waits (4.9 ms) that never happen and missed 7 that do (0.66 ms).
"""
from __future__ import annotations

import numpy as np


OUT, BACK = 0, 1
_RESIDENT, _AWAY, _COMING = 1, 2, 3


def engine_items(swaps: list, instances: list, block_life: dict, op_key: list, oseq: np.ndarray,
                 named: dict) -> tuple[list, int, int, list]:
    """The swap engine's moves over the whole run, op by op, as native/shim/swap.c makes them.

    ``swaps``: the plan's swaps (``request``, ``out_after``, ``in_after``, ``in_before``); ``instances``:
    per swap, the trace's blocks of its request (one per iteration, or the one persistent block);
    ``block_life``: block -> (seq of its allocation, seq of its free or None); ``op_key``: per program op,
    (kernel name, ordinal within its iteration) for a launch, None for a copy or memset (the replay makes
    them kernels of its own: they name blocks but are no plan's key); ``named``: op seq -> the blocks the
    op names.

    The engine keeps one managed buffer per request: a block of the request is served from it when the
    buffer is free (else by the program's allocator, never moved).  After a launch keyed ``out_after``
    it sends the buffer's resident block out; after one keyed ``in_after`` it sends it back if away.
    The first op that names an away block sends it back at once (late when that op is the swap's
    ``in_before``, unforeseen otherwise) and waits; one that names a block on its way back waits.  A free
    ends the block's moves.

    Returns (items, late, unforeseen, sources): items are (block, size, out op, in op, waiting op), the
    in op -1 when the block never came back, the waiting op -1 when nothing waited; an unforeseen or
    late swap-in has in op == waiting op (sent with the op).  ``sources``: per item, the index of the
    swap whose ``out_after`` sent it out."""

    keys: dict = {}
    m_of_swap = []
    for s in swaps:
        q = s["request"]
        m_of_swap.append(keys.setdefault((q["phase"], int(q["size"]), int(q["site"]), int(q["ordinal"])), len(keys)))
    n_m = len(keys)
    size_of = [0] * n_m
    actions: dict = {}
    before: dict = {}
    for i, s in enumerate(swaps):
        m = m_of_swap[i]
        size_of[m] = int(s["size"])
        actions.setdefault((s["out_after"]["kernel"], int(s["out_after"]["ordinal"])), []).append((OUT, m, i))
        actions.setdefault((s["in_after"]["kernel"], int(s["in_after"]["ordinal"])), []).append((BACK, m, i))
        before.setdefault(m, set()).add((s["in_before"]["kernel"], int(s["in_before"]["ordinal"])))
    # allocations and frees of the requests' blocks, merged with the ops by seq
    ev = []
    seen = set()
    for i, blocks in enumerate(instances):
        m = m_of_swap[i]
        for b in blocks:
            if (m, b) in seen or b not in block_life:
                continue
            seen.add((m, b))
            sa, sf = block_life[b]
            ev.append((int(sa), 0, m, b))
            if sf is not None:
                ev.append((int(sf), 1, m, b))
    ev.sort()
    cur = [-1] * n_m            # the block the buffer holds (-1: free)
    state = [0] * n_m
    item_of = [-1] * n_m        # the open item of the buffer
    m_of_block: dict = {}
    items, sources = [], []
    late = unforeseen = 0
    e = 0
    for j in range(len(oseq)):
        s = int(oseq[j])
        while e < len(ev) and ev[e][0] < s:
            _, kind, m, b = ev[e]
            e += 1
            if kind == 0 and cur[m] < 0:          # served from the buffer
                cur[m], state[m], item_of[m] = b, _RESIDENT, -1
                m_of_block[b] = m
            elif kind == 1 and cur[m] == b:       # freed: its moves end
                cur[m], state[m], item_of[m] = -1, 0, -1
                del m_of_block[b]
        key = op_key[j]
        for b in named.get(s, ()):
            m = m_of_block.get(b)
            if m is None:
                continue
            it = item_of[m]
            if state[m] == _AWAY:
                if key is not None and key in before.get(m, ()):
                    late += 1
                else:
                    unforeseen += 1
                items[it][3] = items[it][4] = j
            elif state[m] == _COMING:
                items[it][4] = j
            if state[m] in (_AWAY, _COMING):
                state[m], item_of[m] = _RESIDENT, -1
        if key is None:
            continue
        acts = actions.get(key, ())
        for kind, m, i in acts:                   # out first: a block may leave and come back here
            if kind == OUT and cur[m] >= 0 and state[m] == _RESIDENT:
                items.append([cur[m], size_of[m], j, -1, -1])
                sources.append(i)
                state[m], item_of[m] = _AWAY, len(items) - 1
        for kind, m, i in acts:
            if kind == BACK and cur[m] >= 0 and state[m] == _AWAY:
                items[item_of[m]][3] = j
                state[m] = _COMING
    return [tuple(x) for x in items], late, unforeseen, sources
