"""The interactive memory timeline of the HTML report: the data it needs, packed small.

The page draws the timeline with uPlot (the copy shipped in the ``uplot-python``
package on PyPI, inlined when the report is written: no CDN; 120 kB, where plotly.js
was 4.8 MB and took seconds to compile) and our own script ``timeline.js`` (level of
detail on zoom, the minimap, the per-block hover readout).  This module
turns one device's blocks into the compact payload that script reads:

* events: every allocation and free of the device, in the order of
  ``report.live_curve`` (time, frees before allocs at the same instant); the x axis in
  "events" mode is the index of this sequence;
* blocks, sorted by their allocation event: alloc event (delta-coded), lifetime in
  events (``0xFFFFFFFF`` = never freed), size (index into a table of distinct
  sizes), lifetime class, owner, API and call site codes, block id (delta-coded);
* event times (delta-coded, in units of ``tq`` ns so that every delta fits 32 bits);
* iteration boundaries (event indices), NVML used memory (event index, bytes),
  the initial view (one steady iteration) and the names behind every code.

Numeric arrays are little-endian typed arrays, gzip-compressed and base64-coded
(the browser inflates them with ``DecompressionStream``); everything else is JSON.
"""
from __future__ import annotations

import base64
import html
import importlib.util
import json
import os
import zlib
from functools import lru_cache
from importlib import resources
from typing import Any

import numpy as np
import pandas as pd

from ..trace.model import Trace, counted_bytes
from .data import CLASS_ORDER
from ..analysis.clock import block_times, clock_of
from ..analysis.owners import block_owners
from ..trace.stacks import call_site
from .timeline_parts import _own_iterations, _reserved_steps
from .timeline_summary import MaskedRows, exact_max_events, payload as summary_payload, summary_text

NEVER = np.uint32(0xFFFFFFFF)
MAX_OWNERS = 12          # owners beyond these (by peak bytes) are drawn as "other owners"
MAX_SITES = 65535


def _uplot_file(name: str) -> str | None:
    """A file of uPlot's from the installed ``uplot-python`` package (None when absent).
    The package is located, not imported: only its static JS and CSS are used."""
    try:
        spec = importlib.util.find_spec("uplot")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    for d in spec.submodule_search_locations:
        try:
            with open(os.path.join(d, "static", name), encoding="utf-8") as f:
                return f.read()
        except OSError:
            continue
    return None


@lru_cache(maxsize=1)
def chart_js() -> str | None:
    """uPlot's JavaScript (``uPlot.iife.js``, MIT), None when ``uplot-python`` is absent."""
    js = _uplot_file("uPlot.iife.js")
    return js if js and "uPlot" in js else None


@lru_cache(maxsize=1)
def chart_css() -> str:
    """uPlot's stylesheet (``uPlot.min.css``)."""
    return _uplot_file("uPlot.min.css") or ""


@lru_cache(maxsize=1)
def timeline_js() -> str:
    return (resources.files("pyinterpose.report") / "timeline.js").read_text(encoding="utf-8")


def _pack(a: np.ndarray, dtype: str) -> dict[str, Any]:
    arr = np.ascontiguousarray(a, dtype=np.dtype(dtype).newbyteorder("<"))
    raw = arr.tobytes()
    # level 1: 7x faster than 6 on a 1 M-event trace's arrays and only 14 % larger (the event
    # times, noisy deltas, are most of the bytes at any level)
    z = zlib.compressobj(1, zlib.DEFLATED, 31)  # wbits 31 = gzip container
    gz = z.compress(raw) + z.flush()
    return {"dtype": np.dtype(dtype).name, "n": int(arr.size), "b64": base64.b64encode(gz).decode("ascii")}


def _owners(trace: Trace, b: pd.DataFrame) -> pd.Series:
    """Owner library per block: the owners analysis when present, else the trace's
    ``owner`` column, else the API the block came from (what the owners analysis
    itself falls back to for traces without call sites)."""
    own = None
    try:
        s = block_owners(trace)
        own = s.reindex(b.index) if s.index.equals(trace.blocks.index) or len(s) == len(trace.blocks) else None
        if own is not None and len(s) == len(trace.blocks) and not s.index.equals(trace.blocks.index):
            own = pd.Series(np.asarray(s), index=trace.blocks.index).reindex(b.index)
    except Exception:  # noqa: BLE001 - the owners analysis is optional here
        own = None
    if own is None and "owner" in b.columns:
        own = b["owner"].astype(str)
        if not (own != "").any():
            own = None
    api = b["api"].astype(str)
    if own is None:
        return api
    own = own.astype(object).where(own.notna() & (own.astype(str) != ""), api)
    return own.astype(str)


