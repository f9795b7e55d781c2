"""One logical block per VMM buffer.

The CUDA virtual-memory API makes one buffer out of three calls:
``cuMemAddressReserve`` (a virtual range), ``cuMemCreate`` (physical memory, a
handle with no address) and ``cuMemMap`` (the handle's bytes at an address of the
range).  The shim records each as its own ALLOC (kinds ``vmm_reserve``,
``vmm_create``, ``vmm_map``); kernels' pointers land on the *map* (the only one of
the three with an address the program uses).  :func:`join` turns them into what an
analysis needs:

* **one ``vmm`` block per mapping**: the map's address, its size (the physical bytes
  behind it), the map → unmap lifetime (an unmap that never came ends at the
  reservation's ``cuMemAddressFree``, else at the end of the trace), the map's
  ``seq_alloc`` (so accesses resolve to it unchanged), ``api`` ``cuMemMap``;
  the physical handle's own lifetime in ``handle_t_create`` / ``handle_t_release``
  (``cuMemCreate`` → ``cuMemRelease``; -1 when the create is not in the trace) and
  the enclosing reservation in ``reservation_id`` (-1 when none);
* **physical bytes counted once**: a mapping counts the bytes of its offset range that no
  earlier mapping of the same handle, still live at its map time, already covers
  (``device_bytes``; ``counts_device`` when that is more than 0) — one handle mapped twice
  counts once, partial maps of one handle count each part, two live maps that partly overlap
  count their union (the second adds only what the first does not cover).  Known limit: when the
  first of two overlapping maps is unmapped while the second lives on, the bytes only the first
  counted are not counted again (a per-block constant cannot change mid-life), so the live
  curve can only be low there, never double;
* ``handle_types``: cuMemCreate's ``requestedHandleTypes`` (1 POSIX fd, 8 fabric, 0 none: a handle
  the program may export to other processes; recorded in the create's stream field; 0 in older traces);
* **the collective library's memory** (NCCL): a map of a handle imported from another process
  (``cuMemImportFromShareableHandle``) is kind ``vmm_import`` and a map of a multicast object
  (``cuMulticastCreate``) kind ``multicast``: neither counts (``device_bytes`` 0) — the peer's
  memory counts in the peer's process, against its device, and a multicast object holds no memory
  of its own (the memory bound to it is counted where it was created);
* a handle that is **never mapped** stays a ``vmm_create`` row (address 0; it holds
  device memory, so it counts);
* **reservations** leave ``blocks`` (a virtual range holds no memory) for
  ``trace.reservations``: reservation_id, pid, device, api, address, size, t_alloc,
  t_free, seq_alloc, seq_free, freed, maps (how many mappings it held), mapped_peak
  (the most physical bytes mapped in it at once).

PyTorch's expandable segments (reserved view) are the same pattern: one large
reservation, one handle per 2 MiB / 20 MiB page mapped into it; each page becomes a
``vmm`` block, the segment is the reservation.  JAX/XLA's platform allocator
(blocks view) makes one reservation, one handle and one map per buffer.

Traces with no VMM records pass through untouched (one ``isin`` on the kind column).
"""
from __future__ import annotations

import bisect

import numpy as np
import pandas as pd

from .model import RESERVATION_COLUMNS, conform, empty_table
from .model import ACCESS_COLUMNS, BLOCK_COLUMNS

RAW_KINDS = ("vmm_reserve", "vmm_create", "vmm_map")
KIND = "vmm"
IMPORT_KIND = "vmm_import"        # a mapping of another process's memory (cuMemImportFromShareableHandle)
MULTICAST_KIND = "multicast"      # a mapping of a multicast object (cuMulticastCreate)
OWN, IMPORTED, MULTICAST = 0, 1, 2
IMPORT_APIS = ("cuMemImportFromShareableHandle",)
MULTICAST_APIS = ("cuMulticastCreate",)


def _origin(creates: pd.DataFrame) -> np.ndarray:
    """Per vmm_create row: OWN (cuMemCreate), IMPORTED (a peer's handle) or MULTICAST."""
    api = creates["api"].astype(str).to_numpy() if len(creates) else np.zeros(0, object)
    return np.where(np.isin(api, IMPORT_APIS), IMPORTED, np.where(np.isin(api, MULTICAST_APIS), MULTICAST, OWN))


