"""The HTML report and compare page open in a real headless browser (Chromium) with no
console errors, every image decoded, and the page's render marker set.

Skipped where Chromium is absent (install: apt-get install -y chromium)."""
from __future__ import annotations

import os
import re
import shutil
import subprocess

import pytest

from pyinterpose.analysis.compare import compare
from pyinterpose.report import compare_view, html
from pyinterpose.report.synthetic import training_trace

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser") or (
    "/usr/bin/chromium" if os.path.exists("/usr/bin/chromium") else None)
pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="Chromium not installed (apt-get install -y chromium): "
                                                          "headless browser test skipped")
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--no-first-run", "--enable-logging=stderr", "--v=0"]


@pytest.fixture(autouse=True)
def _no_cached_bandwidth(monkeypatch, tmp_path):
    monkeypatch.setenv("PYINTERPOSE_CACHE_DIR", str(tmp_path))


def chromium(tmp_path, *args) -> subprocess.CompletedProcess:
    prof = tmp_path / "profile"
    prof.mkdir(exist_ok=True)
    return subprocess.run([CHROMIUM, *FLAGS, f"--user-data-dir={prof}", *args], capture_output=True,
                          text=True, timeout=120)


def check_page(tmp_path, page: str, name: str) -> None:
    path = tmp_path / name
    path.write_text(page, encoding="utf-8")
    n_img = page.count("<img ")
    r = chromium(tmp_path, "--dump-dom", path.as_uri())
    assert r.returncode == 0, r.stderr[-2000:]
    body = re.search(r"<body[^>]*>", r.stdout)
    assert body, r.stdout[:500]
    assert 'data-render="ok"' in body.group(0), body.group(0)
    assert f'data-images="{n_img}/{n_img}"' in body.group(0)
    console = [ln for ln in r.stderr.splitlines() if ":CONSOLE" in ln]
    assert console == [], console
    shot = tmp_path / (name + ".png")
    r = chromium(tmp_path, "--window-size=1200,3000", f"--screenshot={shot}", path.as_uri())
    assert r.returncode == 0 and shot.exists()
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 20_000


def test_marker_detects_a_broken_page(tmp_path):
    """The oracle itself: a page with a broken image and a script error fails the checks."""
    from pyinterpose.report.html import _SCRIPT

    page = (f'<!DOCTYPE html><html><body><img src="data:image/png;base64,AAAA">'
            f'<script>{_SCRIPT}</script><script>undefinedFunction()</script></body></html>')
    path = tmp_path / "bad.html"
    path.write_text(page)
    r = chromium(tmp_path, "--dump-dom", path.as_uri())
    assert 'data-render="broken"' in r.stdout
    assert any(":CONSOLE" in ln and "undefinedFunction" in ln for ln in r.stderr.splitlines())


def test_report_renders_in_chromium(tmp_path):
    tr = training_trace(iterations=6, step_ns=200_000)
    check_page(tmp_path, html.render(html.build(tr, bandwidth=16)), "report.html")


def test_compare_page_renders_in_chromium(tmp_path):
    cmp = compare([training_trace(iterations=4), training_trace(iterations=4, act=2 << 20)], ["a", "b"],
                  bandwidth=16, pools=False)
    check_page(tmp_path, compare_view.render_html(cmp), "compare.html")
