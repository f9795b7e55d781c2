"""access.analyze against its former implementation, kept below verbatim as a slow reference.

``reference_analyze`` is ``access.analyze`` as it was before it was made fast at 10 M events
(issue 15): masked copies of six interval columns, the swap cost and the pressure area per row
over float64 temporaries, ``lifetimes.classify`` for the stability, whose "same block in the next
step" test matched 64-bit hashes of (step, size, rank, accesses).  The new analyze must give the
very same dict — same keys in the same order, same types, same values, floats bit for bit (every
float is computed from the same numbers in the same order; the stability join is exact where the
reference relied on 64-bit hashes not colliding) — on synthetic traces that exercise each path
(host blocks between device ones, scattered host blocks, several processes, no bandwidth, no
iterations, graph launches, repeated allocation seqs, huge sizes, unsorted block ids, empty
processes, every quantile and top setting), and on the shipped real-GPU traces.
"""
from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from pyinterpose.analysis import access
from pyinterpose.analysis.access import INTERVAL_KINDS, _share, access_intervals, resolve_link, swap_cost_ns
from pyinterpose.analysis.iterations import _mix64, find_iterations
from pyinterpose.analysis.lifetimes import _quantiles, classify
from pyinterpose.errors import PyinterposeError
from pyinterpose.trace.model import Trace, live_bytes_curve, live_events
from test_iterations import training_trace

ROOT = Path(__file__).resolve().parents[2]


# ---- the former implementation (reference) ------------------------------------------------

def _overlap(start: np.ndarray, end: np.ndarray, lo: int, hi: int) -> np.ndarray:
    ov = np.minimum(end, hi)
    ov -= np.maximum(start, lo)
    return np.clip(ov, 0, None, out=ov)


def _member(q: np.ndarray, ref: np.ndarray) -> np.ndarray:
    """q[i] in ref, by sorting (numpy's isin is slow on millions of uint64)."""
    if len(ref) == 0:
        return np.zeros(len(q), bool)
    r = np.sort(ref)
    order = np.argsort(q)
    qs = q[order]                           # sorted queries: cache-friendly search
    i = np.minimum(np.searchsorted(r, qs), len(r) - 1)
    out = np.empty(len(q), bool)
    out[order] = r[i] == qs
    return out


def _segments(sorted_ids: np.ndarray) -> np.ndarray:
    """Start of each run of equal values (of an array ordered by value)."""
    if len(sorted_ids) == 0:
        return np.zeros(0, np.int64)
    return np.concatenate([[0], np.flatnonzero(sorted_ids[1:] != sorted_ids[:-1]) + 1])


