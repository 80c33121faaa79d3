"""/metrics for Prometheus: what the driver knows of each worker now, in the text exposition
format (version 0.0.4), served on a port of the driver's own.

    Subscriber(prometheus="127.0.0.1:9464")      workerscope listen --prometheus 127.0.0.1:9464

Fed from the live state the driver keeps anyway (each worker's last tree sample, its open
and ended jobs, its frame counts), so a scrape costs a copy of that under the receive lock and
nothing in the workers. Names follow Prometheus' conventions: a `workerscope_` prefix, base
units (`_seconds`, `_bytes`), `_total` on counters; labels are `worker` (the worker id) and
`host`, never the reserved `job` or `instance` (Prometheus sets those for the scrape target).
At most MAX_WORKERS workers have series (the most recently heard from); the rest are counted
in `workerscope_exporter_workers_omitted`. Bound to loopback unless the address says otherwise:
/metrics carries no secret but names hosts and workers (docs/SECURITY.md).
"""

from __future__ import annotations

import http.server
import logging
import math
import socket
import socketserver
import threading
import time
from collections.abc import Callable
from typing import Any

from ..errors import ConfigError

log = logging.getLogger("workerscope.driver")

MAX_WORKERS = 2000  # workers with series: ~15 series each, 30,000 in all at most
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
Snapshot = Callable[[int], tuple[list[dict[str, Any]], dict[str, float], int]]

# (name, type, help, unit source): per worker, from its last tree sample.
TREE = (
    ("workerscope_tree_cpu_seconds_total", "counter",
     "CPU time of the worker's process tree, by mode", None),
    ("workerscope_tree_memory_rss_bytes", "gauge",
     "resident memory of the worker's process tree (the sum over its processes)", "rss_bytes"),
    ("workerscope_tree_memory_peak_rss_bytes", "gauge",
     "the tree's peak resident memory in its current or last job", "peak_rss_bytes"),
    ("workerscope_tree_io_read_bytes_total", "counter",
     "bytes the tree read from storage", "read_bytes"),
    ("workerscope_tree_io_write_bytes_total", "counter",
     "bytes the tree wrote to storage", "write_bytes"),
    ("workerscope_tree_processes", "gauge", "processes in the tree", "num_procs"),
    ("workerscope_tree_threads", "gauge", "threads in the tree", "num_threads"),
)


def parse_address(addr: str) -> tuple[str, int]:
    """("host", port) of "HOST:PORT", "[IPv6]:PORT", ":PORT" or "PORT" (loopback where no
    host is given); ConfigError for anything else (a bare IPv6 address among them)."""
    host, sep, port = addr.rpartition(":")
    if not sep:
        host, port = "", addr
    if ":" in host:
        if not (host.startswith("[") and host.endswith("]")):
            raise ConfigError(f"prometheus: {addr!r}: write an IPv6 address in brackets, "
                              "[::1]:9464")
        host = host[1:-1]
    host = host or "127.0.0.1"
    try:
        number = int(port)
    except ValueError:
        number = -1
    if not 0 <= number <= 65535:
        raise ConfigError(f"prometheus: {addr!r} is not HOST:PORT (a port from 0 to 65535)")
    return host, number


def label(value: object) -> str:
    """A label value as the exposition format writes it: backslash, quote and newline escaped,
    other control characters (a carriage return, say) as U+FFFD, so no line splitter cuts one."""
    text = str(value).replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    if not any(_breaks(c) for c in text):
        return text
    return "".join("\ufffd" if _breaks(c) else c for c in text)


def _breaks(c: str) -> bool:
    """A character some reader takes for the end of a line, or a control one."""
    return ord(c) < 32 or 127 <= ord(c) < 160 or c in "\u2028\u2029"


def _number(value: float) -> str:
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return repr(float(value)) if not float(value).is_integer() else str(int(value))


