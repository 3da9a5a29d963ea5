"""A headless Chromium driven over the Chrome DevTools protocol (a websocket, ``websocket-client``),
for the tests that open report.html as a signer would, and for ``docs/make_screenshots.py``.

Every request the page makes is seen (``Network.requestWillBeSent``) and kept in
:attr:`Page.requests`; the browser also runs with a proxy that goes nowhere and no name
resolution, so a request that did leave would fail rather than reach anything. Chromium is
Debian's ``chromium`` package (the README's test command installs it where it is missing and the
machine allows it: ``.ci/browser.sh``).
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

CHROMIUM_NAMES = ("chromium", "chromium-browser", "google-chrome")
# What .ci/browser.sh runs (as root, or through sudo) where none of the names above is found.
INSTALL_CHROMIUM = "apt-get install -y --no-install-recommends chromium"


def chromium() -> str | None:
    for name in CHROMIUM_NAMES:
        found = shutil.which(name)
        if found:
            return found
    return None


class Page:
    """One page target: commands by id, events kept as they come."""

    def __init__(self, ws: Any) -> None:
        self._ws = ws
        self._next = 0
        self.events: list[dict[str, Any]] = []

    def send(self, method: str, timeout_s: float = 30.0, **params: Any) -> dict[str, Any]:
        self._next += 1
        ident = self._next
        self._ws.send(json.dumps({"id": ident, "method": method, "params": params}))
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            message = json.loads(self._ws.recv())
            if message.get("id") == ident:
                if "error" in message:
                    raise RuntimeError(f"{method}: {message['error']}")
                return message.get("result", {})
            if "method" in message:
                self.events.append(message)
        raise TimeoutError(f"{method}: no reply in {timeout_s} s")

    def wait_event(self, method: str, timeout_s: float = 30.0) -> dict[str, Any]:
        deadline = time.monotonic() + timeout_s
        seen = len(self.events)
        while time.monotonic() < deadline:
            for event in self.events[seen:]:
                if event["method"] == method:
                    return event
            seen = len(self.events)
            self._ws.settimeout(max(0.1, deadline - time.monotonic()))
            message = json.loads(self._ws.recv())
            if "method" in message:
                self.events.append(message)
        raise TimeoutError(f"no {method} in {timeout_s} s")

    def open(self, url: str) -> None:
        self.send("Page.enable")
        self.send("Network.enable")
        self.send("Runtime.enable")
        self.send("Page.navigate", url=url)
        self.wait_event("Page.loadEventFired")

    def js(self, expression: str) -> Any:
        """The expression's value (JSON-able), evaluated in the page."""
        result = self.send("Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in result:
            raise RuntimeError(f"{expression}: {result['exceptionDetails']}")
        return result["result"].get("value")

    def click(self, selector: str) -> None:
        """A real click where the element is drawn (as a reader's mouse), not a DOM ``click()``."""
        box = self.js(f"(() => {{ const e = document.querySelector({json.dumps(selector)}); e.scrollIntoView({{block: 'center'}});"
                      " const r = e.getBoundingClientRect(); return [r.x + r.width / 2, r.y + r.height / 2]; })()")
        for kind in ("mousePressed", "mouseReleased"):
            self.send("Input.dispatchMouseEvent", type=kind, x=box[0], y=box[1], button="left", clickCount=1)

    def visible_text(self) -> str:
        """What is rendered: ``innerText`` leaves out what CSS hides and closed ``<details>`` hold."""
        return str(self.js("document.body.innerText"))

    @property
    def requests(self) -> list[str]:
        return [e["params"]["request"]["url"] for e in self.events if e["method"] == "Network.requestWillBeSent"]

    def screenshot(self, path: Path, full_page: bool = False, max_height: int = 4000) -> Path:
        """The viewport, or the page from its top (at most ``max_height`` pixels of it)."""
        params: dict[str, Any] = {"format": "png"}
        if full_page:
            size = self.send("Page.getLayoutMetrics")["cssContentSize"]
            params.update(captureBeyondViewport=True, clip={"x": 0, "y": 0, "width": size["width"],
                                                            "height": min(size["height"], max_height), "scale": 1})
        data = self.send("Page.captureScreenshot", **params)["data"]
        path.write_bytes(base64.b64decode(data))
        return path


@contextmanager
def browser_page(width: int = 1280, height: int = 1000, timeout_s: float = 60.0) -> Iterator[Page]:
    """A fresh headless Chromium (own profile folder, network pointed nowhere) and its one page."""
    import httpx
    import websocket

    exe = chromium()
    if exe is None:
        raise FileNotFoundError(f"chromium is not installed (Debian: sudo {INSTALL_CHROMIUM})")
    with tempfile.TemporaryDirectory(prefix="qualify-chromium-") as profile:
        argv = [exe, "--headless", "--disable-gpu", "--no-first-run", "--no-default-browser-check",
                "--remote-debugging-port=0", "--remote-allow-origins=*", f"--user-data-dir={profile}",
                f"--window-size={width},{height}", "--hide-scrollbars", "--disable-extensions",
                "--disable-background-networking", "--disable-component-update", "--disable-sync",
                "--proxy-server=127.0.0.1:9", "--host-resolver-rules=MAP * ~NOTFOUND", "about:blank"]
        if os.geteuid() == 0:
            argv.insert(1, "--no-sandbox")  # Chromium refuses to run as root with its sandbox
        proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        try:
            port_file = Path(profile) / "DevToolsActivePort"
            deadline = time.monotonic() + timeout_s
            while not (port_file.exists() and port_file.read_text().strip()):
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"chromium did not start (exit {proc.poll()})")
                time.sleep(0.1)
            port = int(port_file.read_text().splitlines()[0])
            targets = httpx.get(f"http://127.0.0.1:{port}/json/list", timeout=10).json()
            url = next(t["webSocketDebuggerUrl"] for t in targets if t.get("type") == "page")
            ws = websocket.create_connection(url, timeout=timeout_s, suppress_origin=True)
            try:
                page = Page(ws)
                page.send("Emulation.setDeviceMetricsOverride", width=width, height=height, deviceScaleFactor=1,
                          mobile=False)
                yield page
            finally:
                ws.close()
        finally:
            os.killpg(proc.pid, 15)
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, 9)
                proc.wait()


