"""A headless Chromium driven over the DevTools protocol through a pipe (no extra packages).

Used to check pages in a real browser (the tests open every generated page, collect console
errors and take screenshots) and to make the screenshots of the documentation
(``docs/make_screenshots.py``, which puts ``tests/`` on ``sys.path``); not part of the installed
package. Chromium runs with ``--remote-debugging-pipe``: commands go in
on its file descriptor 3 and answers and events come out on 4, as JSON messages each ended by
a NUL byte. A small shell ``exec`` puts the two pipes of :class:`subprocess.Popen` on those
descriptors.

Set ``SPECMD_CHROMIUM`` to use a browser that is not on ``PATH`` as ``chromium``.
"""

from __future__ import annotations

import base64
import json
import os
import select
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

_NAMES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable", "chrome")
_PIPE_SHELL = 'exec "$0" "$@" 3<&0 4>&1 0</dev/null 1>&2'


class BrowserError(RuntimeError):
    """The browser could not be started, or did not answer in time."""


def find_chromium() -> str | None:
    """The Chromium executable: ``$SPECMD_CHROMIUM``, else the first of the usual names on
    ``PATH``; None when there is none."""
    if os.environ.get("SPECMD_CHROMIUM"):
        return shutil.which(os.environ["SPECMD_CHROMIUM"])
    return next((p for p in map(shutil.which, _NAMES) if p), None)


# a page's plotly figures all drawn (a JavaScript expression)
_ALL_DRAWN = ("[...document.querySelectorAll('.plotly-graph-div')]"
              ".every(p => p._fullLayout && p.querySelector('.main-svg'))")  # fmt: skip
# run in a page before its own scripts: the page's clock when it has figures, all drawn
_DRAWN_CLOCK = f"""(() => {{ const drawn = () => {{
  if (document.querySelector('.plotly-graph-div') && {_ALL_DRAWN}) {{
    window.specmdDrawnAt = performance.now(); }} else {{ setTimeout(drawn, 10); }} }};
  setTimeout(drawn, 10); }})();"""


