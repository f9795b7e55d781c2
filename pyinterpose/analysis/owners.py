"""Who made each allocation, and which blocks are the framework allocator's own requests.

A trace may record the **owner** of each allocation: the calling shared object of the outermost
hooked call (``trace.blocks["owner"]``: ``libc10_cuda.so``, ``libcublasLt.so.13``,
``xla_cuda_plugin.so``, ... ; ``""`` when unknown).  Traces without it (every trace written before
owners were recorded, including the shipped real-GPU traces) fall back to the **API** each block was
made with, because each framework's allocator reaches CUDA through one API per view:

=========== ================================== ============================================
framework   blocks view                        reserved view
=========== ================================== ============================================
pytorch     ``cudaMallocAsync`` (one per       ``cudaMalloc`` segments, plus VMM pages
            tensor, backend:cudaMallocAsync)   (``vmm`` blocks) for expandable segments
jax (XLA)   its VMM buffers (``vmm``; JAX      the BFC region: ``vmm`` or ``cuMemAlloc_v2``
            0.11 platform allocator), else
            ``cuMemAlloc_v2``
tensorflow  ``cuMemAllocFromPoolAsync``        the BFC region: ``vmm`` or ``cuMemAlloc_v2``
=========== ================================== ============================================

Everything else — ``cuMemAlloc_v2`` from cuBLAS/cuDNN workspaces, the runtime, NCCL — is *outside
the allocator*: the framework's own statistics (``max_memory_reserved``, ``memory_stats()``) do not
include it, and an allocator simulator must not replay it.

**Trampolines.** ctypes and cffi call CUDA through libffi: a plain Python script's allocations are
recorded with owner ``libffi.so.8`` (or ``_ctypes...so``, ``_cffi_backend...so``).  Those objects
only forward the call, so the owner shown is the Python code behind them: ``python (through
libffi.so.8)``; they are never taken for a framework's allocator.

Functions (pure, over the trace's tables).  :func:`allocator` is **the one place that decides** the
framework and which blocks are its allocator's; every command (summary, report, compare, pools,
exports, the owners tables) reads its answer through it or the helpers below:

* :func:`allocator` — an :class:`Allocator`: ``framework`` (``"pytorch" | "jax" | "tensorflow" |
  "unknown"``) and where it was read, ``mask`` (bool per row of ``trace.blocks``: the device blocks
  the framework's allocator asked for), ``source`` (``"owners" | "api" | "none"``) and ``rule``
  (what was taken as the allocator, in words), ``note`` (why a weaker source was used);
* :func:`framework` — ``allocator(trace).framework``;
* :func:`block_owners` — a Series (index of ``trace.blocks``): the recorded owner (looking through
  trampolines), else the API;
* :func:`allocator_mask` — bool array over ``trace.blocks``: device blocks the framework's
  allocator asked for;
* :func:`bytes_by_owner` — DataFrame ``owner, blocks, bytes, peak_live_bytes, is_allocator``
  (device blocks only, largest peak first): the table summary, compare and the report show;
* :func:`allocator_info` — a JSON-ready dict saying what was taken as the allocator and why.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from ..trace import chunking
from ..trace.model import Trace, peak_live_bytes_of
from ..trace.piecewise import piece_rows, total
from ..trace.stacks import display_owner, is_trampoline
from ..trace.context import context_of

FRAMEWORKS = ("pytorch", "jax", "tensorflow")
_ALIASES = {"torch": "pytorch", "tf": "tensorflow", "keras": "tensorflow"}

# shared-object basenames (prefixes) of each framework's allocator
_ALLOCATOR_OBJECTS = {
    "pytorch": ("libc10_cuda",),
    "jax": ("xla_cuda_plugin", "libxla", "jaxlib", "libjax"),
    "tensorflow": ("libtensorflow_framework", "libtensorflow_cc", "_pywrap_tensorflow"),
}
_ASYNC_APIS = ("cudaMallocAsync", "cudaMallocAsync_ptsz", "cudaMallocFromPoolAsync",
               "cudaMallocFromPoolAsync_ptsz")


def _cmd_words(trace: Trace) -> str:
    return " ".join(str(c) for c in trace.meta.get("command", []) or []).lower()


def normalize_framework(name) -> str:
    """``"torch"`` -> ``"pytorch"``, ``"tf"`` -> ``"tensorflow"``; lower case; ``"unknown"`` for none."""
    n = str(name or "").strip().lower()
    return _ALIASES.get(n, n) or "unknown"


def _owner_names(b: pd.DataFrame) -> list[str]:
    """The distinct recorded owners of the blocks (not "")."""
    if "owner" not in b or len(b) == 0:
        return []
    col = b["owner"]
    used = _used_categories(col) if isinstance(col.dtype, pd.CategoricalDtype) else pd.unique(col.astype(str))
    return [str(o) for o in used if str(o) and str(o) != "nan"]


def _used_categories(col: pd.Series) -> pd.Index:
    """The categories some row of ``col`` holds, in the categories' order (what
    ``col.cat.remove_unused_categories().cat.categories`` gives): the codes counted a range of rows at
    a time (a count per category; pandas' way sorts the codes: 0.2 s a call at 11 M blocks)."""
    cats = col.cat.categories
    codes = col.cat.codes.to_numpy()
    seen = np.zeros(len(cats) + 1, np.int64)
    for s, e in chunking.spans(len(codes)):
        seen += np.bincount(codes[s:e].astype(np.intp) + 1, minlength=len(cats) + 1)   # code -1: missing
    return cats[seen[1:] > 0]


def _framework_of_objects(names: list[str]) -> str | None:
    objs = " ".join(n.lower() for n in names if not is_trampoline(n))
    for name, prefixes in _ALLOCATOR_OBJECTS.items():
        if any(p in objs for p in prefixes):
            return name
    return None


def _declared_framework(trace: Trace) -> str | None:
    """The framework the processes declared in their environment (``PYINTERPOSE_FRAMEWORK``, recorded
    by the shim's CONTEXT records): the most common among the processes that allocated; None if none."""

    p = trace.processes
    if "context" not in p or len(p) == 0:
        return None
    vals = [normalize_framework(context_of(c).get("PYINTERPOSE_FRAMEWORK")) for c in p["context"].tolist()]
    vals = [v for v in vals if v in FRAMEWORKS]
    return max(set(vals), key=vals.count) if vals else None


def _detect_framework(trace: Trace) -> tuple[str, str]:
    """(framework, where it was read): ``meta``, ``owners``, ``process`` (declared by the program through
    ``PYINTERPOSE_FRAMEWORK``), ``command``, ``apis`` or ``none``."""
    fw = str(trace.meta.get("framework") or "").lower()
    if fw:
        return normalize_framework(fw), "meta"
    b = trace.blocks
    names = _owner_names(b)
    found = _framework_of_objects(names)
    if found:
        return found, "owners"
    declared = _declared_framework(trace)
    if declared:
        return declared, "process"
    cmd = [str(c) for c in trace.meta.get("command", []) or []]
    for i, c in enumerate(cmd):
        v = cmd[i + 1] if c == "--framework" and i + 1 < len(cmd) else (
            c.split("=", 1)[1] if c.startswith("--framework=") else None)
        if v:
            return normalize_framework(v), "command"
    words = _cmd_words(trace)
    for key, name in (("torch", "pytorch"), ("jax", "jax"), ("tensorflow", "tensorflow"), ("keras", "tensorflow")):
        if key in words:
            return name, "command"
    if "tf" in re.split(r"[^a-z0-9]+", words):        # train_tf.py, --model tf (a word, not "stuff")
        return "tensorflow", "command"
    if names:
        # owners were recorded and none is a framework's allocator (a plain CUDA, ctypes or cffi
        # program): the APIs it used say nothing about a framework
        return "unknown", "none"
    apis = set(trace.counts.get("by_api", {}))
    if not apis and len(b):
        apis = set(str(a) for a in b["api"].unique())
    if apis & {"cudaMallocAsync", "cudaMalloc"} and not apis & {"cuMemAllocFromPoolAsync"}:
        return "pytorch", "apis"
    if "cuMemAllocFromPoolAsync" in apis:
        return "tensorflow", "apis"
    if apis & {"cuMemCreate", "cuMemMap", "cuMemAlloc_v2"}:
        return "jax", "apis"
    return "unknown", "none"


@dataclass(frozen=True)
class Allocator:
    """Which framework ran and which blocks its allocator asked for (see :func:`allocator`)."""

    framework: str                  # "pytorch" | "jax" | "tensorflow" | "unknown"
    framework_from: str             # "meta" | "owners" | "process" | "command" | "apis" | "none"
    mask: np.ndarray = field(repr=False)   # bool per row of trace.blocks (shared: do not modify)
    source: str = "none"            # "owners" | "api" | "none": what decided the mask
    rule: str = ""                  # what was taken as the allocator, in words
    note: str = ""                  # why a weaker source decided ("" when none)

    @property
    def known(self) -> bool:
        """A framework was recognised (its allocator's blocks are a subset worth naming)."""
        return self.framework != "unknown"


def allocator(trace: Trace) -> Allocator:
    """The framework that ran and the blocks its allocator asked for — **the** decision every
    command shows (summary, report, compare, pools, exports, owners tables).

    Framework, in this order: ``meta["framework"]``; a recorded owner that is a framework's
    allocator object (``libc10_cuda``, ``xla_cuda_plugin``, ...); ``--framework X`` or a framework
    name on the command line; the APIs used, only when the trace recorded no owners (recorded
    owners none of which is a framework mean a program without one: ``"unknown"``).

    Mask: with owners recorded and one of them the framework's allocator object, the device blocks
    it made (``source="owners"``); else the API rule of the table in the module docstring
    (``source="api"``; ``note`` says when owners were recorded but none matched); with no framework,
    every device block (``source="none"``: the program's own requests, no allocator to name).
    Cheap (one test per distinct owner and API): computed on each call, so a table changed in
    place is never answered from a stale copy."""
    fw, fw_from = _detect_framework(trace)
    b = trace.blocks
    if len(b) == 0:
        return Allocator(fw, fw_from, np.zeros(0, bool), "none", "no blocks")
    dev = b["counts_device"].to_numpy(bool)
    if fw not in FRAMEWORKS:
        return Allocator(fw, fw_from, dev.copy(), "none", "every device block is the program's own request")
    names = _owner_names(b)
    note = ""
    if names and fw in _ALLOCATOR_OBJECTS:
        prefixes = _ALLOCATOR_OBJECTS[fw]
        ok = lambda s: not is_trampoline(s) and any(p in s.lower() for p in prefixes)   # noqa: E731
        hit = _str_rows(b["owner"], ok) & dev
        if hit.any():
            objs = sorted({n for n in names if ok(n)})
            return Allocator(fw, fw_from, hit, "owners", f"owner {', '.join(objs)} ({fw}'s allocator)")
        shown = ", ".join(sorted(display_owner(n) for n in names)[:4])
        note = (f"owners recorded ({shown}), none of them {fw}'s allocator object "
                f"({', '.join(p + '*' for p in prefixes)}): the API rule decides")
    m, why = _api_rule(trace, fw)
    return Allocator(fw, fw_from, m, "api", why, note)


def framework(trace: Trace) -> str:
    """The framework that ran: ``allocator(trace).framework`` (``"pytorch" | "jax" | "tensorflow"
    | "unknown"``)."""
    return allocator(trace).framework


def _str_rows(col: pd.Series, pred) -> np.ndarray:
    """bool per row: ``pred(str(value))``, evaluated once per distinct value (the string
    columns are categorical: no per-row Python strings)."""
    if isinstance(col.dtype, pd.CategoricalDtype):
        codes = col.cat.codes.to_numpy()
        vals = np.array([bool(pred(str(c))) for c in col.cat.categories] + [bool(pred("nan"))], bool)
        return vals[codes]   # code -1 (missing) -> the last entry, as astype(str) gives "nan"
    codes, uniq = pd.factorize(col.astype(str))   # missing values: code -1 -> "nan" as above
    return np.array([bool(pred(str(u))) for u in uniq] + [bool(pred("nan"))], bool)[codes]


def _text(col: pd.Series) -> tuple[np.ndarray, np.ndarray]:
    """(codes, names) with ``col.astype(str) == names[codes]`` row by row, computed per distinct
    value (missing values read "nan", as astype(str) gives)."""
    if isinstance(col.dtype, pd.CategoricalDtype):
        codes = col.cat.codes.to_numpy().astype(np.int64)
        names = [str(x) for x in col.cat.categories]
    else:
        codes, uniq = pd.factorize(col.astype(str))
        codes, names = codes.astype(np.int64), [str(u) for u in uniq]
    if (codes < 0).any():
        codes = np.where(codes < 0, len(names), codes)
    return codes, np.array(names + ["nan"], dtype=object)


def _text_narrow(col: pd.Series) -> tuple[np.ndarray, np.ndarray]:
    """:func:`_text` without widening a categorical's codes to int64 (8 bytes a row): its own codes
    when no value is missing."""
    if isinstance(col.dtype, pd.CategoricalDtype):
        codes = col.cat.codes.to_numpy()
        names = [str(x) for x in col.cat.categories]
        if (codes < 0).any():
            codes = np.where(codes < 0, len(names), codes).astype(np.int32)
        return codes, np.array(names + ["nan"], dtype=object)
    return _text(col)


def _has_owners(b: pd.DataFrame) -> bool:
    return "owner" in b and bool(_str_rows(b["owner"], lambda s: s != "").any())


def block_owners(trace: Trace) -> pd.Series:
    """The owner of every block (index of ``trace.blocks``): the recorded calling object where the
    trace has one, else the API the block was made with."""
    b = trace.blocks
    api = b["api"].astype(str)
    if not _has_owners(b):
        return api.rename("owner")
    own = b["owner"].astype(str)
    tramp = _str_rows(b["owner"], is_trampoline)
    if tramp.any():
        own = own.where(~tramp, own.map(display_owner))
    return own.where(own != "", api).rename("owner")


def owner_codes(trace: Trace, rows: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(codes, names) with ``block_owners(trace).to_numpy()[rows] == names[codes]`` (every row: None),
    computed once per distinct (owner, API) pair: no Python string per row (issue 30: a 100 M-event
    trace has ~11 M blocks)."""
    b = trace.blocks
    ac, an = _text_narrow(b["api"])
    ac = ac if rows is None else ac[rows]
    if not _has_owners(b):
        return ac, an
    oc, on = _text_narrow(b["owner"])
    oc = oc if rows is None else oc[rows]
    shown = np.array([display_owner(s) if is_trampoline(s) else s for s in on.tolist()], dtype=object)
    pair = oc.astype(np.int64) * len(an) + ac
    used, codes = np.unique(pair, return_inverse=True)
    names = [shown[p // len(an)] if shown[p // len(an)] != "" else an[p % len(an)] for p in used.tolist()]
    return codes.reshape(-1), np.array(names, dtype=object)


def owner_keys(trace: Trace):
    """:func:`owner_codes` a piece of rows at a time: ``(key, names)``, ``key(lo, hi)`` an int64 key per
    row of ``trace.blocks[lo:hi]`` (one per distinct (owner, API) pair; read from the columns' own codes,
    no array over every row) and ``names(keys)`` the owner of each key, so that
    ``names(key(lo, hi)) == block_owners(trace).to_numpy()[lo:hi]`` (the same names as owner_codes)."""
    b = trace.blocks
    ac, an = _text_narrow(b["api"])
    if not _has_owners(b):
        return (lambda lo, hi: np.asarray(ac[lo:hi], np.int64)), (lambda keys: an[np.asarray(keys, np.int64)])
    oc, on = _text_narrow(b["owner"])
    shown = np.array([display_owner(s) if is_trampoline(s) else s for s in on.tolist()], dtype=object)
    n = len(an)

    def key(lo: int, hi: int) -> np.ndarray:
        k = np.asarray(oc[lo:hi], np.int64) * n
        k += ac[lo:hi]
        return k

    def names(keys) -> np.ndarray:
        return np.array([shown[p // n] if shown[p // n] != "" else an[p % n] for p in np.asarray(keys).tolist()],
                        dtype=object)
    return key, names


def _api_rule(trace: Trace, fw: str) -> tuple[np.ndarray, str]:
    """(mask over blocks, description) for the API fallback; every device block when no block
    was made with the allocator's API (a program that is not what the framework guess says)."""
    m, why = _api_rule_of(trace, fw)
    if not m.any():
        return trace.blocks["counts_device"].to_numpy(bool).copy(), "every device block (none made the " \
            f"{fw} allocator's way: {why})" if fw != "unknown" else why
    return m, why


def _api_rule_of(trace: Trace, fw: str) -> tuple[np.ndarray, str]:
    b = trace.blocks

    def api_in(*names):
        return _str_rows(b["api"], lambda s: s in names)

    dev = b["counts_device"].to_numpy(bool)
    view = str(trace.meta.get("view", "blocks"))
    vmm = _str_rows(b["kind"], lambda s: s in ("vmm", "vmm_create"))
    if fw == "pytorch":
        if view == "reserved":
            return dev & (api_in("cudaMalloc") | vmm), "cudaMalloc segments + VMM pages (expandable segments)"
        return dev & api_in(*_ASYNC_APIS), "cudaMallocAsync (one per tensor)"
    if fw in ("jax", "tensorflow"):
        if fw == "tensorflow" and view != "reserved" and api_in("cuMemAllocFromPoolAsync").any():
            return dev & api_in("cuMemAllocFromPoolAsync"), "cuMemAllocFromPoolAsync (one per tensor)"
        if (dev & vmm).any():
            return dev & vmm, "VMM buffers (cuMemAddressReserve + cuMemCreate + cuMemMap)"
        return dev & api_in("cuMemAlloc_v2"), "cuMemAlloc_v2"
    return dev.copy(), "every device block (framework unknown)"


def allocator_mask(trace: Trace) -> np.ndarray:
    """bool per row of ``trace.blocks``: a device block that the framework's allocator asked for
    (``allocator(trace).mask``, a copy)."""
    return allocator(trace).mask.copy()


def allocator_info(trace: Trace, mask: np.ndarray | None = None) -> dict:
    """What was taken as the framework allocator, for the JSON outputs (``mask``: the
    :func:`allocator_mask` of ``trace`` when the caller has it, e.g. a process's view of it)."""
    a = allocator(trace)
    m = a.mask if mask is None else np.asarray(mask, bool)
    b = trace.blocks
    b = b[[c for c in ("counts_device", "freed", "t_alloc", "t_free", "size") if c in b]]  # what is read below
    dev = b["counts_device"].to_numpy(bool)
    out = {"framework": a.framework, "framework_from": a.framework_from, "view": trace.meta.get("view"),
           "source": a.source, "rule": a.rule, "note": a.note,
           "blocks": int(m.sum()), "bytes": total(b["size"].to_numpy(), m),
           "peak_live_bytes": peak_live_bytes_of(trace, m),
           "outside": {"blocks": int((dev & ~m).sum()), "bytes": total(b["size"].to_numpy(), dev & ~m),
                       "peak_live_bytes": peak_live_bytes_of(trace, dev & ~m)}}
    return out


def bytes_by_owner(trace: Trace) -> pd.DataFrame:
    """Device blocks grouped by owner: ``owner, blocks, bytes, peak_live_bytes, is_allocator``
    (bytes = sum of sizes ever allocated; peak_live_bytes = that owner's own peak), largest
    peak first."""
    b = trace.blocks
    cols = ["owner", "blocks", "bytes", "peak_live_bytes", "is_allocator"]
    if len(b) == 0:
        return pd.DataFrame({c: pd.Series([], dtype=d) for c, d in
                             zip(cols, ["object", "int64", "int64", "int64", "bool"])})
    dev = b["counts_device"].to_numpy(bool)
    # block_owners() as codes: the recorded owner, else the API (one string per distinct value)
    api_codes, api_names = _text_narrow(b["api"])
    if _has_owners(b):
        own_codes, own_names = _text_narrow(b["owner"])
        own_names = np.array([display_owner(n) if n else n for n in own_names], dtype=object)
        names = list(dict.fromkeys(list(own_names) + list(api_names)))
        where = {n: i for i, n in enumerate(names)}
        dt = np.int16 if len(names) < (1 << 15) else np.int64
        own_lab = np.array([where[n] for n in own_names], dt)
        api_lab = np.array([where[n] for n in api_names], dt)
        has_own = own_names != ""
        label = np.empty(len(b), dt)          # the label of each block, a piece at a time (narrow)
        for lo, hi in chunking.spans(len(b), piece_rows()):
            oc, ac = own_codes[lo:hi], api_codes[lo:hi]
            label[lo:hi] = np.where(has_own[oc], own_lab[oc], api_lab[ac])
    else:
        names, label = list(api_names), api_codes
    a = allocator(trace)
    alloc = a.mask if a.known else np.zeros(len(b), bool)   # no framework: nobody's allocator
    size = b["size"].to_numpy(np.int64)
    rows = []
    for code in pd.unique(label[dev]).tolist():
        sel = dev & (label == code)
        rows.append({"owner": str(names[code]), "blocks": int(sel.sum()), "bytes": total(size, sel),
                     "peak_live_bytes": peak_live_bytes_of(trace, sel), "is_allocator": bool((alloc & sel).any())})
    out = pd.DataFrame(rows, columns=cols)
    if len(out) == 0:
        return bytes_by_owner(Trace.from_tables())
    out = out.sort_values(["peak_live_bytes", "bytes", "owner"], ascending=[False, False, True], kind="stable")
    return out.reset_index(drop=True).astype({"blocks": "int64", "bytes": "int64", "peak_live_bytes": "int64",
                                              "is_allocator": "bool"})
