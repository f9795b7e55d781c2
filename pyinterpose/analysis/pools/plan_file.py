"""Building a plan file: a trace's allocations laid out in one arena, keyed so the shim can recognise them
at run time (``pyinterpose plan TRACE -o plan.json``, ``pyinterpose run --apply plan.json``;
docs/apply.md describes the format and the run-time matching).

* :func:`build` — from a blocks-view trace: one steady iteration (its boundary chosen at a request
  that occurs once per iteration, the *anchor*, or at ``pyinterpose.mark_step()`` markers) and the
  blocks that live across iterations, planned by any planner of :mod:`.planners` into one arena; each
  request keyed by (size, site, ordinal): the site is the FNV-1a hash of its owner (the basename of the
  object that called), the ordinal its rank among the requests of that (size, site) — within the
  iteration, or over the process's life for the blocks that live across iterations (``persistent``).
The file's format (check, digest, read, write): pyinterpose.trace.plan_format.

Only requests the shim can serve are planned: device memory from cudaMalloc, cudaMallocAsync,
cudaMallocFromPoolAsync, cuMemAlloc_v2, cuMemAllocAsync, cuMemAllocFromPoolAsync (and their _ptsz forms),
of the trace's main process.
"""
from __future__ import annotations

import hashlib
import os

import numpy as np
import pandas as pd

from ...errors import PyinterposeError
from ...trace.model import Trace
from ...trace.plan_format import ALIGNMENT, FORMAT, VERSION, check, owner_hash
from ..owners import _str_rows, _text
from .planners import PLANNERS, plan as run_planner
from .cyclic import rotate
from .problem import load

SERVED_APIS = ("cudaMalloc", "cudaMallocAsync", "cudaMallocAsync_ptsz", "cudaMallocFromPoolAsync",
               "cudaMallocFromPoolAsync_ptsz", "cuMemAlloc_v2", "cuMemAllocAsync", "cuMemAllocAsync_ptsz",
               "cuMemAllocFromPoolAsync", "cuMemAllocFromPoolAsync_ptsz")
SERVED_KINDS = ("device", "async", "pool")


def _round(size: np.ndarray) -> np.ndarray:
    return (size + ALIGNMENT - 1) // ALIGNMENT * ALIGNMENT