class Browser:
    """A headless Chromium; use as a context manager, then :meth:`open` pages."""

    def __init__(
        self,
        executable: str | None = None,
        width: int = 1400,
        height: int = 900,
        timeout_s: float = 60.0,
    ) -> None:
        self.executable = executable or find_chromium()
        if self.executable is None:
            raise BrowserError("no Chromium found (install the Debian package 'chromium')")
        self.width, self.height, self.timeout_s = width, height, timeout_s
        self._proc: subprocess.Popen[bytes] | None = None
        self._buffer = b""
        self._next_id = 0
        self._events: list[dict[str, Any]] = []
        self._profile: tempfile.TemporaryDirectory[str] | None = None
        self._log: Any = None

    def __enter__(self) -> Browser:
        self._profile = tempfile.TemporaryDirectory(prefix="specmd-chromium-")
        flags = [
            "--headless", "--disable-gpu", "--disable-quic", "--no-first-run",
            "--no-default-browser-check", "--disable-background-networking",
            "--disable-component-update", "--disable-sync", "--disable-extensions",
            "--mute-audio", "--hide-scrollbars", "--force-device-scale-factor=1",
            f"--window-size={self.width},{self.height}",
            f"--user-data-dir={self._profile.name}", "--remote-debugging-pipe",
        ]  # fmt: skip
        if hasattr(os, "geteuid") and os.geteuid() == 0:
            flags.append("--no-sandbox")  # Chromium refuses to run as root with its sandbox
        self._log = open(Path(self._profile.name) / "stderr.log", "wb")
        self._proc = subprocess.Popen(
            ["sh", "-c", _PIPE_SHELL, self.executable, *flags],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._log,
        )
        try:
            self.send("Browser.getVersion")
        except BrowserError:
            self.__exit__(None, None, None)
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        proc = self._proc
        if proc is not None and proc.poll() is None:
            try:
                self._write({"id": -1, "method": "Browser.close"})
                proc.wait(timeout=10)
            except (OSError, subprocess.TimeoutExpired):
                proc.kill()
                proc.wait(timeout=10)
        for stream in (proc.stdin, proc.stdout) if proc is not None else ():
            if stream is not None:
                stream.close()
        self._proc = None
        if self._log is not None:
            self._log.close()
        if self._profile is not None:
            self._profile.cleanup()

    # --- the protocol -------------------------------------------------------------------

    def _write(self, message: dict[str, Any]) -> None:
        assert self._proc is not None and self._proc.stdin is not None
        self._proc.stdin.write(json.dumps(message).encode() + b"\0")
        self._proc.stdin.flush()

    def _read(self, deadline: float) -> dict[str, Any]:
        assert self._proc is not None and self._proc.stdout is not None
        fd = self._proc.stdout.fileno()
        while b"\0" not in self._buffer:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise BrowserError("Chromium did not answer in time")
            ready, _, _ = select.select([fd], [], [], remaining)
            if ready:
                chunk = os.read(fd, 1 << 20)
                if not chunk:
                    raise BrowserError(f"Chromium exited (code {self._proc.poll()})")
                self._buffer += chunk
        message, self._buffer = self._buffer.split(b"\0", 1)
        return json.loads(message)

    def send(
        self, method: str, params: dict[str, Any] | None = None, session: str | None = None
    ) -> dict[str, Any]:
        """Send one command and return its result; events that arrive meanwhile are kept."""
        self._next_id += 1
        message: dict[str, Any] = {"id": self._next_id, "method": method, "params": params or {}}
        if session:
            message["sessionId"] = session
        self._write(message)
        deadline = time.monotonic() + self.timeout_s
        while True:
            reply = self._read(deadline)
            if reply.get("id") == self._next_id:
                if "error" in reply:
                    raise BrowserError(f"{method}: {reply['error'].get('message')}")
                return reply.get("result", {})
            if "method" in reply:
                self._events.append(reply)

    def wait_event(self, method: str, session: str | None, timeout_s: float) -> dict[str, Any]:
        """Wait for an event (already received ones count) and return its params."""
        deadline = time.monotonic() + timeout_s
        while True:
            for i, event in enumerate(self._events):
                if event["method"] == method and event.get("sessionId") == session:
                    return self._events.pop(i).get("params", {})
            reply = self._read(deadline)
            if "method" in reply:
                self._events.append(reply)

    def take_events(self, session: str) -> list[dict[str, Any]]:
        mine = [e for e in self._events if e.get("sessionId") == session]
        self._events = [e for e in self._events if e.get("sessionId") != session]
        return mine

    # --- pages --------------------------------------------------------------------------

    def open(self, target: str | Path, timeout_s: float = 60.0, before: str = "") -> Page:
        """Open a URL or a local file in a new tab and wait for its load event; ``before``: a
        script run in the page before its own."""
        url = target if isinstance(target, str) and "://" in target else Path(target).resolve()
        url = url if isinstance(url, str) else url.as_uri()
        target_id = self.send("Target.createTarget", {"url": "about:blank"})["targetId"]
        session = self.send("Target.attachToTarget", {"targetId": target_id, "flatten": True})[
            "sessionId"
        ]
        page = Page(self, session, target_id)
        for domain in ("Page", "Runtime", "Log"):
            self.send(f"{domain}.enable", session=session)
        self.send(
            "Emulation.setDeviceMetricsOverride",
            {"width": self.width, "height": self.height, "deviceScaleFactor": 1, "mobile": False},
            session=session,
        )
        if before:
            self.send("Page.addScriptToEvaluateOnNewDocument", {"source": before}, session=session)
        self.send("Page.navigate", {"url": url}, session=session)
        self.wait_event("Page.loadEventFired", session, timeout_s)
        return page

    def drawn_in(self, target: str | Path, timeout_s: float = 60.0) -> float:
        """Seconds from a page's navigation to every plotly figure on it drawn, on the page's
        own clock (``performance.now()``, checked every 10 ms from inside the page, so the
        polling from here adds nothing); the tab is closed after."""
        page = self.open(target, timeout_s, before=_DRAWN_CLOCK)
        drawn = page.wait_for("window.specmdDrawnAt", timeout_s)
        self.send("Target.closeTarget", {"targetId": page.target_id})
        return float(drawn) / 1000.0

    def image_stats(self, png: bytes) -> dict[str, Any]:
        """Decode a PNG in a blank page: width, height, the number of distinct colours and the
        share of pixels that differ from the most common (background) colour."""
        page = self.open("about:blank")
        data = base64.b64encode(png).decode()
        return page.evaluate(
            "(async () => { const img = new Image(); "
            f"img.src = 'data:image/png;base64,{data}'; await img.decode(); "
            "const c = document.createElement('canvas'); c.width = img.width; "
            "c.height = img.height; const ctx = c.getContext('2d'); ctx.drawImage(img, 0, 0); "
            "const d = ctx.getImageData(0, 0, c.width, c.height).data; const counts = new Map(); "
            "for (let i = 0; i < d.length; i += 4) { const k = (d[i] << 16) | (d[i+1] << 8) | "
            "d[i+2]; counts.set(k, (counts.get(k) || 0) + 1); } "
            "const top = Math.max(...counts.values()); const n = d.length / 4; "
            "return {width: c.width, height: c.height, colours: counts.size, "
            "foreground: (n - top) / n}; })()",
            await_promise=True,
        )


