"""Speed and size of the HTML report's interactive timeline; prints one JSON object.

    python scripts/bench_report.py TRACE.pit [--runs 3] [--html OUT.html]

Writes the report of TRACE (or reuses --html when it exists), then opens it in
headless Chromium ``--runs`` times, each with a fresh profile (no code cache: a
first visit), and reports the file size and, per run, the milliseconds from
navigation start until every timeline is drawn (``timelines_ms``) and the
timeline script's own share (decode + model + first draw, ``script_ms``); ``script_start_ms``
is when our script began, i.e. after the page and the inlined chart library (uPlot) were parsed;
``dom_interactive_ms`` when the whole page was parsed; ``phases_ms`` splits our script per
timeline into JSON parse, inflate, model, main view and minimap.  Every time is measured in the page
(``performance.now()``).  A long run's summarised timeline (report/timeline_summary.py) also gets
``detail_ms``: from asking for 1/2000 of the run around its middle until the finest level's tiles
are decoded and drawn.

The issue-30 figures (the report written by the CLI under the 100 M-event flock, then opened here):

    flock /work/bench/big.lock prlimit --as=12000000000 python -m pyinterpose report TRACE -o R.html -f --bandwidth 25
    python scripts/bench_report.py TRACE --html R.html --runs 3

A ~1 M-event trace: ``pyinterpose run --simulated-gpu -o big.pit -- python -m
pyinterpose.examples.simtrain --steps 1240 --layers 100`` (995,080 alloc/free events).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "integration"))


ZOOM = """new Promise(function (resolve) {
  var root = document.querySelector('.pit-tl'), tl = root.pitTimeline, m = tl.model;
  if (!m.summary) { resolve(null); return; }
  var n = m.n, t0 = performance.now(), a = n / 2, w = Math.max(8, n / 2000);
  tl.setRange(a, a + w);
  (function poll() {
    if (root.getAttribute('data-level') === root.getAttribute('data-want') && !m.pending()) {
      requestAnimationFrame(function () {
        resolve({ms: Math.round(performance.now() - t0), level: +root.getAttribute('data-level'),
                 levels: m.B.length, buckets: m.B, points: +root.getAttribute('data-points'),
                 info: root.querySelector('.pit-tl-info').textContent});
      });
    } else { setTimeout(poll, 5); }
  })();
})"""


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("trace")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--html")
    ap.add_argument("--time-limit", type=float, default=2.0)
    a = ap.parse_args()
    from cdp import Browser  # tests/integration/cdp.py

    import pyinterpose
    from pyinterpose.report import html

    out = a.html or os.path.splitext(a.trace)[0] + ".bench.html"
    build_s = None
    if not (a.html and os.path.exists(out)):
        t = time.perf_counter()
        tr = pyinterpose.load(a.trace)
        page = html.render(html.build(tr, time_limit=a.time_limit))
        with open(out, "w", encoding="utf-8") as f:
            f.write(page)
        build_s = round(time.perf_counter() - t, 2)
    runs = []
    for _ in range(a.runs):
        with tempfile.TemporaryDirectory() as prof, Browser(prof, 1400, 1000) as b:
            b.open("file://" + os.path.abspath(out), timeout=120)
            b.eval("window.pitTimelinesReady", timeout=120)
            r = b.eval("""({total: +document.body.getAttribute('data-timelines-ms'),
                start: +document.body.getAttribute('data-timelines-script-start-ms'),
                dom: Math.round(performance.getEntriesByType('navigation')[0].domInteractive),
                phases: Array.prototype.map.call(document.querySelectorAll('.pit-tl'),
                                                 function(e){return JSON.parse(e.getAttribute('data-phases'));}),
                script: Array.prototype.map.call(document.querySelectorAll('.pit-tl'),
                                                 function(e){return +e.getAttribute('data-ms');}),
                events: Array.prototype.map.call(document.querySelectorAll('.pit-tl'),
                                                 function(e){return e.pitTimeline.model.n;})})""")
            # a summarised timeline (a long run): zoom into 1/2000 of the run around its middle and
            # time, in the page, until the finest level's tiles are decoded and drawn
            r["detail"] = b.eval(ZOOM, timeout=120)
            runs.append(r)
    try:
        load = os.getloadavg()[0]
    except OSError:
        load = None
    print(json.dumps({
        "html": out, "file_bytes": os.path.getsize(out), "build_seconds": build_s,
        "events": runs[0]["events"] if runs else None,
        "timelines_ms": [r["total"] for r in runs],
        "timelines_ms_median": statistics.median(r["total"] for r in runs) if runs else None,
        "script_ms": [r["script"] for r in runs],
        "script_start_ms": [r["start"] for r in runs],
        "dom_interactive_ms": [r["dom"] for r in runs],
        "phases_ms": [r["phases"] for r in runs],
        # summarised timelines only (else null): ms from asking for 1/2000 of the run until its finest
        # level is decoded and drawn, the level reached, the levels' bucket counts
        "detail_ms": [r["detail"]["ms"] if r["detail"] else None for r in runs],
        "detail": runs[0]["detail"] if runs else None,
        "cpus": os.cpu_count(), "loadavg_1min": load,
    }))
    return 0


if __name__ == "__main__":
    sys.exit(main())