def _file_sha256(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def servable(trace: Trace, pid: int) -> pd.DataFrame:
    """The process's requests the shim can serve, in allocation order: block_id, size, owner, site,
    seq_alloc, seq_free, freed.  ``owner`` is categorical (its text per distinct owner)."""
    b = trace.blocks
    m = (b["pid"].to_numpy() == pid) & _str_rows(b["kind"], lambda k: k in SERVED_KINDS) \
        & _str_rows(b["api"], lambda a: a in SERVED_APIS) \
        & (b["size"].to_numpy() > 0)
    rows = np.flatnonzero(m)
    cols = ["block_id", "size", "seq_alloc", "seq_free", "freed"]
    r = pd.DataFrame({c: b[c].to_numpy()[rows] for c in cols})
    if "owner" in b:
        codes, names = _text(b["owner"])          # the owners' texts once per category ("nan": missing)
        codes, names = codes[rows], names.tolist()
    else:
        codes, names = np.zeros(len(rows), np.int8), [""]
    # equal texts (a category "nan" and a missing value) share one code, so that the categories are distinct
    first = {n: i for i, n in reversed(list(enumerate(names)))}
    remap = np.array([first[n] for n in names], np.int64)
    uniq = sorted(set(first.values()))
    dense = np.full(len(names), -1, np.int64)
    dense[uniq] = np.arange(len(uniq))
    codes = dense[remap][codes]
    cats = [names[i] for i in uniq]
    r["owner"] = pd.Categorical.from_codes(codes, categories=cats)
    r["site"] = np.array([owner_hash(n) for n in cats], np.uint64)[codes] if len(cats) else np.zeros(0, np.uint64)
    order = np.argsort(r["seq_alloc"].to_numpy(), kind="stable")
    if (np.diff(order) != 1).any():
        r = r.iloc[order]
    return r.reset_index(drop=True)


def _anchor(req: pd.DataFrame, bounds: np.ndarray) -> tuple[int, int] | None:
    """(size, site) of a request that occurs exactly once in every iteration [bounds[k], bounds[k+1]),
    the one with the fewest bytes live before it (the loop's low point); None when there is none."""
    sa = req["seq_alloc"].to_numpy(np.int64)
    it = np.searchsorted(bounds, sa, side="right") - 1
    n_it = len(bounds) - 1
    inside = (it >= 0) & (it < n_it)
    if not inside.any():
        return None
    # a (size, site) key occurs once in every iteration when every iteration holds a request, and the key
    # has n_it requests inside, in n_it distinct iterations (by codes: issue 30, ~11 M requests at 100 M events)
    ii = it[inside]
    if np.count_nonzero(np.bincount(ii, minlength=n_it)) != n_it:
        return None
    size_c, size_u = pd.factorize(req["size"].to_numpy()[inside])      # hashing: no sort of the rows
    site_c, site_u = pd.factorize(req["site"].to_numpy()[inside])
    kid, key_u = pd.factorize(size_c.astype(np.int64) * max(len(site_u), 1) + site_c)
    del size_c, site_c
    total = np.bincount(kid, minlength=len(key_u))
    ok = total == n_it
    if ok.any():
        # ... and those keys' requests fall in n_it distinct iterations (no key twice in one iteration)
        rows = np.flatnonzero(ok[kid])
        pair = kid[rows].astype(np.int64) * n_it + ii[rows]
        dup = pd.Series(pair).duplicated().to_numpy()
        if dup.any():
            ok[np.unique(kid[rows[dup]])] = False
        del rows, pair, dup
    if not ok.any():
        return None
    ns = max(len(site_u), 1)
    cand = {(int(size_u[k // ns]), int(site_u[k % ns])) for k in key_u[np.flatnonzero(ok)].tolist()}
    del kid, ii
    # live bytes just before each request of the first iteration (all servable blocks of the process): the
    # events up to its last request, sorted as the whole run's are (a prefix of that order)
    first = np.flatnonzero(it == 0)
    t_max = int(sa[first].max())
    sf = np.where(req["freed"].to_numpy(bool), req["seq_free"].to_numpy(np.int64), np.iinfo(np.int64).max)
    sizes = req["size"].to_numpy(np.int64)
    na = int(np.searchsorted(sa, t_max, side="right"))      # sa ascends (servable's order)
    fm = sf <= t_max
    t = np.concatenate([sa[:na], sf[fm]])
    d = np.concatenate([sizes[:na], -sizes[fm]])
    o = np.lexsort((d, t))
    live_after = np.cumsum(d[o])
    live_before = np.empty(len(t), np.int64)
    live_before[o] = live_after - d[o]
    lb = live_before[:na]
    best, best_live = None, None
    for i in np.flatnonzero(it == 0):   # ranked in the first iteration
        key = (int(req["size"].iat[i]), int(req["site"].iat[i]))
        if key in cand and (best_live is None or lb[i] < best_live):
            best, best_live = key, lb[i]
    return best


def _unservable_note(trace: Trace, pid: int, req: pd.DataFrame) -> str:
    """'' or why most of the process's device memory cannot be served (for the error lines)."""
    b = trace.blocks
    dev = (b["pid"].to_numpy() == pid) & b["counts_device"].to_numpy(bool)
    size = b["size"].to_numpy(np.int64)
    total = int(size[dev].sum())
    if total == 0 or int(req["size"].sum()) * 2 >= total:
        return ""
    vmm = int(size[dev & _str_rows(b["kind"], lambda k: k in ("vmm", "vmm_create"))].sum())
    what = (" through VMM (cuMemCreate + cuMemMap: JAX's platform allocator, PyTorch's expandable segments)"
            if vmm * 2 > total else " through functions --apply does not serve (managed, pitched, VMM)")
    return (f" -- and {100 * (total - int(req['size'].sum())) / total:.0f} % of this process's device bytes "
            f"came{what}, which --apply does not serve")


def build(trace: Trace, strategy: str = "optimal", time_limit: float = 10.0, pid: int | None = None,
          trace_path: str | None = None) -> dict:
    """The plan of ``trace`` (see the module docstring) as a JSON-ready dict; checked."""
    from ..iterations import find_iterations

    if strategy not in PLANNERS:
        raise PyinterposeError(f"unknown planner {strategy!r} (choose from {', '.join(PLANNERS)})")
    pid = trace.main_pid if pid is None else pid
    if pid is None:
        raise PyinterposeError("the trace has no process")
    req = servable(trace, pid)
    why_not = _unservable_note(trace, pid, req)
    if req.empty:
        raise PyinterposeError("the trace has no device allocation the shim can serve "
                               f"({', '.join(SERVED_APIS[:2])}, ..., cuMemAllocFromPoolAsync)" + why_not)
    its = find_iterations(trace, pid)
    if its.count < 2:
        raise PyinterposeError("no training loop found in the trace (a plan is per iteration): "
                               + (its.reason or "fewer than 2 iterations") + why_not)
    sa = req["seq_alloc"].to_numpy(np.int64)
    markers = its.source == "markers"
    anchor = None if markers else _anchor(req, its.boundaries)
    if not markers and anchor is None:
        raise PyinterposeError("no request occurs exactly once per iteration, so the shim could not tell "
                               "where an iteration begins: record the trace with pyinterpose.mark_step() "
                               "markers" + why_not)
    lo, hi = its.steady_window()
    if anchor is not None:   # the window between two occurrences of the anchor, around the steady step
        occ = sa[(req["size"].to_numpy() == anchor[0]) & (req["site"].to_numpy(np.uint64) == np.uint64(anchor[1]))]
        j = int(np.searchsorted(occ, lo))
        j = min(j, len(occ) - 2)
        if j < 0:
            raise PyinterposeError("the iteration's anchor request occurs only once in the trace")
        lo, hi = int(occ[j]), int(occ[j + 1])
        first_boundary = int(occ[0])
        prev_lo = int(occ[j - 1]) if j >= 1 else None
    else:
        first_boundary = int(its.boundaries[0])
        k = int(np.searchsorted(its.boundaries, lo))
        prev_lo = int(its.boundaries[k - 1]) if k >= 1 else None
    sf = req["seq_free"].to_numpy(np.int64)
    freed = req["freed"].to_numpy(bool)
    in_win = (sa >= lo) & (sa < hi)
    inner = in_win & freed & (sf < hi)
    through = (sa < lo) & (~freed | (sf >= hi))
    rows = req[in_win | through].copy()
    phase = np.where(through[in_win | through], "persistent", "iteration")
    # event index of the window (the servable requests' allocs and frees inside it)
    ev = np.sort(np.concatenate([sa[in_win], sf[freed & (sf >= lo) & (sf < hi)]]))
    E = max(len(ev), 1)
    r_sa, r_sf = rows["seq_alloc"].to_numpy(np.int64), rows["seq_free"].to_numpy(np.int64)
    r_inner = inner[in_win | through]
    lower = np.where(r_inner, np.searchsorted(ev, r_sa), 0)
    upper = np.where(r_inner, np.searchsorted(ev, r_sf), E)   # across iterations: the whole period
    size = rows["size"].to_numpy(np.int64)
    # ordinals: within the window for the iteration's requests; over the process's life for the others
    key = pd.DataFrame({"size": req["size"].to_numpy(), "site": req["site"].to_numpy()})
    life_ord = key.groupby(["size", "site"], sort=False).cumcount().to_numpy()
    win_ord = np.full(len(req), -1)
    win_ord[in_win] = key[in_win].groupby(["size", "site"], sort=False).cumcount().to_numpy()
    sel = in_win | through
    ordinal = np.where(through[sel], life_ord[sel], win_ord[sel])
    # a block of the iteration that lives into the next one while the next one's block of the same key is
    # already allocated (it lives longer than an iteration) needs a second, alternate slot
    alt = np.zeros(len(rows), bool)
    arc_end = np.full(len(rows), -1, np.int64)   # crossing rows: where their previous instance is freed
    if prev_lo is not None:
        prev = (sa >= prev_lo) & (sa < lo)
        prev_ord = key[prev].groupby(["size", "site"], sort=False).cumcount().to_numpy()
        twins = prev & freed & (sf >= lo) & (sf < hi)
        free_of = {}
        for i, o in zip(np.flatnonzero(prev), prev_ord):
            if twins[i]:
                free_of[(int(req["size"].iat[i]), int(req["site"].iat[i]), int(o))] = int(sf[i])
        out_rows = ~r_inner & (phase == "iteration")
        for i in np.flatnonzero(out_rows):
            f = free_of.get((int(size[i]), int(rows["site"].iat[i]), int(ordinal[i])))
            alt[i] = f is not None and f > r_sa[i]
            if f is not None and not alt[i]:
                arc_end[i] = int(np.searchsorted(ev, f))
    # the window is a cycle (.cyclic): a crossing row is an arc [its allocation, E) u [0, its previous
    # instance's free); cut where the LOAD is least, when that is less than the whole-window rows give
    rotation = 0
    if (arc_end >= 0).any():
        whole_l = np.where(arc_end >= 0, 0, lower)
        whole_u = np.where(arc_end >= 0, E, np.maximum(upper, lower + 1))
        base = load(whole_l, whole_u, _round(size))
        arc_l = np.where(arc_end >= 0, np.searchsorted(ev, r_sa), whole_l)
        r, nl, nu = rotate(arc_l, whole_u, arc_end, _round(size), E)
        if load(nl, nu, _round(size)) < base:
            rotation, lower, upper = r, nl, nu
    n_rows = len(rows)
    alt_idx = np.flatnonzero(alt)
    slot = _round(np.concatenate([size, size[alt_idx]]))
    lower = np.concatenate([lower, np.zeros(len(alt_idx), np.int64)])
    upper = np.concatenate([np.maximum(upper, lower[:n_rows] + 1), np.full(len(alt_idx), E, np.int64)])
    prob = pd.DataFrame({"id": np.concatenate([rows["block_id"].to_numpy(), -1 - np.arange(len(alt_idx))]),
                         "lower": lower.astype(np.int64), "upper": upper.astype(np.int64), "size": slot})
    p = run_planner(prob, strategy, time_limit=time_limit)
    if p.offsets is None:
        raise PyinterposeError(f"the {strategy} planner found no plan within {time_limit:g} s")
    offsets = np.asarray(p.offsets, np.int64)
    capacity = int((offsets + slot).max()) if len(slot) else 0
    meta = trace.meta or {}
    n_iter = int(in_win.sum())
    sites_known = bool((req["owner"] != "").any())
    doc = {
        "format": FORMAT, "version": VERSION,
        "program": {"command": list(meta.get("command") or []), "cwd": meta.get("cwd")},
        "knobs": dict(meta.get("knobs") or {}), "user_env": dict(meta.get("user_env") or {}),
        "view": meta.get("view"),
        "trace": {"path": os.path.abspath(trace_path) if trace_path else getattr(trace, "path", None),
                  "sha256": _file_sha256(trace_path) if trace_path and os.path.isfile(trace_path) else None,
                  "pid": int(pid)},
        "planner": {"strategy": strategy, "time_limit_s": time_limit, "seconds": round(p.seconds, 4),
                    "optimal": p.optimal},
        "alignment": ALIGNMENT, "capacity": capacity, "load_bytes": int(load(prob["lower"], prob["upper"], slot)),
        "sites": sites_known,
        "iteration": {
            "boundary": "markers" if markers else "anchor",
            "anchor": None if anchor is None else {"size": anchor[0], "site": anchor[1],
                                                   "owner": str(req["owner"][(req["size"] == anchor[0])
                                                                             & (req["site"] == anchor[1])].iat[0])},
            "requests": n_iter, "window_seq": [lo, hi], "events": int(len(ev)),
            "iterations_in_trace": int(its.count), "source": its.source,
        },
        "judge_after": int((sa < first_boundary).sum()) + 3 * n_iter,
        "requests": [
            {"phase": str(ph), "size": int(s), "owner": str(o), "site": int(si), "ordinal": int(od),
             "offset": int(off), "slot_size": int(sl), "lifetime": [int(a), int(b)], "block_id": int(bid)}
            for ph, s, o, si, od, off, sl, a, b, bid in zip(
                phase, size, rows["owner"], rows["site"], ordinal, offsets, slot, prob["lower"], prob["upper"],
                rows["block_id"])],
    }
    if rotation:   # the lifetimes are on the window's events cut at this one (.cyclic)
        doc["iteration"]["rotation"] = int(rotation)
    for n, i in enumerate(alt_idx):   # the alternate slots (no block of the trace: block_id -1)
        r = dict(doc["requests"][i])
        r.update(offset=int(offsets[n_rows + n]), lifetime=[0, int(E)], block_id=-1, alternate=True)
        doc["requests"].append(r)
    if not sites_known:   # no owners in the trace: the shim keys by size and ordinal only
        for r in doc["requests"]:
            r["site"] = owner_hash("")
        if doc["iteration"]["anchor"]:
            doc["iteration"]["anchor"]["site"] = owner_hash("")
    check(doc)
    return doc
