"""Blocks and lifetimes: persistent vs per-iteration classes, lifetimes, sizes, the peak.

Classes (``class`` column of :func:`classify`), against the regular steps that
:func:`pyinterpose.analysis.iterations.find_iterations` found, boundaries ``B[0..c]``:

* ``persistent`` — alive across all regular steps: allocated before the end of the
  first one (``seq_alloc < B[1]``) and not freed before the end of the last
  (weights, optimizer state);
* ``per_iteration`` — allocated and freed inside the same step (activations, workspace,
  gradients freed by the optimizer step);
* ``cross_iteration`` — overlaps the steady run and crosses a step boundary without
  being persistent (prefetch buffers, gradients freed in the next step);
* ``outside`` — entirely before or after the steady run (warm-up, autotuning, teardown);
* ``transient`` — no loop was found: any block alive for less than 90% of its process's
  span (the rest are ``persistent``);
* ``leak`` — never freed, and allocated step after step from one call site whose other blocks are never
  freed either: in the trace, such blocks allocated in at least LEAK_STEPS (3) different steps after the first; or
  a call site the run's per-step history names as a leak (pyinterpose.analysis.growth: windowed and
  flight-recorder traces, where the older blocks of a leak are in the window's opening snapshot).

Lifetimes are given in ns (``life_ns``), in seq (``life_seq``: every record of the
process, launches included) and in alloc/free events of the process (``life_events``,
SINGA's index clock).
"""
from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from ..trace.chunking import spans
from ..trace.live_windows import masked_peaks
from ..trace.pages import release
from ..trace.piecewise import ascending, piece_rows
from ..trace.model import Trace, live_bytes_curve
from .iterations import Iterations, find_iterations
from .growth import leak_stacks
from .search import merge_places

CLASSES = ["persistent", "per_iteration", "cross_iteration", "outside", "transient", "leak"]
QUANTILES = (0.5, 0.9, 0.99)
LEAK_STEPS = 3   # a site whose never-freed blocks were allocated in this many steps (after the first) leaks


