"""Connections that are not workerscope senders at all (garbage bytes, or a greeting cut
short) are each counted in refused["handshakes"]: 5,000 garbage connections once counted 7."""

from __future__ import annotations

import os
import socket

from test_security import _eventually

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
        assert _eventually(lambda: sub.refused["handshakes"] >= n, timeout=30), sub.refused
        assert sub.refused["handshakes"] <= n + 2
