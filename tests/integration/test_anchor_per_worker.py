"""A worker's clock anchor is its own: another hello with the same boot id cannot move it."""

from __future__ import annotations

import time

import zmq
from helpers import wait_until

from workerscope import Subscriber, monitor, procfs, protocol, timed
from workerscope.transport import dealer

CENTURIES = 200 * 365 * 86_400 * 10**9


@timed
def step() -> None:
    pass


def test_a_false_anchor_with_this_host_s_boot_id_moves_no_real_worker(clean_env):
    """A key holder's hello with this host's boot id and an anchor 200 years off, sent before
    the real worker: the real worker still has its job, spans and samples, at the right time
    (it was left with none while wait() returned True)."""
    with Subscriber() as sub:
        ctx = zmq.Context()
        sock = dealer(ctx, sub.endpoint)
        try:
            fake = {"host": "h", "pid": 1, "boot_id": procfs.boot_id(),
                    "anchor": [time.time_ns() + CENTURIES, time.monotonic_ns()]}
            sock.send(protocol.encode_frame(protocol.HELLO, "h:1:2", 0, fake))
            wait_until(lambda: "h:1:2" in sub.received, "the fake hello", timeout=30)
        finally:
            sock.close(0)
            ctx.term()
        before = time.time_ns()
        with monitor(interval=0.1, endpoint=sub.endpoint, name="real"):
            step()
        assert sub.wait(jobs=1, timeout=30)
        t = sub.timeline()
    [job] = [j for j in t.jobs if j.name == "real"]
    assert abs(job.start_ns - before) < 60 * 10**9
    assert any(s.name == "step" and s.worker == job.worker for s in t.spans)
    assert any(s.worker == job.worker for s in t.samples)
