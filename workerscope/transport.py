"""The sidecar's socket to the driver: never blocks, counts what it could not send.

DEALER -> ROUTER rather than PUB/SUB: a DEALER queues frames until the driver connects (no
slow-joiner loss), and the ROUTER can acknowledge the final bye, so the sidecar knows its last
frames arrived before it closes (libzmq #4660 loses them otherwise over ipc://).
"""

from __future__ import annotations

import time
from collections.abc import Callable

import zmq

from . import protocol
from .errors import ProtocolError

SEND_HWM = 10_000
LINGER_MS = 2_000


class Outbox:
    def __init__(self, endpoint: str, send_hwm: int = SEND_HWM) -> None:
        self.endpoint = endpoint
        # A fresh context in this process: a zmq context must never cross a fork.
        self._ctx = zmq.Context()
        self._sock = self._ctx.socket(zmq.DEALER)
        self._sock.setsockopt(zmq.SNDHWM, send_hwm)
        self._sock.setsockopt(zmq.LINGER, LINGER_MS)
        self._sock.setsockopt(zmq.MAXMSGSIZE, protocol.MAX_FRAME_BYTES)
        try:
            self._sock.connect(endpoint)
        except zmq.ZMQError:
            # A bad endpoint must not leave the socket and the context's descriptors behind.
            self._sock.close(linger=0)
            self._ctx.term()
            raise
        self.sent = 0
        self.dropped = 0

    def send(self, frame: bytes) -> bool:
        """Queue one frame; False (and counted) if the queue to the driver is full."""
        try:
            self._sock.send(frame, zmq.NOBLOCK)
        except zmq.Again:
            self.dropped += 1
            return False
        self.sent += 1
        return True

    @property
    def socket(self) -> zmq.Socket[bytes]:
        """For a zmq.Poller: readable when the driver sent something (a ping, an ack)."""
        return self._sock

    @property
    def fd(self) -> int:
        """A descriptor for select/poll that becomes readable when the socket's state changes
        (ZMQ_FD): then read all there is with receive()."""
        fd = self._sock.getsockopt(zmq.FD)
        assert isinstance(fd, int)  # an int option on every platform workerscope runs on
        return fd

    def receive(self) -> list[protocol.Frame]:
        """Whatever the driver sent, without blocking; garbage is skipped."""
        out: list[protocol.Frame] = []
        while True:
            try:
                data = self._sock.recv(zmq.NOBLOCK)
            except zmq.Again:
                return out
            try:
                out.append(protocol.decode_frame(data))
            except ProtocolError:
                continue  # not from a driver we understand: nothing to answer

    def wait_ack(self, seq: int, timeout: float,
                 on_other: Callable[[list[protocol.Frame]], None] | None = None) -> bool:
        """Wait for the driver to acknowledge frame `seq` (the bye). False on timeout.
        Anything else the driver sends meanwhile (a ping) goes to on_other."""
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0 or not self._sock.poll(int(left * 1000) + 1, zmq.POLLIN):
                return False
            try:
                frame = protocol.decode_frame(self._sock.recv(zmq.NOBLOCK))
            except (zmq.Again, ProtocolError):
                continue  # not an ack we can read; keep waiting for the real one
            if frame.kind == protocol.ACK and frame.body.get("seq") == seq:
                return True
            if on_other is not None:
                on_other([frame])

    def close(self) -> None:
        # Called after the bye was acknowledged (nothing left to deliver) or after bye_timeout
        # went by without an answer: the driver had that long to drain the queue.
        self._sock.close(linger=0)
        self._ctx.term()
