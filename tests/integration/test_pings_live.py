"""A sidecar answers its driver's clock pings while its worker runs, not only at its bye: a
long job on another host has its clock offset known during the job."""

from __future__ import annotations

import threading
import time

from workerscope import Subscriber, monitor


def test_pings_are_answered_during_a_job(clean_env):
    """The driver learns a remote worker's clock offset while the worker's job still runs."""
    clean_env.setenv("WORKERSCOPE_TEST_CLOCK_SKEW_NS", str(5 * 10**9))  # "another host"
    with Subscriber() as sub:
        known = threading.Event()
        with monitor(interval=0.1, endpoint=sub.endpoint):
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline and not known.is_set():
                if any(err is not None for _, err in sub.clock_offsets().values()):
                    known.set()
                time.sleep(0.05)
        assert known.is_set(), "no pong came back while the job ran"