def join(trace):
    """Join the VMM rows of ``trace.blocks`` in place (see the module docstring); returns ``trace``."""
    b = trace.blocks
    if len(b) == 0 or not b["kind"].isin(RAW_KINDS).any():
        if getattr(trace, "reservations", None) is None:
            trace.reservations = empty_table(RESERVATION_COLUMNS)
        return trace
    blocks, old_to_new, reservations = join_blocks(b)
    acc = trace.accesses
    if len(acc):
        new_id = old_to_new[acc["block_id"].to_numpy(np.int64)]
        keep = new_id >= 0
        acc = acc[keep].copy() if not keep.all() else acc.copy()
        acc["block_id"] = new_id[keep].astype(ACCESS_COLUMNS["block_id"])
        if not keep.all():
            trace.counts["unresolved_access"] = int(trace.counts.get("unresolved_access", 0)) + int((~keep).sum())
        trace.accesses = acc.reset_index(drop=True)
    trace.blocks = blocks
    trace.reservations = reservations
    return trace


def _union_length(ranges: list[tuple[int, int]]) -> int:
    total, end = 0, None
    for lo, hi in sorted(ranges):
        if end is None or lo > end:
            total += hi - lo
            end = hi
        elif hi > end:
            total += hi - end
            end = hi
    return total


def _cover_counts(maps: pd.DataFrame) -> np.ndarray:
    """Physical bytes each mapping adds (its ``device_bytes``): its offset range less the part that
    earlier mappings of the same physical handle, still mapped at this one's map time, already
    cover — all of it for a first mapping, none for a second mapping of the same bytes, the
    uncovered part when the two partly overlap (the union counts once)."""
    out = maps["size"].to_numpy(np.int64).copy()
    key = maps["_create"].to_numpy(np.int64)
    # mappings without a known create row: one physical object per (pid, handle)
    nokey = key < 0
    if nokey.any():
        h = pd.factorize(pd.Series(list(zip(maps["pid"].to_numpy()[nokey], maps["handle"].to_numpy()[nokey]))))[0]
        key = key.copy()
        key[nokey] = -2 - h
    counts = pd.Series(key).value_counts()
    multi = set(counts[counts > 1].index.tolist())
    if not multi:
        return out
    pos = np.flatnonzero(np.isin(key, list(multi)))
    sub = maps.iloc[pos]
    order = np.lexsort((sub["seq_alloc"].to_numpy(), key[pos]))
    k_s = key[pos][order]
    off = sub["_offset"].to_numpy(np.int64)[order]
    size = sub["size"].to_numpy(np.int64)[order]
    sa = sub["seq_alloc"].to_numpy(np.int64)[order]
    sf = sub["seq_free"].to_numpy(np.int64)[order]
    for i in range(len(order)):
        j = i - 1
        lo, hi = int(off[i]), int(off[i] + size[i])
        cover = []
        while j >= 0 and k_s[j] == k_s[i]:
            if sf[j] > sa[i]:
                a, b = max(lo, int(off[j])), min(hi, int(off[j] + size[j]))
                if a < b:
                    cover.append((a, b))
            j -= 1
        if cover:
            out[pos[order[i]]] = (hi - lo) - _union_length(cover)
    return out


