"""A worker's id belongs to its own connection for as long as that connection lives, silent or
not (issue 21, finding 11): a key holder waiting for a worker to go quiet (a sidecar stopped in
a debugger, a long GC pause) could claim its id and write its timeline. The worker's own
sidecar, reconnecting after a network drop, presents its own routing id, a secret of its
socket, and speaks on. Real sockets, real CURVE keys."""

from __future__ import annotations

import time

import zmq
from helpers import eventually

from workerscope import Subscriber, protocol
from workerscope.transport import dealer

WORKER = "hostA:1:2"



class Sender:
    """A DEALER with the endpoint's keys, speaking for one worker by hand."""

    def __init__(self, ctx: zmq.Context[zmq.Socket[bytes]], endpoint: str,
                 routing_id: bytes | None = None) -> None:
        self.sock = dealer(ctx, endpoint, linger_ms=1000, routing_id=routing_id)
        self.seq = 0

    def send(self, kind: str, body: dict) -> None:
        self.sock.send(protocol.encode_frame(kind, WORKER, self.seq, body))
        self.seq += 1


def _hello() -> dict:
    return {"host": "hostA", "pid": 1, "anchor": [time.time_ns(), time.monotonic_ns()]}


def _start(job: int, name: str) -> dict:
    return {"job": job, "name": name, "t": time.monotonic_ns(), "pid": 1}


def test_a_silent_worker_s_id_is_not_claimed_by_another_connection(clean_env):
    ctx: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
    try:
        with Subscriber(stale_after=0.3) as sub:
            owner, intruder = Sender(ctx, sub.endpoint), Sender(ctx, sub.endpoint)
            owner.send("hello", _hello())
            owner.send("job_start", _start(1, "real"))
            assert sub.wait(started=1, timeout=30)
            assert eventually(lambda: sub.states().get(WORKER) == "stale"), sub.states()
            intruder.send("job_start", _start(2, "forged"))
            intruder.send("bye", {"status": "exited"})
            assert eventually(lambda: sub.refused["identity"] == 2), sub.refused
            t = sub.timeline()
        assert [j.name for j in t.jobs] == ["real"]
        assert t.workers[WORKER].status != "exited"
    finally:
        ctx.destroy(linger=0)


def test_the_worker_s_own_socket_speaks_on_after_reconnecting(clean_env):
    """A second connection with the first one's routing id (what a sidecar's DEALER presents
    when it reconnects) takes over from the first, which is still open: its frames count."""
    ctx: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
    try:
        with Subscriber(stale_after=0.3) as sub:
            first = Sender(ctx, sub.endpoint)
            first.send("hello", _hello())
            first.send("job_start", _start(1, "one"))
            assert sub.wait(started=1, timeout=30)
            again = Sender(ctx, sub.endpoint, routing_id=first.sock.getsockopt(zmq.ROUTING_ID))
            again.seq = first.seq
            again.send("job_end", {"job": 1, "t": time.monotonic_ns(), "status": "ok"})
            assert sub.wait(jobs=1, timeout=30), sub.refused
            t = sub.timeline()
        assert sub.refused["identity"] == 0
        assert [(j.name, j.status) for j in t.jobs] == [("one", "ok")]
    finally:
        ctx.destroy(linger=0)


def test_each_socket_has_a_routing_id_of_its_own(clean_env):
    """The routing id is the socket's secret: random, long enough not to be guessed."""
    ctx: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
    try:
        with Subscriber() as sub:
            ids = {dealer(ctx, sub.endpoint).getsockopt(zmq.ROUTING_ID) for _ in range(50)}
        assert len(ids) == 50 and all(len(i) >= 16 and i[0] != 0 for i in ids)
    finally:
        ctx.destroy(linger=0)
