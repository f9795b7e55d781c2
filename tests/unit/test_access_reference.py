"""access.analyze against an independent reference: small, slow implementations written here.

The reference below imports nothing it checks: the access intervals (touches per block, one per
event, between allocation and free), the swap cost, the step of each block (from the boundaries of
the iterations it is given), the stability, the live-bytes peak and the quantile summaries are all
computed here, over plain pandas/numpy, from the trace's tables.  Its inputs are the trace, the
link (``resolve_link``: the bandwidth setting, tested in test_bandwidth.py) and the iterations
(``find_iterations``, tested against the generators' truth in test_iterations.py; handed to both
sides) and the clock (``clock_of``: which clock, and where it places host events and kernels;
tested on its own: the reference builds the intervals from those times).  ``access.analyze`` must give the very same dict — same keys in the same order, same types,
same values, floats bit for bit — on synthetic traces that exercise each path (host blocks between
device ones, scattered host blocks, several processes, no bandwidth, no iterations, graph
launches, repeated allocation seqs, several touches of one block by one event, huge sizes,
unsorted block ids, empty processes, every quantile and top setting), and on the shipped
real-GPU traces.  ``test_intervals_table_same_as_reference`` compares the intervals table itself.
"""
from __future__ import annotations

import math
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from pyinterpose.analysis import access
from pyinterpose.analysis.access import resolve_link                   # input: the link setting
from pyinterpose.analysis.clock import clock_of                        # input: the clock decision
from pyinterpose.analysis.iterations import find_iterations            # input: the iterations
from pyinterpose.errors import PyinterposeError
from pyinterpose.trace.model import Trace
from test_iterations import training_trace

ROOT = Path(__file__).resolve().parents[2]
KINDS = ["alloc_to_first", "between", "last_to_free", "unaccessed"]
QS = (0.5, 0.9, 0.99)


# ---- the reference ------------------------------------------------------------------------

def ref_share(part, whole):
    return float(part) / float(whole) if whole else None


def ref_quantiles(x: np.ndarray) -> dict[str, float] | None:
    """p50, p90, p99 (numpy's linear quantiles), min, max, mean."""
    if len(x) == 0:
        return None
    q = np.quantile(x, QS)
    d = {"p50": float(q[0]), "p90": float(q[1]), "p99": float(q[2])}
    d.update(min=float(x.min()), max=float(x.max()), mean=float(x.mean()))
    return d


def ref_swap_cost_ns(size: np.ndarray, bw) -> np.ndarray:
    """Out and back in: each direction costs its latency plus size / its bandwidth."""
    s = size.astype(np.float64)
    out = bw.latency_s + s / bw.d2h_bytes_per_s
    back = bw.latency_s + s / bw.h2d_bytes_per_s
    return (out + back) * 1e9


def ref_blocks(trace: Trace, pid) -> pd.DataFrame:
    """The process's blocks (all with pid None) in block_id order (stable)."""
    b = trace.blocks
    if pid is not None:
        b = b[b["pid"] == pid]
    return b.sort_values("block_id", kind="stable").reset_index(drop=True)


def ref_times(trace: Trace, pid, b: pd.DataFrame):
    """The times the intervals are read on: (t_alloc, t_free per block of ``b``; start, end per
    access; device clock used).  CPU clock: the host times, an access lasting no time.  Device
    clock (the clock module places host events and kernels on it: an input here, tested on its
    own): allocation and free where the GPU reached them, an access from its kernel's device start
    to its device end."""
    a = trace.accesses
    t_alloc, t_free = b["t_alloc"].to_numpy(np.int64).copy(), b["t_free"].to_numpy(np.int64).copy()
    start, end = a["t"].to_numpy(np.int64).copy(), a["t"].to_numpy(np.int64).copy()
    pids = [pid] if pid is not None else sorted({int(x) for x in b["pid"].to_numpy()})
    device = False
    for p in pids:
        c = clock_of(trace, p)
        if not c.device:
            continue
        device = True
        mb = b["pid"].to_numpy() == p
        t_alloc[mb] = c.host_times(b["seq_alloc"].to_numpy(np.int64)[mb], t_alloc[mb])
        t_free[mb] = c.host_times(b["seq_free"].to_numpy(np.int64)[mb], t_free[mb])
        ma = a["pid"].to_numpy() == p
        start[ma], end[ma] = c.op_times(a["seq"].to_numpy(np.int64)[ma], a["t"].to_numpy(np.int64)[ma])
    return t_alloc, t_free, start, end, device


