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

A long trace (more blocks than a piece, ``trace.piecewise.piece_rows``; issue 30) is read a piece of blocks
at a time (:func:`_long_window`): the plan needs only the steady window's requests, those alive across it,
the previous iteration's, and each (size, site)'s count over the process's life before the window, so no
table of every request is made; the plan is the in-memory path's (:func:`_memory_window`) byte for byte.
"""
from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass

import numpy as np
import pandas as pd

from ...errors import PyinterposeError
from ...trace.chunking import spans
from ...trace.model import Trace
from ...trace.pages import release
from ...trace.piecewise import piece_rows
from ...trace.plan_format import ALIGNMENT, FORMAT, VERSION, check, owner_hash
from ..owners import _str_rows, _text
from .planners import PLANNERS, plan as run_planner
from .cyclic import rotate
from .problem import load

SERVED_APIS = ("cudaMalloc", "cudaMallocAsync", "cudaMallocAsync_ptsz", "cudaMallocFromPoolAsync",
               "cudaMallocFromPoolAsync_ptsz", "cuMemAlloc_v2", "cuMemAllocAsync", "cuMemAllocAsync_ptsz",
               "cuMemAllocFromPoolAsync", "cuMemAllocFromPoolAsync_ptsz")
SERVED_KINDS = ("device", "async", "pool")
VMM_KINDS = ("vmm", "vmm_create")


def _round(size: np.ndarray) -> np.ndarray:
    return (size + ALIGNMENT - 1) // ALIGNMENT * ALIGNMENT


def _file_sha256(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _distinct(names: list[str]) -> tuple[np.ndarray, list[str]]:
    """(the category of each name's code, the categories): equal texts (a category "nan" and a missing
    value) share one category, so that the categories are distinct."""
    first = {n: i for i, n in reversed(list(enumerate(names)))}
    remap = np.array([first[n] for n in names], np.int64)
    uniq = sorted(set(first.values()))
    dense = np.full(len(names), -1, np.int64)
    dense[uniq] = np.arange(len(uniq))
    return dense[remap], [names[i] for i in uniq]


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
    to_cat, cats = _distinct(names)
    codes = to_cat[codes]
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
    vmm = int(size[dev & _str_rows(b["kind"], lambda k: k in VMM_KINDS)].sum())
    return _note_text(total, vmm, int(req["size"].sum()))


def _note_text(total: int, vmm: int, served: int) -> str:
    """:func:`_unservable_note`'s text from the process's device bytes, those through VMM and those served."""
    if total == 0 or served * 2 >= total:
        return ""
    what = (" through VMM (cuMemCreate + cuMemMap: JAX's platform allocator, PyTorch's expandable segments)"
            if vmm * 2 > total else " through functions --apply does not serve (managed, pitched, VMM)")
    return (f" -- and {100 * (total - served) / total:.0f} % of this process's device bytes "
            f"came{what}, which --apply does not serve")


NO_ANCHOR = ("no request occurs exactly once per iteration, so the shim could not tell where an iteration "
             "begins: record the trace with pyinterpose.mark_step() markers")


@dataclass
class _Window:
    """What the plan is made of (:func:`_memory_window` or :func:`_long_window`; :func:`_plan`)."""

    sub: pd.DataFrame           # servable's rows alive across [lo, hi) and those allocated in [prev_lo or lo, hi)
    life_ord: np.ndarray        # per row of sub: its rank among the process's requests of its (size, site)
    ev_free: np.ndarray         # seq_free of every freed request of the process freed in [lo, hi)
    lo: int
    hi: int
    prev_lo: int | None         # where the iteration before the window begins (None: the window is the first)
    n_before: int               # the process's requests allocated before the first iteration boundary
    its: object                 # find_iterations' result
    markers: bool
    anchor: tuple[int, int] | None
    anchor_owner: str | None    # the owner text of the anchor's first request
    sites_known: bool           # some request has an owner text


def build(trace: Trace, strategy: str = "optimal", time_limit: float = 10.0, pid: int | None = None,
          trace_path: str | None = None, *, pieces: bool | None = None) -> dict:
    """The plan of ``trace`` (see the module docstring) as a JSON-ready dict; checked.  ``pieces``: read the
    blocks a piece at a time (default: when there are more blocks than a piece); the plan is the same."""
    if strategy not in PLANNERS:
        raise PyinterposeError(f"unknown planner {strategy!r} (choose from {', '.join(PLANNERS)})")
    pid = trace.main_pid if pid is None else pid
    if pid is None:
        raise PyinterposeError("the trace has no process")
    if pieces is None:
        pieces = len(trace.blocks) > piece_rows()
    w = _long_window(trace, pid) if pieces else None
    if w is None:
        w = _memory_window(trace, pid)
    return _plan(trace, pid, w, strategy, time_limit, trace_path)


def _no_requests(why_not: str) -> PyinterposeError:
    return PyinterposeError("the trace has no device allocation the shim can serve "
                            f"({', '.join(SERVED_APIS[:2])}, ..., cuMemAllocFromPoolAsync)" + why_not)


def _no_loop(its, why_not: str) -> PyinterposeError:
    return PyinterposeError("no training loop found in the trace (a plan is per iteration): "
                            + (its.reason or "fewer than 2 iterations") + why_not)


def _bounds(its, occ: np.ndarray | None) -> tuple[int, int, int | None, int]:
    """(lo, hi, prev_lo, first boundary) of the planned window: between two occurrences of the anchor
    (``occ``: their seq_alloc, ascending) around the steady step, else the steady step between markers."""
    lo, hi = its.steady_window()
    if occ is not None:
        j = int(np.searchsorted(occ, lo))
        j = min(j, len(occ) - 2)
        if j < 0:
            raise PyinterposeError("the iteration's anchor request occurs only once in the trace")
        return int(occ[j]), int(occ[j + 1]), (int(occ[j - 1]) if j >= 1 else None), int(occ[0])
    k = int(np.searchsorted(its.boundaries, lo))
    return lo, hi, (int(its.boundaries[k - 1]) if k >= 1 else None), int(its.boundaries[0])


def _memory_window(trace: Trace, pid: int) -> _Window:
    """The plan's inputs from the table of every servable request (:func:`servable`)."""
    from ..iterations import find_iterations

    req = servable(trace, pid)
    why_not = _unservable_note(trace, pid, req)
    if req.empty:
        raise _no_requests(why_not)
    its = find_iterations(trace, pid)
    if its.count < 2:
        raise _no_loop(its, why_not)
    sa = req["seq_alloc"].to_numpy(np.int64)
    markers = its.source == "markers"
    anchor = None if markers else _anchor(req, its.boundaries)
    if not markers and anchor is None:
        raise PyinterposeError(NO_ANCHOR + why_not)
    is_anchor = None if anchor is None else \
        (req["size"].to_numpy() == anchor[0]) & (req["site"].to_numpy(np.uint64) == np.uint64(anchor[1]))
    lo, hi, prev_lo, first_boundary = _bounds(its, None if anchor is None else sa[is_anchor])
    sf = req["seq_free"].to_numpy(np.int64)
    freed = req["freed"].to_numpy(bool)
    through = (sa < lo) & (~freed | (sf >= hi))
    keep = through | ((sa >= (lo if prev_lo is None else prev_lo)) & (sa < hi))
    key = pd.DataFrame({"size": req["size"].to_numpy(), "site": req["site"].to_numpy()})
    life_ord = key.groupby(["size", "site"], sort=False).cumcount().to_numpy()
    return _Window(sub=req[keep].reset_index(drop=True), life_ord=life_ord[keep],
                   ev_free=sf[freed & (sf >= lo) & (sf < hi)], lo=lo, hi=hi, prev_lo=prev_lo,
                   n_before=int((sa < first_boundary).sum()), its=its, markers=markers, anchor=anchor,
                   anchor_owner=None if anchor is None else str(req["owner"][is_anchor].iat[0]),
                   sites_known=bool((req["owner"] != "").any()))


