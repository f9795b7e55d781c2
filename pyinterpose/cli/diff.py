"""``pyinterpose diff A B [--fail-above PCT [--metric peak|reserved|site:FILE:LINE]] [--json]``."""
from __future__ import annotations

# Lazy imports (in functions): `pyinterpose --help` loads every cli module, so analyses/reports load on use.

from . import _args as A

EXIT_ABOVE = 1     # --fail-above: B exceeds A by more than the limit (bad input is 2, as everywhere)


def register(sub) -> None:
    p = sub.add_parser("diff", help="two runs side by side: what grew, appeared, vanished (a CI memory gate)",
                       description="Compare run B against run A: totals (peak, reserved, allocated), each call "
                                   "site, owner and lifetime class (live at the peak and allocated), and the steps "
                                   "side by side. With --fail-above PCT the exit status is 1 when B's metric "
                                   "exceeds A's by more than PCT percent (a CI gate for memory regressions).")
    p.add_argument("a", metavar="A", help="the baseline trace")
    p.add_argument("b", metavar="B", help="the trace compared with it")
    p.add_argument("--fail-above", type=A.number(lo=0), metavar="PCT",
                   help="exit 1 when B's --metric is more than PCT percent above A's (from 0 bytes in A: any "
                        "growth)")
    p.add_argument("--metric", default="peak", metavar="peak|reserved|site:FILE:LINE",
                   help="what --fail-above checks: peak live device bytes (default), bytes reserved by the "
                        "framework's allocator, or the bytes live at the peak from one call site "
                        "(site:train.py:88; site:TEXT matches the call sites starting with TEXT)")
    p.add_argument("--top", type=A.count(lo=1), default=20, metavar="N", help="rows per table (default 20)")
    p.add_argument("--json", action="store_true", help="print the diff (every call site's delta) as one JSON "
                                                       "object")
    A.add_site_skip(p)
    p.set_defaults(func=run)


def run(args) -> int:
    from ..analysis.diff import diff, gate, parse_metric, profile
    from ..report.diff_text import gate_line, print_diff
    from ..heap import give_back
    from ..report.text import print_json

    metric = parse_metric(args.metric)           # a bad --metric fails before any trace is read
    profiles, traces = [], []
    for path in (args.a, args.b):
        tr = A.load_trace(path, quiet=args.json)
        A.apply_site_skip(tr, args)
        profiles.append(profile(tr, path))
        tr.forget_all()                   # A's derived tables are not read again: not held under B's
        give_back()
        traces.append(tr)
    d = diff(*profiles)
    g = gate(d, metric, args.fail_above) if args.fail_above is not None else None
    if args.json:
        print_json({**d, "gate": g}, trace=traces)
    else:
        print_diff(d, top=args.top, gate=g)
    if g is not None and g["exceeded"]:
        if args.json:
            import sys
            print("pyinterpose: " + gate_line(g), file=sys.stderr)
        return EXIT_ABOVE
    return 0
