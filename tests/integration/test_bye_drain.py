"""A driver slower than its worker gets every frame the sidecar queued before the bye: the
sidecar waits for the bye's acknowledgement as long as the driver says it is reading its
frames (a progress acknowledgement about once a second), not only bye_timeout. Four workers
flooding spans on two loaded CPUs once lost every job's end and bye: the sidecars waited 2 s
for the ack, then closed with hundreds of frames still queued."""

from __future__ import annotations

import subprocess
import sys
import time

from jobs import spanner_script

from workerscope import Subscriber

WORKER = spanner_script(200_000, ring_records=1 << 20)


def test_a_slow_driver_gets_the_job_end_and_bye_of_a_worker_that_left(clean_env):
    slow = 0.03  # s a frame: the receive thread spends this long on each, like a busy driver

    def busy(frame) -> None:
        time.sleep(slow)

    with Subscriber(on_frame=busy) as sub:
        proc = subprocess.run([sys.executable, "-c", WORKER, sub.endpoint], timeout=300)
        assert proc.returncode == 0
        left = time.monotonic()
        # Every frame reaches it, however long the driver takes: the queue behind the bye
        # is seconds of frames at this pace, past the bye_timeout (0.3 s in tests, 2 s by
        # default).
        ended = -1
        while not sub.wait(jobs=1, byes=1, timeout=30):
            received = sum(sub.received.values())
            assert received > ended, "the driver stopped receiving"
            ended = received
        behind = time.monotonic() - left
        t = sub.timeline()
    assert behind > 2.0, behind  # it was behind for longer than the bye timeout
    (job,) = t.jobs
    assert job.status == "ok"
    (w,) = t.workers.values()
    assert w.status == "exited"
    ticks = [s for s in t.spans if s.name == "tick"]
    assert len(ticks) + w.spans_lost == 200_000, (len(ticks), w.spans_lost)
