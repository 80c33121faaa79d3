"""A light job whose worker is killed ends lost where the driver found the worker gone."""

from __future__ import annotations

import signal
import subprocess
import time

from helpers import python_script, wait_until

from workerscope import Subscriber
from workerscope.protocol import Status


def test_a_killed_light_job_lasts_until_its_worker_was_found_gone(clean_env):
    """SIGKILL of a light worker 1 s into its job: the job is lost and lasts about as long as
    it ran (it lasted the 2-3 ms from its start to its last frame)."""
    with Subscriber() as sub:
        code = f"""
            import sys, time
            from workerscope import profiled
            def work():
                print("started", flush=True)
                while True:
                    time.sleep(0.05)
            profiled(work, mode="light", endpoint={sub.endpoint!r})()
        """
        child = subprocess.Popen(python_script(code), stdout=subprocess.PIPE, text=True)
        try:
            assert child.stdout is not None and child.stdout.readline().strip() == "started"
            assert sub.wait(started=1, timeout=30)
            started = time.monotonic()
            while time.monotonic() - started < 1.0:
                time.sleep(0.05)
            child.send_signal(signal.SIGKILL)
            child.wait(timeout=30)
            killed = time.monotonic()
        finally:
            child.kill()
            child.wait()
            child.stdout.close()
        wait_until(lambda: Status.DEAD in sub.states().values(), "the worker's death",
                   timeout=30, step=0.05)
        found = time.monotonic()
        [job] = sub.timeline().jobs
    assert job.status == Status.LOST
    seconds = (job.end_ns - job.start_ns) / 1e9
    assert 0.95 <= seconds <= found - started + 1.0, (seconds, killed - started)