def ref_intervals(trace: Trace, pid) -> pd.DataFrame:
    """One row per interval between consecutive touches of a block: its allocation, each event
    that accessed it (several accesses by one event — one seq — are one touch, the first in the
    access table), its free.  An access counts when it names the block (a block id repeated in
    the table: its last row) and falls in [seq_alloc, seq_free].  No touch: one ``unaccessed``
    row.  An interval runs from where the touch before it ends to where the next one starts (on
    the device clock a kernel lasts from its device start to its device end; touches overlapping
    on concurrent streams give 0).  Rows ordered by (block_id, start_seq)."""
    b = ref_blocks(trace, pid)
    nb = len(b)
    row_of = {int(i): r for r, i in enumerate(b["block_id"].to_numpy(np.int64))}   # last row wins
    a = trace.accesses
    row = np.array([row_of.get(int(i), -1) for i in a["block_id"].to_numpy(np.int64)], np.int64)
    seq = a["seq"].to_numpy(np.int64)
    t_alloc, t_free, a_start, a_end, device = ref_times(trace, pid, b)
    sa, sf = b["seq_alloc"].to_numpy(np.int64), b["seq_free"].to_numpy(np.int64)
    ok = row >= 0
    ok[ok] = (seq[ok] >= sa[row[ok]]) & (seq[ok] <= sf[row[ok]])
    touches = pd.DataFrame({"row": row[ok], "seq": seq[ok], "arrive": a_start[ok], "leave": a_end[ok]})
    touches = touches.sort_values(["row", "seq"], kind="stable").drop_duplicates(["row", "seq"], keep="first")
    # points of each block in order: allocation (0), touches (1), free (2); an interval leaves one
    # point and arrives at the next
    pts = pd.concat([
        pd.DataFrame({"row": np.arange(nb), "o": 0, "seq": sa, "arrive": t_alloc, "leave": t_alloc}),
        touches.assign(o=1)[["row", "o", "seq", "arrive", "leave"]],
        pd.DataFrame({"row": np.arange(nb), "o": 2, "seq": sf, "arrive": t_free, "leave": t_free}),
    ]).sort_values(["row", "o", "seq"], kind="stable").reset_index(drop=True)
    r = pts["row"].to_numpy(np.int64)
    same = r[1:] == r[:-1]
    first = np.flatnonzero(same)
    rr = r[first]
    n_touch = np.bincount(touches["row"].to_numpy(np.int64), minlength=nb)
    j = first - np.searchsorted(r, rr)                      # interval index within its block
    code = np.where(n_touch[rr] == 0, 3, np.where(j == 0, 0, np.where(j == n_touch[rr], 2, 1)))
    ps = pts["seq"].to_numpy(np.int64)
    st, en = pts["leave"].to_numpy(np.int64)[first], pts["arrive"].to_numpy(np.int64)[first + 1]
    if device:
        en = np.maximum(en, st)
    return pd.DataFrame({
        "block_id": b["block_id"].to_numpy(np.int64)[rr], "pid": b["pid"].to_numpy()[rr],
        "size": b["size"].to_numpy(np.int64)[rr], "start_t": st, "end_t": en,
        "start_seq": ps[first], "end_seq": ps[first + 1], "ati_ns": en - st,
        "kind": np.array(KINDS, dtype=object)[code], "block_kind": b["kind"].astype(str).to_numpy()[rr],
        "api": b["api"].astype(str).to_numpy()[rr], "freed": b["freed"].to_numpy(bool)[rr],
        "counts_device": b["counts_device"].to_numpy(bool)[rr]})


def ref_step_of(iters, seq: np.ndarray) -> np.ndarray:
    """The regular step whose [boundary, next boundary) holds each seq, -1 outside."""
    out = np.full(len(seq), -1, np.int64)
    bnd = [int(x) for x in iters.boundaries]
    for k in range(iters.count):
        out[(seq >= bnd[k]) & (seq < bnd[k + 1])] = k
    return out


