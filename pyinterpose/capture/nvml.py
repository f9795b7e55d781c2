"""NVML at capture time: host-link description and samples taken while the target runs.

Two entry points, both safe on machines with no GPU, no driver or no pynvml:

* :func:`link_info` — per device: PCIe link (current and max generation/width,
  the GPU's own max generation), the theoretical per-direction bandwidth derived
  from it, NVLink and C2C (Grace Hopper/Blackwell) when present.  Stored by
  ``pyinterpose run`` in ``trace.meta["nvml"]``.
* :class:`NvmlSampler` — a daemon thread sampling used memory and
  ``nvmlDeviceGetPcieThroughput`` (TX = bytes sent by the GPU, i.e. device to
  host; RX = bytes received, host to device; KB/s over NVML's 20 ms window).
  Times are ``time.monotonic_ns()``, the CLOCK_MONOTONIC the shim stamps events
  with.

Bandwidth basis: the *current* PCIe link drops to Gen1 (and sometimes a
narrower width) while the GPU idles (ASPM), so the theoretical figure comes
from the *max* generation and width of the link in this system
(``nvmlDeviceGetMaxPcieLinkGeneration``/``Width``), never from the current one
unless the max is unknown — ``basis`` says which.
"""
from __future__ import annotations

import threading
import time
from typing import Any

import pandas as pd

from ..trace.model import NVML_COLUMNS, conform, empty_table
from ..units import pcie_bytes_per_s


def _pynvml():
    """Import pynvml (nvidia-ml-py); ImportError propagates to the callers' handlers."""
    import pynvml  # noqa: PLC0415

    return pynvml


def _text(v: Any) -> str:
    return v.decode(errors="replace") if isinstance(v, (bytes, bytearray)) else str(v)


def _try(fn, *args, default=None):
    """Call an NVML query; any NVML error (not supported, no permission, ...) -> default."""
    try:
        return fn(*args)
    except Exception:  # noqa: BLE001 - NVMLError subclasses vary by driver and binding
        return default


def _field_values(nv, handle, field_ids: list[int]) -> dict[int, float | None]:
    """nvmlDeviceGetFieldValues -> {field id: value or None when the field is unsupported}."""
    out: dict[int, float | None] = {f: None for f in field_ids}
    vals = _try(nv.nvmlDeviceGetFieldValues, handle, field_ids, default=None)
    if not vals:
        return out
    attr = {0: "dVal", 1: "uiVal", 2: "ulVal", 3: "ullVal", 4: "sllVal", 5: "siVal", 6: "usVal"}
    for fid, fv in zip(field_ids, vals):
        if getattr(fv, "nvmlReturn", 0) != 0:
            continue
        name = attr.get(int(getattr(fv, "valueType", 3)), "ullVal")
        out[fid] = getattr(fv.value, name, None)
    return out


def _pcie(nv, h) -> dict:
    gen_cur = _try(nv.nvmlDeviceGetCurrPcieLinkGeneration, h)
    width_cur = _try(nv.nvmlDeviceGetCurrPcieLinkWidth, h)
    gen_max = _try(nv.nvmlDeviceGetMaxPcieLinkGeneration, h)
    width_max = _try(nv.nvmlDeviceGetMaxPcieLinkWidth, h)
    gpu_gen_max = _try(nv.nvmlDeviceGetGpuMaxPcieLinkGeneration, h)
    if gen_max and width_max:
        gen, width = int(gen_max), int(width_max)
        basis = (f"theoretical PCIe Gen{gen} x{width} per direction after encoding, from the link's max "
                 f"generation/width in this system (the current link drops to Gen1 at idle)")
    elif gen_cur and width_cur:
        gen, width = int(gen_cur), int(width_cur)
        basis = (f"theoretical PCIe Gen{gen} x{width} from the CURRENT link (max unknown); "
                 f"may be low: the link drops to Gen1 at idle")
    else:
        gen = width = None
        basis = "PCIe link generation/width not reported by NVML"
    bw = pcie_bytes_per_s(gen, width) if gen and width else None
    return {"gen_current": gen_cur, "width_current": width_cur, "gen_max": gen_max,
            "width_max": width_max, "gpu_gen_max": gpu_gen_max,
            "h2d_bytes_per_s": bw, "d2h_bytes_per_s": bw, "basis": basis}


def _nvlink(nv, h) -> dict | None:
    max_links = int(getattr(nv, "NVML_NVLINK_MAX_LINKS", 18))
    active, versions = [], set()
    for link in range(max_links):
        state = _try(nv.nvmlDeviceGetNvLinkState, h, link)
        if state is None:
            if link == 0:
                return None  # NVLink not supported on this device
            continue
        if int(state) == 1:
            active.append(link)
            v = _try(nv.nvmlDeviceGetNvLinkVersion, h, link)
            if v is not None:
                versions.add(int(v))
    if not active:
        return None
    fid = getattr(nv, "NVML_FI_DEV_NVLINK_GET_SPEED", None)
    speed = _field_values(nv, h, [fid])[fid] if fid is not None else None
    return {"links_active": len(active), "links": active,
            "version": max(versions) if versions else None,
            "speed_mbps_per_link": speed}


