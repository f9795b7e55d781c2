"""One duration per trace: summary, report and compare all show Trace.duration_ns (t0 to the
program's end as the trailer recorded it; the last event for a trace cut short)."""
from __future__ import annotations

from pyinterpose.analysis.compare import trace_row
from pyinterpose.analysis.summary import summarize
from pyinterpose.report import html
from pyinterpose.report.synthetic import training_trace


def test_summary_report_and_compare_agree_on_the_duration():
    tr = training_trace(iterations=4)
    last_event = tr.end_ns
    tr.meta["t0_ns"] = 5_000
    tr.meta["trailer"] = {"end_ns": 5_000 + last_event + 700_000_000, "duration_s": 99.0}
    assert tr.duration_ns == last_event + 700_000_000
    s = summarize(tr)
    rep = html.build(tr, bandwidth=16.0, time_limit=0.5)
    assert s["duration_s"] * 1e9 == rep.headlines["duration_ns"] == tr.duration_ns
    assert trace_row(tr, pools=False, swap=False)["duration_ns"] == tr.duration_ns


def test_trace_cut_short_lasts_until_its_last_event():
    tr = training_trace(iterations=3)
    tr.meta.pop("trailer", None)
    assert tr.duration_ns == tr.end_ns