def _event_positions(b: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """Index of each block's alloc and free among its process's alloc/free events, in
    (pid, seq) order, frees first at an equal seq (ties in block order)."""
    return _positions(b["pid"].to_numpy(np.int64), b["seq_alloc"].to_numpy(np.int64),
                      b["seq_free"].to_numpy(np.int64))


def _positions(pid: np.ndarray, sa: np.ndarray, sf: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """:func:`_event_positions` of the blocks with these pids, allocation and free seqs (int64)."""
    n = len(pid)
    if n == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    if pid.min() < 0 or pid.max() >= 1 << 23 or min(sa.min(), sf.min()) < 0 or max(sa.max(), sf.max()) >= 1 << 40:
        return _event_positions_lexsort(pid, sa, sf)
    # each kind sorted by (pid, seq) (stable, nearly in order already), then merged
    ka, kf = pid << 40 | sa, pid << 40 | sf
    oa, of = np.argsort(ka, kind="stable"), np.argsort(kf, kind="stable")
    ka_s, kf_s = ka[oa], kf[of]
    rank = np.empty(2 * n, np.int64)
    rank[oa] = np.searchsorted(kf_s, ka_s, side="right") + np.arange(n)
    rank[n + of] = np.searchsorted(ka_s, kf_s, side="left") + np.arange(n)
    # rank within the process: minus the events of smaller pids
    upid, cnt = np.unique(pid, return_counts=True)
    first = np.concatenate([[0], np.cumsum(2 * cnt)[:-1]])[np.searchsorted(upid, pid)]
    return rank[:n] - first, rank[n:] - first


def _life_events(sa: np.ndarray, sf: np.ndarray) -> np.ndarray:
    """``pf - pa`` of :func:`_positions` for the blocks of one process (int64): the place of each block's
    free minus that of its allocation among the process's allocations and frees in seq order (frees first
    at an equal seq, then in block order), from one merge of the two sorted streams
    (:func:`.search.merge_places`) instead of the sorts of both keys and a rank of every event (issue 30:
    ~0.8 GB less at 100 M events)."""
    n = len(sa)
    rows_t = np.int32 if n < 2 ** 31 - 1 else np.int64
    oa = None if ascending(sa) else np.argsort(sa, kind="stable").astype(rows_t, copy=False)
    of = np.argsort(sf, kind="stable").astype(rows_t, copy=False)
    life = np.empty(n, np.int64)
    for which, lo, at in merge_places(sf[of], sa if oa is None else sa[oa]):
        hi = lo + len(at)
        if which == 0:                      # the frees' places
            life[of[lo:hi]] = at
        elif oa is None:                    # minus the allocations'
            life[lo:hi] -= at
        else:
            life[oa[lo:hi]] -= at
    return life


def _event_positions_lexsort(pid, sa, sf) -> tuple[np.ndarray, np.ndarray]:
    n = len(pid)
    ev_pid = np.concatenate([pid, pid])
    ev_seq = np.concatenate([sa, sf])
    ev_kind = np.concatenate([np.ones(n, np.int8), np.zeros(n, np.int8)])  # frees first at equal seq
    order = np.lexsort((ev_kind, ev_seq, ev_pid))
    rank = np.empty(2 * n, np.int64)
    rank[order] = np.arange(2 * n)
    # rank within the process
    first = np.searchsorted(ev_pid[order], ev_pid, side="left")
    pos = rank - first
    return pos[:n], pos[n:]


def classify(trace: Trace, iters: Iterations | None = None, pid: int | None = None) -> pd.DataFrame:
    """One row per block of ``pid`` (default: the process iterations are found in, i.e. the
    main process): block_id, pid, size, kind, api, counts_device, t/seq alloc/free, freed,
    life_ns, life_seq, life_events, iter_alloc, iter_free (index of the regular step holding
    the alloc/free, -1 outside), phase (position of the alloc inside its step, 0..1, NaN
    outside) and ``class`` (see the module docstring).

    Computed once per trace, process and ``iters`` (kept by ``Trace.derived``): the report,
    the summary and the access analysis share it, so callers must not modify it in place."""
    if iters is None:
        iters = find_iterations(trace, pid)
    if pid is None:
        pid = iters.pid
    derived = getattr(trace, "derived", None)
    if derived is None:
        return _classify(trace, iters, pid)
    # the key holds id(iters) and the value holds iters itself, so the id cannot be reused
    # by another Iterations while this entry lives
    return derived(("lifetimes.classify", pid, id(iters)), lambda: (iters, _classify(trace, iters, pid)))[1]


def _classify(trace: Trace, iters: Iterations, pid: int | None) -> pd.DataFrame:
    cols = ["block_id", "pid", "size", "kind", "api", "counts_device", "t_alloc", "t_free",
            "seq_alloc", "seq_free", "freed"]
    if "stack_id" in trace.blocks:
        cols = cols + ["stack_id"]                # leaks are found per call site (_leaks)
    out = trace.blocks[cols]                     # a copy of these columns only
    if pid is not None:
        m = out["pid"].to_numpy() == pid
        if not m.all():
            out = out[m]
    bid = out["block_id"].to_numpy()
    if len(bid) > 1 and not (np.diff(bid) > 0).all():
        out = out.sort_values("block_id")
    out = out.reset_index(drop=True)
    sa = out["seq_alloc"].to_numpy(np.int64)
    sf = out["seq_free"].to_numpy(np.int64)
    freed = out["freed"].to_numpy(bool)
    out["life_ns"] = out["t_free"] - out["t_alloc"]
    out["life_seq"] = sf - sa
    pa, pf = _event_positions(out) if len(out) else (np.zeros(0, np.int64),) * 2
    out["life_events"] = pf - pa
    ia = iters.iteration_of(sa)
    # a block still alive at the end of the trace is not "freed in" any step
    ifr = np.where(freed, iters.iteration_of(np.maximum(sf - 1, sa)), -1)
    out["iter_alloc"], out["iter_free"] = ia, ifr
    phase = np.full(len(out), np.nan)
    if iters.count:
        B = iters.boundaries
        k = ia >= 0
        phase[k] = (sa[k] - B[ia[k]]) / np.maximum(B[ia[k] + 1] - B[ia[k]], 1)
    out["phase"] = phase

    code = CLASSES.index
    span = iters.seq_range if iters.seq_range != (0, 0) else (
        (int(sa.min()), int(sf.max())) if len(sa) else (0, 0))
    cls = _class_codes(sa, sf, freed, ia, ifr, iters, span)
    cls[_leaks(trace, out, ia, freed, iters)] = code("leak")
    out["class"] = pd.Categorical.from_codes(cls, categories=CLASSES)
    return out


def _class_codes(sa, sf, freed, ia, ifr, iters: Iterations, seq_range: tuple[int, int]) -> np.ndarray:
    """The class code (int8, ``CLASSES``; leaks not marked) of each block from its allocation and free
    seqs, whether it was freed and the steps it was allocated and freed in; ``seq_range``: the run's
    span when it has no steps (a block living 90 % of it is persistent)."""
    code = CLASSES.index
    cls = np.empty(len(sa), dtype=np.int8)
    if iters.count:
        B = iters.boundaries
        c = iters.count
        overlaps = (sa < B[c]) & (sf > B[0])
        persistent = overlaps & (sa < B[1]) & (~freed | (sf >= B[c]))
        same = (ia >= 0) & (ia == ifr)
        cls[:] = code("cross_iteration")
        cls[same] = code("per_iteration")
        cls[persistent] = code("persistent")
        cls[~overlaps] = code("outside")
    else:
        span = max(seq_range[1] - seq_range[0], 1)
        long_lived = ~freed | ((sf - sa) >= 0.9 * span)
        cls[:] = code("transient")
        cls[long_lived] = code("persistent")
    return cls


def class_series(trace: Trace, iters: Iterations | None = None, pid: int | None = None) -> pd.Series:
    """``block_id -> class name`` of :func:`classify`'s blocks (its ``class`` column as text, indexed by
    ``block_id``: what the exports and the report's classes read), made a piece of blocks at a time:
    only the block ids and one class code per block are kept, not classify's table (about 120
    bytes a block).  Blocks whose ids are not ascending, or a run without steps and without a seq
    range: :func:`classify` itself."""
    if iters is None:
        iters = find_iterations(trace, pid)
    if pid is None:
        pid = iters.pid
    codes = _codes_in_pieces(trace, iters, pid)
    if codes is None:
        return _series_of(classify(trace, iters, pid))
    bid, cls = codes
    # the class column's text exactly as _series_of makes it (the same dtype: the classes' own str
    # objects in an object array, taken by code; a code outside CLASSES through pandas' own text)
    if len(cls) and (cls.min() < 0 or cls.max() >= len(CLASSES)):
        text = pd.Series(pd.Categorical.from_codes(cls, categories=CLASSES)).astype(str).to_numpy()
    else:
        text = np.array(CLASSES, dtype=object)[cls]
    # no copies of the two arrays (pandas 3's constructors copy a numpy array by default: ~0.2 GB at 100 M)
    return pd.Series(text, index=pd.Index(bid, name="block_id", copy=False), copy=False)


def _codes_in_pieces(trace: Trace, iters: Iterations, pid: int | None) -> tuple[np.ndarray, np.ndarray] | None:
    """(block ids, class codes) of :func:`classify`'s blocks, in its row order, made a piece of blocks at
    a time; None where classify itself is needed (block ids not ascending, or a run without steps and
    without a seq range)."""
    b = trace.blocks
    if (iters.count == 0 and iters.seq_range == (0, 0)) or not len(b):
        return None
    cols = {c: b[c].to_numpy() for c in ("block_id", "pid", "seq_alloc", "seq_free", "freed")}
    sid_col = b["stack_id"].to_numpy() if "stack_id" in b else None
    code = CLASSES.index
    leak = leak_stacks(trace) if sid_col is not None else []
    last = None
    pairs_k, pairs_i, pairs_row, freed_keys = [], [], [], []     # the leak rule's inputs (small)
    n_out = 0
    # the output's length first, so that ids and codes are filled in place (no list of pieces and
    # no concatenation: at 100 M events ~0.1 GB less)
    if pid is None:
        n_all = len(b)
    else:
        n_all = 0
        for lo, hi in spans(len(b), piece_rows()):
            n_all += int(np.count_nonzero(cols["pid"][lo:hi] == pid))
            release(cols["pid"], lo, hi)
    ids_all = np.empty(n_all, np.int64)
    cls_all = np.empty(n_all, np.int8)
    for lo, hi in spans(len(b), piece_rows()):
        m = None if pid is None else cols["pid"][lo:hi] == pid
        take = (lambda a: a[lo:hi]) if m is None else (lambda a: a[lo:hi][m])
        bid = take(cols["block_id"])
        if len(bid) and ((len(bid) > 1 and not (np.diff(bid) > 0).all()) or (last is not None and bid[0] <= last)):
            return None                 # ids not ascending: classify sorts
        if len(bid):
            last = bid[-1]
        sa = take(cols["seq_alloc"]).astype(np.int64)
        sf = take(cols["seq_free"]).astype(np.int64)
        freed = take(cols["freed"]).astype(bool)
        ia = iters.iteration_of(sa)
        ifr = np.where(freed, iters.iteration_of(np.maximum(sf - 1, sa)), -1)
        cls = _class_codes(sa, sf, freed, ia, ifr, iters, iters.seq_range)
        if sid_col is not None:             # _leaks, a piece at a time
            sid = take(sid_col).astype(np.int64)
            pp = take(cols["pid"]).astype(np.int64)
            live = ~freed & (sid >= 0)
            mask = np.zeros(len(sa), bool)
            for p_, s_ in leak:
                mask |= live & (pp == p_) & (sid == s_)
            if iters.count >= 2:
                key = (pp << 32) | (sid & 0xFFFFFFFF)
                idx = np.flatnonzero(live & (ia >= 1))
                pairs_k.append(key[idx])
                pairs_i.append(ia[idx])
                pairs_row.append(idx + n_out)
                fl = freed & (ia >= 1) & (sid >= 0)
                freed_keys.append(np.unique(key[fl]))
            cls[mask] = code("leak")
        for a in list(cols.values()) + ([sid_col] if sid_col is not None else []):
            release(a, lo, hi)
        ids_all[n_out:n_out + len(sa)] = bid
        cls_all[n_out:n_out + len(sa)] = cls
        n_out += len(sa)
    cls = cls_all
    if pairs_k:
        k, it, rows = np.concatenate(pairs_k), np.concatenate(pairs_i), np.concatenate(pairs_row)
        if len(k):
            nsteps = pd.DataFrame({"key": k, "it": it}).groupby("key")["it"].nunique()
            fk = np.concatenate(freed_keys)
            bad = nsteps.index[(nsteps >= LEAK_STEPS).to_numpy() & ~np.isin(nsteps.index.to_numpy(), fk)]
            if len(bad):
                cls[rows[np.isin(k, bad.to_numpy())]] = code("leak")
    return ids_all, cls


def _series_of(out: pd.DataFrame) -> pd.Series:
    """classify's table as ``block_id -> class name`` (as analysis.guarded reads it)."""
    return pd.Series(out["class"].astype(str).to_numpy(), index=pd.Index(out["block_id"], name="block_id"))


def _leaks(trace: Trace, out: pd.DataFrame, ia: np.ndarray, freed: np.ndarray, iters: Iterations) -> np.ndarray:
    """Blocks of a leak (see the module's doc): never freed, from a call site that leaks."""

    n = len(out)
    mask = np.zeros(n, bool)
    if n == 0 or "stack_id" not in out:
        return mask
    sid = out["stack_id"].to_numpy(np.int64)
    pid = out["pid"].to_numpy(np.int64)
    live = ~freed & (sid >= 0)
    for p, s in leak_stacks(trace):
        mask |= live & (pid == p) & (sid == s)
    if iters.count >= 2:
        # in the trace: never-freed blocks of one site allocated in LEAK_STEPS or more steps after the first,
        # with no block of that site freed after the first step
        idx = np.flatnonzero(live & (ia >= 1))
        if len(idx):
            key = (pid << 32) | (sid & 0xFFFFFFFF)
            sub = pd.DataFrame({"key": key[idx], "it": ia[idx]})
            nsteps = sub.groupby("key")["it"].nunique()
            fl = freed & (ia >= 1) & (sid >= 0)
            bad = nsteps.index[(nsteps >= LEAK_STEPS).to_numpy() & ~np.isin(nsteps.index.to_numpy(), key[fl])]
            if len(bad):
                mask[idx[np.isin(key[idx], bad.to_numpy())]] = True
    return mask


def _quantiles(x: np.ndarray) -> dict[str, float] | None:
    if len(x) == 0:
        return None
    q = np.quantile(x, QUANTILES)
    d = {f"p{int(p * 100)}": float(v) for p, v in zip(QUANTILES, q)}
    d.update(min=float(x.min()), max=float(x.max()), mean=float(x.mean()))
    return d


def size_histogram(sizes: np.ndarray) -> list[dict[str, int]]:
    """Power-of-two buckets [2^k, 2^(k+1)): blocks and bytes in each (non-empty ones)."""
    sizes = np.asarray(sizes, dtype=np.int64)
    if len(sizes) == 0:
        return []
    k = np.floor(np.log2(np.maximum(sizes, 1))).astype(np.int64)
    counts = np.bincount(k)
    nbytes = np.bincount(k, weights=sizes.astype(np.float64))
    return [{"lo": int(1 << i), "hi": int(1 << (i + 1)), "blocks": int(counts[i]),
             "bytes": int(nbytes[i])} for i in np.flatnonzero(counts)]


def live_at(blocks: pd.DataFrame, t: int) -> pd.DataFrame:
    """Blocks alive at instant ``t`` (after the allocations at t; frees at t applied)."""
    return blocks[(blocks["t_alloc"] <= t) & ((blocks["t_free"] > t) | ~blocks["freed"])]


def peak(classes: pd.DataFrame, top: int = 10, curve: tuple[np.ndarray, np.ndarray] | None = None,
         at_peak: tuple[int, int] | None = None) -> dict[str, Any]:
    """Peak live device bytes of the classified blocks and what is live then.  ``curve``: their
    ``live_bytes_curve`` when the caller has it; ``at_peak``: (its maximum, the time first reached)
    when the caller has only those."""
    dev = classes[classes["counts_device"]]
    if at_peak is None:
        t, live = live_bytes_curve(dev) if curve is None else curve
        if len(live) == 0:
            return {"bytes": 0, "t": None, "by_class": {}, "top_blocks": [], "blocks": 0}
        i = int(np.argmax(live))
        at_peak = int(live[i]), int(t[i])
    peak_bytes, t_peak = at_peak
    at = live_at(dev, t_peak)
    by_class = at.groupby("class", observed=True)["size"].sum()
    top_rows = at.sort_values(["size", "block_id"], ascending=[False, True]).head(top)
    return {
        "bytes": int(peak_bytes), "t": t_peak, "blocks": int(len(at)),
        "by_class": {str(k): int(v) for k, v in by_class.items()},
        "top_blocks": [
            {"block_id": int(r.block_id), "size": int(r.size), "kind": str(r.kind), "api": str(r.api),
             "class": str(r.cls),
             "t_alloc": int(r.t_alloc), "life_ns": int(r.life_ns)}
            for r in top_rows.rename(columns={"class": "cls"}).itertuples(index=False)],
    }


def per_iteration_peaks(blocks: pd.DataFrame, boundaries_t: np.ndarray,
                        curve: tuple[np.ndarray, np.ndarray] | None = None) -> np.ndarray:
    """Max live bytes inside each [boundaries_t[k], boundaries_t[k+1]) (0 when no event).
    ``curve``: ``live_bytes_curve(blocks)`` when the caller has it."""
    tt, live = live_bytes_curve(blocks) if curve is None else curve
    nk = len(boundaries_t) - 1
    out = np.zeros(max(nk, 0), np.int64)
    if nk <= 0 or len(tt) == 0:
        return out
    idx = np.searchsorted(tt, boundaries_t, side="left")
    lo, hi = idx[:-1], idx[1:]
    ne = hi > lo
    if ne.any():
        # segments are contiguous (boundaries are monotone); the extra index closes the last
        red = np.maximum.reduceat(np.append(live, 0), np.append(lo[ne], hi[ne][-1]))
        out[ne] = red[:-1]
    return out


def summary(trace: Trace, iters: Iterations | None = None, pid: int | None = None,
            top: int = 10) -> dict[str, Any]:
    """Classes, lifetimes, size distribution and the peak of one process (default: main)."""
    if iters is None:
        iters = find_iterations(trace, pid)
    lean = _lean_summary_inputs(trace, iters, pid, top) if len(trace.blocks) > LEAN_BLOCKS else None
    if lean is not None:
        return _summary_of(iters, *lean)
    c = classify(trace, iters, pid)
    on = c["counts_device"].to_numpy(bool)
    size = c["size"].to_numpy(np.int64)[on]
    life_ns = c["life_ns"].to_numpy(np.int64)[on]
    life_events = c["life_events"].to_numpy(np.int64)[on]
    cls = c["class"].cat.codes.to_numpy()[on]
    pk, per_it = _peaks(trace, c, iters, top)
    freed = c["freed"].to_numpy(bool)[on]
    return _summary_of(iters, size, life_ns, life_events, cls, freed, pk, per_it, len(c))


# above this many blocks in the trace (~20 M events), summary() reads the blocks' columns a piece at a
# time instead of making classify's table (issue 30: ~120 bytes a block, and its transient arrays: at
# 100 M events the report's lifetimes step peaked at 3.4 GB)
LEAN_BLOCKS = 2_000_000


def _summary_of(iters: Iterations, size, life_ns, life_events, cls, freed, pk, per_it, n_rows: int) -> dict:
    """summary()'s object from the classified device blocks' columns (in classify's row order), the
    peak, the per-step peaks and the number of classified blocks (device or not)."""
    per_class = {}
    for k, name in enumerate(CLASSES):
        g = cls == k
        if not g.any():
            continue
        per_class[name] = {
            "blocks": int(g.sum()), "bytes": int(size[g].sum()),
            "life_ns": _quantiles(life_ns[g]),
            "life_events": _quantiles(life_events[g]),
            "size": _quantiles(size[g]),
        }
    per_class = {name: per_class[name] for name in CLASSES if name in per_class}
    steady_peak = None
    if iters.count:
        lo, hi = iters.boundaries[0], iters.boundaries[-1]
        steady_peak = {"per_iteration_max": int(max(per_it)), "per_iteration_min": int(min(per_it)),
                       "seq_range": [int(lo), int(hi)]}
    return {
        "pid": iters.pid,
        "iterations": {"source": iters.source, "count": iters.count, "period_allocs": iters.period_allocs},
        "blocks": int(len(size)),
        "bytes_allocated": int(size.sum()),
        "never_freed": int((~freed).sum()),
        "classes": per_class,
        "sizes": {"quantiles": _quantiles(size),
                  "histogram": size_histogram(size)},
        "lifetime_ns": _quantiles(life_ns),
        "lifetime_events": _quantiles(life_events),
        "peak": pk,
        "steady_peak": steady_peak,
        "other_blocks": int(n_rows - len(size)),
    }


def _lean_summary_inputs(trace: Trace, iters: Iterations, pid: int | None, top: int):
    """:func:`_summary_of`'s arguments without classify's table: the class codes made a piece of blocks
    at a time (:func:`_codes_in_pieces`), the event positions from the three seq columns, the other
    columns read from the blocks' (mapped) columns, and the peak's table only the blocks live at the
    peak.  None where classify itself is needed (see :func:`_codes_in_pieces`; steps out of time order)."""
    if pid is None:
        pid = iters.pid
    bt = iters.boundaries_t if iters.count else None
    if pid is None:
        return None             # every process's blocks: their own curve (_peaks)
    if bt is not None and len(bt) > 1 and (np.diff(np.asarray(bt, np.int64)) < 0).any():
        return None
    codes = _codes_in_pieces(trace, iters, pid)
    if codes is None:
        return None
    ids, cls_all = codes
    del ids
    b = trace.blocks
    mine = b["pid"].to_numpy() == pid
    rows = None if mine.all() else np.flatnonzero(mine)

    def col(name, dtype):
        a = b[name].to_numpy()
        out = (a if rows is None else a[rows]).astype(dtype, copy=False)
        release(a, 0, len(a))
        return out

    on = col("counts_device", bool)
    life_events = _life_events(col("seq_alloc", np.int64), col("seq_free", np.int64))[on]
    size = col("size", np.int64)
    t_alloc, t_free, freed_all = col("t_alloc", np.int64), col("t_free", np.int64), col("freed", bool)
    n_rows = len(on)
    mp = masked_peaks(trace, mine, bt)
    if mp.events:
        t = mp.t
        at = np.flatnonzero(on & (t_alloc <= t) & ((t_free > t) | ~freed_all))
        src = at if rows is None else rows[at]
        table = pd.DataFrame({"block_id": b["block_id"].to_numpy()[src], "size": size[at],
                              "kind": b["kind"].iloc[src].to_numpy(), "api": b["api"].iloc[src].to_numpy(),
                              "counts_device": np.ones(len(at), bool), "t_alloc": t_alloc[at],
                              "t_free": t_free[at], "freed": freed_all[at],
                              "life_ns": t_free[at] - t_alloc[at],
                              "class": pd.Categorical.from_codes(cls_all[at], categories=CLASSES)})
        pk = peak(table, top=top, at_peak=(mp.peak, mp.t))
    else:
        pk = peak(pd.DataFrame({"counts_device": np.zeros(0, bool)}), top=top,
                  curve=(np.zeros(0, np.int64), np.zeros(0, np.int64)))
    life_ns = (t_free - t_alloc)[on]
    del t_alloc, t_free
    return (size[on], life_ns, life_events, cls_all[on], freed_all[on], pk, mp.per_window, n_rows)


def _peaks(trace: Trace, classes: pd.DataFrame, iters: Iterations, top: int):
    """(:func:`peak` of the classified blocks, :func:`per_iteration_peaks` of their curve or None
    without iterations).  The classified blocks are usually the trace's device blocks of one process:
    then both are read from the trace's live events in pieces (:func:`.live_windows.masked_peaks`:
    the same events in the same order, nothing of the trace's length kept); else from their own curve."""
    bt = iters.boundaries_t if iters.count else None
    mine = _one_process_mask(trace, classes)
    if mine is None or (bt is not None and len(bt) > 1 and (np.diff(np.asarray(bt, np.int64)) < 0).any()):
        curve = live_bytes_curve(classes)
        return (peak(classes, top=top, curve=curve),
                per_iteration_peaks(None, bt, curve=curve) if bt is not None else None)
    mp = masked_peaks(trace, mine, bt)
    empty = (np.zeros(0, np.int64), np.zeros(0, np.int64))
    pk = peak(classes, top=top, at_peak=(mp.peak, mp.t)) if mp.events else peak(classes, top=top, curve=empty)
    return pk, mp.per_window


def _one_process_mask(trace: Trace, classes: pd.DataFrame) -> np.ndarray | None:
    """Rows of ``trace.blocks`` of the classified blocks' process, when the classified device blocks are
    exactly that process's device blocks (None otherwise: not the trace's blocks of one process)."""
    b = trace.blocks
    if not len(classes):
        return None
    pid = classes["pid"].iloc[0]
    mine = b["pid"].to_numpy() == pid
    if int((mine & b["counts_device"].to_numpy(bool)).sum()) != int(classes["counts_device"].sum()):
        return None
    return mine