def _sites(trace: Trace, stack_id: np.ndarray) -> tuple[np.ndarray, list[str]]:
    """(code per block, names): the call site of each block's stack (-1: none)."""
    codes = np.full(len(stack_id), -1, np.int32)
    if len(stack_id) == 0 or not (stack_id >= 0).any():
        return codes, []
    uniq, inv = _sorted_codes(stack_id)
    names: list[str] = []
    index: dict[str, int] = {}
    ucode = np.full(len(uniq), -1, np.int32)
    for j, sid in enumerate(uniq.tolist()):
        if sid < 0:
            continue
        try:
            name = str(call_site(trace, int(sid)))
        except Exception:  # noqa: BLE001
            continue
        if name not in index:
            if len(names) >= MAX_SITES:
                continue
            index[name] = len(names)
            names.append(name)
        ucode[j] = index[name]
    return ucode[inv].astype(np.int32), names


def _codes(values, order: list[str] | None = None) -> tuple[np.ndarray, list[str]]:
    """(code per value, names): names sorted (or in ``order`` first), codes index them.
    Hash-based (pandas.factorize), so O(n) on millions of strings: the codes of a categorical,
    or the strings themselves, without converting every value to a string first."""
    if isinstance(values, pd.Categorical):
        inv, used = pd.factorize(values.codes, sort=False)       # the categories that occur
        cats = values.categories
        names = [str(cats[c]) if c >= 0 else "nan" for c in used]
    elif isinstance(values, np.ndarray) and values.dtype == object and pd.api.types.infer_dtype(
            values, skipna=False) == "string":
        inv, uniq = pd.factorize(values, sort=False)
        names = [str(x) for x in uniq]
    else:
        inv, uniq = pd.factorize(pd.Series(values, copy=False).astype(str), sort=False)
        names = [str(x) for x in uniq]
    key = (lambda k: (order.index(names[k]) if names[k] in order else len(order), names[k])) if order is not None \
        else (lambda k: names[k])
    rank = sorted(range(len(names)), key=key)
    remap = np.empty(len(names), np.int64)
    remap[rank] = np.arange(len(names))
    return remap[inv].astype(np.int64), [names[k] for k in rank]


