"""Issue 24, item 9: numbers in the report that read wrong.

* a table never prints a value that is not zero as 0 ("median size (MiB) 0.0", "bytes (GiB) 0.0" for
  40 MiB): each printed number, times its column's unit, is the value to within the last decimal shown;
* the size histogram's legends never cover a bar (extents measured on the drawn figure);
* the bandwidth row says the GB/s used;
* the Pareto axis ends at the run's duration as summary gives it (Trace.duration_ns);
* compare names the GPUs used rather than "processes / devices 1 / 0".
"""
from __future__ import annotations

import re

import numpy as np
import pandas as pd
import pytest

from pyinterpose.report import html, html_sections, plots, tables
from pyinterpose.report.compare_view import metric_rows

MiB, GiB = 1 << 20, 1 << 30
UNITS = {"B": 1, "KiB": 1 << 10, "MiB": MiB, "GiB": GiB, "TiB": 1 << 40, "s": 1e9, "ms": 1e6, "us": 1e3,
         "ns": 1, "%": 0.01}


def _parse(cell: str) -> float:
    return float(cell.replace(",", ""))


def _check_column(values, name):
    df = tables.format_frame(pd.DataFrame({name: values}))
    header = df.columns[0]
    m = re.search(r"\(([^)]+)\)$", header)
    unit = UNITS[m.group(1)] if m else 1
    for v, cell in zip(values, df.iloc[:, 0]):
        x = _parse(cell)
        dec = len(cell.split(".")[1]) if "." in cell else 0
        assert abs(x * unit - v) <= 0.5 * 10 ** -dec * unit * (1 + 1e-9), (name, header, v, cell)
        assert v == 0 or x != 0, (name, header, v, cell)    # nothing real prints as zero
    return header


@pytest.mark.parametrize("name,values", [
    ("bytes", [40 * MiB, 3 * GiB, 4 * GiB, 5 * GiB]),                 # was "bytes (GiB)" with 0.0 for 40 MiB
    ("median size", [256, 2 * MiB, 8 * MiB, 8 * MiB]),               # was "(MiB)" with 0.0 for 256 B
    ("lifetime_ns", [800, 3e9, 4e9, 5e9]),                           # 800 ns in seconds: 0.000
    ("fragmentation", [0.00004, 0.2, 0.3]),                          # 0.004 % as 0.0 %
    ("ratio_to_bound", [1.0000004, 1.2, 1.3]),
    ("mean", [0.0001, 1.5, 2.5]),
    ("bytes", [0, 12 * MiB, 13 * MiB]),                              # a real zero stays 0
])
def test_no_real_value_prints_as_zero(name, values):
    _check_column(values, name)


def test_typical_unit_kept_when_nothing_rounds_to_zero():
    assert _check_column([3 * GiB, 4 * GiB, 300 * MiB], "bytes") == "bytes (GiB)"
    assert _check_column([3e9, 4e9, 2e8], "lifetime_ns") == "lifetime (s)"


def test_size_histogram_legends_cover_no_bar():
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    # the tallest bars at both ends of the size range, where a corner legend used to sit
    hist = pd.DataFrame({"lo": [2 ** k for k in range(8, 30)],
                         "count": [5000] + [10] * 20 + [4800],
                         "bytes": [10] * 20 + [900 * MiB, 1000 * MiB]})
    fig = plots.size_histogram_figure(hist)
    canvas = FigureCanvasAgg(fig)
    canvas.draw()
    r = canvas.get_renderer()
    fb = fig.bbox
    for ax in fig.axes:
        leg = ax.get_legend().get_window_extent(r)
        assert fb.x0 <= leg.x0 and leg.x1 <= fb.x1 and fb.y0 <= leg.y0 and leg.y1 <= fb.y1
        bars = [p.get_window_extent(r) for p in ax.patches]
        assert bars and not any(leg.overlaps(b) for b in bars if b.height > 0)
        assert not leg.overlaps(ax.get_window_extent(r).shrunk(0.999, 0.999))      # above the plot area
    for a, b in [(fig.axes[0], fig.axes[1])]:
        assert not a.get_legend().get_window_extent(r).overlaps(b.get_legend().get_window_extent(r))


def test_bandwidth_row_gives_the_numbers():
    bw = {"h2d_bytes_per_s": 24.6e9, "d2h_bytes_per_s": 26.1e9, "latency_s": 8e-6,
          "source": "measured on NVIDIA H100 (abc) at 2026-11-20"}
    t = html_sections._bandwidth_text(bw)
    assert "24.6 GB/s host to device" in t and "26.1 GB/s device to host" in t and "8.0 us" in t
    assert t.endswith("(measured on NVIDIA H100 (abc) at 2026-11-20)")
    same = html_sections._bandwidth_text({**bw, "d2h_bytes_per_s": 24.6e9, "source": "NVML: PCIe gen 5 x16"})
    assert same.startswith("24.6 GB/s per direction")


@pytest.mark.slow
def test_report_bandwidth_and_pareto_duration(monkeypatch):
    """The report's bandwidth facts carry GB/s, and the Pareto axis is given Trace.duration_ns (the
    summary's duration), not the time of the last event."""
    from pyinterpose.report.synthetic import training_trace

    tr = training_trace(iterations=6, step_ns=200_000)
    tr.meta["trailer"] = {"end_ns": int(tr.end_ns) + 50_000_000}
    tr.meta["t0_ns"] = 0
    assert tr.duration_ns == tr.end_ns + 50_000_000
    seen = {}
    real = plots.swap_pareto_png

    def spy(*a, **k):
        seen["run_ns"] = k.get("run_ns")
        return real(*a, **k)
    monkeypatch.setattr(plots, "swap_pareto_png", spy)
    rep = html.build(tr, bandwidth=16, time_limit=0.2)
    facts = {k: v for s in rep.sections for k, v in s.facts}
    assert "16 GB/s per direction" in facts["bandwidth"]
    assert seen["run_ns"] == tr.duration_ns


def test_compare_says_how_many_gpus():
    from pyinterpose.analysis.compare import compare
    from pyinterpose.report.synthetic import training_trace

    cmp = compare([training_trace(iterations=3), training_trace(iterations=3, device=1)], ["a", "b"],
                  bandwidth=16, pools=False, swap=False)
    cols, rows = metric_rows(cmp)
    lines = {r[0]: r[1:] for r in rows}
    assert lines["GPUs used"] == ["1 (GPU 0)", "1 (GPU 1)"]              # was "1 / 0": read as no GPU
    assert lines["processes"] == ["1", "1"]
    assert not any(k.startswith("processes / devices") for k in lines)


def test_facts_percentages_and_ratios_never_print_a_real_value_as_zero():
    from pyinterpose.report.text import fmt_pct, fmt_ratio

    assert fmt_pct(0.00004) == "0.004%" and fmt_pct(0.5) == "50.0%" and fmt_pct(0) == "0.0%"
    assert fmt_ratio(0.0004) == "0.0004" and fmt_ratio(1.25) == "1.250" and fmt_ratio(0.0) == "0.000"
    assert fmt_pct(-0.00002) == "-0.002%"
