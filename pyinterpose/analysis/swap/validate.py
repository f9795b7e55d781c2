"""The independent check every swap schedule passes before it is replayed or reported."""
from __future__ import annotations

import numpy as np
import pandas as pd

from ..bandwidth import Bandwidth


def validate_schedule(sched: pd.DataFrame, mode: str, bandwidth: Bandwidth | None = None,
                      tol_ns: float = 1.0) -> list[str]:
    """Problems with a schedule (empty list = valid).  Checks: transfers lie inside the
    block's interval (out after the previous access and ending by the next one — a swap-out
    still running at the next access cannot have freed anything the program could use —, in
    after out and starting before the next access), a swap-out the program waits for (budget
    mode: memory freed before the swap-out ended) issued before the moment it waits, the away window
    [free_t, realloc_t) is inside the transfers' span, transfer durations match the
    link model, a block used while away (swap-in late) or freed before its swap-out
    ended has that stall counted, transfers in one direction never overlap, a block
    is never away twice at once; in no-overhead also: no stall, swap-in done by the
    next access, memory freed when the swap-out ends and taken when the swap-in starts."""
    p: list[str] = []
    if len(sched) == 0:
        return p
    s = {k: sched[k].to_numpy() for k in ("block_id", "prev_access", "out_start", "out_end", "in_start", "in_end",
                                          "free_t", "realloc_t", "next_access", "stall", "size")}
    bid = s["block_id"]

    def bad(mask, msg):
        for i in np.flatnonzero(np.asarray(mask)):
            p.append(f"swap {i} (block {int(bid[i])}): {msg}")

    bad(s["out_start"] < s["prev_access"] - tol_ns, "swap-out starts before the previous access")
    bad(s["out_end"] < s["out_start"], "swap-out ends before it starts")
    bad(s["out_end"] > s["next_access"] + tol_ns, "swap-out ends after the next access")
    bad(s["in_start"] >= s["next_access"], "swap-in starts at or after the next access (nothing there to issue it)")
    gated = s["free_t"] < s["out_end"] - tol_ns      # the program pauses at free_t until the swap-out ends
    bad(gated & (s["out_start"] >= s["free_t"]), "the program waits at the early free for a swap-out issued after it")
    bad(s["in_start"] < s["out_end"] - tol_ns, "swap-in starts before the swap-out ended")
    bad(s["in_end"] < s["in_start"], "swap-in ends before it starts")
    bad(s["free_t"] < s["prev_access"] - tol_ns, "memory freed before the previous access")
    bad(s["free_t"] > s["out_end"] + tol_ns, "memory freed after the swap-out ended")
    bad(s["realloc_t"] <= s["free_t"], "empty or negative away window")
    bad(s["realloc_t"] > s["in_start"] + tol_ns, "memory retaken after the swap-in started")
    bad(s["realloc_t"] > s["next_access"] + tol_ns, "block still away at its next access")
    late_in = np.maximum(0.0, s["in_end"] - s["next_access"])
    early_free = np.maximum(0.0, s["out_end"] - s["free_t"])
    bad(late_in + early_free > s["stall"] + tol_ns, "block used or freed while in transfer, stall not counted")
    bad(s["stall"] < -tol_ns, "negative stall")
    if bandwidth is not None:
        size = s["size"].astype(np.float64)
        want_out = bandwidth.d2h_seconds(size) * 1e9
        want_in = bandwidth.h2d_seconds(size) * 1e9
        bad(np.abs((s["out_end"] - s["out_start"]) - want_out) > tol_ns + 1e-9 * want_out,
            "swap-out duration differs from latency + size / bandwidth")
        bad(np.abs((s["in_end"] - s["in_start"]) - want_in) > tol_ns + 1e-9 * want_in,
            "swap-in duration differs from latency + size / bandwidth")
    for a, b, name in (("out_start", "out_end", "device-to-host"), ("in_start", "in_end", "host-to-device")):
        o = np.lexsort((s[b], s[a]))            # by start, then end (stable)
        st, en = s[a][o], s[b][o]
        for k in np.flatnonzero(st[1:] < en[:-1] - tol_ns):
            p.append(f"{name} transfers overlap: blocks {int(bid[o[k]])} and {int(bid[o[k + 1]])}")
    o = np.lexsort((s["free_t"], bid))          # by block, then free time (stable)
    ob = bid[o]
    same = ob[1:] == ob[:-1]
    for k in np.flatnonzero(same & (s["free_t"][o][1:] < s["realloc_t"][o][:-1] - tol_ns)):
        p.append(f"block {int(ob[k])} is swapped out twice at once")
    if mode == "no-overhead":
        bad(s["stall"] > tol_ns, "stall in no-overhead mode")
        bad(s["in_end"] > s["next_access"] + tol_ns, "swap-in ends after the next access")
        bad(np.abs(s["free_t"] - s["out_end"]) > tol_ns, "no-overhead frees before the swap-out ended")
        bad(np.abs(s["realloc_t"] - s["in_start"]) > tol_ns, "no-overhead retakes memory early")
    return p