def ref_peak(trace: Trace, mask: np.ndarray) -> tuple[int, int]:
    """(time, bytes) where the live bytes of the blocks in ``mask`` first reach their maximum
    (frees before allocations at an equal time); (0, 0) for no block."""
    b = trace.blocks[mask]
    if len(b) == 0:
        return 0, 0
    fr = b[b["freed"].to_numpy(bool)]
    t = np.concatenate([fr["t_free"].to_numpy(np.int64), b["t_alloc"].to_numpy(np.int64)])
    d = np.concatenate([-fr["size"].to_numpy(np.int64), b["size"].to_numpy(np.int64)])
    o = np.lexsort((d, t))
    live = np.cumsum(d[o])
    i = int(np.argmax(live))
    return int(t[o][i]), int(live[i])


def ref_stability(trace: Trace, iters, pid, iv: pd.DataFrame) -> dict[str, Any] | None:
    """Share of the device blocks allocated inside regular steps whose size, rank (n-th
    allocation of that size in its step, allocation order) and access count (intervals - 1)
    repeat in the next step (the previous one for the last step)."""
    count = iters.count
    if count < 2:
        return None
    b = trace.blocks if pid is None else trace.blocks[trace.blocks["pid"] == pid]
    b = b.sort_values("block_id")
    step = ref_step_of(iters, b["seq_alloc"].to_numpy(np.int64))
    c = b[(step >= 0) & b["counts_device"].to_numpy(bool)].assign(step=step[(step >= 0)
                                                                          & b["counts_device"].to_numpy(bool)])
    if len(c) == 0:
        return None
    c = c.sort_values("seq_alloc")
    n_int = iv.groupby("block_id").size().to_dict()
    seen: dict[tuple[int, int], int] = {}
    keys = []
    for st, sz, bid in zip(c["step"].to_numpy(np.int64), c["size"].to_numpy(np.int64),
                           c["block_id"].to_numpy(np.int64)):
        nth = seen.get((int(st), int(sz)), 0)
        seen[(int(st), int(sz))] = nth + 1
        keys.append((int(st), int(sz), nth, n_int.get(int(bid), 1) - 1))
    acc_of = {(st, sz, nth): acc for st, sz, nth, acc in keys}
    hit, pos_hit = [], []
    for st, sz, nth, acc in keys:
        other = st + 1 if st + 1 < count else st - 1
        partner = acc_of.get((other, sz, nth))
        pos_hit.append(partner is not None)
        hit.append(partner is not None and partner == acc)
    hit, pos_hit = np.array(hit, bool), np.array(pos_hit, bool)
    sizes = c["size"].to_numpy(np.int64).astype(np.float64)
    return {
        "blocks": int(len(c)),
        "stable_blocks": ref_share(hit.sum(), len(c)),
        "stable_bytes": ref_share(sizes[hit].sum(), sizes.sum()),
        "same_size_and_position": ref_share(pos_hit.sum(), len(c)),
    }


