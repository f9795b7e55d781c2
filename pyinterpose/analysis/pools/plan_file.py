"""The plan file: a trace's allocations laid out in one arena, keyed so the shim can recognise them
at run time (``pyinterpose plan TRACE -o plan.json``, ``pyinterpose run --apply plan.json``;
docs/apply.md describes the format and the run-time matching).

* :func:`build` — from a blocks-view trace: one steady iteration (its boundary chosen at a request
  that occurs once per iteration, the *anchor*, or at ``pyinterpose.mark_step()`` markers) and the
  blocks that live across iterations, planned by any planner of :mod:`.planners` into one arena; each
  request keyed by (size, site, ordinal): the site is the FNV-1a hash of its owner (the basename of the
  object that called), the ordinal its rank among the requests of that (size, site) — within the
  iteration, or over the process's life for the blocks that live across iterations (``persistent``).
* :func:`check` — the plan's own consistency (no two slots live at once overlap, every slot within the
  capacity and aligned, keys unique); run before writing and before applying.
* :func:`digest` — the compact binary the shim maps (native/shim/apply.c); no JSON parser in the shim.
* :func:`read` — a plan file, checked (bad input: one clear line).

Only requests the shim can serve are planned: device memory from cudaMalloc, cudaMallocAsync,
cudaMallocFromPoolAsync, cuMemAlloc_v2, cuMemAllocAsync, cuMemAllocFromPoolAsync (and their _ptsz forms),
of the trace's main process.
"""
from __future__ import annotations

import hashlib
import json
import os

import numpy as np
import pandas as pd

from ...errors import PyinterposeError
from ...trace.model import Trace
from .planners import PLANNERS, plan as run_planner
from .problem import InvalidPlanError, load, validate_plan

FORMAT = "pyinterpose-plan"
VERSION = 1
ALIGNMENT = 512          # every slot's size and offset: a multiple (the arena base is >= 256-aligned)
SERVED_APIS = ("cudaMalloc", "cudaMallocAsync", "cudaMallocAsync_ptsz", "cudaMallocFromPoolAsync",
               "cudaMallocFromPoolAsync_ptsz", "cuMemAlloc_v2", "cuMemAllocAsync", "cuMemAllocAsync_ptsz",
               "cuMemAllocFromPoolAsync", "cuMemAllocFromPoolAsync_ptsz")
SERVED_KINDS = ("device", "async", "pool")
PLAN_MAGIC = 0x314E414C50495950   # "PYIPLAN1"
FLAG_MARKERS, FLAG_NO_SITES = 1, 2
_M64 = (1 << 64) - 1