def _reservation_of(maps: pd.DataFrame, res: pd.DataFrame) -> np.ndarray:
    """Index (into ``res``) of the reservation holding each mapping, -1 when none: same process,
    address inside, reserved before the map and not yet freed."""
    out = np.full(len(maps), -1, dtype=np.int64)
    if len(res) == 0 or len(maps) == 0:
        return out
    # sweep over (pid, seq): reservation open / close and map events
    ev = []
    for i, (p, sa, sf, fr) in enumerate(zip(res["pid"].to_numpy(), res["seq_alloc"].to_numpy(),
                                            res["seq_free"].to_numpy(), res["freed"].to_numpy())):
        ev.append((int(p), int(sa), 0, i))
        ev.append((int(p), int(sf) if fr else np.iinfo(np.int64).max, 2, i))
    for i, (p, sa) in enumerate(zip(maps["pid"].to_numpy(), maps["seq_alloc"].to_numpy())):
        ev.append((int(p), int(sa), 1, i))
    ev.sort()
    r_addr = res["address"].to_numpy(np.uint64).astype(object)
    r_size = res["size"].to_numpy(np.int64)
    m_addr = maps["address"].to_numpy(np.uint64).astype(object)
    live: list[tuple[int, int]] = []   # sorted (address, res index) of open reservations
    cur_pid = None
    for p, _, what, i in ev:
        if p != cur_pid:
            live, cur_pid = [], p
        if what == 0:
            bisect.insort(live, (int(r_addr[i]), i))
        elif what == 2:
            k = bisect.bisect_left(live, (int(r_addr[i]), i))
            if k < len(live) and live[k][1] == i:
                live.pop(k)
        else:
            a = int(m_addr[i])
            k = bisect.bisect_right(live, (a, len(r_size))) - 1   # live ranges never overlap
            if k >= 0 and live[k][0] + int(r_size[live[k][1]]) > a:
                out[i] = live[k][1]
    return out


