"""A job whose sidecar dies is still a timeline, built through the builder like any other."""

from __future__ import annotations

import threading

from workerscope import monitor, timed
from workerscope.protocol import Status


@timed
def step() -> int:
    return 1


def test_lost_sidecar_timeline_is_built_like_any_other(clean_env):
    """With the sidecar killed mid-job, the timeline holds the job on its own thread (as a
    sidecar's job_start says it), the spans the ring kept, and a sidecar_lost worker."""
    with monitor(interval=0.5, name="lost") as m:
        link = m._job.link
        link.proc.kill()
        link.proc.wait()
        for _ in range(3):
            step()
    t = m.timeline
    [job] = t.jobs
    assert job.tid == threading.get_native_id()
    assert job.name == "lost" and job.status == Status.OK
    [worker] = t.workers.values()
    assert worker.status == Status.SIDECAR_LOST and worker.errors
    assert [s.name for s in t.spans if s.kind == "span"].count("step") == 3
