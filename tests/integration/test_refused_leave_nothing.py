"""A holder of the endpoint's key sends frames the driver refuses or that end nothing: they
leave nothing behind in its memory and satisfy no wait (issue: ids of refused frames kept,
fake job_end frames counted as ended jobs)."""

from __future__ import annotations

import time

from helpers import eventually
from test_security import Sender

from workerscope import Subscriber
from workerscope.driver.receive import MAX_WORKER_ID


def test_job_ends_of_jobs_never_started_satisfy_no_wait(clean_env):
    """job_end frames for jobs that never started (or ended already) are not ended jobs:
    wait(jobs=N) waits on for the real ones."""
    with Subscriber() as sub:
        s = Sender(sub.endpoint)
        try:
            s.hello("h:1:2")
            for job in range(5):
                s.send("h:1:2", "job_end", {"job": 100 + job, "t": time.monotonic_ns(),
                                            "status": "ok"})
            s.send("h:1:2", "job_start", {"job": 1, "name": "real", "t": time.monotonic_ns(),
                                          "pid": 1})
            s.send("h:1:2", "job_end", {"job": 1, "t": time.monotonic_ns(), "status": "ok"})
            s.send("h:1:2", "job_end", {"job": 1, "t": time.monotonic_ns(), "status": "ok"})
            assert eventually(lambda: sub.received.get("h:1:2", 0) == 9)
            assert sub.wait(jobs=1, timeout=10)
            assert not sub.wait(jobs=2, timeout=0.5), "only the one real job ended"
        finally:
            s.close()
        t = sub.timeline()
    assert [j.name for j in t.jobs] == ["real"]


def test_refused_frames_leave_no_worker_ids_behind(clean_env):
    """Sample frames under new worker ids, each refused (past max_workers, or an id too
    long): the driver keeps none of those ids, in any store."""
    with Subscriber(max_workers=1) as sub:
        s = Sender(sub.endpoint)
        try:
            s.hello("h:1:2")
            assert eventually(lambda: "h:1:2" in sub.received)
            long_id = "x" * (MAX_WORKER_ID + 1)
            for k in range(200):
                s.send(f"other:{k}:1", "sample", {"t": time.monotonic_ns(), "tree": {}})
                s.send(f"{long_id}{k}", "sample", {"t": time.monotonic_ns(), "tree": {}})
            assert eventually(lambda: sub.refused["workers"] >= 200 and sub.bad_frames >= 200,
                               timeout=30), (sub.refused, sub.bad_frames)
            # Every map of the receive thread and of the state it fills (the Connections'
            # are keyed by connection, not by what a frame says).
            kept = [name for owner in (sub._rx, sub._state)
                    for name, store in vars(owner).items()
                    if isinstance(store, (dict, set)) and any(
                        isinstance(k, str) and (k.startswith("other:") or k.startswith("xxx"))
                        for k in store)]
            assert not kept, f"refused ids kept in {kept}"
        finally:
            s.close()