def reference_analyze(trace: Trace, iters, bandwidth=None, latency_us: float | None = None, *,
                      pid: int | None = None, ati_quantile: float = 0.9, size_quantile: float = 0.9,
                      top: int = 10, cache_path: str | None = None) -> dict[str, Any]:
    """Paper 1's access analysis of one process's device blocks (default: the iterations' process)."""
    for name, q in (("ati_quantile", ati_quantile), ("size_quantile", size_quantile)):
        if not 0.0 <= q <= 1.0:
            raise PyinterposeError(f"{name} must be between 0 and 1 (got {q})")
    if pid is None:
        pid = iters.pid
    clock = clock_of(trace, pid)
    iv_all = ref_intervals(trace, pid)
    iv = iv_all[iv_all["counts_device"].to_numpy(bool)]
    in_blocks = trace.blocks["counts_device"].to_numpy(bool)
    if pid is not None:
        in_blocks = in_blocks & (trace.blocks["pid"].to_numpy() == pid)
    block_size = trace.blocks["size"].to_numpy(np.int64)[in_blocks]
    n_blocks = int(len(block_size))
    ati = iv["ati_ns"].to_numpy(np.int64)
    size = iv["size"].to_numpy(np.int64)
    bid = iv["block_id"].to_numpy(np.int64)
    kind = iv["kind"].to_numpy(object)
    masks = {k: kind == k for k in KINDS}

    def per_block_any(mask: np.ndarray) -> pd.Series:        # by block, in block order
        return pd.Series(mask).groupby(bid, sort=False).any()

    first_size = pd.Series(size).groupby(bid, sort=False).first().to_numpy().astype(np.float64)
    block_bytes = float(block_size.sum())
    out: dict[str, Any] = {
        "pid": pid,
        **clock.as_dict(),
        "iterations": {"source": iters.source, "count": iters.count},
        "intervals": int(len(ati)),
        "blocks": n_blocks,
        "accessed_blocks": int(per_block_any(~masks["unaccessed"]).sum()),
        "accesses": int(masks["between"].sum() + masks["alloc_to_first"].sum()),
        "ati_quantiles": ref_quantiles(ati),
        "ati_by_kind": {k: {"intervals": int(m.sum()), "quantiles": ref_quantiles(ati[m])}
                        for k, m in masks.items() if m.any()},
    }
    bw, note = resolve_link(trace, bandwidth, latency_us, cache_path)
    out["bandwidth"] = None if bw is None else {
        "h2d_bytes_per_s": bw.h2d_bytes_per_s, "d2h_bytes_per_s": bw.d2h_bytes_per_s,
        "latency_s": bw.latency_s, "source": bw.source}
    out["bandwidth_note"] = note
    hides = None
    if bw is not None:
        hides = ati >= ref_swap_cost_ns(size, bw)
        sw = per_block_any(hides).to_numpy()
        sw_bytes = float(first_size[sw].sum())
        out["filtered_fraction"] = {
            "intervals": ref_share((~hides).sum(), len(hides)),
            "blocks": ref_share(n_blocks - int(sw.sum()), n_blocks),
            "bytes": ref_share(block_bytes - sw_bytes, block_bytes),
        }
        out["filtered_by_kind"] = {k: ref_share((~hides[m]).sum(), m.sum()) for k, m in masks.items() if m.any()}
        out["swappable"] = {"intervals": int(hides.sum()), "blocks": int(sw.sum()), "bytes": int(sw_bytes)}
    else:
        out["filtered_fraction"] = None
    out["outliers"] = None
    if len(ati):
        ati_thr = float(np.quantile(ati, ati_quantile))
        size_thr = float(np.quantile(block_size, size_quantile))
        is_out = (ati >= ati_thr) & (size >= size_thr)
        t_peak, peak_bytes = ref_peak(trace, in_blocks)
        bt = [int(x) for x in iters.boundaries_t]
        if iters.count and bt[0] <= t_peak < bt[-1]:
            k = max(i for i in range(iters.count) if bt[i] <= t_peak)
            lo, hi, wname = bt[k], bt[k + 1], f"iteration {k}"
        else:
            lo, hi, wname = None, None, "whole trace"
        st, en = iv["start_t"].to_numpy(np.int64), iv["end_t"].to_numpy(np.int64)
        if lo is None:
            lo, hi = int(st.min()), int(en.max())
        area = size.astype(np.float64) * np.clip(np.minimum(en, hi) - np.maximum(st, lo), 0, None)
        at_peak = (st <= t_peak) & (en > t_peak)
        ob = per_block_any(is_out).to_numpy()
        order = np.argsort(-(size[is_out].astype(np.float64) * ati[is_out]), kind="stable")[:top]
        sel = np.flatnonzero(is_out)[order]
        out["outliers"] = {
            "ati_threshold_ns": ati_thr, "size_threshold_bytes": size_thr,
            "ati_quantile": ati_quantile, "size_quantile": size_quantile,
            "intervals": int(is_out.sum()), "blocks": int(ob.sum()),
            "bytes": int(first_size[ob].sum()),
            "swappable_intervals": None if hides is None else int((is_out & hides).sum()),
            "peak_bytes": peak_bytes, "peak_t": t_peak,
            "share_of_peak_bytes": ref_share(size[is_out & at_peak].sum(), peak_bytes),
            "pressure_window": {"name": wname, "start_t": lo, "end_t": hi},
            "share_of_pressure": ref_share(area[is_out].sum(), area.sum()),
            "top": [{"block_id": int(bid[i]), "size": int(size[i]), "ati_ns": int(ati[i]),
                     "kind": str(kind[i]), "start_t": int(st[i]), "end_t": int(en[i])} for i in sel],
        }
    out["stability"] = ref_stability(trace, iters, pid, iv) if iters.count else None
    la = trace.launches
    g = int(la.loc[la["pid"] == pid, "graph"].sum()) if pid is not None and len(la) else int(la["graph"].sum())
    out["graph_launches"] = g
    # replays of graphs captured in the trace are expanded by the reader; the others are counted
    u = min(g, int(trace.counts.get("graph_launches_unexpanded", g)))
    out["graph_launches_unexpanded"] = u
    out["notes"] = [] if not u else [
        f"{u} of {g} CUDA graph launches ran a graph not captured in the trace (instantiated before "
        "recording started, or built node by node): their kernels' accesses are missing here (ATIs across "
        "such a replay are too long, blocks used only inside it look untouched)"]
    return out