def render(rows: list[dict[str, Any]], driver: dict[str, float], omitted: int) -> str:
    """The /metrics text of one snapshot (DriverState.metrics)."""
    out: list[str] = []
    series: dict[str, list[str]] = {}
    meta: dict[str, tuple[str, str]] = {}

    def add(name: str, kind: str, doc: str, labels: dict[str, object], value: float | None) -> None:
        if value is None:
            return
        meta.setdefault(name, (kind, doc))
        text = ",".join(f'{k}="{label(v)}"' for k, v in labels.items())
        series.setdefault(name, []).append(f"{name}{{{text}}} {_number(float(value))}" if text
                                           else f"{name} {_number(float(value))}")

    for r in rows:
        who = {"worker": r["worker"], "host": r["host"]}
        tree = r["tree"]
        for name, kind, doc, key in TREE:
            if key is None:
                for mode in ("user", "system"):
                    add(name, kind, doc, {**who, "mode": mode}, tree.get(f"cpu_{mode}_s"))
            else:
                add(name, kind, doc, who, tree.get(key))
        # Rates of the present: 0 for a worker not running (its last reading is of then).
        busy = r["status"] == "running"
        add("workerscope_tree_cpu_utilization_ratio", "gauge",
            "CPU the tree used at its last sample, in cores (1 = one core busy; 0 unless the "
            "worker is running)", who,
            None if tree.get("cpu_percent") is None else tree["cpu_percent"] / 100.0 * busy)
        add("workerscope_gpu_utilization_ratio", "gauge",
            "mean utilisation of the GPUs the worker's sidecar reads (0-1; 0 unless the worker "
            "is running)", who, None if r["gpu_util"] is None else r["gpu_util"] / 100.0 * busy)
        add("workerscope_gpu_memory_used_bytes", "gauge",
            "GPU memory in use on the GPUs the worker's sidecar reads", who, r["gpu_mem"])
        add("workerscope_worker_up", "gauge",
            "1 while the worker is running or idle, 0 once it ended, died or went silent", who,
            1.0 if r["status"] in ("running", "idle") else 0.0)
        add("workerscope_jobs_running", "gauge", "jobs running now", who, r["running"])
        for status, count in sorted(r["ended"].items()):
            add("workerscope_jobs_ended_total", "counter", "jobs ended, by status",
                {**who, "status": status}, count)
        add("workerscope_jobs_straggling", "gauge",
            "running jobs over the straggler line (1.5x the median of recent jobs)", who,
            r["stragglers"])
        add("workerscope_frames_received_total", "counter", "frames received from the worker",
            who, r["received"])
        add("workerscope_frames_lost_total", "counter",
            "frames lost on the way (gaps in the worker's sequence numbers)", who, r["lost"])
        add("workerscope_frames_dropped_total", "counter",
            "frames the worker's sidecar could not queue for this driver", who, r["dropped"])
    add("workerscope_driver_workers", "gauge", "workers this driver has heard from", {},
        driver["workers"])
    add("workerscope_driver_bad_frames_total", "counter", "frames that could not be decoded",
        {}, driver["bad_frames"])
    add("workerscope_driver_jobs_started_total", "counter", "jobs started", {},
        driver["jobs_started"])
    add("workerscope_driver_jobs_ended_total", "counter", "jobs ended", {}, driver["jobs_ended"])
    add("workerscope_driver_callback_errors_total", "counter", "exceptions on_frame raised", {},
        driver.get("callback_errors"))
    add("workerscope_driver_loop_errors_total", "counter",
        "socket errors the receive loop waited out", {}, driver.get("loop_errors"))
    add("workerscope_exporter_scrapes_refused_total", "counter",
        f"connections to /metrics closed unanswered (past {MAX_SCRAPES} at once)", {},
        driver.get("scrapes_refused"))
    add("workerscope_driver_kept_bytes", "gauge", "bytes of frames kept in the driver's record",
        {}, driver["kept_bytes"])
    for key, value in sorted(driver.items()):
        if key.startswith("refused_"):
            add("workerscope_driver_refused_total", "counter", "what the driver refused, by reason",
                {"reason": key[len("refused_"):]}, value)
    add("workerscope_exporter_workers_omitted", "gauge",
        f"workers left without series (past the cap of {MAX_WORKERS})", {}, omitted)
    for name, lines in series.items():
        kind, doc = meta[name]
        out.append(f"# HELP {name} {doc}")
        out.append(f"# TYPE {name} {kind}")
        out.extend(lines)
    return "\n".join(out) + "\n"


