"""A sidecar stopped by SIGSTOP (a debugger, a frozen container, memory pressure) must never
hold up the job it watches: the worker's writes to it give up, and the job goes on."""

from __future__ import annotations

import signal
import threading
import time

import pytest
from helpers import orphan_sidecars, wait_until

from workerscope import profiled
from workerscope.worker import link as launcher
from workerscope.worker.link import WRITE_TIMEOUT


def tiny(i):
    return i


@pytest.mark.timeout(400)  # 50,000 jobs, and the sidecars that took them, on a loaded machine
def test_jobs_go_on_when_the_sidecar_is_stopped(clean_env):
    """With its sidecar stopped, a worker runs 50,000 heavy jobs (far more than the pipe
    holds) to the end, in bounded time, and gets every result."""
    wrapped = profiled(tiny, mode="heavy", interval=0.05)
    assert wrapped(0) == 0  # the sidecar is up
    (link,) = launcher._links.values()
    sidecar = link.proc
    sidecar.send_signal(signal.SIGSTOP)
    results: list[int] = []
    worker = threading.Thread(target=lambda: results.extend(wrapped(i) for i in range(50_000)))
    try:
        worker.start()
        # Generous: the writes give up after WRITE_TIMEOUT; the rest is the jobs themselves.
        worker.join(timeout=WRITE_TIMEOUT + 120)
        assert not worker.is_alive(), "the job is blocked on its stopped sidecar"
        assert results == list(range(50_000))
    finally:
        sidecar.send_signal(signal.SIGCONT)
        launcher.close_all(wait=True)
        worker.join()
    sidecar.wait(timeout=30)
    # A sidecar that took over and fell behind the 50,000 jobs was given up on in turn (the
    # worker's writes to it timed out): it still works through the jobs it took, then ends.
    wait_until(lambda: not orphan_sidecars(), "the orphan sidecars to end", timeout=180,
               step=0.1)
    assert not orphan_sidecars()


def test_a_monitor_on_a_frozen_sidecar_waits_seconds_not_thirty(clean_env):
    """monitor() (which waits for its timeline) on a sidecar stopped mid-job gives up within a
    few seconds, with a timeline that says the sidecar was lost, and why (it waited 30 s)."""
    from workerscope import monitor
    from workerscope.protocol import Status

    with monitor(interval=0.1):
        pass  # the sidecar is up
    (link,) = launcher._links.values()
    sidecar = link.proc
    try:
        started = time.monotonic()
        with monitor(interval=0.1) as m:
            sidecar.send_signal(signal.SIGSTOP)
        waited = time.monotonic() - started
        assert waited < 10, waited
        assert m.timeline is not None
        assert [w.status for w in m.timeline.workers.values()] == [Status.SIDECAR_LOST]
        assert any("stopped" in e for w in m.timeline.workers.values() for e in w.errors)
    finally:
        sidecar.send_signal(signal.SIGCONT)
        launcher.close_all(wait=True)
    sidecar.wait(timeout=30)


def test_a_stopped_sidecar_given_up_on_is_not_left_behind(clean_env):
    """The sidecar the worker gave up on as stopped is killed and reaped when the next job
    starts another, and its ring folder goes with it: stopped, it would hold both for ever
    (it was left running, untracked, a leak the suite caught under load)."""
    import os

    from workerscope import monitor

    with monitor(interval=0.1):
        pass
    (link,) = launcher._links.values()
    sidecar, rings = link.proc, link.rings
    sidecar.send_signal(signal.SIGSTOP)
    try:
        with monitor(interval=0.1):
            pass  # given up on within FROZEN_S
        with monitor(interval=0.1):
            pass  # a new sidecar: the stopped one is done away with
        assert sidecar.poll() is not None, "the stopped sidecar still runs"
        assert rings is not None and not os.path.exists(rings), "its ring folder is left"
        (new,) = launcher._links.values()
        assert new.proc is not None and new.proc.pid != sidecar.pid
    finally:
        if sidecar.poll() is None:
            sidecar.send_signal(signal.SIGCONT)
        launcher.close_all(wait=True)
