"""The plan file's format: what ``pyinterpose plan`` writes and ``pyinterpose run --apply`` reads
(docs/apply.md describes it; pyinterpose.analysis.pools.plan_file builds one from a trace).

* :func:`check` — the plan's own consistency (no two slots live at once overlap, every slot within the
  capacity and aligned, keys unique); run before writing and before applying.
* :func:`digest` — the compact binary the shim maps (native/shim/apply.c); no JSON parser in the shim.
* :func:`read` / :func:`write` — a plan file, checked (bad input: one clear line).
* :func:`validate_plan` — the independent check that no two buffers live at once share an address
  (also what every planner's answer goes through).

Here, below capture and analysis, because both read it: capture hands the digest to the shim,
analysis builds plans.
"""
from __future__ import annotations

import json
import os

import numpy as np
import pandas as pd

from ..errors import PyinterposeError

FORMAT = "pyinterpose-plan"
VERSION = 1
ALIGNMENT = 512          # every slot's size and offset: a multiple (the arena base is >= 256-aligned)
PLAN_MAGIC = 0x314E414C50495950   # "PYIPLAN1"
FLAG_MARKERS, FLAG_NO_SITES = 1, 2
_M64 = (1 << 64) - 1


class InvalidPlanError(RuntimeError):
    """A planner produced an invalid plan: a bug, never a user error."""


def owner_hash(owner: str) -> int:
    """FNV-1a 64 of the owner's basename (native/shim/site.c ``pi_site_owner_hash``)."""
    h = 14695981039346656037   # offset basis
    for b in (owner or "").encode():
        h = ((h ^ b) * 1099511628211) & _M64
    return h


def validate_plan(lower, upper, size, offsets, capacity: int | None = None) -> int:
    """Check a plan; return its height (max offset+size).  Raise InvalidPlanError if
    two time-overlapping buffers overlap in address, an offset is negative, or the
    height exceeds ``capacity``.

    Independent of the planners (native/planner/validate.c): a sweep over time
    with a segment tree over the compressed address axis that counts how many
    live buffers cover each address cell; a newcomer landing on a covered cell
    overlaps a live buffer.  O(n log n)."""
    from .._core import ffi, lib  # lazy: compiled cffi module, absent from an unbuilt tree

    lower = np.ascontiguousarray(lower, np.int64)
    upper = np.ascontiguousarray(upper, np.int64)
    size = np.ascontiguousarray(size, np.int64)
    offsets = np.ascontiguousarray(offsets, np.int64)
    n = len(size)
    if not (len(lower) == len(upper) == len(offsets) == n):
        raise InvalidPlanError("plan arrays differ in length")
    if n == 0:
        return 0
    if (offsets < 0).any():
        raise InvalidPlanError(f"negative offset for buffer #{int(np.flatnonzero(offsets < 0)[0])}")
    height = int((offsets + size).max())
    if capacity is not None and height > capacity:
        raise InvalidPlanError(f"plan height {height} exceeds capacity {capacity}")
    conflict = np.full(2, -1, np.int32)
    ptr = [ffi.cast("int64_t *", a.ctypes.data) for a in (lower, upper, size, offsets)]
    rc = lib.pi_validate_plan(n, *ptr, ffi.cast("int32_t *", conflict.ctypes.data))
    if rc < 0:
        raise MemoryError("pi_validate_plan")
    if rc == 1:
        i, j = sorted(int(x) for x in conflict)
        raise InvalidPlanError(f"buffers #{i} and #{j} overlap in time and address")
    return height


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