def owner_hash(owner: str) -> int:
    """FNV-1a 64 of the owner's basename (native/shim/site.c ``pi_site_owner_hash``)."""
    h = 14695981039346656037   # offset basis
    for b in (owner or "").encode():
        h = ((h ^ b) * 1099511628211) & _M64
    return h


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
    seq_alloc, seq_free, freed."""
    b = trace.blocks
    m = (b["pid"].to_numpy() == pid) & b["kind"].astype(str).isin(SERVED_KINDS).to_numpy() \
        & b["api"].astype(str).isin(SERVED_APIS).to_numpy() & (b["size"].to_numpy() > 0)
    cols = ["block_id", "size", "seq_alloc", "seq_free", "freed"]
    r = b.loc[m, cols].copy()
    owner = b.loc[m, "owner"].astype(str) if "owner" in b else pd.Series("", index=r.index)
    r["owner"] = owner.to_numpy()
    hashes = {o: owner_hash(o) for o in pd.unique(r["owner"])}
    r["site"] = r["owner"].map(hashes).astype(np.uint64)
    return r.sort_values("seq_alloc", kind="stable").reset_index(drop=True)


def _anchor(req: pd.DataFrame, bounds: np.ndarray) -> tuple[int, int] | None:
    """(size, site) of a request that occurs exactly once in every iteration [bounds[k], bounds[k+1]),
    the one with the fewest bytes live before it (the loop's low point); None when there is none."""
    sa = req["seq_alloc"].to_numpy(np.int64)
    it = np.searchsorted(bounds, sa, side="right") - 1
    inside = (it >= 0) & (it < len(bounds) - 1)
    if not inside.any():
        return None
    df = pd.DataFrame({"size": req["size"].to_numpy()[inside], "site": req["site"].to_numpy()[inside],
                       "it": it[inside]})
    per = df.groupby(["size", "site", "it"], sort=False).size().unstack(fill_value=0)
    once = per[(per == 1).all(axis=1) & (per.shape[1] == len(bounds) - 1)]
    if once.empty:
        return None
    # live bytes just before each request (all servable blocks of the process)
    sf = np.where(req["freed"].to_numpy(bool), req["seq_free"].to_numpy(np.int64), np.iinfo(np.int64).max)
    sizes = req["size"].to_numpy(np.int64)
    t = np.concatenate([sa, sf])
    d = np.concatenate([sizes, -sizes])
    o = np.lexsort((d, t))
    live_after = np.cumsum(d[o])
    live_before = np.empty(len(t), np.int64)
    live_before[o] = live_after - d[o]
    lb = live_before[:len(sa)]
    cand = set(map(tuple, once.index.tolist()))
    best, best_live = None, None
    for i in np.flatnonzero(it == 0):   # ranked in the first iteration
        key = (int(req["size"].iat[i]), int(req["site"].iat[i]))
        if key in cand and (best_live is None or lb[i] < best_live):
            best, best_live = key, lb[i]
    return best


def _unservable_note(trace: Trace, pid: int, req: pd.DataFrame) -> str:
    """'' or why most of the process's device memory cannot be served (for the error lines)."""
    b = trace.blocks
    dev = b[(b["pid"].to_numpy() == pid) & b["counts_device"].to_numpy(bool)]
    total = int(dev["size"].sum())
    if total == 0 or int(req["size"].sum()) * 2 >= total:
        return ""
    vmm = int(dev.loc[dev["kind"].astype(str).isin(("vmm", "vmm_create")), "size"].sum())
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


def check(doc: dict, where: str = "plan") -> None:
    """Raise PyinterposeError (one line) unless ``doc`` is a consistent plan: format and version, every
    slot aligned, within the capacity and at least its request's size, keys unique, and no two slots
    whose lifetimes overlap share an address."""
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise PyinterposeError(f"{where}: not a pyinterpose plan (format {doc.get('format') if isinstance(doc, dict) else None!r})")
    if doc.get("version") != VERSION:
        raise PyinterposeError(f"{where}: plan version {doc.get('version')!r}; this pyinterpose reads version {VERSION}")
    try:
        cap = int(doc["capacity"])
        reqs = doc["requests"]
        it = doc["iteration"]
        df = pd.DataFrame({
            "phase": [str(r["phase"]) for r in reqs], "size": [int(r["size"]) for r in reqs],
            "site": [int(r["site"]) for r in reqs], "ordinal": [int(r["ordinal"]) for r in reqs],
            "offset": [int(r["offset"]) for r in reqs], "slot": [int(r["slot_size"]) for r in reqs],
            "lower": [int(r["lifetime"][0]) for r in reqs], "upper": [int(r["lifetime"][1]) for r in reqs],
            "alternate": [bool(r.get("alternate", False)) for r in reqs],
            "serve": [str(r.get("serve", "arena")) for r in reqs]})
        int(doc["judge_after"])
        if it["boundary"] == "anchor":
            int(it["anchor"]["size"]), int(it["anchor"]["site"])
        elif it["boundary"] != "markers":
            raise ValueError(f"boundary {it['boundary']!r}")
    except (KeyError, TypeError, ValueError, IndexError) as e:
        raise PyinterposeError(f"{where}: malformed plan ({type(e).__name__}: {e})") from None
    if cap < 0 or cap >= 1 << 62:
        raise PyinterposeError(f"{where}: capacity {cap} out of range")
    if df.empty:
        raise PyinterposeError(f"{where}: the plan has no request")
    bad = ~df["phase"].isin(["iteration", "persistent"])
    if bad.any():
        raise PyinterposeError(f"{where}: request #{int(np.flatnonzero(bad)[0])}: unknown phase")
    prim = set(map(tuple, df.loc[~df["alternate"], ["size", "site", "ordinal"]].to_numpy().tolist()))
    orphan = [i for i in np.flatnonzero(df["alternate"].to_numpy())
              if tuple(df.loc[i, ["size", "site", "ordinal"]].tolist()) not in prim]
    if orphan:
        raise PyinterposeError(f"{where}: request #{orphan[0]}: an alternate slot without its request")
    bad = ~df["serve"].isin(SERVES)
    if bad.any():
        raise PyinterposeError(f"{where}: request #{int(np.flatnonzero(bad)[0])}: unknown serve "
                               f"{df['serve'].iat[int(np.flatnonzero(bad)[0])]!r}")
    arena = (df["serve"] == "arena").to_numpy()
    checks = [((df["size"] <= 0) | (df["slot"] < df["size"]), "slot smaller than its request"),
              (arena & ((df["offset"] < 0) | (df["offset"] + df["slot"] > cap)), "slot outside the arena"),
              ((df["offset"] % ALIGNMENT != 0) | (df["slot"] % ALIGNMENT != 0), f"slot not {ALIGNMENT}-aligned"),
              ((df["site"] < 0) | (df["site"] > _M64) | (df["ordinal"] < 0), "bad key"),
              (df["upper"] <= df["lower"], "empty lifetime"),
              (df.duplicated(["phase", "size", "site", "ordinal", "alternate"]).to_numpy(), "duplicate key"),
              (df["alternate"] & (df["phase"] != "iteration"), "an alternate slot outside the iteration")]
    for mask, what in checks:
        m = np.asarray(mask, bool)
        if m.any():
            raise PyinterposeError(f"{where}: request #{int(np.flatnonzero(m)[0])}: {what}")
    a = df[arena]
    try:
        validate_plan(a["lower"], a["upper"], a["slot"], a["offset"], cap)
    except InvalidPlanError as e:
        raise PyinterposeError(f"{where}: {e}") from None
    if doc.get("swap") is not None:
        _check_swap(doc, df, where)


SERVES = ("arena", "real", "managed")   # a request's slot in the arena; the program's own allocator; managed memory


def _check_swap(doc: dict, df: pd.DataFrame, where: str) -> None:
    """The swap section (``plan --swap``; analysis/swap/planned.py): every swap names a managed request of
    the plan and three launch keys, and its replay says no swap-out ends after the block's next access."""
    sw = doc["swap"]
    try:
        n_managed = int(sw["managed"])
        managed = df[df["serve"] == "managed"]
        idx = sorted(int(r["managed_index"]) for r in doc["requests"] if r.get("serve") == "managed")
        if idx != list(range(n_managed)) or len(managed) != n_managed:
            raise ValueError("managed requests are not numbered 0..n-1")
        keys = {(r["phase"], int(r["size"]), int(r["site"]), int(r["ordinal"])): int(r["managed_index"])
                for r in doc["requests"] if r.get("serve") == "managed"}
        for i, s in enumerate(sw["swaps"]):
            q = s["request"]
            if (q["phase"], int(q["size"]), int(q["site"]), int(q["ordinal"])) not in keys:
                raise ValueError(f"swap #{i}: its request is not a managed request of the plan")
            for k in ("out_after", "in_after", "in_before"):
                if not isinstance(s[k]["kernel"], str) or int(s[k]["ordinal"]) < 0:
                    raise ValueError(f"swap #{i}: bad {k}")
            pl, rp = s["planned_ns"], s["replayed_ns"]
            if float(pl["out_end"]) > float(s["next_access_ns"]) + 1.0:
                raise ValueError(f"swap #{i}: its swap-out ends after the block's next access")
            if float(rp["out_start"]) > float(rp["out_end"]) or float(rp["in_start"]) < float(rp["out_end"]) - 1.0 \
                    or float(rp["in_end"]) < float(rp["in_start"]):
                raise ValueError(f"swap #{i}: its transfers are out of order in the replay (a swap-in before "
                                 "its swap-out has ended)")
        int(sw["predicted_peak_bytes"]), float(sw["predicted_stall_ns"])
    except (KeyError, TypeError, ValueError) as e:
        raise PyinterposeError(f"{where}: malformed swap section ({type(e).__name__}: {e})") from None


def read(path: str) -> dict:
    """A plan file, checked (a bad file: one line, exit status 2)."""
    try:
        with open(path, "rb") as f:
            doc = json.loads(f.read().decode("utf-8"))
    except FileNotFoundError:
        raise PyinterposeError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise PyinterposeError(f"{path}: is a directory, not a plan") from None
    except (OSError, UnicodeDecodeError, ValueError) as e:
        raise PyinterposeError(f"{path}: not a plan file ({type(e).__name__})") from None
    check(doc, path)
    return doc


def write(doc: dict, path: str) -> None:
    check(doc)
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "w") as f:
        json.dump(doc, f, indent=None, separators=(",", ":"))
        f.write("\n")
    os.replace(tmp, path)


