"""``pyinterpose bandwidth``: measure pinned-memory H2D/D2H bandwidth and latency, cache it for ``swap``."""
from __future__ import annotations

# Lazy imports (in functions): `pyinterpose --help` loads every cli module, so analyses/reports load on use.

from ..errors import PyinterposeError
from . import _args as A


def register(sub) -> None:
    p = sub.add_parser("bandwidth", help="measure host<->device copy bandwidth (cached for `swap`)",
                       description="Measure pinned-memory host-to-device and device-to-host bandwidth and "
                                   "small-copy latency through the CUDA runtime, and cache the result under "
                                   "~/.cache/pyinterpose keyed by GPU UUID so `pyinterpose swap` can use it.")
    p.add_argument("--size", type=A.number(0.0, 1 << 20, lo_open=True), default=64, metavar="MiB", help="copy size in MiB (default 64)")
    p.add_argument("--repeat", type=A.count(1, 1_000_000), default=10, metavar="N", help="timed copies per direction (default 10)")
    p.add_argument("--device", type=A.count(0, 1 << 16), default=0, help="CUDA device ordinal (default 0)")
    p.add_argument("--simulated-gpu", action="store_true",
                   help="measure the simulated CUDA runtime (host memcpy speed, labelled simulated)")
    p.add_argument("--no-save", action="store_true", help="do not write the cache")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=run)


def run(args) -> int:
    from ..analysis.bandwidth import measure, save_measurement
    from ..report.text import console, print_json, print_kv

    m = measure(size_bytes=int(args.size * (1 << 20)), repeat=args.repeat, simulated=args.simulated_gpu,
                device=args.device)
    if not args.no_save:
        try:
            m["cache"] = save_measurement(m)
        except OSError as e:
            raise PyinterposeError(f"cannot write the bandwidth cache: {e}")
    if args.json:
        print_json(m)
        return 0
    label = " (simulated: host memcpy speed, not a GPU link)" if m["simulated"] else ""
    name = "simulated GPU" if m["simulated"] else (m["name"] or "?")
    print_kv([
        ("device", f"{name} [{m['key']}]{label}"),
        ("host to device", f"{m['h2d_bytes_per_s'] / 1e9:.2f} GB/s, latency {m['h2d_latency_s'] * 1e6:.1f} us"),
        ("device to host", f"{m['d2h_bytes_per_s'] / 1e9:.2f} GB/s, latency {m['d2h_latency_s'] * 1e6:.1f} us"),
        ("copy size", f"{m['size_bytes'] / (1 << 20):g} MiB x {m['repeat']}"),
        ("method", m["method"]),
        ("saved to", m.get("cache", "not saved (--no-save)")),
    ], title="Bandwidth", out=console())
    return 0
