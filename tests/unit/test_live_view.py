"""The live screen of `workerscope listen --live`, from rows as Subscriber.live() gives them."""

from __future__ import annotations

from workerscope.export.live import render


def row(worker: str, status: str, cpu: float | None, **more: object) -> dict[str, object]:
    """A Subscriber.live() row (driver/live.py LiveState.rows), `more` added."""
    return {"worker": worker, "host": worker.partition(":")[0], "pid": 1, "status": status,
            "job": "train" if status == "running" else None, "span": None, "cpu_percent": cpu,
            "rss_bytes": 300 * 2**20, "gpu_util_percent": 40.0 if cpu else None, "lost": 0,
            "dropped": 0, "running_s": 2.0 if status == "running" else None, "straggler": False,
            **more}


def _line(screen: str, worker: str) -> str:
    return next(x for x in screen.splitlines() if x.startswith(worker))


def test_ended_workers_show_no_cpu_and_failed_jobs_are_counted():
    """A worker that is no longer running shows no CPU or GPU use (its last reading is not
    now), a running one does; failed jobs are counted per worker and in the heading when the
    rows carry them."""
    rows = [row("a:1:2", "running", 93.0, failed_jobs=0),
            row("b:3:4", "exited", 87.0, failed_jobs=2),
            row("c:5:6", "killed", 55.0, failed_jobs=1),
            row("d:7:8", "stale", 12.0, failed_jobs=0)]
    screen = render(rows, "tcp://127.0.0.1:5555", width=120, jobs=7)
    assert "93%" in _line(screen, "a:1") and "40%" in _line(screen, "a:1")
    for worker, cpu in (("b:3", "87%"), ("c:5", "55%"), ("d:7", "12%")):
        line = _line(screen, worker)
        assert cpu not in line and "40%" not in line, line
    head = screen.splitlines()[0]
    assert "7 job(s) ended" in head and "3 failed" in head, head
    cols = next(x for x in screen.splitlines() if x.startswith("worker "))
    assert "failed" in cols.split()
    at = cols.index("failed")
    assert _line(screen, "b:3")[at:at + 6].strip() == "2"


def test_rows_without_failed_counts_still_render():
    """Rows from a driver that does not count failed jobs render without that column."""
    screen = render([row("a:1:2", "running", 93.0)], "tcp://x", width=100, jobs=1)
    assert "failed" not in screen and "93%" in screen


def test_the_endpoint_line_is_never_cut():
    """At 120 columns the live view's endpoint, keys and all, is on a line of its own, whole:
    it is there to be copied (the heading cut it at the width)."""
    endpoint = "tcp://driver-host:5555?curve=" + "A" * 43 + "," + "B" * 43
    screen = render([], endpoint, width=120, jobs=0)
    assert f"endpoint: {endpoint}" in screen.splitlines()