def _cumcount(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``groupby([a, b]).cumcount()``: the rank of each row among the earlier rows with the same (a, b)."""
    n = len(a)
    if n == 0:
        return np.zeros(0, np.int64)
    order = np.lexsort((b, a))                           # stable: equal keys keep their order
    sa, sb = a[order], b[order]
    new = np.ones(n, bool)
    new[1:] = (sa[1:] != sa[:-1]) | (sb[1:] != sb[:-1])
    start = np.maximum.accumulate(np.where(new, np.arange(n), 0))
    out = np.empty(n, np.int64)
    out[order] = np.arange(n) - start
    return out


def _ref_peak(trace: Trace, mask: np.ndarray) -> tuple[int, int]:
    """(time, bytes) of the peak of live bytes of the blocks in ``mask`` (the first time it is
    reached; (0, 0) for none): ``live_bytes_curve(trace.blocks[mask])`` without sorting again."""

    t, d, r = live_events(trace)
    if len(d):
        live = np.cumsum(d * mask[r])
        i = int(np.argmax(live))
        if live[i] > 0 and mask[r[i]]:
            return int(t[i]), int(live[i])
    t, live = live_bytes_curve(trace.blocks[mask])
    i = int(np.argmax(live)) if len(live) else 0
    return (int(t[i]), int(live[i])) if len(live) else (0, 0)


def _ref_stability(intervals: pd.DataFrame, classes: pd.DataFrame, count: int) -> dict[str, Any] | None:
    """Share of blocks allocated inside regular steps whose size, relative position (n-th
    allocation of that size in the step) and access count repeat exactly in the next step
    (the previous one for the last step)."""
    if count < 2:
        return None
    c = classes[(classes["iter_alloc"] >= 0) & classes["counts_device"]]
    if len(c) == 0:
        return None
    ib = intervals["block_id"].to_numpy(np.int64)     # intervals per block (ordered by block)
    if len(ib) < 2 or (ib[1:] >= ib[:-1]).all():
        first = _segments(ib)
        ub, n_int = ib[first], np.diff(np.append(first, len(ib)))
    else:
        ub, n_int = np.unique(ib, return_counts=True)
    c = c.sort_values("seq_alloc")
    cb = c["block_id"].to_numpy(np.int64)
    k = np.minimum(np.searchsorted(ub, cb), max(len(ub) - 1, 0))
    acc = (np.where((k < len(ub)) & (ub[k] == cb), n_int[k], 1) if len(ub) else np.ones(len(cb), np.int64)) - 1
    key = pd.DataFrame({
        "block_id": c["block_id"].to_numpy(), "it": c["iter_alloc"].to_numpy(np.int64),
        "size": c["size"].to_numpy(np.int64), "acc": acc,
    })
    it = key["it"].to_numpy(np.int64)
    nth = _cumcount(it, key["size"].to_numpy(np.int64))
    nb = np.where(it + 1 < count, it + 1, it - 1)
    sizes_i = key["size"].to_numpy(np.int64)

    def h(*cols):   # 64-bit hash of a tuple of int columns
        z = np.zeros(len(cols[0]), np.uint64)
        for c in cols:
            z = _mix64(z ^ c.astype(np.uint64))
        return z

    hit = _member(h(nb, sizes_i, nth, acc), h(it, sizes_i, nth, acc))
    pos_hit = _member(h(nb, sizes_i, nth), h(it, sizes_i, nth))
    sizes = sizes_i.astype(np.float64)
    return {
        "blocks": int(len(key)),
        "stable_blocks": _share(hit.sum(), len(key)),
        "stable_bytes": _share(sizes[hit].sum(), sizes.sum()),
        "same_size_and_position": _share(pos_hit.sum(), len(key)),
    }


def reference_analyze(trace: Trace, bandwidth=None, latency_us: float | None = None, *, pid: int | None = None,
            iters=None, ati_quantile: float = 0.9, size_quantile: float = 0.9, top: int = 10,
            cache_path: str | None = None) -> dict[str, Any]:
    """Paper 1's access analysis of one process's device blocks (default: the main process).

    ``bandwidth``: GB/s per direction (or a :class:`~pyinterpose.analysis.bandwidth.Bandwidth`);
    None = cached measurement or the trace's NVML link data; with neither the bandwidth
    filter is skipped (``filtered_fraction`` None, ``bandwidth_note`` says why).
    Outliers: intervals with ATI >= the ``ati_quantile`` of all ATIs and block size >= the
    ``size_quantile`` of all block sizes."""

    for name, q in (("ati_quantile", ati_quantile), ("size_quantile", size_quantile)):
        if not 0.0 <= q <= 1.0:
            raise PyinterposeError(f"{name} must be between 0 and 1 (got {q})")
    if iters is None:
        iters = find_iterations(trace, pid)
    if pid is None:
        pid = iters.pid
    iv_all = access_intervals(trace, pid)     # shared: the device rows' columns are taken, not the table
    dev_iv = iv_all["counts_device"].to_numpy(bool)
    runs = None
    if not dev_iv.all():                      # the device rows: a few long runs (one per host block gap)
        edge = np.flatnonzero(dev_iv[1:] != dev_iv[:-1]) + 1
        bounds = np.concatenate([[0], edge, [len(dev_iv)]])
        if len(bounds) <= 512:
            runs = [(int(lo), int(hi)) for lo, hi in zip(bounds[:-1], bounds[1:]) if dev_iv[lo]]

    def col(name: str, dtype=None) -> np.ndarray:
        x = iv_all[name].cat.codes.to_numpy() if dtype is None else iv_all[name].to_numpy(dtype)
        if runs is None:
            return x if dev_iv.all() else x[dev_iv]
        return np.concatenate([x[lo:hi] for lo, hi in runs]) if runs else x[:0].copy()
    in_blocks = trace.blocks["counts_device"].to_numpy(bool)      # the process's device blocks
    if pid is not None:
        in_blocks = in_blocks & (trace.blocks["pid"].to_numpy() == pid)
    block_size = trace.blocks["size"].to_numpy(np.int64)[in_blocks]
    ati = col("ati_ns", np.int64)
    size = col("size", np.int64)
    bid = col("block_id", np.int64)
    kcode = col("kind")
    masks = {k: kcode == i for i, k in enumerate(INTERVAL_KINDS)}
    n_blocks = int(len(block_size))
    # intervals are ordered by block: one segment per block
    seg = _segments(bid)
    seg_size = size[seg].astype(np.float64)

    def per_block_any(mask: np.ndarray) -> np.ndarray:
        return np.logical_or.reduceat(mask, seg) if len(seg) else np.zeros(0, bool)
    block_bytes = float(block_size.sum())
    out: dict[str, Any] = {
        "pid": pid,
        "iterations": {"source": iters.source, "count": iters.count},
        "intervals": int(len(ati)),
        "blocks": n_blocks,
        "accessed_blocks": int(per_block_any(~masks["unaccessed"]).sum()),
        "accesses": int(masks["between"].sum() + masks["alloc_to_first"].sum()),
        "ati_quantiles": _quantiles(ati),
        "ati_by_kind": {k: {"intervals": int(m.sum()), "quantiles": _quantiles(ati[m])}
                        for k, m in masks.items() if m.any()},
    }

    # bandwidth filter
    bw, note = resolve_link(trace, bandwidth, latency_us, cache_path)
    out["bandwidth"] = None if bw is None else {
        "h2d_bytes_per_s": bw.h2d_bytes_per_s, "d2h_bytes_per_s": bw.d2h_bytes_per_s,
        "latency_s": bw.latency_s, "source": bw.source}
    out["bandwidth_note"] = note
    hides = None
    if bw is not None:
        hides = ati >= swap_cost_ns(size, bw)
        sw = per_block_any(hides)
        sw_bytes = float(seg_size[sw].sum())
        out["filtered_fraction"] = {
            "intervals": _share((~hides).sum(), len(hides)),
            "blocks": _share(n_blocks - int(sw.sum()), n_blocks),
            "bytes": _share(block_bytes - sw_bytes, block_bytes),
        }
        out["filtered_by_kind"] = {k: _share((~hides[m]).sum(), m.sum()) for k, m in masks.items() if m.any()}
        out["swappable"] = {"intervals": int(hides.sum()), "blocks": int(sw.sum()),
                            "bytes": int(sw_bytes)}
    else:
        out["filtered_fraction"] = None

    # outliers and their share of memory pressure
    out["outliers"] = None
    if len(ati):
        ati_thr = float(np.quantile(ati, ati_quantile))
        size_thr = float(np.quantile(block_size, size_quantile))
        is_out = (ati >= ati_thr) & (size >= size_thr)
        t_peak, peak_bytes = _ref_peak(trace, in_blocks)
        # pressure window: the regular step holding the peak, else the whole process
        if iters.count and iters.boundaries_t[0] <= t_peak < iters.boundaries_t[-1]:
            k = int(np.searchsorted(iters.boundaries_t, t_peak, side="right") - 1)
            lo, hi, wname = int(iters.boundaries_t[k]), int(iters.boundaries_t[k + 1]), f"iteration {k}"
        else:
            lo, hi, wname = None, None, "whole trace"
        st, en = col("start_t", np.int64), col("end_t", np.int64)
        if lo is None:
            lo, hi = int(st.min()), int(en.max())
        area = size.astype(np.float64) * _overlap(st, en, lo, hi)
        at_peak = (st <= t_peak) & (en > t_peak)
        ob = per_block_any(is_out)
        order = np.argsort(-(size[is_out].astype(np.float64) * ati[is_out]), kind="stable")[:top]
        sel = np.flatnonzero(is_out)[order]
        out["outliers"] = {
            "ati_threshold_ns": ati_thr, "size_threshold_bytes": size_thr,
            "ati_quantile": ati_quantile, "size_quantile": size_quantile,
            "intervals": int(is_out.sum()), "blocks": int(ob.sum()),
            "bytes": int(seg_size[ob].sum()),
            "swappable_intervals": None if hides is None else int((is_out & hides).sum()),
            "peak_bytes": peak_bytes, "peak_t": t_peak,
            "share_of_peak_bytes": _share(size[is_out & at_peak].sum(), peak_bytes),
            "pressure_window": {"name": wname, "start_t": lo, "end_t": hi},
            "share_of_pressure": _share(area[is_out].sum(), area.sum()),
            "top": [{"block_id": int(bid[i]), "size": int(size[i]), "ati_ns": int(ati[i]),
                     "kind": INTERVAL_KINDS[kcode[i]], "start_t": int(st[i]), "end_t": int(en[i])} for i in sel],
        }
        del st, en, area, at_peak, is_out, ob
    ati = size = kcode = masks = hides = seg = seg_size = None      # free them before the classes are built

    out["stability"] = _ref_stability(pd.DataFrame({"block_id": bid}, copy=False), classify(trace, iters, pid),
                                 iters.count) if iters.count else None
    # kernels inside CUDA graph replays are not recorded one by one: their accesses are missing
    la = trace.launches
    g = int(la.loc[la["pid"] == pid, "graph"].sum()) if pid is not None and len(la) else int(la["graph"].sum())
    out["graph_launches"] = g
    out["notes"] = [] if not g else [
        f"{g} CUDA graph launches: the kernels inside graph replays are not seen, so their accesses are "
        "missing here (ATIs across a replay are too long, blocks used only inside graphs look untouched)"]
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
    want = reference_analyze(tr, **kw)
    got = access.analyze(tr, **kw)
    same(got, want)
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
    dev = access_intervals(tr, tr.main_pid)["counts_device"].to_numpy()
    assert not dev.all() and dev.any()
    r = check(tr, bandwidth=10.0, cache_path=nocache, ati_quantile=0.5, size_quantile=0.3)
    assert r["stability"] is not None and r["outliers"]["intervals"] > 0


def test_scattered_host_blocks_take_the_masked_path(nocache):
    tr = random_blocks_trace(11, nb=6000, host_frac=0.5)
    dev = access_intervals(tr, 1)["counts_device"].to_numpy()
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
