"""Two runs side by side: what grew, what appeared, what vanished (``pyinterpose diff A B``).

:func:`profile` reduces one trace to the tables a diff compares (plain values, so a trace can be let
go once profiled); :func:`diff` puts two profiles side by side; :func:`gate` checks one metric
against a threshold (``--fail-above``).  Pure functions over the trace's tables.

What is compared:

* ``totals``: ``peak`` (peak live device bytes, the figure every command shows), ``reserved``
  (what the framework's allocator reserved: the peak of its own blocks in a reserved view, its
  simulation on its own requests in a blocks view — ``simulated: pytorch|bfc`` — or unknown when
  no framework allocator was recognised), ``allocated`` (device bytes allocated in total) and
  ``blocks`` (device allocations);
* ``call_sites``: per call site (:func:`pyinterpose.trace.stacks.call_site`: the first frame
  outside allocation helpers; ``(no call site recorded)`` for blocks without a stack) the bytes
  live at the run's peak, the bytes allocated and the blocks;
* ``owners``: the same per owner (the calling object, :func:`~pyinterpose.analysis.owners.block_owners`);
* ``classes``: per lifetime class of the main process
  (:func:`pyinterpose.analysis.lifetimes.classify`);
* ``steps``: per regular step of the main process (:func:`~pyinterpose.analysis.iterations.find_iterations`):
  the peak live bytes inside the step, the device allocations and bytes allocated in it (a profile holds them
  as int64 columns, :class:`Steps`; the diff's rows, :class:`StepPairs`, are made when read, and ``--json``
  writes them from the columns a chunk at a time: ~450 k steps at 100 M events).

Every row of a keyed table (call site, owner, class) has ``a`` and ``b`` (None where the key is
absent from that run), ``delta`` (of ``peak_live_bytes``) and ``status``: ``appeared`` (only in B),
``vanished`` (only in A), ``grew``, ``shrank`` or ``same`` (by live bytes at the peak, then bytes
allocated).  Only device blocks count (host allocations are kept apart, as everywhere).
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Iterator

import numpy as np
import pandas as pd

from ..errors import PyinterposeError
from ..heap import give_back
from ..trace.chunking import spans
from ..trace.live import live_at_peak, scan
from ..trace.live_windows import masked_peaks
from ..trace.model import Trace, peak_live_bytes_of
from ..trace.pages import release, release_tables
from ..trace.piecewise import piece_rows
from ..trace.stacks import call_site
from .flame import peak_bytes_per_block
from .iterations import find_iterations
from .lifetimes import CLASSES, _codes_in_pieces, classify, per_iteration_peaks
from .owners import allocator, block_owners, owner_keys
from .pools import peak_reserved

NO_SITE = "(no call site recorded)"
METRICS = ("peak", "reserved", "site")
_SIM = {"pytorch": "pytorch", "jax": "bfc", "tensorflow": "bfc"}
# above this many blocks a trace is profiled from its columns (_profile_lean: the same figures, faster
# from ~1 M blocks and in bounded memory; below, the tables' own groupby is as fast)
LEAN_BLOCKS = 200_000


def _site_texts(trace: Trace, stack_ids: np.ndarray) -> np.ndarray:
    uniq, inv = np.unique(stack_ids, return_inverse=True)
    texts = np.array([call_site(trace, int(s)) if s >= 0 else "" for s in uniq.tolist()], dtype=object)
    out = texts[inv] if len(stack_ids) else np.zeros(0, object)
    out[out == ""] = NO_SITE
    return out


def _group(keys: np.ndarray, live: np.ndarray, size: np.ndarray) -> dict[str, dict[str, int]]:
    df = pd.DataFrame({"k": keys, "live": live, "size": size, "one": 1})
    g = df.groupby("k", sort=True).agg(peak_live_bytes=("live", "sum"), bytes=("size", "sum"), blocks=("one", "sum"))
    return {str(k): {"peak_live_bytes": int(r.peak_live_bytes), "bytes": int(r.bytes), "blocks": int(r.blocks)}
            for k, r in zip(g.index, g.itertuples())}


def reserved(trace: Trace) -> tuple[int | None, str]:
    """(bytes, source) the framework's allocator reserved at its peak; (None, why) when unknown."""

    a = allocator(trace)          # allocator_info's framework and mask, without its other figures' passes
    if trace.meta.get("view") == "reserved":
        return int(peak_live_bytes_of(trace, a.mask)), "reserved view"
    sim = _SIM.get(a.framework)
    del a
    if sim is None:
        return None, "no framework allocator recognised (its reserve is not known)"

    return peak_reserved(trace, sim), f"simulated: {sim}"