class _Columns:
    """The blocks' columns a long trace's plan reads (views of the mapped cache columns, given back a piece
    at a time) and the lookups from their category codes: served kind, served API, VMM kind, and the
    owner's category (servable's: equal texts share one), its site and the site's index."""

    @classmethod
    def of(cls, b: pd.DataFrame) -> "_Columns | None":
        """None where a text column is not categorical (the in-memory path reads it)."""
        cat = lambda c: isinstance(b[c].dtype, pd.CategoricalDtype)     # noqa: E731
        if not (cat("kind") and cat("api")) or ("owner" in b and not cat("owner")):
            return None
        return cls(b)

    def __init__(self, b: pd.DataFrame):
        self.n = len(b)
        self.pid, self.size, self.dev = b["pid"].to_numpy(), b["size"].to_numpy(), b["counts_device"].to_numpy()
        self.sa, self.sf, self.freed = b["seq_alloc"].to_numpy(), b["seq_free"].to_numpy(), b["freed"].to_numpy()
        self.block_id = b["block_id"].to_numpy()
        self.kind, self.api = b["kind"].cat.codes.to_numpy(), b["api"].cat.codes.to_numpy()
        # per category, and last the missing value (code -1), which reads "nan" as astype(str) gives
        kinds = [str(x) for x in b["kind"].cat.categories] + ["nan"]
        apis = [str(x) for x in b["api"].cat.categories] + ["nan"]
        self.kind_ok = np.array([k in SERVED_KINDS for k in kinds], bool)
        self.kind_vmm = np.array([k in VMM_KINDS for k in kinds], bool)
        self.api_ok = np.array([a in SERVED_APIS for a in apis], bool)
        if "owner" in b:
            self.owner = b["owner"].cat.codes.to_numpy()
            names = [str(x) for x in b["owner"].cat.categories] + ["nan"]
        else:
            self.owner, names = None, [""]
        self.to_cat, self.cats = _distinct(names)
        self.site_of_cat = np.array([owner_hash(n) for n in self.cats], np.uint64)
        self.sites, self.site_idx_of_cat = np.unique(self.site_of_cat, return_inverse=True)
        self.named = np.array([n != "" for n in self.cats], bool)

    def cat(self, lo: int, hi: int, r: np.ndarray) -> np.ndarray:
        """The owner category of rows ``r`` of the piece [lo, hi)."""
        if self.owner is None:
            return np.zeros(len(r), np.int64)
        return self.to_cat[self.owner[lo:hi][r]]

    def release(self, lo: int, hi: int) -> None:
        for a in (self.pid, self.size, self.dev, self.sa, self.sf, self.freed, self.block_id, self.kind,
                  self.api, self.owner):
            if a is not None:
                release(a, lo, hi)


