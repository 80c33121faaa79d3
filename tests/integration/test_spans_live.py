"""A heavy job's spans reach the driver while it runs, every DRAIN_NS (50 ms), from its start:
the first job of a new sidecar sent them only at its end (the ring drain was due at the next
heartbeat, a second on), so a killed sidecar lost them all and a live view saw none."""

from __future__ import annotations

import threading
import time

from workerscope import Subscriber, profiled, span
from workerscope.worker import link


def test_the_first_job_s_spans_arrive_while_it_runs(clean_env):
    seen = threading.Event()
    arrived: list[tuple[str, float]] = []

    def on_frame(f):
        arrived.append((str(f.kind), time.monotonic()))
        if str(f.kind) == "spans" and f.body.get("records"):
            seen.set()

    done_before = []

    def work():
        # Spans of ~10 ms keep finishing until the driver has one (or 60 s): how many it
        # took says how soon the first went, on a loaded machine too (the job slows with it).
        deadline = time.monotonic() + 60
        n = 0
        while not seen.is_set() and time.monotonic() < deadline:
            with span("step"):
                time.sleep(0.01)
            n += 1
        done_before.append(n)

    with Subscriber(on_frame=on_frame) as sub:
        profiled(work, mode="heavy", interval=5.0, endpoint=sub.endpoint)()  # a new sidecar
        assert sub.wait(jobs=1, timeout=60)
        link.close_all(wait=True)
    kinds = [k for k, _ in arrived]
    first_spans = kinds.index("spans")
    assert first_spans < kinds.index("job_end"), kinds
    # A drain every 50 ms sends the first after ~5 spans; at the next heartbeat (1 s), ~100.
    assert done_before[0] < 40, done_before
