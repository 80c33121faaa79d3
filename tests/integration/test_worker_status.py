"""A worker that ended is recorded as ended: a timeline taken after a worker's last job ended
never says it is still "running". With no job open and no bye yet it is "idle"; after its
sidecar's bye it is what the bye says (exited)."""

from __future__ import annotations

import subprocess
import sys
import textwrap

from workerscope import Subscriber, monitor, protocol
from workerscope.builder import TimelineBuilder

W = "host:1:2"


def _frame(seq: int, kind: str, body: dict) -> protocol.Frame:
    return protocol.Frame(kind, W, seq, body)


def _builder_after(*kinds: str) -> TimelineBuilder:
    """A builder fed a worker's hello, then the given frames (job_start, job_end, bye)."""
    b = TimelineBuilder()
    b.add(_frame(0, protocol.HELLO, {"host": "host", "pid": 1, "anchor": [10**18, 0]}))
    for seq, kind in enumerate(kinds, 1):
        body = {"job": 1, "t": seq * 1000}
        if kind == protocol.JOB_START:
            body.update(name="j", pid=1, tid=1)
        elif kind == protocol.BYE:
            body = {"t": seq * 1000, "status": "exited"}
        b.add(_frame(seq, kind, body))
    return b


def test_job_open_running_job_ended_idle_bye_exited():
    """A worker is running while a job is open, idle once its last job ended (no bye yet),
    and exited after its bye."""
    b = _builder_after(protocol.JOB_START)
    assert b.timeline().workers[W].status == "running"
    b = _builder_after(protocol.JOB_START, protocol.JOB_END)
    assert b.timeline().workers[W].status == "idle"
    b = _builder_after(protocol.JOB_START, protocol.JOB_END, protocol.BYE)
    assert b.timeline().workers[W].status == "exited"


def test_a_finished_monitor_timeline_is_not_running(clean_env):
    """monitor()'s timeline, taken when its job ended, says idle (the worker lives on), never
    running."""
    with monitor(interval=0.05) as m:
        pass
    (w,) = m.timeline.workers.values()
    assert w.status == "idle"


def _worker(endpoint: str) -> subprocess.Popen[str]:
    """A worker process that runs one heavy job for the driver, then waits for stdin to close
    before it exits (and its sidecar says bye)."""
    code = textwrap.dedent(f"""
        import sys
        from workerscope import profiled
        profiled(lambda: 1, mode="heavy", interval=0.05, endpoint={endpoint!r})()
        sys.stdin.read()
    """)
    return subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, text=True)


def test_driver_timeline_after_the_bye_says_exited(clean_env):
    """Saved after wait(byes=1), the worker whose process ended is exited."""
    with Subscriber() as sub:
        worker = _worker(sub.endpoint)
        try:
            assert sub.wait(jobs=1, timeout=60)
        finally:
            assert worker.stdin is not None
            worker.stdin.close()
            worker.wait()
        assert sub.wait(byes=1, timeout=30)
        (w,) = sub.timeline().workers.values()
    assert w.status == "exited"


def test_driver_timeline_right_after_wait_for_jobs_is_not_running(clean_env):
    """Saved right after wait(jobs=1), before any bye, a worker whose job ended is idle, not
    running."""
    with Subscriber() as sub:
        worker = _worker(sub.endpoint)
        try:
            assert sub.wait(jobs=1, timeout=60)
            (w,) = sub.timeline().workers.values()
        finally:
            assert worker.stdin is not None
            worker.stdin.close()
            worker.wait()
    assert w.status == "idle"