class Page:
    """One tab: evaluate script, collect console errors, take screenshots."""

    def __init__(self, browser: Browser, session: str, target_id: str) -> None:
        self.browser = browser
        self.session = session
        self.target_id = target_id
        self._errors: list[str] = []

    def evaluate(self, expression: str, await_promise: bool = False) -> Any:
        """Evaluate a JavaScript expression; its value, passed by value."""
        result = self.browser.send(
            "Runtime.evaluate",
            {"expression": expression, "returnByValue": True, "awaitPromise": await_promise},
            session=self.session,
        )
        if "exceptionDetails" in result:
            details = result["exceptionDetails"]
            text = details.get("exception", {}).get("description") or details.get("text")
            raise BrowserError(f"script failed: {text}")
        return result["result"].get("value")

    def wait_for(self, expression: str, timeout_s: float = 30.0) -> Any:
        """Poll until ``expression`` is truthy; its value."""
        deadline = time.monotonic() + timeout_s
        while True:
            value = self.evaluate(expression)
            if value:
                return value
            if time.monotonic() > deadline:
                raise BrowserError(f"timed out waiting for {expression}")
            time.sleep(0.1)

    @property
    def errors(self) -> list[str]:
        """Console errors, uncaught exceptions and error log entries (e.g. a failed load)."""
        for event in self.browser.take_events(self.session):
            params = event.get("params", {})
            if event["method"] == "Runtime.consoleAPICalled" and params.get("type") in (
                "error",
                "assert",
            ):
                args = params.get("args", [])
                self._errors.append(
                    "console: " + " ".join(str(a.get("value", a.get("description"))) for a in args)
                )
            elif event["method"] == "Runtime.exceptionThrown":
                details = params.get("exceptionDetails", {})
                text = details.get("exception", {}).get("description") or details.get("text")
                self._errors.append(f"exception: {text}")
            elif (
                event["method"] == "Log.entryAdded"
                and params.get("entry", {}).get("level") == "error"
            ):
                entry = params["entry"]
                self._errors.append(f"log: {entry.get('text')} {entry.get('url', '')}".strip())
        return list(self._errors)

    def screenshot(self, path: Path | None = None, selector: str | None = None) -> bytes:
        """A PNG of the whole page, or of the first element matching ``selector``."""
        if selector is None:
            size = self.browser.send("Page.getLayoutMetrics", session=self.session)
            content = size["cssContentSize"]
            clip = {"x": 0, "y": 0, "width": content["width"], "height": content["height"]}
        else:
            clip = self.evaluate(
                f"(() => {{ const r = document.querySelector({json.dumps(selector)})"
                ".getBoundingClientRect(); return {x: r.left + window.scrollX, "
                "y: r.top + window.scrollY, width: r.width, height: r.height}; })()"
            )
        clip = {k: float(v) for k, v in clip.items()} | {"scale": 1}
        shot = self.browser.send(
            "Page.captureScreenshot",
            {"format": "png", "clip": clip, "captureBeyondViewport": True},
            session=self.session,
        )
        png = base64.b64decode(shot["data"])
        if path is not None:
            Path(path).write_bytes(png)
        return png

    def plots(self) -> list[dict[str, Any]]:
        """Every plotly figure on the page: id, number of traces, drawn trace groups and points
        (bars, markers), and title (after waiting until plotly has drawn them all)."""
        self.wait_for(_ALL_DRAWN)
        return self.evaluate(
            "[...document.querySelectorAll('.plotly-graph-div')].map(p => ({id: p.id, "
            "traces: p.data.length, drawn: p.querySelectorAll('g.trace').length, "
            "points: p.querySelectorAll('.point').length, "
            "title: (p.layout.title && p.layout.title.text) || ''}))"
        )