def digest(doc: dict) -> bytes:
    """The binary the shim maps (native/shim/apply.c): header, keys sorted by (size, site, persistent
    first), slots (offset, size, alt, 0).  A persistent key lists one slot per process-life ordinal up to its
    last planned one (ordinals that are not planned get an empty slot: served by nobody).  ``alt``: 1 + the
    index of the slot's alternate (0: none), for requests whose block outlives the iteration: the
    alternates follow every key's slots."""
    reqs = doc["requests"]
    groups: dict[tuple[int, int, int], dict[int, tuple[int, int, int]]] = {}
    alternates: dict[tuple[int, int, int], tuple[int, int, int]] = {}
    for r in reqs:
        k = (int(r["size"]), int(r["site"]), 0 if r["phase"] == "persistent" else 1)
        serve = r.get("serve", "arena")
        mode = 0 if serve == "arena" else (1 if serve == "real" else 2 + int(r["managed_index"]))
        if r.get("alternate"):
            alternates[(k[0], k[1], int(r["ordinal"]))] = (int(r["offset"]), int(r["slot_size"]), min(mode, 1))
        else:
            groups.setdefault(k, {})[int(r["ordinal"])] = (int(r["offset"]), int(r["slot_size"]), mode)
    key_dt = np.dtype([("size", "<u8"), ("site", "<u8"), ("first", "<u4"), ("count", "<u4"),
                       ("persistent", "<u4"), ("pad", "<u4")])
    slot_dt = np.dtype([("offset", "<u8"), ("size", "<u8"), ("alt", "<u8"), ("pad", "<u8")])
    keys = np.zeros(len(groups), key_dt)
    slots: list[list[int]] = []
    alt_of: list[tuple[int, tuple[int, int]]] = []
    for i, k in enumerate(sorted(groups)):
        ords = groups[k]
        n = max(ords) + 1
        keys[i] = (k[0], k[1], len(slots), n, 1 - k[2], 0)
        for o in range(n):
            if k[2] == 1 and (k[0], k[1], o) in alternates:
                alt_of.append((len(slots), alternates[(k[0], k[1], o)]))
            off, size, mode = ords.get(o, (0, 0, 0))
            slots.append([off, size, 0, mode])
    for at, (off, size, mode) in alt_of:   # alternates after every key's slots; alt = 1 + their index
        slots[at][2] = len(slots) + 1
        slots.append([off, size, 0, mode])
    sl = np.array([tuple(x) for x in slots], slot_dt) if slots else np.zeros(0, slot_dt)
    it = doc["iteration"]
    flags = (FLAG_MARKERS if it["boundary"] == "markers" else 0) | (0 if doc.get("sites", True) else FLAG_NO_SITES)
    anchor = it.get("anchor") or {"size": 0, "site": 0}
    hdr = np.zeros(16, "<u8")
    hdr[0] = PLAN_MAGIC
    hdr[1] = VERSION | (flags << 32)
    hdr[2:9] = [int(doc["capacity"]), len(keys), len(sl), int(anchor["size"]), int(anchor["site"]),
                int(it["requests"]), int(doc["judge_after"])]
    swap = _swap_digest(doc)
    hdr[9] = len(swap)   # reserved[0]: the swap section's bytes, after the slots
    return hdr.tobytes() + keys.tobytes() + sl.tobytes() + swap


