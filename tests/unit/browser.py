"""A real headless browser for the tests: Debian's chromium driven by its chromedriver over the
W3C WebDriver protocol (httpx on loopback). The driver listens on a free loopback port; every
request and wait is bounded; close() always ends the session and stops the driver by its pid."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx

ELEMENT = "element-6066-11e4-a52e-4f735466cecf"  # the W3C web element reference key
CHROMIUM = ("chromium", "chromium-browser")
DRIVER = "chromedriver"


def chromium_binary() -> str | None:
    for name in CHROMIUM:
        found = shutil.which(name)
        if found:
            return found
    return None


def available() -> str | None:
    """None when chromium and chromedriver are installed, else what is missing."""
    missing = [
        n for n, ok in (("chromium", chromium_binary()), (DRIVER, shutil.which(DRIVER))) if not ok
    ]
    return " and ".join(missing) + " not installed (make browser-deps)" if missing else None


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class WebDriverError(RuntimeError):
    pass


# Resolves after two animation frames: what the browser queued for a frame has been handled.
FRAMES = "return new Promise(r => requestAnimationFrame(() => requestAnimationFrame(r)))"
SETTLED = """const e = document.elementFromPoint(arguments[0], arguments[1]);
return e !== null && e.matches(':hover');"""


class Browser:
    """One chromedriver process and one headless chromium session."""

    def __init__(self, *, width: int = 1280, height: int = 1000, timeout_s: float = 30.0) -> None:
        binary = chromium_binary()
        driver = shutil.which(DRIVER)
        if binary is None or driver is None:
            raise WebDriverError(available() or "no browser")
        self.profile = Path(tempfile.mkdtemp(prefix="gx10-chromium-"))
        self.port = _free_port()
        self.log = self.profile / "chromedriver.log"
        self.session: str | None = None
        self.proc = subprocess.Popen(
            [driver, f"--port={self.port}", "--allowed-ips=127.0.0.1", f"--log-path={self.log}"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        self.http = httpx.Client(base_url=f"http://127.0.0.1:{self.port}", timeout=timeout_s)
        try:
            self._wait_ready(timeout_s)
            capabilities = {
                "browserName": "chrome",
                "goog:chromeOptions": {
                    "binary": binary,
                    "args": [
                        "--headless=new",
                        "--no-sandbox",  # root in a container
                        "--disable-gpu",
                        "--disable-dev-shm-usage",
                        "--no-first-run",
                        "--disable-extensions",
                        "--disable-background-networking",
                        "--disable-component-update",
                        "--disable-sync",
                        f"--user-data-dir={self.profile / 'profile'}",
                        f"--window-size={width},{height}",
                    ],
                },
                "goog:loggingPrefs": {"browser": "ALL"},
                "timeouts": {"script": 10000, "pageLoad": 20000, "implicit": 0},
            }
            value = self._call("POST", "/session", {"capabilities": {"alwaysMatch": capabilities}})
            self.session = str(value["sessionId"])
        except BaseException:
            self.close()
            raise

    def _wait_ready(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise WebDriverError(f"chromedriver exited {self.proc.returncode}: {self._tail()}")
            with contextlib.suppress(httpx.HTTPError):
                if self.http.get("/status", timeout=2).json()["value"].get("ready"):
                    return
            time.sleep(0.1)
        raise WebDriverError(f"chromedriver not ready within {timeout_s:g} s: {self._tail()}")

    def _tail(self) -> str:
        with contextlib.suppress(OSError):
            return self.log.read_text(errors="replace")[-2000:]
        return ""

    def _call(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        response = self.http.request(method, path, json=body if method == "POST" else None)
        payload = response.json()
        value = payload.get("value")
        if response.status_code != 200:
            error = value.get("error") if isinstance(value, dict) else value
            message = value.get("message") if isinstance(value, dict) else ""
            raise WebDriverError(f"{method} {path}: {error}: {message}")
        return value

    def _s(self, path: str) -> str:
        assert self.session is not None, "no session"
        return f"/session/{self.session}{path}"

    # The WebDriver commands the tests use.

    def get(self, url: str) -> None:
        self._call("POST", self._s("/url"), {"url": url})

    def script(self, source: str, *args: Any) -> Any:
        """Run `source` (a function body; arguments in `arguments`) and return its value."""
        return self._call("POST", self._s("/execute/sync"), {"script": source, "args": list(args)})

    def find(self, css: str) -> str:
        value = self._call("POST", self._s("/element"), {"using": "css selector", "value": css})
        return str(value[ELEMENT])

    def actions(self, *sources: dict[str, Any]) -> None:
        self._call("POST", self._s("/actions"), {"actions": list(sources)})
        self._call("DELETE", self._s("/actions"))

    def hover(self, element: str) -> None:
        """The mouse pointer moved onto the centre of `element` (and left to rest there)."""
        move = {"type": "pointerMove", "duration": 0, "x": 0, "y": 0, "origin": {ELEMENT: element}}
        self.actions(
            {
                "type": "pointer",
                "id": "mouse",
                "parameters": {"pointerType": "mouse"},
                "actions": [move, {"type": "pause", "duration": 50}],
            }
        )

    def hover_at(self, x: float, y: float) -> None:
        """The mouse pointer moved to viewport coordinates (x, y)."""
        move = {
            "type": "pointerMove",
            "duration": 0,
            "x": int(x),
            "y": int(y),
            "origin": "viewport",
        }
        self.actions(
            {
                "type": "pointer",
                "id": "mouse",
                "parameters": {"pointerType": "mouse"},
                "actions": [move, {"type": "pause", "duration": 50}],
            }
        )

    def settled_at(self, x: float, y: float, timeout_s: float = 10.0) -> bool:
        """Whether the page has taken the pointer at viewport (x, y): the element there is under
        the pointer after two frames. Under load the browser may hold a move for the next frame
        and merge it with the one after, or replay an older position after a scroll; a test that
        moves the pointer twice waits for this between the moves."""
        self.script(FRAMES)
        return bool(self.wait(SETTLED, x, y, timeout_s=timeout_s))

    def keys(self, *keys: str) -> None:
        """Key presses, as a keyboard user types them (W3C key values, e.g. TAB)."""
        steps: list[dict[str, Any]] = []
        for key in keys:
            steps += [{"type": "keyDown", "value": key}, {"type": "keyUp", "value": key}]
        self.actions({"type": "key", "id": "keyboard", "actions": steps})

    def browser_log(self) -> list[dict[str, Any]]:
        """The browser's console entries since the last call (chromedriver's log endpoint)."""
        return list(self._call("POST", self._s("/se/log"), {"type": "browser"}))

    def wait(self, source: str, *args: Any, timeout_s: float = 5.0) -> Any:
        """Poll the script `source` until it returns a truthy value; its last value."""
        deadline = time.monotonic() + timeout_s
        value = self.script(source, *args)
        while not value and time.monotonic() < deadline:
            time.sleep(0.05)
            value = self.script(source, *args)
        return value

    def close(self) -> None:
        """End the session (chromium exits), then stop the driver by its pid."""
        try:
            if self.session is not None:
                with contextlib.suppress(httpx.HTTPError, WebDriverError, ValueError):
                    self._call("DELETE", self._s(""))
                self.session = None
        finally:
            self.http.close()
            # The driver runs in its own process group (its own session), with any browser process
            # it left. Signalled before the driver is reaped, so the group id cannot be reused.
            if self.proc.returncode is None:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(self.proc.pid, signal.SIGTERM)
                try:
                    self.proc.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    with contextlib.suppress(ProcessLookupError, PermissionError):
                        os.killpg(self.proc.pid, signal.SIGKILL)
                    self.proc.wait(timeout=10)
            shutil.rmtree(self.profile, ignore_errors=True)


@contextlib.contextmanager
def browser(**options: Any) -> Iterator[Browser]:
    session = Browser(**options)
    try:
        yield session
    finally:
        session.close()


TAB = "\ue004"