def _sorted_codes(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(sorted distinct values, index of each value among them): np.unique(values,
    return_inverse=True) through a hash table instead of a sort of every value."""
    inv, uniq = pd.factorize(values, sort=False)
    uniq = np.asarray(uniq)
    rank = np.argsort(uniq, kind="stable")
    remap = np.empty(len(uniq), np.int64)
    remap[rank] = np.arange(len(uniq))
    return uniq[rank], remap[inv]


def payload(trace: Trace, device: int, classes: pd.Series | None = None, iterations=None,
            reserved_view: bool = False, reserved: dict | None = None) -> dict[str, Any] | None:
    """The JSON-able payload for one device (None when the device has no blocks).
    ``reserved``: a simulated allocator's reserved curve
    (:func:`pyinterpose.analysis.pools.reserved_curve`), placed on the event axis as
    ``reserved_line`` {"x", "ys"}."""
    bl = trace.blocks
    mask = bl["device"].to_numpy() == device
    if "counts_device" in bl:
        mask &= bl["counts_device"].to_numpy(bool)
    # only the columns used here (a copy of every column of millions of blocks costs hundreds of MB)
    cols = [c for c in ("block_id", "pid", "device", "freed", "t_alloc", "t_free", "seq_alloc", "seq_free", "size",
                        "device_bytes", "api", "owner", "stack_id") if c in bl.columns]
    if not mask.any():
        return None
    n_events = int(mask.sum()) + int((bl["freed"].to_numpy(bool) & mask).sum())
    if n_events > exact_max_events():
        # a long run: the curve as min/max per bucket at several zoom levels (timeline_summary)
        cols = [c for c in ("block_id", "pid", "freed", "t_alloc", "t_free", "seq_alloc", "seq_free", "size",
                            "device_bytes") if c in bl.columns]
        # every block counted on this device (one GPU): the table itself, not a copy of its columns
        return summary_payload(trace, device, bl if mask.all() else MaskedRows(bl, mask, cols), iterations=iterations,
                               reserved_view=reserved_view, reserved=reserved)
    b = bl.loc[mask, cols]
    freed = b["freed"].to_numpy(bool)
    nb = len(b)
    rows = np.arange(nb)

    t_alloc, t_free = block_times(trace, b)      # on the process's clock (device time when recorded)
    t_all = np.concatenate([t_free[freed], t_alloc])
    is_alloc = np.concatenate([np.zeros(int(freed.sum()), bool), np.ones(nb, bool)])
    r = np.concatenate([rows[freed], rows])
    # by time, frees before allocs at the same instant (the order of live_bytes_curve): one
    # int64 key, stably sorted (a merge sort: the frees and the allocs each come mostly sorted)
    if len(t_all) and int(t_all.min()) >= 0 and int(t_all.max()) < (1 << 61):
        ev_order = np.argsort(t_all * 2 + is_alloc, kind="stable")
    else:
        ev_order = np.lexsort((is_alloc, t_all))
    t, r, is_alloc = t_all[ev_order], r[ev_order], is_alloc[ev_order]
    n = len(t)
    ev_idx = np.arange(n, dtype=np.int64)
    a_ev = np.empty(nb, np.int64)
    a_ev[r[is_alloc]] = ev_idx[is_alloc]
    f_ev = np.full(nb, -1, np.int64)
    f_ev[r[~is_alloc]] = ev_idx[~is_alloc]
    # a block freed at the instant it was allocated: its free sorts first; put it right after
    bad = freed & (f_ev < a_ev)
    f_ev[bad] = a_ev[bad]  # lifetime 0 events: never live in the drawing, as in the data

    # the device's live bytes after every event: its peak and where the area ends
    size_rows = counted_bytes(b)     # the live-bytes sizes: a double-mapped window's overlap counts once
    total = np.cumsum(np.where(is_alloc, size_rows[r], -size_rows[r]))
    ipk = int(np.argmax(total)) if n else 0
    stats = {"peak_bytes": int(total[ipk]) if n else 0, "peak_t_ns": int(t[ipk]) if n else 0,
             "peak_event": ipk, "end_bytes": int(total[-1]) if n else 0}

    order = r[is_alloc]          # blocks by allocation event (the allocs appear in event order)
    a_s = a_ev[order]
    life = np.where(freed[order], f_ev[order] - a_s, np.int64(NEVER)).astype(np.uint32)
    size = size_rows[order]
    usize, size_idx = _sorted_codes(size)

    if classes is not None:
        cls = classes.reindex(b["block_id"].to_numpy()).astype(object)
        cls = cls.where(cls.notna(), "other").to_numpy()[order]
    else:
        cls = np.full(nb, "live" if not reserved_view else "reserved", dtype=object)
    cls_code, cls_names = _codes(cls, CLASS_ORDER)

    own = _owners(trace, b).to_numpy()[order]
    own_code, own_names = _codes(own)
    if len(own_names) > MAX_OWNERS:
        # keep the owners with the most bytes, lump the rest
        tot = np.bincount(own_code, weights=size.astype(np.float64), minlength=len(own_names))
        keep = np.argsort(-tot, kind="stable")[:MAX_OWNERS - 1]
        remap = np.full(len(own_names), MAX_OWNERS - 1, np.int64)
        remap[keep] = np.arange(len(keep))
        own_names = [own_names[k] for k in keep] + ["other owners"]
        own_code = remap[own_code]
    api = b["api"].array
    api_code, api_names = _codes(api.take(order) if isinstance(api, pd.Categorical) else api.to_numpy()[order])
    if "stack_id" in b.columns:
        site_code, site_names = _sites(trace, b["stack_id"].to_numpy(np.int64)[order])
    else:
        site_code, site_names = np.full(nb, -1, np.int32), []

    bid = b["block_id"].to_numpy(np.int64)[order]
    t_rel = t - (int(t[0]) if n else 0)
    dt = np.diff(t_rel, prepend=np.int64(0))
    dt = np.maximum(dt, 0)
    tq = max(1, int(-(-int(dt.max(initial=0)) // 0xFFFFFFFF)))
    # quantise cumulative times (not deltas) so rounding errors do not add up
    tqv = t_rel // tq
    dtq = np.diff(tqv, prepend=np.int64(0)).astype(np.uint32)

    arrays = {
        "a": _pack(np.diff(a_s, prepend=np.int64(0)).astype(np.uint32), "u4"),
        "life": _pack(life, "u4"),
        "size_idx": _pack(size_idx.astype(np.uint32), "u4" if len(usize) > 65535 else "u2"),
        "sizes": _pack(usize.astype(np.float64), "f8"),
        "cls": _pack(cls_code, "u1"),
        "own": _pack(own_code, "u1"),
        "api": _pack(api_code, "u1" if len(api_names) < 256 else "u2"),
        "bid": _pack(np.diff(bid, prepend=np.int64(0)).astype(np.int32), "i4"),
        "t": _pack(dtq, "u4"),
    }
    if site_names:
        arrays["site"] = _pack(site_code, "i4")

    iters_ev: list[int] = []
    iters_t: list[int] = []
    iterations = _own_iterations(trace, b, iterations)
    if iterations is not None and getattr(iterations, "count", 0):
        bt = np.asarray(iterations.boundaries_t, dtype=np.int64)
        iters_ev = np.searchsorted(t, bt, side="left").astype(np.int64).tolist()
        iters_t = bt.tolist()                     # ns since the start of capture, as every time
    if len(iters_ev) >= 2:
        k = (len(iters_ev) - 1) // 2
        lo, hi = iters_ev[k], iters_ev[k + 1]
        pad = max(1, (hi - lo) // 20)
        initial = [max(0, lo - pad), min(n - 1, hi + pad)]
    else:
        initial = [0, max(0, n - 1)]

    nvml = {"x": [], "y": []}
    nv = trace.nvml
    if len(nv):
        g = nv[nv["device"] == device].sort_values("t")
        if len(g):
            tt = g["t"].to_numpy(np.int64)
            # fractional event index: position between the events around the sample
            j = np.searchsorted(t, tt, side="right")
            x = np.clip(j - 0.5, -0.5, n - 0.5)
            nvml = {"x": [round(float(v), 2) for v in x], "y": g["used_bytes"].astype(np.int64).tolist()}

    extra = {}
    if reserved is not None:
        rl = _reserved_steps(b["block_id"].to_numpy(np.int64), a_ev, f_ev, reserved)
        if rl is not None:
            extra["reserved_line"] = rl
    start_epoch = trace.meta.get("start_time")

    extra.update(clock_of(trace).as_dict())      # the time axis' clock
    return {**extra,
        "device": int(device), "events": int(n), "blocks": int(nb), "tq": tq,
        "t0_ns": int(t[0]) if n else 0,          # the first event's time since the start of capture
        "start_epoch_s": float(start_epoch) if isinstance(start_epoch, (int, float)) else None,
        "reserved_view": bool(reserved_view),
        "names": {"cls": cls_names, "own": own_names, "api": api_names, "site": site_names},
        "arrays": arrays,
        "iters": iters_ev, "iters_t": iters_t,
        "nvml": nvml,
        "initial": initial,
        "stats": stats,
    }


def deferred(p: dict[str, Any], idx: int) -> str:
    """A summarised timeline's finer levels, each in its own element, for the end of the page (after the
    scripts: the first view is drawn before the browser has parsed them); the page decodes a level's
    tiles when the view first needs them.  Empty for an exact timeline."""
    if "summary" not in p:
        return ""
    return "".join(f'<script type="application/json" class="pit-tl-level" data-tl="{idx}" data-level="{k}">'
                   f'{json.dumps(tiles, separators=(",", ":"))}</script>'
                   for k, tiles in enumerate(p["summary"]["levels"]) if k)


def fragment(p: dict[str, Any], idx: int) -> str:
    """The HTML for one device's timeline: containers, controls and the payload."""
    dev = p["device"]
    note = ""
    if "summary" in p:
        # level 0 with the payload (the first view); the finer levels: :func:`deferred`
        p = {**p, "summary": {**p["summary"], "levels": p["summary"]["levels"][:1]}}
        note = f'<div class="pit-tl-summary note">{html.escape(summary_text(p))}</div>'
    data = json.dumps(p, separators=(",", ":")).replace("</", "<\\/")
    return (
        f'<div class="pit-tl" id="pit-tl-{idx}" data-idx="{idx}" data-device="{dev}" data-timeline="pending">'
        f'<div class="pit-tl-bar"><b>GPU {dev}</b>'
        '<span class="pit-tl-group">stack by <button data-mode="cls" class="on">lifetime class</button>'
        '<button data-mode="own">owner</button></span>'
        '<span class="pit-tl-group"><button data-act="steady">one steady iteration</button>'
        '<button data-act="all">whole run</button></span>'
        '<span class="pit-tl-info"></span></div>'
        f'{note}<div class="pit-tl-main" id="pit-tl-{idx}-main"></div>'
        '<div class="pit-tl-legend"></div>'
        f'<div class="pit-tl-mini" id="pit-tl-{idx}-mini"></div>'
        '<div class="pit-tl-help">Drag across the plot to zoom into a range, scroll to zoom around the cursor,'
        ' shift+scroll or shift+drag to pan; drag the red window in the minimap to move it, or drag across'
        ' the minimap to choose a range.</div>'
        '<div class="pit-tl-hover">Hover over the stacked area to see the block under the cursor.</div>'
        f'<script type="application/json" class="pit-tl-data">{data}</script>'
        '</div>'
    )
