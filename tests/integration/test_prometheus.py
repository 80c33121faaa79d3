"""/metrics for Prometheus (driver/prometheus.py), scraped by a real Prometheus (Debian's
`prometheus` package) on loopback: 4 real workers send to a driver serving /metrics, the
Prometheus scrapes it, and its HTTP API gives each worker's tree RSS as the driver last saw it."""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import sys
import textwrap
import threading
import time
import urllib.error
import urllib.parse
import urllib.request

import pytest

from workerscope import Subscriber
from workerscope.driver.prometheus import parse_address, render
from workerscope.errors import ConfigError

MIB = 1 << 20
WORKER = textwrap.dedent("""
    import sys, time
    from workerscope import profiled

    def hold(mib, seconds):
        b = bytearray(mib << 20)
        b[::4096] = b"x" * len(b[::4096])
        time.sleep(seconds)

    profiled(hold, mode="heavy", interval=0.1, endpoint=sys.argv[1])(int(sys.argv[2]), 8)
""")


def _get(url: str, timeout: float = 5) -> bytes:
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return r.read()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _query(base: str, promql: str) -> list[dict]:
    body = json.loads(_get(f"{base}/api/v1/query?" + urllib.parse.urlencode({"query": promql})))
    assert body["status"] == "success", body
    return body["data"]["result"]


def _until(check, timeout: float = 60):
    deadline = time.monotonic() + timeout
    while True:
        got = check()
        if got or time.monotonic() > deadline:
            return got
        time.sleep(0.2)  # a poll: the condition is check()


def test_a_real_prometheus_scrapes_each_workers_tree_rss(clean_env, tmp_path):
    binary = shutil.which("prometheus")
    if binary is None:
        pytest.skip("Debian's `prometheus` is not installed (apt-get install -y prometheus): "
                    "/metrics can only be checked against a real Prometheus")
    with Subscriber(prometheus="127.0.0.1:0") as sub:
        target = urllib.parse.urlparse(sub.prometheus_url)
        port = _free_port()
        (tmp_path / "prometheus.yml").write_text(textwrap.dedent(f"""
            global:
              scrape_interval: 1s
            scrape_configs:
              - job_name: workerscope
                static_configs:
                  - targets: ["{target.netloc}"]
        """))
        prom = subprocess.Popen(
            [binary, f"--config.file={tmp_path / 'prometheus.yml'}",
             f"--storage.tsdb.path={tmp_path / 'data'}", f"--web.listen-address=127.0.0.1:{port}"],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        workers = [subprocess.Popen([sys.executable, "-c", WORKER, sub.endpoint, str(mib)])
                   for mib in (40, 60, 80, 100)]
        base = f"http://127.0.0.1:{port}"
        try:
            def ready() -> bool:
                try:
                    return _get(f"{base}/-/ready") is not None
                except (urllib.error.URLError, ConnectionError):
                    return False

            assert _until(ready), prom.stderr.read(2000) if prom.poll() is not None else "not ready"
            # Every worker in its job with its memory held, then two scrapes that saw them all.
            assert _until(lambda: sum(r["rss_bytes"] is not None and r["rss_bytes"] > 40 * MIB
                                      and r["job"] is not None for r in sub.live()) == 4)
            assert _until(lambda: [
                r for r in _query(base, "count_over_time(count(workerscope_tree_memory_rss_bytes"
                                        " > 41943040)[30s:1s])") if float(r["value"][1]) >= 2])
            got = {r["metric"]["worker"]: (r["metric"], float(r["value"][1]))
                   for r in _query(base, "workerscope_tree_memory_rss_bytes")}
            rows = {r["worker"]: r["rss_bytes"] for r in sub.live()}
        finally:
            for w in workers:
                w.wait(timeout=60)
            prom.terminate()
            prom.wait(timeout=30)
            prom.stderr.close()
        assert set(got) == set(rows) and len(got) == 4, (got, rows)
        for wid, (metric, value) in got.items():
            assert abs(value - rows[wid]) <= 0.05 * rows[wid], (wid, value, rows[wid])
            # Prometheus renames a target's own job= or instance= to exported_*: none of ours.
            assert not {"exported_job", "exported_instance"} & set(metric), metric
            assert metric["job"] == "workerscope" and metric["host"]
        # /metrics is rendered at most once a second: the jobs' ends show in a later one.
        assert sub.wait(jobs=4, timeout=60)
        text = _until(lambda: next((t for t in [_get(sub.prometheus_url).decode()]
                                    if "workerscope_jobs_ended_total" in t), ""))
    assert ' job="' not in text and "instance=" not in text
    assert "workerscope_jobs_ended_total" in text and "workerscope_driver_workers 4" in text


def test_label_values_and_addresses():
    """Worker ids come from the wire: a quote, backslash or newline cannot break a line."""
    text = render([{"worker": 'w"\\\nx', "host": "h", "status": "running", "tree":
                    {"rss_bytes": 5.0}, "gpu_util": None, "gpu_mem": None, "ended": {"ok": 2},
                    "running": 1, "stragglers": 0, "received": 3, "lost": 0, "dropped": 0}],
                  {"workers": 1, "bad_frames": 0, "jobs_started": 3, "jobs_ended": 2,
                   "kept_bytes": 10, "refused_workers": 0}, 0)
    assert 'worker="w\\"\\\\\\nx"' in text
    assert all(line.startswith(("#", "workerscope_")) for line in text.splitlines())
    assert "\r" not in render([{"worker": "a\rb\u2028c", "host": "h", "status": "idle",
                                 "tree": {"rss_bytes": 1.0}, "gpu_util": None, "gpu_mem": None,
                                 "ended": {}, "running": 0, "stragglers": 0, "received": 0,
                                 "lost": 0, "dropped": 0}], {"workers": 1, "bad_frames": 0,
                                "jobs_started": 0, "jobs_ended": 0, "kept_bytes": 0}, 0)
    assert parse_address(":9464") == ("127.0.0.1", 9464)
    assert parse_address("[::1]:5") == ("::1", 5)
    with pytest.raises(ConfigError, match="brackets"):
        parse_address("::1")
    assert parse_address("0.0.0.0:1") == ("0.0.0.0", 1)
    with pytest.raises(ConfigError):
        parse_address("localhost:http")


def test_a_busy_port_fails_the_start_clearly(clean_env):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        sub = Subscriber(prometheus=f"127.0.0.1:{s.getsockname()[1]}")
        with pytest.raises(ConfigError, match="cannot listen"):
            sub.start()
        sub.close()
    # The driver's own address taken: the start fails and /metrics is not left serving.
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        sub = Subscriber(f"tcp://127.0.0.1:{s.getsockname()[1]}", prometheus="127.0.0.1:0")
        with pytest.raises(Exception):  # noqa: B017 - ZeroMQ's own error, whichever it is
            sub.start()
        assert sub.prometheus_url is None
        assert not [t for t in threading.enumerate() if t.name == "workerscope-metrics"]
        sub.close()