def _device_columns(trace: Trace) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(device mask, bytes each block holds at the peak, size, the device rows, their stack ids: -1 none)."""
    b = trace.blocks
    dev = b["counts_device"].to_numpy(bool)
    _, live = peak_bytes_per_block(trace)
    rows = np.flatnonzero(dev)
    sid = b["stack_id"].to_numpy(np.int64)[rows] if "stack_id" in b else np.full(len(rows), -1, np.int64)
    return dev, live, b["size"].to_numpy(np.int64), rows, sid


class Steps(Sequence):
    """A profile's steps as columns (int64, one entry per regular step): the peak live bytes inside the
    step, the device allocations made in it and their bytes.  Read as a sequence, step ``i`` is the dict
    ``{"step", "peak_live_bytes", "blocks", "bytes"}`` (made when read: at 100 M events a trace has
    ~450 k steps, ~0.4 GB as dicts, issue 30)."""

    def __init__(self, peak: np.ndarray, blocks: np.ndarray, nbytes: np.ndarray):
        self.peak = np.asarray(peak, np.int64)
        self.blocks = np.asarray(blocks, np.int64)
        self.bytes = np.asarray(nbytes, np.int64)

    @classmethod
    def of(cls, steps) -> "Steps":
        """``steps`` as columns (a Steps, or a list of step dicts)."""
        if isinstance(steps, Steps):
            return steps
        rows = list(steps)
        return cls(*(np.array([r[k] for r in rows], np.int64) for k in ("peak_live_bytes", "blocks", "bytes")))

    def __len__(self) -> int:
        return len(self.peak)

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        i = range(len(self))[i]
        return {"step": i, "peak_live_bytes": int(self.peak[i]), "blocks": int(self.blocks[i]),
                "bytes": int(self.bytes[i])}

    def __repr__(self) -> str:
        return f"Steps({len(self)} steps)"


class StepPairs(Sequence):
    """:func:`diff`'s ``steps``: per step ``{"step", "a", "b", "delta"}`` (``a``/``b``: that profile's step,
    None past its last; ``delta``: of the peak live bytes, None unless both), made when read;
    :meth:`json_chunks` writes the JSON array from the columns a piece at a time."""

    def __init__(self, a, b):
        self.a, self.b = Steps.of(a), Steps.of(b)

    def __len__(self) -> int:
        return max(len(self.a), len(self.b))

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        i = range(len(self))[i]
        sa = self.a[i] if i < len(self.a) else None
        sb = self.b[i] if i < len(self.b) else None
        return {"step": i, "a": sa, "b": sb,
                "delta": (sb["peak_live_bytes"] - sa["peak_live_bytes"]) if sa and sb else None}

    def __repr__(self) -> str:
        return f"StepPairs({len(self)} steps)"

    def json_chunks(self, rows: int = 1 << 16) -> Iterator[str]:
        """The JSON array of the steps (``json.dumps`` of the list of dicts, separators ``,`` and ``:``),
        in pieces of ``rows`` steps."""
        n = len(self)
        yield "["
        for lo in range(0, n, rows):
            hi = min(n, lo + rows)
            sides = []
            for s in (self.a, self.b):
                k = min(hi, len(s))
                cols = [c[lo:k].tolist() for c in (s.peak, s.blocks, s.bytes)] if lo < k else [[], [], []]
                sides.append([f'{{"step":{lo + j},"peak_live_bytes":{p},"blocks":{nb},"bytes":{by}}}'
                              for j, (p, nb, by) in enumerate(zip(*cols))] + ["null"] * (hi - max(lo, k)))
            pa, pb = (s.peak[lo:hi].tolist() for s in (self.a, self.b))
            delta = [str(y - x) for x, y in zip(pa, pb)] + ["null"] * (hi - lo - min(len(pa), len(pb)))
            text = ",".join(f'{{"step":{lo + j},"a":{ja},"b":{jb},"delta":{d}}}'
                            for j, (ja, jb, d) in enumerate(zip(sides[0], sides[1], delta)))
            yield ("," if lo else "") + text
        yield "]"


def _step_rows(it, peaks: np.ndarray, seq_alloc: np.ndarray, size_f: np.ndarray) -> Steps:
    """Per regular step: its peak live bytes, and the device allocations (``seq_alloc``, ``size_f``: the
    process's device blocks) made in it and their bytes."""
    counts = _StepCounts(it)
    counts.add(seq_alloc, size_f)
    return counts.steps(peaks)


class _StepCounts:
    """The device allocations per regular step and their bytes, summed a piece of blocks at a time
    (the bytes in float64, as one ``bincount`` over every block sums them: exact integers below 2**53)."""

    def __init__(self, it):
        self.it, self.n = it, int(it.count)
        self.allocs = np.zeros(self.n, np.int64)
        self.nbytes = np.zeros(self.n, np.float64)

    def add(self, seq_alloc: np.ndarray, size_f: np.ndarray) -> None:
        k = self.it.iteration_of(seq_alloc)
        ok = k >= 0
        self.allocs += np.bincount(k[ok], minlength=self.n)[:self.n]
        self.nbytes += np.bincount(k[ok], weights=np.asarray(size_f, np.float64)[ok], minlength=self.n)[:self.n]

    def steps(self, peaks: np.ndarray) -> Steps:
        return Steps(np.asarray(peaks, np.int64)[:self.n], self.allocs, np.round(self.nbytes).astype(np.int64))


def profile(trace: Trace, label: str) -> dict[str, Any]:
    """The tables :func:`diff` compares, for one trace (plain values; the steps as :class:`Steps`
    columns).  A long trace (more than
    ``LEAN_BLOCKS`` blocks) is profiled from its columns, grouped by codes (:func:`_profile_lean`)."""
    if len(trace.blocks) > LEAN_BLOCKS:
        lean = _profile_lean(trace, label)
        if lean is not None:
            return lean

    b = trace.blocks
    dev, live, size, rows, sid = _device_columns(trace)
    owners = block_owners(trace).astype(str).to_numpy()[rows].astype(object)
    owners[owners == ""] = "(unknown)"
    res, res_src = reserved(trace)
    out: dict[str, Any] = {
        "label": label, "path": getattr(trace, "path", None),
        "totals": {"peak": peak_live_bytes_of(trace), "reserved": res, "allocated": int(size[rows].sum()),
                   "blocks": int(len(rows))},
        "reserved_source": res_src,
        "has_stacks": bool((sid >= 0).any()),
        "call_sites": _group(_site_texts(trace, sid), live[rows], size[rows]),
        "owners": _group(owners, live[rows], size[rows]),
        "classes": {}, "steps": [], "iterations": None,
    }
    it = find_iterations(trace)
    if it.pid is not None:
        cl = classify(trace, it)
        m = cl["counts_device"].to_numpy(bool)
        pos = pd.Index(b["block_id"].to_numpy()).get_indexer(cl["block_id"].to_numpy()[m])
        out["classes"] = _group(cl["class"].astype(str).to_numpy()[m], live[pos], cl["size"].to_numpy(np.int64)[m])
    if it.count:
        out["iterations"] = int(it.count)
        pb = b[(b["pid"].to_numpy() == it.pid) & dev]
        peaks = per_iteration_peaks(pb, np.asarray(it.boundaries_t, np.int64))
        out["steps"] = _step_rows(it, peaks, pb["seq_alloc"].to_numpy(np.int64), pb["size"].to_numpy(np.float64))
    return out


class _Sums:
    """Per key (int64): the live bytes at the peak, the bytes allocated and the blocks, summed a piece
    of rows at a time (exact int64 sums)."""

    DENSE = 1 << 20     # keys in [0, DENSE): summed by index; others through np.unique

    def __init__(self):
        self.parts: list[tuple[np.ndarray, np.ndarray]] = []

    def add(self, keys: np.ndarray, live: np.ndarray, size: np.ndarray) -> None:
        if not len(keys):
            return
        keys = np.asarray(keys, np.int64)
        lo, hi = int(keys.min()), int(keys.max())
        if lo >= 0 and hi < self.DENSE:
            inv, n = keys, hi + 1
        else:
            u, inv = np.unique(keys, return_inverse=True)
            inv, n = inv.reshape(-1), len(u)
        acc = np.zeros((3, n), np.int64)
        np.add.at(acc[0], inv, live)
        np.add.at(acc[1], inv, size)
        acc[2] = np.bincount(inv, minlength=n)
        if lo >= 0 and hi < self.DENSE:
            u = np.flatnonzero(acc[2])
            acc = acc[:, u]
        self.parts.append((u.astype(np.int64), acc))

    def result(self) -> tuple[np.ndarray, np.ndarray]:
        """(the keys, ascending; their sums: int64 (3, keys))."""
        if not self.parts:
            return np.zeros(0, np.int64), np.zeros((3, 0), np.int64)
        keys = np.concatenate([k for k, _ in self.parts])
        u, inv = np.unique(keys, return_inverse=True)
        out = np.zeros((3, len(u)), np.int64)
        for j in range(3):
            np.add.at(out[j], inv.reshape(-1), np.concatenate([a[j] for _, a in self.parts]))
        return u, out


def _by_name(names, acc: np.ndarray) -> dict[str, dict[str, int]]:
    """Sums per key (``acc``: (3, keys), ``names``: each key's name) summed per name (several keys
    may share one), in the names' sorted order: :func:`_group`'s table."""
    out: dict[str, list[int]] = {}
    for k in np.flatnonzero(acc[2]).tolist():
        r = out.setdefault(str(names[k]), [0, 0, 0])
        r[0] += int(acc[0, k])
        r[1] += int(acc[1, k])
        r[2] += int(acc[2, k])
    return {k: {"peak_live_bytes": v[0], "bytes": v[1], "blocks": v[2]} for k, v in sorted(out.items())}


def _settle(trace: Trace) -> None:
    """Between the long steps of a profile: the cached columns' pages and the heap's free pages given
    back (the CLI keeps freed memory: each step's transients would stay resident under the next)."""
    release_tables(trace)
    give_back()


def _profile_lean(trace: Trace, label: str) -> dict[str, Any] | None:
    """:func:`profile` in bounded memory (issue 30: at 100 M events the in-memory profile peaked at
    5.7 GB, the first lean one at 2.3 GB): the steps that need the whole trace first, each on its own
    (the iterations, the lifetime classes' codes, the reserve's replay, the bytes live at the peak —
    kept as the few blocks holding any —, the steps' peaks), then one pass over the blocks a piece at a
    time summing per stack id, (owner, API) key, class code and step.  Every figure is :func:`profile`'s.
    None where that needs classify itself (then :func:`profile` computes as before)."""
    it = find_iterations(trace)
    bt = np.asarray(it.boundaries_t, np.int64) if it.count else None
    if bt is not None and len(bt) > 1 and (np.diff(bt) < 0).any():
        return None
    cls = None
    if it.pid is not None:
        codes = _codes_in_pieces(trace, it, it.pid)
        if codes is None:
            return None
        cls = codes[1]          # classify's rows are the process's, in row order (block ids ascending)
        del codes
    _settle(trace)
    res, res_src = reserved(trace)
    _settle(trace)
    best, k, _ = scan(trace)
    peak = max(best, 0)
    live = live_at_peak(trace, k) if k >= 0 and best > 0 else np.zeros(0, np.int64)
    nz = np.flatnonzero(live)                   # the blocks live at the peak: few
    lv = live[nz]
    del live
    peaks = None
    b = trace.blocks
    if it.count:
        mask = np.zeros(len(b), bool)
        pid_col = b["pid"].to_numpy()
        for lo, hi in spans(len(b), piece_rows()):
            mask[lo:hi] = pid_col[lo:hi] == it.pid
            release(pid_col, lo, hi)
        peaks = masked_peaks(trace, mask, bt).per_window
        del mask
    _settle(trace)

    cols = {c: b[c].to_numpy() for c in ("counts_device", "size", "pid")}
    if "stack_id" in b:
        cols["stack_id"] = b["stack_id"].to_numpy()
    if it.count:
        cols["seq_alloc"] = b["seq_alloc"].to_numpy()
    okey, oname = owner_keys(trace)
    sites, owners, classes = _Sums(), _Sums(), _Sums()
    counts = _StepCounts(it) if it.count else None
    allocated = blocks = off = 0
    for lo, hi in spans(len(b), piece_rows()):
        dev = np.asarray(cols["counts_device"][lo:hi], bool)
        size = np.asarray(cols["size"][lo:hi], np.int64)
        lp = np.zeros(hi - lo, np.int64)
        j0, j1 = np.searchsorted(nz, (lo, hi))
        lp[nz[j0:j1] - lo] = lv[j0:j1]
        r = np.flatnonzero(dev)
        lr, sr = lp[r], size[r]
        sid = (np.asarray(cols["stack_id"][lo:hi], np.int64)[r] if "stack_id" in cols
               else np.full(len(r), -1, np.int64))
        sites.add(sid + 1, lr, sr)          # key 0: no stack
        owners.add(okey(lo, hi)[r], lr, sr)
        allocated += int(sr.sum())
        blocks += len(r)
        del r, lr, sr, sid
        if cls is not None:
            mine = np.asarray(cols["pid"][lo:hi]) == it.pid
            c = cls[off:off + int(np.count_nonzero(mine))]
            off += len(c)
            m = dev[mine]
            classes.add(c[m].astype(np.int64), lp[mine][m], size[mine][m])
            if counts is not None:
                counts.add(np.asarray(cols["seq_alloc"][lo:hi], np.int64)[mine][m], size[mine][m].astype(np.float64))
        for a in cols.values():
            release(a, lo, hi)
    del cols
    release_tables(trace)

    sk, sa = sites.result()
    texts = np.array([call_site(trace, int(s) - 1) if s > 0 else "" for s in sk.tolist()], dtype=object)
    texts[texts == ""] = NO_SITE
    ok_, oa = owners.result()
    on = oname(ok_)
    on[on == ""] = "(unknown)"
    out: dict[str, Any] = {
        "label": label, "path": getattr(trace, "path", None),
        "totals": {"peak": peak, "reserved": res, "allocated": allocated, "blocks": blocks},
        "reserved_source": res_src,
        "has_stacks": bool(len(sk) and sk[-1] > 0),
        "call_sites": _by_name(texts, sa),
        "owners": _by_name(on, oa),
        "classes": {}, "steps": [], "iterations": None,
    }
    if cls is None:
        return out
    ck, ca = classes.result()
    out["classes"] = _by_name(np.array(CLASSES, dtype=object)[ck], ca)
    if counts is not None:
        out["iterations"] = int(it.count)
        out["steps"] = counts.steps(peaks)
    return out


def _status(a: dict | None, b: dict | None) -> str:
    if a is None:
        return "appeared"
    if b is None:
        return "vanished"
    for key in ("peak_live_bytes", "bytes"):
        if b[key] != a[key]:
            return "grew" if b[key] > a[key] else "shrank"
    return "same"


_ORDER = {"appeared": 0, "grew": 1, "vanished": 2, "shrank": 3, "same": 4}


def _keyed(a: dict, b: dict, name: str) -> list[dict]:
    rows = []
    for k in sorted(set(a) | set(b)):
        ra, rb = a.get(k), b.get(k)
        va = ra["peak_live_bytes"] if ra else 0
        vb = rb["peak_live_bytes"] if rb else 0
        da = ra["bytes"] if ra else 0
        db = rb["bytes"] if rb else 0
        rows.append({name: k, "status": _status(ra, rb), "a": ra, "b": rb, "delta": vb - va,
                     "delta_pct": _pct(va, vb), "allocated_delta": db - da})
    rows.sort(key=lambda r: (-abs(r["delta"]), -abs(r["allocated_delta"]), _ORDER[r["status"]], r[name]))
    return rows


def _pct(a: int | None, b: int | None) -> float | None:
    if a is None or b is None:
        return None
    if a == 0:
        return 0.0 if b == 0 else None     # from nothing: no percentage (appeared)
    return 100.0 * (b - a) / a


def diff(a: dict, b: dict) -> dict[str, Any]:
    """Two profiles side by side (the ``diff --json`` object; its ``steps`` a :class:`StepPairs`: the
    list of per-step dicts, made when read)."""
    totals = {}
    for k in ("peak", "reserved", "allocated", "blocks"):
        va, vb = a["totals"][k], b["totals"][k]
        totals[k] = {"a": va, "b": vb, "delta": (vb - va) if va is not None and vb is not None else None,
                     "delta_pct": _pct(va, vb)}
    totals["reserved"]["source"] = {"a": a["reserved_source"], "b": b["reserved_source"]}
    steps = StepPairs(a["steps"], b["steps"])     # made when read, or written as JSON from the columns
    sites = _keyed(a["call_sites"], b["call_sites"], "call_site")
    counts = {s: sum(r["status"] == s for r in sites) for s in _ORDER}
    notes = []
    if not (a["has_stacks"] and b["has_stacks"]):
        without = [p["label"] for p in (a, b) if not p["has_stacks"]]
        notes.append(f"no call stacks in {' and '.join(without)}: {'its' if len(without) == 1 else 'their'} blocks are "
                     f"under {NO_SITE!r} (capture with --stacks python|native)")
    return {"a": {"label": a["label"], "path": a["path"], "iterations": a["iterations"]},
            "b": {"label": b["label"], "path": b["path"], "iterations": b["iterations"]},
            "totals": totals, "call_sites": sites, "call_site_counts": counts,
            "owners": _keyed(a["owners"], b["owners"], "owner"),
            "classes": _keyed(a["classes"], b["classes"], "class"), "steps": steps, "notes": notes}


# ------------------------------------------------------------------------------------------ gate
@dataclass
class Metric:
    kind: str               # "peak" | "reserved" | "site"
    site: str = ""          # kind "site": FILE:LINE (or any text a call site starts with)

    @property
    def name(self) -> str:
        return f"site:{self.site}" if self.kind == "site" else self.kind


def parse_metric(text: str) -> Metric:
    """``peak``, ``reserved`` or ``site:FILE:LINE`` (``site:train.py:88``; also ``site:TEXT``: the call
    sites whose text starts with TEXT, e.g. ``site:raw_alloc``)."""
    t = text.strip()
    if t in ("peak", "reserved"):
        return Metric(t)
    if t.startswith("site:") and t[5:].strip():
        return Metric("site", t[5:].strip())
    raise PyinterposeError(f"bad --metric {text!r}: expected peak, reserved or site:FILE:LINE")


def _site_match(key: str, want: str) -> bool:
    import os

    if key == want or key.startswith(want + " ") or key.startswith(want):
        return True
    head = key.split(" in ")[0]                     # "dir/train.py:88 in f" -> by base name too
    return os.path.basename(head) == os.path.basename(want)


def metric_values(d: dict, m: Metric) -> tuple[int | None, int | None, str]:
    """(A's value, B's value, what was measured) of ``m`` in the diff ``d``."""
    if m.kind in ("peak", "reserved"):
        t = d["totals"][m.kind]
        return t["a"], t["b"], ("peak live device bytes" if m.kind == "peak" else "bytes reserved by the allocator")
    rows = [r for r in d["call_sites"] if _site_match(r["call_site"], m.site)]
    if not rows:
        raise PyinterposeError(f"no call site matches {m.site!r} in either run (see `pyinterpose diff A B` for the "
                               f"call sites)")
    va = sum(r["a"]["peak_live_bytes"] for r in rows if r["a"])
    vb = sum(r["b"]["peak_live_bytes"] for r in rows if r["b"])
    names = ", ".join(r["call_site"] for r in rows[:3]) + (", ..." if len(rows) > 3 else "")
    return va, vb, f"bytes live at the peak from {names}"


def gate(d: dict, m: Metric, pct: float) -> dict[str, Any]:
    """Whether B's ``m`` exceeds A's by more than ``pct`` percent: {"metric", "a", "b", "delta_pct",
    "limit_pct", "exceeded", "what"}.  From 0 bytes in A, any growth exceeds."""
    va, vb, what = metric_values(d, m)
    if va is None or vb is None:
        which = " and ".join(x for x, v in (("A", va), ("B", vb)) if v is None)
        src = d["totals"]["reserved"]["source"]
        why = "; ".join(s for s in (src["a"] if va is None else None, src["b"] if vb is None else None) if s)
        raise PyinterposeError(f"--metric {m.name}: not known for {which} ({why})")
    p = _pct(va, vb)
    exceeded = (vb > va) if p is None else (p > pct)
    return {"metric": m.name, "a": va, "b": vb, "delta": vb - va, "delta_pct": p, "limit_pct": pct,
            "exceeded": bool(exceeded), "what": what}
