"""An independent replay of a swap schedule on the compute streams (the CPU clock's one stream, or
the device's streams), written from the model's description in issue 21 and never importing
the code it checks.  It finds the delays by fixed-point iteration (the least solution of "an op
starts when the op before it on the stream has ended, and after every transfer it waits for"),
not by the production code's single ordered sweep.  A transfer is issued at its planned time
plus how late the timeline runs then (its anchor op's delay less the idle time since that op's
recorded end).

ops: list of (release time R, duration, access-end offset[, stream]), in the program's (seq) order;
the stream defaults to 0.  On each stream an op follows the one before it in that order; ops are
released in (R, position) order, whatever their streams.
swaps: dicts with the planned times (out_start, out_end, free_t, in_start, in_end), size, the
previous-access op index ``p`` (None: the last op released by the swap-out's planned start) and
next-access op index ``q``.
events: (time, delta) of the blocks' allocations (+) and frees (-).
"""
from __future__ import annotations

TOL = 1e-3


def replay(ops, swaps, events):
    n = len(ops)
    R = [o[0] for o in ops]
    stream = [o[3] if len(o) > 3 else 0 for o in ops]
    before = []                # the op before each on its stream (-1: none)
    last_on = {}
    for i in range(n):
        before.append(last_on.get(stream[i], -1))
        last_on[stream[i]] = i

    def last_released(t):      # the op released last by t, in (R, position) order
        k = -1
        for i in range(n):
            if R[i] <= t and (k < 0 or (R[i], i) > (R[k], k)):
                k = i
        return k

    def first_released_at_or_after(t):
        k = -1
        for i in range(n):
            if R[i] >= t and (k < 0 or (R[i], i) < (R[k], k)):
                k = i
        return k

    def shift(k, t):           # how late the timeline runs at t, seen from op k released by t
        if k < 0:
            return 0.0
        return max(0.0, D[k] - max(0.0, t - (R[k] + ops[k][1])))

    D = [0.0] * n
    for _ in range(10 * n + 10):
        # transfers, each engine in planned order
        times = {}
        free = -float("inf")
        for k in sorted(range(len(swaps)), key=lambda k: swaps[k]["out_start"]):
            sw = swaps[k]
            p = sw["p"] if sw["p"] is not None else last_released(sw["out_start"])
            s = max(sw["out_start"] + shift(p, sw["out_start"]), free)
            e = s + (sw["out_end"] - sw["out_start"])
            times[k] = [s, e, None, None]
            free = e
        free = -float("inf")
        for k in sorted(range(len(swaps)), key=lambda k: swaps[k]["in_start"]):
            sw = swaps[k]
            a = last_released(sw["in_start"])
            s = max(sw["in_start"] + shift(a, sw["in_start"]), free, times[k][1])
            e = s + (sw["in_end"] - sw["in_start"])
            times[k][2:] = [s, e]
            free = e
        # ops: the op before on their stream, then the waits
        new = [0.0] * n
        for i in range(n):
            d = 0.0
            j = before[i]
            if j >= 0:
                gap = max(0.0, R[i] - (R[j] + ops[j][1]))
                d = max(0.0, new[j] - gap)      # j comes before i: this sweep's
            for k, sw in enumerate(swaps):
                if sw["q"] == i:
                    d = max(d, times[k][3] - R[i])
                if sw["out_end"] - sw["free_t"] > TOL and first_released_at_or_after(sw["free_t"]) == i:
                    d = max(d, times[k][1] - R[i])
            new[i] = d if d > TOL else 0.0
        if all(abs(a - b) <= 1e-6 for a, b in zip(new, D)):
            break
        D = new
    end_before = max(R[i] + ops[i][1] for i in range(n))
    end_after = max(R[i] + ops[i][1] + D[i] for i in range(n))
    # peak: allocations move with the first op released at or after them, frees with the last
    # op released by them, in their order; swapped blocks leave at their replayed swap-out end and come back at
    # their replayed swap-in start
    ev = []
    latest = -float("inf")
    for t, dlt in sorted(events):      # in time order, frees first: the program's order
        if dlt > 0:
            i = first_released_at_or_after(t)
        else:
            i = last_released(t)
        latest = max(latest, t + (D[i] if i >= 0 else 0.0))     # none moves before the one before it
        ev.append((latest, dlt))
    for k, sw in enumerate(swaps):
        ev += [(times[k][1], -sw["size"]), (times[k][2], sw["size"])]
    live = peak = 0
    for t, dlt in sorted(ev):          # frees first at a tie
        live += dlt
        peak = max(peak, live)
    return {"delays": D, "slowdown": max(0.0, end_after - end_before), "peak": peak, "transfers": times}