class _Keys:
    """Dense ids of (size, site index) keys, the same id for a key in every piece."""

    def __init__(self):
        self.ids: dict[tuple[int, int], int] = {}
        self.keys: list[tuple[int, int]] = []

    def __call__(self, size: np.ndarray, site_idx: np.ndarray, n_sites: int) -> np.ndarray:
        sc, su = pd.factorize(size)
        cc, cu = pd.factorize(sc.astype(np.int64) * n_sites + site_idx)
        g = np.empty(len(cu), np.int64)
        for j, u in enumerate(cu.tolist()):
            k = (int(su[u // n_sites]), int(u % n_sites))
            g[j] = self.ids.get(k, -1)
            if g[j] < 0:
                g[j] = self.ids[k] = len(self.keys)
                self.keys.append(k)
        return g[cc]

    def __len__(self) -> int:
        return len(self.keys)


def _grow(a: np.ndarray, n: int, fill) -> np.ndarray:
    return a if len(a) >= n else np.concatenate([a, np.full(n - len(a), fill, a.dtype)])


class _AnchorCounts:
    """:func:`_anchor`'s counts made a piece of requests at a time (in allocation order): per (size, site)
    key, its requests inside the iterations and whether two fall in one iteration; which iterations hold
    a request; the first iteration's requests and the bytes allocated before it."""

    def __init__(self, bounds: np.ndarray, n_sites: int):
        self.bounds, self.n_it, self.n_sites = np.asarray(bounds, np.int64), len(bounds) - 1, n_sites
        self.keys = _Keys()
        self.present = np.zeros(self.n_it, bool)
        self.total, self.twice = np.zeros(0, np.int64), np.zeros(0, bool)
        self.last_it = np.zeros(0, np.int64)        # per key: the last iteration it was seen in
        self.inside = False
        self.bytes_before = 0
        self.first: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []

    def add(self, sa: np.ndarray, size: np.ndarray, site_idx: np.ndarray) -> None:
        it = np.searchsorted(self.bounds, sa, side="right") - 1
        self.bytes_before += int(size[it < 0].sum())
        inside = (it >= 0) & (it < self.n_it)
        if not inside.any():
            return
        self.inside = True
        ii = it[inside]
        self.present[ii] = True
        kid = self.keys(size[inside], site_idx[inside], self.n_sites)
        n = len(self.keys)
        self.total, self.twice = _grow(self.total, n, 0), _grow(self.twice, n, False)
        self.last_it = _grow(self.last_it, n, -1)
        self.total += np.bincount(kid, minlength=n)
        # a key twice in one iteration: within this piece, or in the iteration an earlier piece ended in
        twice = pd.Series(kid * self.n_it + ii).duplicated().to_numpy() | (self.last_it[kid] == ii)
        self.twice[kid[twice]] = True
        np.maximum.at(self.last_it, kid, ii)
        f = ii == 0
        if f.any():
            self.first.append((sa[inside][f], size[inside][f], kid[f]))

    def anchor(self, c: _Columns, served: np.ndarray) -> tuple[int, int] | None:
        """:func:`_anchor`'s answer (the same rules; the live bytes from one more pass over the frees)."""
        if not self.inside or np.count_nonzero(self.present) != self.n_it:
            return None
        ok = (self.total == self.n_it) & ~self.twice
        if not ok.any():
            return None
        f_sa, f_size, f_kid = (np.concatenate(x) for x in zip(*self.first))
        t_max = int(f_sa.max())
        # live bytes just before each first-iteration request: the bytes allocated before it (requests in
        # allocation order, seq_alloc rising) less those freed at or before it (a free at its seq sorts first)
        freed_before = np.zeros(len(f_sa), np.int64)
        for lo, hi in spans(c.n, piece_rows()):
            r = np.flatnonzero(served[lo:hi])
            sf = c.sf[lo:hi][r].astype(np.int64)
            m = c.freed[lo:hi][r].astype(bool) & (sf <= t_max)
            if m.any():
                o = np.argsort(sf[m], kind="stable")
                cum = np.cumsum(c.size[lo:hi][r][m].astype(np.int64)[o])
                k = np.searchsorted(sf[m][o], f_sa, side="right")
                freed_before += np.where(k > 0, cum[np.maximum(k - 1, 0)], 0)
            c.release(lo, hi)
        live = self.bytes_before + np.cumsum(f_size) - f_size - freed_before
        cand = np.flatnonzero(ok[f_kid])
        if not len(cand):
            return None
        best = int(cand[np.argmin(live[cand])])        # the first of the least
        size, site = self.keys.keys[int(f_kid[best])]
        return size, int(c.sites[site])


def _long_window(trace: Trace, pid: int) -> _Window | None:
    """:func:`_memory_window`'s answer made a piece of blocks at a time (issue 30): a mask of the servable
    rows and the counts first (the anchor's, :class:`_AnchorCounts`), then the anchor's requests, then the
    window's rows, those alive across it and their (size, site) ranks.  None where the in-memory path is
    needed (a text column not categorical, requests not in allocation order)."""
    from ..iterations import find_iterations

    c = _Columns.of(trace.blocks)
    if c is None:
        return None
    its = find_iterations(trace, pid)       # first: it gives its own transient memory back
    markers = its.source == "markers"
    counts = _AnchorCounts(its.boundaries, len(c.sites)) if its.count >= 2 and not markers else None
    served = np.zeros(c.n, bool)
    n_req = req_bytes = dev_bytes = vmm_bytes = 0
    named, last = False, None
    for lo, hi in spans(c.n, piece_rows()):
        size = c.size[lo:hi]
        mine = c.pid[lo:hi] == pid
        dev = mine & c.dev[lo:hi].astype(bool)
        dev_bytes += int(size[dev].astype(np.int64).sum())
        vmm_bytes += int(size[dev & c.kind_vmm[c.kind[lo:hi]]].astype(np.int64).sum())
        m = mine & c.kind_ok[c.kind[lo:hi]] & c.api_ok[c.api[lo:hi]] & (size > 0)
        served[lo:hi] = m
        r = np.flatnonzero(m)
        if len(r):
            sa = c.sa[lo:hi][r].astype(np.int64)
            if (len(sa) > 1 and not (np.diff(sa) > 0).all()) or (last is not None and sa[0] <= last):
                return None                 # not in allocation order: servable sorts them
            last = int(sa[-1])
            sz = size[r].astype(np.int64)
            n_req += len(r)
            req_bytes += int(sz.sum())
            cat = c.cat(lo, hi, r)
            named = named or bool(c.named[cat].any())
            if counts is not None:
                counts.add(sa, sz, c.site_idx_of_cat[cat])
        c.release(lo, hi)
    why_not = _note_text(dev_bytes, vmm_bytes, req_bytes)
    if n_req == 0:
        raise _no_requests(why_not)
    if its.count < 2:
        raise _no_loop(its, why_not)
    anchor = occ = owner = None
    if not markers:
        anchor = counts.anchor(c, served)
        del counts
        if anchor is None:
            raise PyinterposeError(NO_ANCHOR + why_not)
        is_site = c.site_of_cat == np.uint64(anchor[1])
        parts = []
        for lo, hi in spans(c.n, piece_rows()):
            r = np.flatnonzero(served[lo:hi])
            cat = c.cat(lo, hi, r)
            m = (c.size[lo:hi][r] == anchor[0]) & is_site[cat]
            if m.any():
                parts.append(c.sa[lo:hi][r][m].astype(np.int64))
                if owner is None:
                    owner = c.cats[int(cat[m][0])]
            c.release(lo, hi)
        occ = np.concatenate(parts)
    lo, hi, prev_lo, first_boundary = _bounds(its, occ)
    # the rows the plan needs, each (size, site)'s rank over the process's life, the window's frees
    start = lo if prev_lo is None else prev_lo
    keys, seen = _Keys(), np.zeros(0, np.int64)
    cols = {k: [] for k in ("block_id", "size", "seq_alloc", "seq_free", "freed", "cat", "life")}
    ev_free, n_before = [], 0
    for p0, p1 in spans(c.n, piece_rows()):
        r = np.flatnonzero(served[p0:p1])
        sa = c.sa[p0:p1][r].astype(np.int64)
        sf = c.sf[p0:p1][r].astype(np.int64)
        freed = c.freed[p0:p1][r].astype(bool)
        size = c.size[p0:p1][r]
        n_before += int(np.count_nonzero(sa < first_boundary))
        ev_free.append(sf[freed & (sf >= lo) & (sf < hi)])
        pre = sa < lo
        life = np.full(len(r), -1, np.int64)
        cat = c.cat(p0, p1, r)
        if pre.any():
            kid = keys(size[pre].astype(np.int64), c.site_idx_of_cat[cat[pre]], len(c.sites))
            seen = _grow(seen, len(keys), 0)
            life[pre] = seen[kid] + pd.DataFrame({"k": kid}).groupby("k", sort=False).cumcount().to_numpy()
            seen += np.bincount(kid, minlength=len(keys))
        keep = (pre & (~freed | (sf >= hi))) | ((sa >= start) & (sa < hi))
        if keep.any():
            for k, v in (("block_id", c.block_id[p0:p1][r]), ("size", size), ("seq_alloc", sa),
                         ("seq_free", sf), ("freed", freed), ("cat", cat), ("life", life)):
                cols[k].append(v[keep])
        c.release(p0, p1)
    dtypes = {"block_id": c.block_id.dtype, "size": c.size.dtype, "seq_alloc": np.int64, "seq_free": np.int64,
              "freed": bool, "cat": np.int64, "life": np.int64}
    cols = {k: np.concatenate(v) if v else np.zeros(0, dtypes[k]) for k, v in cols.items()}
    cat, life = cols.pop("cat"), cols.pop("life")
    sub = pd.DataFrame(cols)
    sub["owner"] = pd.Categorical.from_codes(cat, categories=c.cats)
    sub["site"] = c.site_of_cat[cat]
    return _Window(sub=sub, life_ord=life, ev_free=np.concatenate(ev_free), lo=lo, hi=hi, prev_lo=prev_lo,
                   n_before=n_before, its=its, markers=markers, anchor=anchor, anchor_owner=owner,
                   sites_known=named)


def _plan(trace: Trace, pid: int, w: _Window, strategy: str, time_limit: float, trace_path: str | None) -> dict:
    """The plan (:func:`build`) from its inputs."""
    req, its, markers, anchor, lo, hi, prev_lo = w.sub, w.its, w.markers, w.anchor, w.lo, w.hi, w.prev_lo
    sa = req["seq_alloc"].to_numpy(np.int64)
    sf = req["seq_free"].to_numpy(np.int64)
    freed = req["freed"].to_numpy(bool)
    in_win = (sa >= lo) & (sa < hi)
    inner = in_win & freed & (sf < hi)
    through = (sa < lo) & (~freed | (sf >= hi))
    rows = req[in_win | through].copy()
    phase = np.where(through[in_win | through], "persistent", "iteration")
    # event index of the window (the servable requests' allocs and frees inside it)
    ev = np.sort(np.concatenate([sa[in_win], w.ev_free]))
    E = max(len(ev), 1)
    r_sa, r_sf = rows["seq_alloc"].to_numpy(np.int64), rows["seq_free"].to_numpy(np.int64)
    r_inner = inner[in_win | through]
    lower = np.where(r_inner, np.searchsorted(ev, r_sa), 0)
    upper = np.where(r_inner, np.searchsorted(ev, r_sf), E)   # across iterations: the whole period
    size = rows["size"].to_numpy(np.int64)
    # ordinals: within the window for the iteration's requests; over the process's life for the others
    key = pd.DataFrame({"size": req["size"].to_numpy(), "site": req["site"].to_numpy()})
    life_ord = w.life_ord
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
    sites_known = w.sites_known
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
                                                   "owner": w.anchor_owner},
            "requests": n_iter, "window_seq": [lo, hi], "events": int(len(ev)),
            "iterations_in_trace": int(its.count), "source": its.source,
        },
        "judge_after": w.n_before + 3 * n_iter,
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
