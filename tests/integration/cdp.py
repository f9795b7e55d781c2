"""A small DevTools-protocol driver for headless Chromium over ``--remote-debugging-pipe``
(JSON messages separated by NUL on fds 3/4: no websocket library needed).

Used by the browser tests and by ``scripts/bench_report.py``: load a page, evaluate
JavaScript (awaiting promises), send real mouse and wheel input, collect console
messages and uncaught exceptions, take screenshots."""
from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import threading
import time
from typing import Any

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser") or (
    "/usr/bin/chromium" if os.path.exists("/usr/bin/chromium") else None)


class BrowserError(RuntimeError):
    pass


class Browser:
    def __init__(self, profile_dir: str, width: int = 1400, height: int = 1000, scale: float = 1.0):
        if CHROMIUM is None:
            raise BrowserError("chromium not installed")
        import fcntl

        def _high(fd: int) -> int:  # away from 3/4 so the dup2 calls below cannot clobber each other
            hi = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 10)
            os.close(fd)
            return hi

        to_chrome_r, self._to_chrome = os.pipe()
        self._from_chrome, from_chrome_w = os.pipe()
        to_chrome_r, from_chrome_w = _high(to_chrome_r), _high(from_chrome_w)

        def _fds():
            os.dup2(to_chrome_r, 3)
            os.dup2(from_chrome_w, 4)

        self.proc = subprocess.Popen(
            [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--remote-debugging-pipe",
             "--disable-background-networking", "--disable-component-update", "--disable-sync",
             "--no-first-run", "--no-default-browser-check", f"--user-data-dir={profile_dir}",
             f"--window-size={width},{height}", "about:blank"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
            preexec_fn=_fds, close_fds=False)  # dup2 leaves 3/4 inheritable; all else is close-on-exec
        os.close(to_chrome_r)
        os.close(from_chrome_w)
        self._id = 0
        self._lock = threading.Lock()
        self._cv = threading.Condition(self._lock)
        self._results: dict[int, dict] = {}
        self.events: list[dict] = []
        self._closed = False
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        tid = self.call("Target.createTarget", {"url": "about:blank"})["targetId"]
        self.session = self.call("Target.attachToTarget", {"targetId": tid, "flatten": True})["sessionId"]
        for m in ("Page.enable", "Runtime.enable", "Log.enable", "Network.enable"):
            self.call(m, session=True)
        self.call("Emulation.setDeviceMetricsOverride",
                  {"width": width, "height": height, "deviceScaleFactor": scale, "mobile": False}, session=True)

    # -- transport
    def _read(self) -> None:
        buf = b""
        while True:
            try:
                chunk = os.read(self._from_chrome, 1 << 16)
            except OSError:
                break
            if not chunk:
                break
            buf += chunk
            while b"\0" in buf:
                msg, buf = buf.split(b"\0", 1)
                try:
                    d = json.loads(msg)
                except ValueError:
                    continue
                with self._cv:
                    if "id" in d:
                        self._results[d["id"]] = d
                    else:
                        self.events.append(d)
                    self._cv.notify_all()
        with self._cv:
            self._closed = True
            self._cv.notify_all()

    def call(self, method: str, params: dict | None = None, session: bool = False, timeout: float = 60.0) -> dict:
        with self._cv:
            self._id += 1
            mid = self._id
        msg: dict[str, Any] = {"id": mid, "method": method, "params": params or {}}
        if session:
            msg["sessionId"] = self.session
        os.write(self._to_chrome, json.dumps(msg).encode() + b"\0")
        deadline = time.monotonic() + timeout
        with self._cv:
            while mid not in self._results:
                left = deadline - time.monotonic()
                if left <= 0 or self._closed:
                    raise BrowserError(f"no answer to {method} (closed={self._closed})")
                self._cv.wait(left)
            d = self._results.pop(mid)
        if "error" in d:
            raise BrowserError(f"{method}: {d['error']}")
        return d.get("result", {})

    # -- page helpers
    def open(self, url: str, timeout: float = 60.0) -> None:
        n0 = len(self.events)
        self.call("Page.navigate", {"url": url}, session=True)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self._cv:
                if any(e.get("method") == "Page.loadEventFired" for e in self.events[n0:]):
                    return
                self._cv.wait(0.1)
        raise BrowserError(f"page did not load: {url}")

    def eval(self, expr: str, timeout: float = 60.0) -> Any:
        r = self.call("Runtime.evaluate", {"expression": expr, "awaitPromise": True, "returnByValue": True},
                      session=True, timeout=timeout)
        if "exceptionDetails" in r:
            ex = r["exceptionDetails"]
            raise BrowserError(f"JS error: {ex.get('exception', {}).get('description') or ex.get('text')}")
        return r.get("result", {}).get("value")

    def mouse(self, kind: str, x: float, y: float, **kw) -> None:
        self.call("Input.dispatchMouseEvent", {"type": kind, "x": x, "y": y, **kw}, session=True)

    def screenshot(self, path: str, full_page: bool = True) -> None:
        params: dict[str, Any] = {"format": "png"}
        if full_page:
            m = self.call("Page.getLayoutMetrics", session=True)
            size = m.get("cssContentSize") or m.get("contentSize")
            params.update(captureBeyondViewport=True,
                          clip={"x": 0, "y": 0, "width": size["width"], "height": size["height"], "scale": 1})
        data = self.call("Page.captureScreenshot", params, session=True)["data"]
        with open(path, "wb") as f:
            f.write(base64.b64decode(data))

    def element_screenshot(self, path: str, selector: str, scale: float = 1.0) -> None:
        box = self.eval(f"(function(){{var r=document.querySelector({json.dumps(selector)}).getBoundingClientRect();"
                        "return {x:r.left+window.scrollX,y:r.top+window.scrollY,w:r.width,h:r.height};})()")
        data = self.call("Page.captureScreenshot",
                         {"format": "png", "captureBeyondViewport": True,
                          "clip": {"x": box["x"], "y": box["y"], "width": box["w"], "height": box["h"],
                                   "scale": scale}}, session=True)["data"]
        with open(path, "wb") as f:
            f.write(base64.b64decode(data))

    def requests(self) -> list[str]:
        """URLs the page asked for (documents, scripts, images, fetches)."""
        with self._cv:
            return [e["params"]["request"]["url"] for e in self.events
                    if e.get("method") == "Network.requestWillBeSent"]

    def console_errors(self) -> list[str]:
        """Console messages and uncaught exceptions of the page (any level: a clean report logs nothing)."""
        out = []
        with self._cv:
            evs = list(self.events)
        for e in evs:
            m, p = e.get("method"), e.get("params", {})
            if m == "Runtime.consoleAPICalled":
                out.append(f"console.{p.get('type')}: " + " ".join(str(a.get("value", a.get("description", "")))
                                                                   for a in p.get("args", [])))
            elif m == "Runtime.exceptionThrown":
                d = p.get("exceptionDetails", {})
                out.append("exception: " + str(d.get("exception", {}).get("description") or d.get("text")))
            elif m == "Log.entryAdded":
                en = p.get("entry", {})
                out.append(f"log.{en.get('level')}: {en.get('text')} ({en.get('url', '')})")
        return out

    def close(self) -> None:
        try:
            self.call("Browser.close", timeout=5)
        except BrowserError:
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        for fd in (self._to_chrome, self._from_chrome):
            try:
                os.close(fd)
            except OSError:
                pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