def _c2c(nv, h) -> dict | None:
    info = _try(getattr(nv, "nvmlDeviceGetC2cModeInfoV", lambda _h: None), h)
    enabled = bool(getattr(info, "isC2cEnabled", 0)) if info is not None else False
    f_count = getattr(nv, "NVML_FI_DEV_C2C_LINK_COUNT", None)
    f_bw = getattr(nv, "NVML_FI_DEV_C2C_LINK_GET_MAX_BW", None)
    fields = [f for f in (f_count, f_bw) if f is not None]
    vals = _field_values(nv, h, fields) if fields else {}
    count = vals.get(f_count)
    if not enabled and not count:
        return None
    mbps = vals.get(f_bw)  # MB/s per link (NVML docs)
    total = float(mbps) * 1e6 * int(count) if (mbps and count) else None
    return {"enabled": enabled, "links": int(count) if count else None,
            "max_bw_mbps_per_link": mbps, "bytes_per_s": total,
            "basis": "NVML_FI_DEV_C2C_LINK_GET_MAX_BW x link count" if total else "no bandwidth field"}


def link_info() -> dict:
    """Describe every GPU's host and peer links.  Never raises.

    Returns ``{"available": False, "reason": ...}`` when NVML cannot be used."""
    try:
        nv = _pynvml()
    except Exception as e:  # noqa: BLE001
        return {"available": False, "reason": f"pynvml (nvidia-ml-py) not importable: {e}"}
    try:
        nv.nvmlInit()
    except Exception as e:  # noqa: BLE001
        return {"available": False, "reason": f"NVML init failed (no NVIDIA driver/GPU?): {e}"}
    try:
        driver = _text(_try(nv.nvmlSystemGetDriverVersion, default=""))
        n = int(_try(nv.nvmlDeviceGetCount, default=0) or 0)
        devices = []
        for i in range(n):
            h = _try(nv.nvmlDeviceGetHandleByIndex, i)
            if h is None:
                continue
            mem = _try(nv.nvmlDeviceGetMemoryInfo, h)
            devices.append({
                "index": i,
                "name": _text(_try(nv.nvmlDeviceGetName, h, default="")),
                "uuid": _text(_try(nv.nvmlDeviceGetUUID, h, default="")),
                "total_bytes": int(mem.total) if mem is not None else None,
                "pcie": _pcie(nv, h),
                "nvlink": _nvlink(nv, h),
                "c2c": _c2c(nv, h),
            })
        return {"available": True, "driver": driver, "devices": devices}
    except Exception as e:  # noqa: BLE001 - never raise from capture
        return {"available": False, "reason": f"NVML query failed: {e}"}
    finally:
        _try(nv.nvmlShutdown)


class NvmlSampler:
    """Sample used memory and PCIe throughput of every GPU on a daemon thread.

    ``start()`` then ``stop() -> DataFrame`` (columns of ``trace.nvml``: t, device,
    used_bytes, pcie_tx_kbs, pcie_rx_kbs; t = time.monotonic_ns()).  Throughput
    the driver does not report is NaN.  Without NVML ``stop()`` returns an empty
    frame.  Each throughput query itself takes ~20 ms per direction, so the real
    period is max(interval_s, 40 ms x devices)."""

    def __init__(self, interval_s: float = 0.05):
        self.interval_s = float(interval_s)
        self._rows: list[tuple] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._nv = None
        self._handles: list[tuple[int, Any]] = []
        self.error: str | None = None

    def start(self) -> "NvmlSampler":
        try:
            nv = _pynvml()
            nv.nvmlInit()
        except Exception as e:  # noqa: BLE001
            self.error = f"NVML unavailable: {e}"
            return self
        self._nv = nv
        n = int(_try(nv.nvmlDeviceGetCount, default=0) or 0)
        self._handles = [(i, h) for i in range(n)
                         if (h := _try(nv.nvmlDeviceGetHandleByIndex, i)) is not None]
        self._thread = threading.Thread(target=self._loop, name="pyinterpose-nvml", daemon=True)
        self._thread.start()
        return self

    def _sample_once(self) -> None:
        nv = self._nv
        tx_id = getattr(nv, "NVML_PCIE_UTIL_TX_BYTES", 0)
        rx_id = getattr(nv, "NVML_PCIE_UTIL_RX_BYTES", 1)
        for dev, h in self._handles:
            t = time.monotonic_ns()
            mem = _try(nv.nvmlDeviceGetMemoryInfo, h)
            tx = _try(nv.nvmlDeviceGetPcieThroughput, h, tx_id)
            rx = _try(nv.nvmlDeviceGetPcieThroughput, h, rx_id)
            self._rows.append((t, dev, int(mem.used) if mem is not None else -1,
                               float("nan") if tx is None else float(tx),
                               float("nan") if rx is None else float(rx)))

    def _loop(self) -> None:
        try:
            while True:
                self._sample_once()
                if self._stop.wait(self.interval_s):
                    break
        except Exception as e:  # noqa: BLE001 - a sampler must never take the run down
            self.error = f"NVML sampling stopped: {e}"

    def stop(self) -> pd.DataFrame:
        if self._thread is not None:
            self._stop.set()
            self._thread.join()
            self._thread = None
        if self._nv is not None:
            _try(self._nv.nvmlShutdown)
            self._nv = None
        if not self._rows:
            return empty_table(NVML_COLUMNS)
        df = pd.DataFrame(self._rows, columns=list(NVML_COLUMNS))
        return conform(df, NVML_COLUMNS)