def join_blocks(b: pd.DataFrame) -> tuple[pd.DataFrame, np.ndarray, pd.DataFrame]:
    """(new blocks, old block_id -> new block_id (-1 = dropped), reservations)."""
    kind = b["kind"]
    is_map = (kind == "vmm_map").to_numpy()
    is_create = (kind == "vmm_create").to_numpy()
    is_res = (kind == "vmm_reserve").to_numpy()
    maps = b[is_map].drop(columns=["handle_t_create", "handle_t_release", "reservation_id"], errors="ignore")
    creates = b[is_create]
    res = b[is_res].sort_values(["pid", "seq_alloc"], kind="stable").reset_index(drop=True)
    res["reservation_id"] = np.arange(len(res), dtype=np.int64)

    # map -> the latest create of the same (pid, handle) before it
    maps["_row"] = np.arange(len(maps))
    maps["_offset"] = maps["stream"].to_numpy(np.uint64).astype(np.int64)  # cuMemMap's offset (0 in old traces)
    cr = creates[["pid", "handle", "seq_alloc", "t_alloc", "t_free", "block_id", "device", "stream"]].rename(
        columns={"seq_alloc": "_cseq", "t_alloc": "handle_t_create", "t_free": "handle_t_release",
                 "block_id": "_create", "device": "_cdev", "stream": "_htypes"})
    cr["_origin"] = _origin(creates)
    m_sorted = maps.sort_values("seq_alloc", kind="stable")
    if len(cr):
        j = pd.merge_asof(m_sorted, cr.sort_values("_cseq", kind="stable"), left_on="seq_alloc", right_on="_cseq",
                          by=["pid", "handle"], direction="backward", allow_exact_matches=False)
    else:
        j = m_sorted.assign(_cseq=np.nan, handle_t_create=np.nan, handle_t_release=np.nan, _create=np.nan)
    j = j.sort_values("_row").reset_index(drop=True)
    maps = maps.reset_index(drop=True)
    for c in ("handle_t_create", "handle_t_release", "_create"):
        maps[c] = j[c].fillna(-1).to_numpy(np.int64)
    origin = j["_origin"].fillna(OWN).to_numpy(np.int64) if "_origin" in j else np.full(len(maps), OWN)
    maps["handle_types"] = (j["_htypes"].fillna(0).to_numpy(np.float64).astype(np.int64) if "_htypes" in j
                            else np.zeros(len(maps), np.int64))

    # reservation of each map; an unmap that never came ends at the reservation's free
    rid = _reservation_of(maps, res)
    maps["reservation_id"] = rid
    has = rid >= 0
    if has.any():
        r_fr = res["freed"].to_numpy(bool)[rid[has]]
        r_sf = res["seq_free"].to_numpy(np.int64)[rid[has]]
        r_tf = res["t_free"].to_numpy(np.int64)[rid[has]]
        fr = maps["freed"].to_numpy(bool)[has]
        sf = maps["seq_free"].to_numpy(np.int64)[has]
        clip = r_fr & (~fr | (sf > r_sf))
        idx = np.flatnonzero(has)[clip]
        maps.loc[idx, "freed"] = True
        maps.loc[idx, "seq_free"] = r_sf[clip]
        maps.loc[idx, "t_free"] = r_tf[clip]
    dev_bytes = _cover_counts(maps) if len(maps) else np.zeros(0, np.int64)
    dev_bytes[origin != OWN] = 0          # a peer's memory, a multicast object: not this process's
    maps["device_bytes"] = dev_bytes
    maps["counts_device"] = dev_bytes > 0

    cats = list(kind.cat.categories) if hasattr(kind, "cat") else []
    cats += [k for k in (KIND, IMPORT_KIND, MULTICAST_KIND) if k not in cats]
    names = np.array([KIND, IMPORT_KIND, MULTICAST_KIND], dtype=object)
    maps["kind"] = pd.Categorical(names[origin], categories=cats)
    maps["stream"] = np.zeros(len(maps), np.uint64)

    # reservations table
    n_maps = np.bincount(rid[has], minlength=len(res)) if len(res) else np.zeros(0, np.int64)
    res["maps"] = n_maps.astype(np.int64)
    res["mapped_peak"] = _mapped_peak(maps, len(res))
    reservations = conform(res[[c for c in RESERVATION_COLUMNS if c in res]], RESERVATION_COLUMNS)

    # new blocks: everything else + vmm blocks + handles never mapped
    mapped_creates = set(maps["_create"][maps["_create"] >= 0].tolist())
    keep_create = is_create & ~b["block_id"].isin(mapped_creates).to_numpy()
    rest = b[~(is_map | is_res | is_create) | keep_create].copy()
    kc = (rest["kind"] == "vmm_create").to_numpy()
    rest["handle_types"] = np.where(kc, rest["stream"].to_numpy(np.uint64).astype(np.int64), 0)
    rest["device_bytes"] = np.where(rest["counts_device"].to_numpy(bool), rest["size"].to_numpy(np.int64), 0)
    if kc.any():   # a handle never mapped: its own lifetime
        rest.loc[kc, "handle_t_create"] = rest.loc[kc, "t_alloc"]
        rest.loc[kc, "handle_t_release"] = rest.loc[kc, "t_free"]
        foreign = kc & (_origin(rest) != OWN)   # an imported handle, a multicast object: no memory here
        rest.loc[foreign, "counts_device"] = False
        rest.loc[foreign, "device_bytes"] = 0
    if len(rest):
        rest["kind"] = rest["kind"].cat.set_categories(maps["kind"].cat.categories) if hasattr(rest["kind"], "cat") \
            else rest["kind"]
    vm = maps.drop(columns=[c for c in maps.columns if c.startswith("_")])
    out = pd.concat([rest, vm], ignore_index=True)
    out = out.sort_values(["t_alloc", "pid", "seq_alloc"], kind="stable").reset_index(drop=True)
    old_ids = out["block_id"].to_numpy(np.int64)
    n_old = int(b["block_id"].max()) + 1 if len(b) else 0
    old_to_new = np.full(n_old, -1, dtype=np.int64)
    old_to_new[old_ids] = np.arange(len(out), dtype=np.int64)
    out["block_id"] = np.arange(len(out), dtype=np.int64)
    out = conform(out, BLOCK_COLUMNS)
    return out, old_to_new, reservations


def _mapped_peak(maps: pd.DataFrame, n_res: int) -> np.ndarray:
    """Most physical bytes (counted mappings) mapped in each reservation at once."""
    out = np.zeros(n_res, np.int64)
    m = maps[(maps["reservation_id"] >= 0) & maps["counts_device"]]
    if len(m) == 0:
        return out
    r = np.concatenate([m["reservation_id"].to_numpy(np.int64)] * 2)
    s = np.concatenate([m["seq_alloc"].to_numpy(np.int64), m["seq_free"].to_numpy(np.int64)])
    d = np.concatenate([m["device_bytes"].to_numpy(np.int64), -m["device_bytes"].to_numpy(np.int64)])
    order = np.lexsort((d, s, r))
    r, d = r[order], d[order]
    cum = np.cumsum(d)
    start = np.r_[0, np.flatnonzero(np.diff(r)) + 1]
    base = np.repeat(cum[start] - d[start], np.diff(np.r_[start, len(r)]))
    live = cum - base
    np.maximum.at(out, r, live)
    return out