# ---- comparison --------------------------------------------------------------------------

def same(a, b, path="r"):
    """a == b with the same types, dict key order and floats bit for bit (NaN == NaN)."""
    assert type(a) is type(b), f"{path}: {type(a).__name__} != {type(b).__name__} ({a!r} vs {b!r})"
    if isinstance(a, dict):
        assert list(a) == list(b), f"{path}: keys {list(a)} != {list(b)}"
        for k in a:
            same(a[k], b[k], f"{path}[{k!r}]")
    elif isinstance(a, list):
        assert len(a) == len(b), f"{path}: {len(a)} items != {len(b)}"
        for i, (x, y) in enumerate(zip(a, b)):
            same(x, y, f"{path}[{i}]")
    elif isinstance(a, float):
        assert (a == b and math.copysign(1, a) == math.copysign(1, b)) or (a != a and b != b), \
            f"{path}: {a!r} != {b!r}"
    else:
        assert a == b, f"{path}: {a!r} != {b!r}"


def check(tr: Trace, **kw) -> dict:
    iters = find_iterations(tr, kw.get("pid"))            # the input both sides are given
    want = reference_analyze(tr, iters, **kw)
    got = access.analyze(tr, iters=iters, **kw)
    same(got, want)                 # the reference names the clock as clock_of decides it
    return got


@pytest.fixture()
def nocache(tmp_path):
    return str(tmp_path / "none.json")


# ---- synthetic traces --------------------------------------------------------------------

def _rebuild(tr: Trace, blocks: pd.DataFrame, accesses: pd.DataFrame | None = None, launches=None) -> Trace:
    keep = [c for c in ("block_id", "pid", "size", "t_alloc", "t_free", "seq_alloc", "seq_free", "kind", "api",
                        "freed") if c in blocks]
    acc = tr.accesses if accesses is None else accesses
    return Trace.from_tables(blocks=blocks[keep].reset_index(drop=True), accesses=acc,
                             launches=tr.launches if launches is None else launches, meta=tr.meta)


def check_variants(tr: Trace, nocache: str) -> None:
    """:func:`check` on ``tr`` and the variants each path of the analysis must handle: host blocks, random
    blocks, block ids repeated with sizes of their own, a second process, the device clock, repeated
    touches (eight analyses)."""
    ref = sys.modules[__name__]
    ref.check(tr, bandwidth=12.0, cache_path=nocache)
    ref.check(ref.with_host_blocks(tr, 7), bandwidth=10.0, cache_path=nocache, ati_quantile=0.5, size_quantile=0.3)
    ref.check(ref.random_blocks_trace(11, nb=3000, host_frac=0.5), bandwidth=5.0, cache_path=nocache)
    b = tr.blocks.copy()
    b.loc[b.index[5:9], "block_id"] = int(b["block_id"].iloc[4])          # ids repeated
    b.loc[b.index[5:9], "size"] = [1 << 20, 3 << 20, 5, 1 << 22]        # ... with sizes of their own
    ref.check(ref._rebuild(tr, b), bandwidth=12.0, cache_path=nocache, size_quantile=0.1, ati_quantile=0.1)
    tr2 = ref.with_second_process(tr)
    for pid in tr2.pids:
        ref.check(tr2, pid=pid, bandwidth=20.0, cache_path=nocache)
    ref.check(ref.with_device_clock(tr, seed=3, untimed=0.1), bandwidth=12.0, cache_path=nocache, top=1000)
    ref.check(ref.with_repeated_touches(tr), bandwidth=1.0, cache_path=nocache)