# -- the two bundles the browser tests and docs/make_screenshots.py open ---------------------------

# Smoke and context on the small profile: short answers, and a context lane's long prompt (compacted
# in the transcript, with its needles' positions). ``drop_needle`` gives the longest lane a
# distractor's value: a fact failure, graded from the slot the contract read.
REPORT_MODULES = ("smoke", "context")
FAIL_FAULT = "drop_needle"


def reference_bundle(workdir: Path, faults: tuple[str, ...] = (), repeat: int = 2) -> Path:
    """A ``--qualify`` run against the reference server in a subprocess; its one evidence bundle."""
    from .helpers import run_pytest, suite, write_profile

    workdir.mkdir(parents=True, exist_ok=True)
    profile = write_profile(workdir, REPORT_MODULES, name="report-html.toml")
    evidence = workdir / "ev"
    done = run_pytest("-q", f"--qualify={profile}", "--qualify-endpoint", "reference", "--qualify-evidence",
                      str(evidence), "--repeat", str(repeat),
                      *[arg for fault in faults for arg in ("--qualify-reference-fault", fault)],
                      *suite(*REPORT_MODULES), cwd=workdir, timeout=600)
    expected = 1 if faults else 0
    if done.returncode != expected:
        raise RuntimeError(f"the reference run exited {done.returncode}, not {expected}:\n{done.stdout[-4000:]}\n{done.stderr[-2000:]}")
    (bundle,) = [p for p in evidence.iterdir() if p.is_dir()]
    return bundle
