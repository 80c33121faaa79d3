"""Filling max_workers must not lock real workers out (issue 21, finding 11): a key holder that
claims worker ids one connection after another, each hello then gone, once used every slot,
and a real job's worker that came next was refused. Past max_workers, a worker whose
connection has ended and that said bye or has been silent for stale_after is let go of from
the live state (its frames are in the record: timeline() still has it) to make room. Workers
whose connections are open keep their slots, and those are bounded by max_connections."""

from __future__ import annotations

import time
from collections.abc import Callable

import zmq

from workerscope import Subscriber, profiled, protocol
from workerscope.transport import dealer


def _eventually(check: Callable[[], bool], timeout: float = 30.0) -> bool:
    """Poll a condition that has no event to wait on, up to `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def _hello(sock: zmq.Socket[bytes], wid: str) -> None:
    body = {"host": "h", "pid": 7, "anchor": [time.time_ns(), time.monotonic_ns()]}
    sock.send(protocol.encode_frame("hello", wid, 0, body))


def test_gone_workers_make_room_for_a_real_one(clean_env):
    ctx: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
    try:
        with Subscriber(max_workers=4, stale_after=0.3) as sub:
            for n in range(4):  # every slot taken, each connection then closed
                sock = dealer(ctx, sub.endpoint)
                _hello(sock, f"squat:{n}:1")
                assert _eventually(lambda n=n: f"squat:{n}:1" in sub.received)
                sock.close(linger=1000)
            assert len(sub.received) == 4
            assert _eventually(lambda: set(sub.states().values()) == {"stale"}), sub.states()
            assert profiled(sum, mode="heavy", interval=0.05, endpoint=sub.endpoint)([1, 2]) == 3
            assert sub.wait(jobs=1, timeout=30), sub.refused
            t = sub.timeline()
            assert sub.refused["workers"] == 0 and sub.retired >= 1
        assert [j.name for j in t.jobs] == ["sum"] and t.jobs[0].status == "ok"
        # Those let go of are still in the timeline, from the record.
        assert {f"squat:{n}:1" for n in range(4)} <= set(t.workers)
    finally:
        ctx.destroy(linger=0)


def test_workers_with_open_connections_keep_their_slots(clean_env):
    """Silent or not, a worker whose connection is open is not let go of: past max_workers
    a new worker is refused, and counted."""
    ctx: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
    try:
        with Subscriber(max_workers=2, stale_after=0.3) as sub:
            held = [dealer(ctx, sub.endpoint) for _ in range(2)]
            for n, sock in enumerate(held):
                _hello(sock, f"held:{n}:1")
            assert _eventually(lambda: len(sub.received) == 2)
            assert _eventually(lambda: set(sub.states().values()) == {"stale"})
            late = dealer(ctx, sub.endpoint)
            _hello(late, "late:1:1")
            assert _eventually(lambda: sub.refused["workers"] >= 1), sub.refused
            assert sub.retired == 0 and "late:1:1" not in sub.received
    finally:
        ctx.destroy(linger=0)