def with_host_blocks(tr: Trace, every: int, seed: int = 0) -> Trace:
    """Every ``every``-th block of the trace followed by a host block (its own, accessed too)."""
    rng = np.random.default_rng(seed)
    b = tr.blocks.copy()
    b["block_id"] = b["block_id"] * 2                      # room for the host blocks' ids
    h = b.iloc[::every].copy()
    h["block_id"] += 1
    h["kind"] = "host"
    h["api"] = "cudaMallocHost"
    h["size"] = rng.integers(1, 1 << 22, len(h))
    blocks = pd.concat([b, h]).sort_values("block_id")
    a = tr.accesses.copy()
    a["block_id"] = a["block_id"] * 2
    ha = a[a["block_id"].isin(h["block_id"] - 1)].copy()
    ha["block_id"] += 1
    return _rebuild(tr, blocks, pd.concat([a, ha]).sort_values(["seq", "block_id"]))


def with_second_process(tr: Trace, pid2: int = 7) -> Trace:
    """The same loop run again by another process (its blocks after the first one's)."""
    b2 = tr.blocks.copy()
    b2["block_id"] += int(tr.blocks["block_id"].max()) + 1
    b2["pid"] = pid2
    a2 = tr.accesses.copy()
    a2["block_id"] += int(tr.blocks["block_id"].max()) + 1
    a2["pid"] = pid2
    return _rebuild(tr, pd.concat([tr.blocks, b2]), pd.concat([tr.accesses, a2]))


def with_graph_launches(tr: Trace, pid: int, n: int = 5) -> Trace:
    la = pd.DataFrame({"pid": [pid] * n + [pid + 1] * 2, "seq": np.arange(n + 2), "t": np.arange(n + 2) * 10,
                       "graph": [True] * n + [True, False], "kernel_name": "<graph>"})
    return _rebuild(tr, tr.blocks, launches=la)


def random_blocks_trace(seed: int, nb: int = 400, host_frac: float = 0.1, pids=(1,), size_hi=1 << 24,
                        tie_seq: bool = False) -> Trace:
    """No loop: random lifetimes, sizes, accesses (some on unknown blocks or outside lifetimes)."""
    rng = np.random.default_rng(seed)
    seq_alloc = np.sort(rng.choice(20 * nb, nb, replace=False))
    if tie_seq:
        seq_alloc[1::3] = seq_alloc[0:-1:3][: len(seq_alloc[1::3])]
    life = rng.integers(1, 10 * nb, nb)
    kind = np.where(rng.random(nb) < host_frac, "host", "device")
    blocks = pd.DataFrame({
        "block_id": np.arange(nb), "pid": rng.choice(pids, nb), "size": rng.integers(0, size_hi, nb),
        "t_alloc": seq_alloc * 100, "t_free": (seq_alloc + life) * 100, "seq_alloc": seq_alloc,
        "seq_free": seq_alloc + life, "kind": kind, "api": "cudaMalloc",
        "freed": rng.random(nb) < 0.9})
    na = 8 * nb
    seq = rng.integers(0, 30 * nb, na)
    acc = pd.DataFrame({"block_id": rng.integers(0, nb + 5, na), "pid": pids[0], "seq": seq,
                        "t": seq * 100 + rng.integers(0, 50, na), "kernel": 0})
    return Trace.from_tables(blocks=blocks, accesses=acc)


# ---- tests -------------------------------------------------------------------------------

@pytest.mark.parametrize("bandwidth", [12.0, 1.0, None])
def test_training_loop_same_as_reference(nocache, bandwidth):
    tr, truth = training_trace(steps=25, layers=5, warmup=1, noise=0.2, seed=3)
    r = check(tr, bandwidth=bandwidth, cache_path=nocache)
    assert r["iterations"]["count"] == truth["count"] and r["stability"]["blocks"] > 0
    assert (r["filtered_fraction"] is None) == (bandwidth is None)


@pytest.mark.parametrize("every", [1, 7, 50])
def test_host_blocks_between_device_blocks(nocache, every):
    tr, _ = training_trace(steps=20, layers=4, warmup=1, noise=0.1, seed=5)
    tr = with_host_blocks(tr, every, seed=every)
    dev = ref_intervals(tr, tr.main_pid)["counts_device"].to_numpy()
    assert not dev.all() and dev.any()
    r = check(tr, bandwidth=10.0, cache_path=nocache, ati_quantile=0.5, size_quantile=0.3)
    assert r["stability"] is not None and r["outliers"]["intervals"] > 0


