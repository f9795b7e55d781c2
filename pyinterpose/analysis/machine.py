"""The machine a trace was captured on, from its metadata: GPUs (name, memory, host link), the
driver, NVML, the host, Python and the framework versions when the capture knew them.

:func:`machine` returns a JSON-ready dict (``summary --json``'s ``machine``); :func:`machine_lines`
the same as (label, text) pairs for the terminal.  Nothing here is measured: every value is what
``pyinterpose run`` recorded (``meta["nvml"]``, ``meta["gpus"]``, ``meta["frameworks"]``, ...);
what it did not record is said as unknown, never guessed.
"""
from __future__ import annotations

from typing import Any

from ..trace.model import Trace
from ..units import fmt_bytes


def _link(dev: dict) -> dict | None:
    """The host link of one NVML device: PCIe (generation, width, per-direction bytes/s), NVLink
    and C2C when present."""
    out: dict[str, Any] = {}
    p = dev.get("pcie") or {}
    if p.get("gen_max") or p.get("gen_current"):
        out["pcie"] = {"gen": p.get("gen_max") or p.get("gen_current"),
                       "width": p.get("width_max") or p.get("width_current"),
                       "bytes_per_s": p.get("h2d_bytes_per_s")}
    if dev.get("nvlink"):
        nl = dev["nvlink"]
        out["nvlink"] = {"links_active": nl.get("links_active"), "version": nl.get("version")}
    if dev.get("c2c"):
        out["c2c"] = {"links": dev["c2c"].get("links"), "bytes_per_s": dev["c2c"].get("bytes_per_s")}
    return out or None


def machine(trace: Trace) -> dict[str, Any]:
    """GPUs, driver, NVML link, host and framework versions, as the trace recorded them."""
    m = trace.meta
    nv = m.get("nvml") or {}
    by_index = {d.get("index"): d for d in nv.get("devices") or []}
    gpus = []
    for g in m.get("gpus") or []:
        d = by_index.get(g.get("nvml_index"), {})
        gpus.append({"nvml_index": g.get("nvml_index"), "name": g.get("name") or d.get("name"),
                     "uuid": g.get("uuid") or d.get("uuid"), "memory_bytes": d.get("total_bytes"),
                     "link": _link(d)})
    if not gpus:                      # older traces: the NVML devices only
        gpus = [{"nvml_index": d.get("index"), "name": d.get("name"), "uuid": d.get("uuid"),
                 "memory_bytes": d.get("total_bytes"), "link": _link(d)} for d in nv.get("devices") or []]
    return {
        "simulated_gpu": bool(m.get("simulated_gpu", False)),
        "gpus": gpus,
        "driver": nv.get("driver"),
        "nvml": {"available": bool(nv.get("available")), "reason": nv.get("reason")},
        "cuda_visible_devices": m.get("cuda_visible_devices"),
        "host": m.get("host"), "platform": m.get("platform"), "python": m.get("python"),
        "frameworks": dict(m.get("frameworks") or {}),
    }


def _link_text(link: dict | None) -> str:
    if not link:
        return "host link not reported"
    parts = []
    if "pcie" in link:
        p = link["pcie"]
        bw = f", {p['bytes_per_s'] / 1e9:.1f} GB/s per direction" if p.get("bytes_per_s") else ""
        parts.append(f"PCIe Gen{p['gen']} x{p['width']}{bw}")
    if "nvlink" in link:
        nl = link["nvlink"]
        parts.append(f"NVLink{'' if nl.get('version') is None else ' v' + str(nl['version'])} "
                     f"{nl.get('links_active')} links")
    if "c2c" in link:
        c = link["c2c"]
        parts.append("C2C" + (f" {c['bytes_per_s'] / 1e9:.0f} GB/s" if c.get("bytes_per_s") else ""))
    return ", ".join(parts)


def machine_lines(d: dict[str, Any]) -> list[tuple[str, str]]:
    """:func:`machine`'s dict as (label, text) lines for the terminal."""
    out: list[tuple[str, str]] = []
    if d["simulated_gpu"]:
        out.append(("GPU", "simulated (simcuda): no real GPU"))
    for g in d["gpus"]:
        mem = fmt_bytes(g["memory_bytes"]) if g.get("memory_bytes") else "memory not reported"
        out.append((f"GPU {g['nvml_index']}", f"{g.get('name') or 'unknown'}, {mem}; {_link_text(g.get('link'))}"))
    if not d["gpus"] and not d["simulated_gpu"]:
        out.append(("GPU", "not recorded" + (f" (NVML: {d['nvml']['reason']})" if d["nvml"].get("reason") else "")))
    out.append(("driver", d["driver"] or ("unknown (NVML not available)" if not d["nvml"]["available"] else "unknown")))
    if d.get("cuda_visible_devices") is not None:
        out.append(("CUDA_VISIBLE_DEVICES", str(d["cuda_visible_devices"])))
    fw = d.get("frameworks") or {}
    out.append(("frameworks", ", ".join(f"{k} {v}" for k, v in fw.items()) if fw else "versions not recorded"))
    out.append(("host", f"{d.get('host') or '?'} ({d.get('platform') or '?'}), Python {d.get('python') or '?'}"))
    return out
