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

Functions (pure, over the trace's tables):

* :func:`framework` — ``"pytorch" | "jax" | "tensorflow" | "unknown"`` from the trace's metadata,
  owners, command line and APIs;
* :func:`block_owners` — a Series (index of ``trace.blocks``): the recorded owner, else the API;
* :func:`allocator_mask` — bool array over ``trace.blocks``: device blocks the framework's
  allocator asked for;
* :func:`bytes_by_owner` — DataFrame ``owner, blocks, bytes, peak_live_bytes, is_allocator``
  (device blocks only, largest peak first): the table summary, compare and the report show;
* :func:`allocator_info` — a JSON-ready dict saying what was taken as the allocator and why.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from ..trace.model import Trace, peak_live_bytes_of

FRAMEWORKS = ("pytorch", "jax", "tensorflow")

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


def framework(trace: Trace) -> str:
    """The framework that ran, from (in this order) ``meta["framework"]``, the owners recorded,
    a ``--framework X`` argument or framework name on the command line, and the APIs used."""
    fw = str(trace.meta.get("framework") or "").lower()
    if fw:
        return {"torch": "pytorch", "tf": "tensorflow"}.get(fw, fw)
    b = trace.blocks
    if "owner" in b and len(b):
        used = b["owner"].cat.remove_unused_categories().cat.categories \
            if isinstance(b["owner"].dtype, pd.CategoricalDtype) else pd.unique(b["owner"].astype(str))
        objs = " ".join(str(o).lower() for o in used if str(o))
        for name, prefixes in _ALLOCATOR_OBJECTS.items():
            if any(p in objs for p in prefixes):
                return name
    cmd = [str(c) for c in trace.meta.get("command", []) or []]
    for i, c in enumerate(cmd):
        v = cmd[i + 1] if c == "--framework" and i + 1 < len(cmd) else (
            c.split("=", 1)[1] if c.startswith("--framework=") else None)
        if v:
            return {"torch": "pytorch", "tf": "tensorflow"}.get(v.lower(), v.lower())
    words = _cmd_words(trace)
    for key, name in (("torch", "pytorch"), ("jax", "jax"), ("tensorflow", "tensorflow"), ("keras", "tensorflow")):
        if key in words:
            return name
    apis = set(trace.counts.get("by_api", {}))
    if not apis and len(b):
        apis = set(str(a) for a in b["api"].unique())
    if apis & {"cudaMallocAsync", "cudaMalloc"} and not apis & {"cuMemAllocFromPoolAsync"}:
        return "pytorch"
    if "cuMemAllocFromPoolAsync" in apis:
        return "tensorflow"
    if apis & {"cuMemCreate", "cuMemMap", "cuMemAlloc_v2"}:
        return "jax"
    return "unknown"


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
    return own.where(own != "", api).rename("owner")


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
    """bool per row of ``trace.blocks``: a device block that the framework's allocator asked for."""
    b = trace.blocks
    if len(b) == 0:
        return np.zeros(0, bool)
    fw = framework(trace)
    if _has_owners(b) and fw in _ALLOCATOR_OBJECTS:
        prefixes = _ALLOCATOR_OBJECTS[fw]
        hit = _str_rows(b["owner"], lambda s: any(p in s.lower() for p in prefixes))
        if hit.any():
            return hit & b["counts_device"].to_numpy(bool)
    return _api_rule(trace, fw)[0]


def allocator_info(trace: Trace, mask: np.ndarray | None = None) -> dict:
    """What was taken as the framework allocator, for the JSON outputs (``mask``: the
    :func:`allocator_mask` of ``trace`` when the caller has it)."""
    fw = framework(trace)
    m = allocator_mask(trace) if mask is None else np.asarray(mask, bool)
    src = "owners" if _has_owners(trace.blocks) and fw in _ALLOCATOR_OBJECTS else "api"
    b = trace.blocks
    b = b[[c for c in ("counts_device", "freed", "t_alloc", "t_free", "size") if c in b]]  # what is read below
    dev = b["counts_device"].to_numpy(bool)
    out = {"framework": fw, "view": trace.meta.get("view"), "source": src,
           "rule": _api_rule(trace, fw)[1] if src == "api" else f"owner is {fw}'s allocator",
           "blocks": int(m.sum()), "bytes": int(b["size"].to_numpy()[m].sum()),
           "peak_live_bytes": peak_live_bytes_of(trace, m),
           "outside": {"blocks": int((dev & ~m).sum()), "bytes": int(b["size"].to_numpy()[dev & ~m].sum()),
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
    api_codes, api_names = _text(b["api"])
    if _has_owners(b):
        own_codes, own_names = _text(b["owner"])
        names = list(dict.fromkeys(list(own_names) + list(api_names)))
        where = {n: i for i, n in enumerate(names)}
        own_lab = np.array([where[n] for n in own_names], np.int64)
        api_lab = np.array([where[n] for n in api_names], np.int64)
        label = np.where((own_names != "")[own_codes], own_lab[own_codes], api_lab[api_codes])
    else:
        names, label = list(api_names), api_codes
    alloc = allocator_mask(trace)
    size = b["size"].to_numpy(np.int64)
    rows = []
    for code in pd.unique(label[dev]).tolist():
        sel = dev & (label == code)
        rows.append({"owner": str(names[code]), "blocks": int(sel.sum()), "bytes": int(size[sel].sum()),
                     "peak_live_bytes": peak_live_bytes_of(trace, sel), "is_allocator": bool(alloc[sel].any())})
    out = pd.DataFrame(rows, columns=cols)
    if len(out) == 0:
        return bytes_by_owner(Trace.from_tables())
    out = out.sort_values(["peak_live_bytes", "bytes", "owner"], ascending=[False, False, True], kind="stable")
    return out.reset_index(drop=True).astype({"blocks": "int64", "bytes": "int64", "peak_live_bytes": "int64",
                                              "is_allocator": "bool"})