def test_scattered_host_blocks_take_the_masked_path(nocache):
    tr = random_blocks_trace(11, nb=6000, host_frac=0.5)
    dev = ref_intervals(tr, 1)["counts_device"].to_numpy()
    assert (dev[1:] != dev[:-1]).sum() > 1024                     # more runs than the slice path takes
    check(tr, bandwidth=5.0, cache_path=nocache)


def test_several_processes(nocache):
    tr, _ = training_trace(steps=15, layers=4, warmup=1, noise=0.3, seed=8)
    tr = with_host_blocks(with_second_process(tr), 9)
    for pid in tr.pids:
        check(tr, pid=pid, bandwidth=20.0, cache_path=nocache)
    check(tr, bandwidth=20.0, cache_path=nocache)                  # the main process
    tr2 = random_blocks_trace(4, nb=900, pids=(1, 2, 3))
    for pid in (1, 2, 3):
        check(tr2, pid=pid, bandwidth=2.0, cache_path=nocache)


@pytest.mark.parametrize("seed", range(6))
def test_random_traces_without_iterations(nocache, seed):
    tr = random_blocks_trace(seed, nb=300 + 200 * seed, host_frac=0.15 * (seed % 3))
    r = check(tr, bandwidth=[None, 3.0, 50.0][seed % 3], cache_path=nocache,
              ati_quantile=[0.9, 0.0, 1.0, 0.37, 0.5, 0.99][seed], size_quantile=[0.9, 1.0, 0.0, 0.5, 0.21, 0.7][seed],
              top=[10, 0, 1, 3, 1000, 5][seed])
    assert r["iterations"]["count"] == 0 and r["stability"] is None


def test_graph_launches(nocache):
    tr, _ = training_trace(steps=12, layers=3, warmup=1, seed=9)
    pid = tr.main_pid
    r = check(with_graph_launches(tr, pid), bandwidth=12.0, cache_path=nocache)
    assert r["graph_launches"] == 5 and r["notes"]


def test_repeated_alloc_seqs(nocache):
    # ties in seq_alloc: the stability's allocation order comes from pandas' sort, as before
    check(random_blocks_trace(21, nb=700, tie_seq=True), bandwidth=1.0, cache_path=nocache)
    tr, _ = training_trace(steps=20, layers=4, warmup=1, noise=0.1, seed=5)
    b = tr.blocks.copy()
    sa = b["seq_alloc"].to_numpy().copy()
    sa[7::10] = sa[6::10][: len(sa[7::10])]
    b["seq_alloc"] = sa
    r = check(_rebuild(tr, b), bandwidth=12.0, cache_path=nocache)
    assert r["stability"] is not None


def test_stability_key_fallback(nocache, monkeypatch):
    # (step, size) that cannot be packed in one int64 (sizes >= 2**62 / steps): sizes by rank
    monkeypatch.setattr(access, "_PACKED_KEY_LIMIT", 1)
    tr, _ = training_trace(steps=20, layers=4, warmup=1, noise=0.1, seed=5)
    r = check(tr, bandwidth=12.0, cache_path=nocache, ati_quantile=0.2)
    assert r["stability"] is not None


def test_unsorted_and_repeated_block_ids(nocache):
    tr, _ = training_trace(steps=20, layers=4, warmup=1, seed=9)
    b = tr.blocks.sample(frac=1.0, random_state=1)               # block table not in block_id order
    assert check(_rebuild(tr, b), bandwidth=12.0, cache_path=nocache)["stability"] is not None
    b = tr.blocks.copy()
    b.loc[b.index[5:9], "block_id"] = int(b["block_id"].iloc[4])   # ids repeated (classify's order)
    assert check(_rebuild(tr, b), bandwidth=12.0, cache_path=nocache)["stability"] is not None


def test_empty_and_host_only_processes(nocache):
    check(Trace.from_tables(), cache_path=nocache)
    check(Trace.from_tables(), bandwidth=3.0, cache_path=nocache)
    tr = random_blocks_trace(5, nb=50, host_frac=1.0)
    r = check(tr, bandwidth=3.0, cache_path=nocache)
    assert r["intervals"] == 0 and r["outliers"] is None


def with_repeated_touches(tr: Trace, every: int = 3) -> Trace:
    """Every ``every``-th access repeated by the same event (a kernel given one buffer twice, an
    in-place op), the copy at a later time: one touch, at the first one's time."""
    a = tr.accesses
    dup = a.iloc[::every].copy()
    dup["t"] = dup["t"] + 7
    both = pd.concat([a, dup]).sort_values("seq", kind="stable")
    return _rebuild(tr, tr.blocks, both)


