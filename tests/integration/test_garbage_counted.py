"""Connections that are not workerscope senders at all (garbage bytes, or a greeting cut
short) are each counted in refused["handshakes"]: 5,000 garbage connections once counted 7."""

from __future__ import annotations

import os
import socket

from helpers import eventually

from workerscope import Subscriber
from workerscope.config import split_endpoint


def test_garbage_connections_are_counted(clean_env):
    with Subscriber() as sub:
        host, port = split_endpoint(sub.endpoint)[0][len("tcp://"):].rsplit(":", 1)
        n = 100
        for k in range(n):
            with socket.create_connection((host, int(port)), timeout=10) as s:
                # Random bytes, or the start of a ZeroMQ greeting that never finishes.
                s.sendall(os.urandom(64) if k % 2 else b"\xff" + bytes(8) + b"\x7f")
        assert eventually(lambda: sub.refused["handshakes"] >= n, timeout=30), sub.refused
        assert sub.refused["handshakes"] <= n + 2


def test_key_holders_refused_past_max_workers_are_not_counted_as_failed_handshakes(clean_env):
    """A connection whose frames were refused (past max_workers) passed its handshake: it is
    counted in refused["workers"], not in refused["handshakes"] (960 of 3,000 were)."""
    import time

    import zmq

    from workerscope import protocol
    from workerscope.transport import dealer

    ctx: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
    try:
        with Subscriber(max_workers=1) as sub:
            for n in range(6):
                sock = dealer(ctx, sub.endpoint)
                sock.send(protocol.encode_frame("hello", f"w:{n}:1", 0, {
                    "host": "h", "pid": n, "anchor": [time.time_ns(), time.monotonic_ns()]}))
                assert eventually(lambda n=n: sub.refused["workers"] == max(0, n)
                                   and len(sub.received) == 1), sub.refused
                sock.close(linger=1000)
            # One garbage connection last: the monitor tells connections' ends in order, so
            # once it is counted the six before it have been told too.
            host, port = split_endpoint(sub.endpoint)[0][len("tcp://"):].rsplit(":", 1)
            with socket.create_connection((host, int(port)), timeout=10) as s:
                s.sendall(os.urandom(64))
            assert eventually(lambda: sub.refused["handshakes"] >= 1, timeout=30), sub.refused
            assert sub.refused["handshakes"] == 1, sub.refused
    finally:
        ctx.destroy(linger=0)