MAX_SCRAPES = 8  # scrapes served at once; more connections are closed unanswered
SCRAPE_TIMEOUT_S = 5.0  # a client that sends nothing for this long is let go


CACHE_S = 1.0  # scrapes within this of the last rendering get its bytes


class _Server(http.server.ThreadingHTTPServer):
    """ThreadingHTTPServer with a bound on the threads: the driver's memory ceiling holds
    against a client that opens connections and sends nothing. IPv4 or IPv6 by the host."""

    daemon_threads = True
    refused = 0

    def __init__(self, address: tuple[str, int], handler: Any) -> None:
        self.slots = threading.BoundedSemaphore(MAX_SCRAPES)
        if ":" in address[0]:
            self.address_family = socket.AF_INET6
        super().__init__(address, handler)

    def server_bind(self) -> None:
        # HTTPServer's own looks the host's name up (getfqdn), which can stall a start on a
        # cluster whose DNS does not answer: not needed to serve.
        socketserver.TCPServer.server_bind(self)
        host, port = self.server_address[:2]
        self.server_name, self.server_port = str(host), int(port)

    def process_request(self, request: Any, client_address: Any) -> None:
        if not self.slots.acquire(blocking=False):
            self.refused += 1
            self.shutdown_request(request)
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self.slots.release()
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self.slots.release()


class MetricsServer:
    """An HTTP server on its own thread answering GET /metrics from `snapshot`."""

    def __init__(self, address: str, snapshot: Snapshot) -> None:
        host, port = parse_address(address)
        self.scrapes = 0

        class Handler(http.server.BaseHTTPRequestHandler):
            server_version = "workerscope"
            timeout = SCRAPE_TIMEOUT_S

            def do_GET(self) -> None:
                if self.path.split("?", 1)[0] != "/metrics":
                    self.send_error(404, "only /metrics is here")
                    return
                try:
                    body = outer.body()
                except Exception as err:  # noqa: BLE001 - a scrape must never break the driver
                    log.warning("workerscope: /metrics failed: %r", err)
                    self.send_error(500, "the metrics could not be rendered")
                    return
                outer.scrapes += 1
                self.send_response(200)
                self.send_header("Content-Type", CONTENT_TYPE)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                log.debug("prometheus: " + format, *args)

        outer = self
        self._snapshot = snapshot
        self._cached: tuple[float, bytes] | None = None
        self._render_lock = threading.Lock()
        try:
            self.httpd = _Server((host, port), Handler)
        except OSError as err:
            raise ConfigError(f"prometheus: cannot listen on {address!r}: {err}") from err
        bound = self.httpd.server_address
        self.host, self.port = str(bound[0]), int(bound[1])
        self.thread = threading.Thread(target=self.httpd.serve_forever, name="workerscope-metrics",
                                       daemon=True)
        self.thread.start()

    def body(self) -> bytes:
        """The /metrics text, rendered at most once every CACHE_S whatever the number of
        scrapers (one rendering of 2,000 workers takes ~0.3 s of CPU)."""
        with self._render_lock:
            now = time.monotonic()
            if self._cached is None or now - self._cached[0] >= CACHE_S:
                rows, driver, omitted = self._snapshot(MAX_WORKERS)
                driver = {**driver, "scrapes_refused": self.httpd.refused}
                self._cached = (now, render(rows, driver, omitted).encode())
            return self._cached[1]

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}/metrics"

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(timeout=5)
