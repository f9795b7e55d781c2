"""Units: a quantity's human form (bytes, durations, ratios) and a PCIe link's bandwidth.

Below every layer: capture, analysis, report and the CLI all print sizes, and there is one
byte formatter.  Imports nothing of pyinterpose."""
from __future__ import annotations

import math

#: Theoretical bytes/s per lane per direction after line encoding (interposition.md §4).
PCIE_LANE_BYTES_PER_S = {
    1: 2.5e9 * 8 / 10 / 8,      # 0.25 GB/s, 8b/10b
    2: 5e9 * 8 / 10 / 8,        # 0.5 GB/s
    3: 8e9 * 128 / 130 / 8,     # 0.985 GB/s, 128b/130b
    4: 16e9 * 128 / 130 / 8,    # 1.969 GB/s
    5: 32e9 * 128 / 130 / 8,    # 3.938 GB/s
    6: 64e9 * 242 / 256 / 8,    # ~7.56 GB/s, PAM4 + FLIT
}


def pcie_bytes_per_s(gen: int | None, width: int | None) -> float | None:
    """Theoretical per-direction bandwidth of a PCIe link (None when unknown)."""
    if not gen or not width:
        return None
    lane = PCIE_LANE_BYTES_PER_S.get(int(gen))
    if lane is None:  # a generation newer than the table: assume doubling per generation
        top = max(PCIE_LANE_BYTES_PER_S)
        lane = PCIE_LANE_BYTES_PER_S[top] * 2 ** (int(gen) - top)
    return lane * int(width)


_UNITS = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"]


def fmt_bytes(n: float | int | None, precision: int = 1) -> str:
    """Human bytes in binary units: 0 -> '0 B', 1536 -> '1.5 KiB'; None/NaN -> '-'."""
    if n is None or (isinstance(n, float) and math.isnan(n)):
        return "-"
    n = float(n)
    sign = "-" if n < 0 else ""
    n = abs(n)
    for unit in _UNITS:
        if n < 1024.0 or unit == _UNITS[-1]:
            if unit == "B":
                return f"{sign}{int(round(n))} B"
            return f"{sign}{n:.{precision}f} {unit}"
        n /= 1024.0
    raise AssertionError("unreachable")


def fmt_ns(ns: float | int | None) -> str:
    """Human duration from nanoseconds: 1500 -> '1.5 us', 2.5e9 -> '2.50 s'."""
    if ns is None or (isinstance(ns, float) and math.isnan(ns)):
        return "-"
    ns = float(ns)
    a = abs(ns)
    if a < 1e3:
        return f"{ns:.0f} ns"
    if a < 1e6:
        return f"{ns / 1e3:.1f} us"
    if a < 1e9:
        return f"{ns / 1e6:.1f} ms"
    return f"{ns / 1e9:.2f} s"


def _digits(x: float, digits: int, most: int = 6) -> int:
    """``digits``, or more (up to ``most``) so that a value that is not zero does not print as zero."""
    while digits < most and 0 < abs(x) < 0.5 * 10.0 ** -digits:
        digits += 1
    return digits


def fmt_ratio(x: float | None, digits: int = 3) -> str:
    if x is None or (isinstance(x, float) and (math.isnan(x) or math.isinf(x))):
        return "-"
    return f"{x:.{_digits(float(x), digits)}f}"


def fmt_pct(x: float | None, digits: int = 1) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "-"
    v = 100.0 * float(x)
    return f"{v:.{_digits(v, digits)}f}%"