def _swap_digest(doc: dict) -> bytes:
    """native/shim/swap.c's section: n_managed, n_actions, the managed requests (size, flags), the actions
    (kernel name hash, ordinal, kind 0 out after / 1 in after / 2 back before, managed index, swap index)
    sorted by (hash, ordinal)."""
    sw = doc.get("swap")
    if not sw:
        return b""
    man = sorted((int(r["managed_index"]), int(r["size"])) for r in doc["requests"] if r.get("serve") == "managed")
    m_dt = np.dtype([("size", "<u8"), ("flags", "<u8")])
    a_dt = np.dtype([("kname", "<u8"), ("ordinal", "<u4"), ("kind", "<u2"), ("pad", "<u2"), ("managed", "<u4"),
                     ("swap", "<u4")])
    index = {(r["phase"], int(r["size"]), int(r["site"]), int(r["ordinal"])): int(r["managed_index"])
             for r in doc["requests"] if r.get("serve") == "managed"}
    acts = []
    for i, s in enumerate(sw["swaps"]):
        q = s["request"]
        m = index[(q["phase"], int(q["size"]), int(q["site"]), int(q["ordinal"]))]
        for kind, k in enumerate(("out_after", "in_after", "in_before")):
            acts.append((owner_hash(s[k]["kernel"]), int(s[k]["ordinal"]), kind, 0, m, i))
    acts.sort(key=lambda a: (a[0], a[1], a[2]))
    head = np.array([len(man), len(acts)], "<u8")
    return head.tobytes() + np.array([(sz, 0) for _, sz in man], m_dt).tobytes() + np.array(acts, a_dt).tobytes()