def with_device_clock(tr: Trace, seed: int = 0, untimed: float = 0.0) -> Trace:
    """Every accessing event becomes a kernel launch with device times (CUPTI's): it starts 1-5 us
    after the call and runs 0-40 us, so kernels of a block overlap now and then; ``untimed``: the
    share of launches whose device record was dropped (-1)."""
    rng = np.random.default_rng(seed)
    ev = tr.accesses[["pid", "seq", "t"]].drop_duplicates(["pid", "seq"]).sort_values("seq")
    n = len(ev)
    start = ev["t"].to_numpy(np.int64) + rng.integers(1_000, 5_000, n)
    end = start + rng.integers(0, 40_000, n)
    drop = rng.random(n) < untimed
    la = pd.DataFrame({"pid": ev["pid"].to_numpy(), "seq": ev["seq"].to_numpy(), "t": ev["t"].to_numpy(),
                       "graph": False, "kernel_name": "k", "stream": rng.integers(1, 3, n),
                       "dev_start": np.where(drop, -1, start), "dev_end": np.where(drop, -1, end)})
    return _rebuild(tr, tr.blocks, launches=la)


def test_device_clock_same_as_reference(nocache):
    """On the device clock an interval runs from one kernel's device END to the next one's START
    (kernels of non-zero length, overlapping on two streams, some records dropped)."""
    tr, _ = training_trace(steps=15, layers=4, warmup=1, noise=0.1, seed=12)
    for untimed in (0.0, 0.1):
        dv = with_device_clock(tr, seed=3, untimed=untimed)
        assert clock_of(dv, dv.main_pid).device
        iv = same_intervals(dv, dv.main_pid)
        assert (iv["ati_ns"] == 0).any() and (iv["ati_ns"] > 0).any()
        r = check(dv, bandwidth=12.0, cache_path=nocache)
        assert r["clock"] != "cpu"


def same_intervals(tr: Trace, pid) -> pd.DataFrame:
    want = ref_intervals(tr, pid)
    got = access.access_intervals(tr, pid)
    assert list(got.columns) == list(want.columns)
    for c in want.columns:
        g = got[c].astype(str).to_numpy() if c in ("kind", "block_kind", "api") else got[c].to_numpy()
        assert (g == want[c].to_numpy()).all(), c
    return want


def test_intervals_table_same_as_reference():
    tr, _ = training_trace(steps=12, layers=4, warmup=1, noise=0.2, seed=2)
    for t in (tr, with_host_blocks(tr, 5), with_repeated_touches(tr), random_blocks_trace(3, nb=500)):
        for pid in [None] + list(t.pids):
            same_intervals(t, pid)


def test_touches_of_one_event_are_one(nocache):
    """A block accessed twice by one event (one seq) has one touch: no zero-length interval."""
    tr, _ = training_trace(steps=15, layers=4, warmup=1, noise=0.1, seed=6)
    tr2 = with_repeated_touches(tr)
    assert len(tr2.accesses) > len(tr.accesses)
    iv = same_intervals(tr2, tr2.main_pid)
    assert len(iv) == len(ref_intervals(tr, tr.main_pid))
    r = check(tr2, bandwidth=12.0, cache_path=nocache)
    assert r["intervals"] == check(tr, bandwidth=12.0, cache_path=nocache)["intervals"]


# ---- real-GPU traces ---------------------------------------------------------------------

def _gpu_traces() -> list[Path]:
    found = {p.name: p for p in sorted((ROOT / "samples").glob("*.pit"))}
    full = ROOT.parent / "shared" / "data" / "gpu-traces"
    found.update({p.name: p for p in sorted(full.glob("*.pit"))} if full.is_dir() else {})
    return [found[k] for k in sorted(found)]


@pytest.mark.parametrize("path", _gpu_traces(), ids=lambda p: p.name)
def test_real_gpu_traces(nocache, path):
    import pyinterpose

    tr = pyinterpose.load(str(path))
    iters = find_iterations(tr)
    for pid in [None] + [p for p in tr.pids if p != iters.pid]:
        check(tr, pid=pid, bandwidth=25.0, cache_path=nocache)
    check(tr, cache_path=nocache)                                  # the trace's NVML link, or none
