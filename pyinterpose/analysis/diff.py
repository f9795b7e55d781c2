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
  the peak live bytes inside the step, the device allocations and bytes allocated in it.

Every row of a keyed table (call site, owner, class) has ``a`` and ``b`` (None where the key is
absent from that run), ``delta`` (of ``peak_live_bytes``) and ``status``: ``appeared`` (only in B),
``vanished`` (only in A), ``grew``, ``shrank`` or ``same`` (by live bytes at the peak, then bytes
allocated).  Only device blocks count (host allocations are kept apart, as everywhere).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from ..errors import PyinterposeError
from ..trace.live_windows import masked_peaks
from ..trace.model import Trace, peak_live_bytes_of
from ..trace.stacks import call_site
from .flame import peak_bytes_per_block
from .iterations import find_iterations
from .lifetimes import CLASSES, _codes_in_pieces, classify, per_iteration_peaks
from .owners import allocator_info, block_owners, owner_codes
from .pools import reserved_curve

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

    info = allocator_info(trace)
    if trace.meta.get("view") == "reserved":
        return int(info["peak_live_bytes"]), "reserved view"
    sim = _SIM.get(info["framework"])
    if sim is None:
        return None, "no framework allocator recognised (its reserve is not known)"

    curve = reserved_curve(trace, sim)
    b = np.asarray(curve["bytes"])
    return (int(b.max()) if len(b) else 0), f"simulated: {sim}"


def _group_codes(codes: np.ndarray, names: np.ndarray, live: np.ndarray, size: np.ndarray) -> dict[str, dict[str, int]]:
    """:func:`_group` of ``names[codes]`` (codes: small non-negative ints per row), summed per code
    (exact int64 sums) and then per name (several codes may share one), in the names' sorted order."""
    n = len(names)
    acc = np.zeros((3, n), np.int64)
    np.add.at(acc[0], codes, live)
    np.add.at(acc[1], codes, size)
    acc[2] = np.bincount(codes, minlength=n)[:n]
    out: dict[str, list[int]] = {}
    for k in np.flatnonzero(acc[2]).tolist():
        r = out.setdefault(str(names[k]), [0, 0, 0])
        r[0] += int(acc[0, k])
        r[1] += int(acc[1, k])
        r[2] += int(acc[2, k])
    return {k: {"peak_live_bytes": v[0], "bytes": v[1], "blocks": v[2]} for k, v in sorted(out.items())}


def _device_columns(trace: Trace) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(device mask, bytes each block holds at the peak, size, the device rows, their stack ids: -1 none)."""
    b = trace.blocks
    dev = b["counts_device"].to_numpy(bool)
    _, live = peak_bytes_per_block(trace)
    rows = np.flatnonzero(dev)
    sid = b["stack_id"].to_numpy(np.int64)[rows] if "stack_id" in b else np.full(len(rows), -1, np.int64)
    return dev, live, b["size"].to_numpy(np.int64), rows, sid


def _step_rows(it, peaks: np.ndarray, seq_alloc: np.ndarray, size_f: np.ndarray) -> list[dict]:
    """Per regular step: its peak live bytes, and the device allocations (``seq_alloc``, ``size_f``: the
    process's device blocks) made in it and their bytes."""
    k = it.iteration_of(seq_alloc)
    ok = k >= 0
    n_alloc = np.bincount(k[ok], minlength=it.count)[:it.count]
    n_bytes = np.bincount(k[ok], weights=size_f[ok], minlength=it.count)[:it.count]
    return [{"step": i, "peak_live_bytes": int(peaks[i]), "blocks": int(n_alloc[i]),
             "bytes": int(round(n_bytes[i]))} for i in range(int(it.count))]


def profile(trace: Trace, label: str) -> dict[str, Any]:
    """The tables :func:`diff` compares, for one trace (plain values).  A long trace (more than
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


def _profile_lean(trace: Trace, label: str) -> dict[str, Any] | None:
    """:func:`profile` without a string per block or a copy of the blocks table (issue 30: at 100 M
    events the in-memory profile peaked at 5.7 GB): the call sites grouped by stack id, the owners
    by (owner, API) code, the classes by :func:`.lifetimes._codes_in_pieces`' codes and the steps'
    peaks from :func:`.live_windows.masked_peaks`, each the same figure as :func:`profile`'s.  None
    where those need classify itself (then :func:`profile` computes as before)."""
    it = find_iterations(trace)
    bt = np.asarray(it.boundaries_t, np.int64) if it.count else None
    if bt is not None and len(bt) > 1 and (np.diff(bt) < 0).any():
        return None
    codes = _codes_in_pieces(trace, it, it.pid) if it.pid is not None else None
    if it.pid is not None and codes is None:
        return None
    b = trace.blocks
    dev, live, size, rows, sid = _device_columns(trace)
    lr, sr = live[rows], size[rows]
    uniq, inv = np.unique(sid, return_inverse=True)
    texts = np.array([call_site(trace, int(s)) if s >= 0 else "" for s in uniq.tolist()], dtype=object)
    texts[texts == ""] = NO_SITE
    sites = _group_codes(inv.reshape(-1), texts, lr, sr)
    has_stacks = bool(len(uniq) and uniq[-1] >= 0)
    del sid, uniq, inv
    oc, on = owner_codes(trace, rows)
    on = on.copy()
    on[on == ""] = "(unknown)"
    owners = _group_codes(oc, on, lr, sr)
    del oc
    res, res_src = reserved(trace)
    out: dict[str, Any] = {
        "label": label, "path": getattr(trace, "path", None),
        "totals": {"peak": peak_live_bytes_of(trace), "reserved": res, "allocated": int(sr.sum()),
                   "blocks": int(len(rows))},
        "reserved_source": res_src,
        "has_stacks": has_stacks,
        "call_sites": sites,
        "owners": owners,
        "classes": {}, "steps": [], "iterations": None,
    }
    del lr, sr, rows
    if it.pid is None:
        return out
    mine = np.flatnonzero(b["pid"].to_numpy() == it.pid)       # classify's rows, in its order
    ids, cls = codes
    del ids
    m = dev[mine]
    pos = mine[m]
    out["classes"] = _group_codes(cls[m].astype(np.int64), np.array(CLASSES, dtype=object), live[pos], size[pos])
    del cls, m, live
    if it.count:
        out["iterations"] = int(it.count)
        mask = np.zeros(len(b), bool)
        mask[mine] = True
        peaks = masked_peaks(trace, mask, bt).per_window
        out["steps"] = _step_rows(it, peaks, b["seq_alloc"].to_numpy(np.int64)[pos], size[pos].astype(np.float64))
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
    """Two profiles side by side (the ``diff --json`` object)."""
    totals = {}
    for k in ("peak", "reserved", "allocated", "blocks"):
        va, vb = a["totals"][k], b["totals"][k]
        totals[k] = {"a": va, "b": vb, "delta": (vb - va) if va is not None and vb is not None else None,
                     "delta_pct": _pct(va, vb)}
    totals["reserved"]["source"] = {"a": a["reserved_source"], "b": b["reserved_source"]}
    steps = []
    for i in range(max(len(a["steps"]), len(b["steps"]))):
        sa = a["steps"][i] if i < len(a["steps"]) else None
        sb = b["steps"][i] if i < len(b["steps"]) else None
        steps.append({"step": i, "a": sa, "b": sb,
                      "delta": (sb["peak_live_bytes"] - sa["peak_live_bytes"]) if sa and sb else None})
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
