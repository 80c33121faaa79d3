"""The sidecar's socket to the driver: never blocks, counts what it could not send.

DEALER -> ROUTER rather than PUB/SUB: a DEALER queues frames until the driver connects (no
slow-joiner loss), and the ROUTER can acknowledge the final bye, so the sidecar knows its last
frames arrived before it closes (libzmq #4660 loses them otherwise over ipc://).

An endpoint with ?curve=KEY,KEY (what a driver on tcp:// hands out, config.split_endpoint)
connects with CURVE: the frames are encrypted and the driver lets in only the holders of the
key (docs/SECURITY.md). One without keys connects in plain text, as a driver made with
`insecure=True` or on ipc:// expects.
"""

from __future__ import annotations

import errno
import logging
import math
import os
import secrets
import stat
import time
from collections.abc import Callable

import zmq
from zmq.utils import z85

from . import protocol
from .config import public_endpoint, split_endpoint
from .errors import ConfigError, ProtocolError
from .protocol import MAX_FRAME_BYTES

__all__ = ["LINGER_MS", "MAX_FRAME_BYTES", "SEND_HWM", "Outbox", "dealer"]

SEND_HWM = 10_000
ROUTING_ID_BYTES = 16
LINGER_MS = 2_000
MAX_BYE_WAIT_S = protocol.MAX_BYE_WAIT_S
PROGRESS_WAIT_S = 5.0  # more, after each word that the driver is reading (a few of its acks)
# The largest frame that goes over the network, either way (protocol's): a driver reads no
# bigger frame (ZeroMQ drops a connection that sends one), and its memory ceiling is counted in
# these (docs/SECURITY.md): 10,000 span records are ~450 KB, a sample of a 1,000-process tree
# ~340 KB.
log = logging.getLogger("workerscope.transport")


def not_delivered(bye_wait: str, endpoint: str, what: str) -> str | None:
    """What to say of frames a driver did not take, by how the wait for the bye's
    acknowledgement ended (Outbox.bye_wait); None when there is nothing to say."""
    where = public_endpoint(endpoint)
    if bye_wait == "refused the keys":
        return (f"the driver at {where} refused this worker's keys: {what} were not delivered; "
                "give the worker the driver's endpoint whole, with its ?curve=... part "
                "(sub.endpoint, or what `workerscope listen` printed), from this run of the "
                "driver or one started with the same key")
    if bye_wait == "nobody listened":
        return f"nobody listened on {where}: {what} were not delivered"
    return None


def dealer(ctx: zmq.Context[zmq.Socket[bytes]], endpoint: str, send_hwm: int = SEND_HWM,
           linger_ms: int = LINGER_MS, routing_id: bytes | None = None) -> zmq.Socket[bytes]:
    """A DEALER connected to a driver's endpoint, with the CURVE keys the endpoint carries.
    zmq.ZMQError if it cannot be made (and then no socket is left open).

    Its routing id is random (ROUTING_ID_BYTES, never starting with a zero byte, which
    ZeroMQ keeps for its own) unless given: the driver binds a worker to the routing id that
    first spoke for it, and this socket presents the same one when it reconnects, so the
    worker's own sidecar speaks on after a network drop and nobody else can take its place
    (it is sent encrypted, under CURVE)."""
    try:
        address, keys = split_endpoint(endpoint)
    except ConfigError as err:
        raise zmq.ZMQError(zmq.EINVAL, str(err)) from err
    shared = address.startswith("ipc://") and _check_ipc_path(address[len("ipc://"):])
    sock = ctx.socket(zmq.DEALER)
    try:
        # Options first: a connection takes the socket's options as they are at connect().
        if shared:
            # Once the driver's socket is gone, another user may bind the path: ZeroMQ would
            # reconnect to theirs on its own.
            sock.setsockopt(zmq.RECONNECT_IVL, -1)
        sock.setsockopt(zmq.SNDHWM, send_hwm)
        sock.setsockopt(zmq.LINGER, linger_ms)
        sock.setsockopt(zmq.MAXMSGSIZE, MAX_FRAME_BYTES)
        sock.setsockopt(zmq.ROUTING_ID, routing_id or new_routing_id())
        if keys is not None:
            server_public, secret = (z85.encode(k) for k in keys)
            sock.setsockopt(zmq.CURVE_SERVERKEY, server_public)
            sock.setsockopt(zmq.CURVE_SECRETKEY, secret)
            sock.setsockopt(zmq.CURVE_PUBLICKEY, zmq.curve_public(secret))
        sock.connect(address)
    except zmq.ZMQError as err:
        sock.close(linger=0)
        raise zmq.ZMQError(err.errno, f"{err.strerror} ({public_endpoint(endpoint)})") from err
    return sock


def new_routing_id() -> bytes:
    """A socket's routing id: ROUTING_ID_BYTES random bytes, the first never zero."""
    return bytes([1 + secrets.randbelow(255)]) + secrets.token_bytes(ROUTING_ID_BYTES - 1)


def _check_ipc_path(path: str) -> bool:
    """Refuse an ipc path another user could be listening on, and say whether its folder is
    shared: other users may write to it (as to /tmp), or it is another user's. In a shared
    folder whoever binds a path first receives what connects to it: there, the socket must
    be there already and be this user's or root's; in a folder of one's own, a socket of
    another user is refused too, and a path with none yet waits for its driver as before.
    zmq.ZMQError (EACCES) if refused."""
    try:
        folder = os.stat(os.path.dirname(os.path.abspath(path)))
        # Shared: others may write there, or it is another user's (theirs to bind in).
        shared = bool(folder.st_mode & (stat.S_IWGRP | stat.S_IWOTH)) or folder.st_uid not in (
            os.getuid(), 0)
    except OSError:
        shared = False  # no folder: nobody binds there before it is made
    try:
        st = os.stat(path)
    except OSError:
        if shared:
            raise zmq.ZMQError(errno.EACCES, f"ipc://{path}: no driver's socket there yet, in a "
                                           "folder other users may write to (or own): whoever "
                                           "binds it first would receive the frames; nothing is "
                                           "sent (start the driver first, or use a path in a "
                                           "folder of your own)") from None
        return False
    if st.st_uid not in (os.getuid(), 0) or not stat.S_ISSOCK(st.st_mode):
        raise zmq.ZMQError(errno.EACCES, f"ipc://{path} is owned by uid {st.st_uid}, not this "
                                       "user: another user may be listening there; nothing is "
                                       "sent to it (use a path in a folder of your own)")
    return shared


# Connection events that tell whether a driver listens: a handshake done, or a connection
# that failed (refused, closed, or its handshake refused).
_HEARD = zmq.EVENT_HANDSHAKE_SUCCEEDED
_REFUSED = (zmq.EVENT_HANDSHAKE_FAILED_AUTH | zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL
            | zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL)  # a driver was there, and refused the keys
_FAILED = zmq.EVENT_CONNECT_RETRIED | zmq.EVENT_CLOSED | _REFUSED


class Outbox:
    """A worker's or sidecar's way to the driver: frames queued without blocking, and at the
    end a wait for the driver's acknowledgement of the bye. Whether a driver listens at all
    is told by the connection's own events: a wait for an ack from nobody is skipped."""

    def __init__(self, endpoint: str, send_hwm: int = SEND_HWM) -> None:
        self.endpoint = endpoint
        # A fresh context in this process: a zmq context must never cross a fork.
        self._ctx: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
        try:
            self._sock = dealer(self._ctx, endpoint, send_hwm)
            self._events = self._sock.get_monitor_socket(_HEARD | _FAILED)
        except zmq.ZMQError:
            # A bad endpoint must not leave the socket and the context's descriptors behind.
            self._ctx.destroy(linger=0)
            raise
        self.heard = False  # a driver completed a handshake
        self._failed = False  # a connection failed before any handshake was done
        self.refused = False  # a handshake failed (CURVE): the keys are not the driver's
        # how wait_ack ended: acknowledged | timed out | nobody listened | refused the keys
        self.bye_wait = ""
        self.sent = 0
        self.dropped = 0
        self.read_seq = -1  # the latest of this worker's frames the driver said it read
        self.read_at = -math.inf  # when it said so (monotonic)
        self.too_big = 0  # of those dropped, frames over MAX_FRAME_BYTES

    def send(self, frame: bytes) -> bool:
        """Queue one frame; False (and counted) if the queue to the driver is full, or if the
        frame is too big for a driver to read (sent, it would cost the connection)."""
        if len(frame) > MAX_FRAME_BYTES:
            self.dropped += 1
            self.too_big += 1
            if self.too_big == 1:
                log.warning("a frame of %d bytes is over the %d-byte limit: not sent (counted "
                            "in dropped)", len(frame), MAX_FRAME_BYTES)
            return False
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
                frame = protocol.decode_frame(data)
            except ProtocolError:
                continue  # not from a driver we understand: nothing to answer
            if frame.kind == protocol.ACK:
                self._read_so_far(frame)
                continue
            out.append(frame)

    def _read_so_far(self, frame: protocol.Frame) -> None:
        """An ack of a frame before the bye: the driver is reading this worker's frames."""
        acked = frame.body.get("seq")
        if type(acked) is int and acked > self.read_seq:
            self.read_seq, self.read_at = acked, time.monotonic()

    @property
    def nobody_listened(self) -> bool:
        """No driver has completed a handshake, and a connection to the endpoint failed."""
        from zmq.utils.monitor import recv_monitor_message

        while True:
            try:
                event = recv_monitor_message(self._events, zmq.NOBLOCK)["event"]
            except zmq.Again:
                break
            if event == _HEARD:
                self.heard, self._failed = True, False
            elif not self.heard:
                self._failed = True
                self.refused = self.refused or bool(event & _REFUSED)
        return self._failed and not self.heard

    def wait_ack(self, seq: int, timeout: float,
                 on_other: Callable[[list[protocol.Frame]], None] | None = None,
                 progress: bool = False) -> bool:
        """Wait for the driver to acknowledge frame `seq` (the bye). False on timeout, or at
        once when nobody listened (`bye_wait` says which). Anything else the driver sends
        meanwhile (a ping) goes to on_other. progress (a sidecar's bye): wait longer while
        the driver says it is still reading this worker's frames."""
        start = time.monotonic()
        # A driver still reading this worker's queued frames says so about once a second (an
        # ack of an earlier seq): each lets it wait PROGRESS_WAIT_S more, up to MAX_BYE_WAIT_S
        # in all, so a driver behind a flood still gets every frame queued before the bye.
        # Light mode's exit wait stays its own (half a second).
        longest = start + (max(timeout, MAX_BYE_WAIT_S) if progress and timeout > 0 else timeout)
        deadline = start + timeout
        if progress:
            deadline = min(max(deadline, self.read_at + PROGRESS_WAIT_S), longest)
        poller = zmq.Poller()
        poller.register(self._sock, zmq.POLLIN)
        poller.register(self._events, zmq.POLLIN)
        while True:
            if self.nobody_listened:
                self.bye_wait = "refused the keys" if self.refused else "nobody listened"
                return False
            left = deadline - time.monotonic()
            if left <= 0:
                self.bye_wait = "timed out"
                return False
            if self._sock not in dict(poller.poll(int(left * 1000) + 1)):
                continue  # an event, or the time is up: looked at above
            try:
                frame = protocol.decode_frame(self._sock.recv(zmq.NOBLOCK))
            except (zmq.Again, ProtocolError):
                continue  # not an ack we can read; keep waiting for the real one
            if frame.kind == protocol.ACK:
                acked = frame.body.get("seq")
                if acked == seq:
                    self.bye_wait = "acknowledged"
                    return True
                before = self.read_seq
                self._read_so_far(frame)
                if self.read_seq > before:
                    deadline = min(max(deadline, self.read_at + PROGRESS_WAIT_S), longest)
                continue
            if on_other is not None:
                on_other([frame])

    def close(self) -> None:
        # Called after the bye was acknowledged (nothing left to deliver) or after bye_timeout
        # went by without an answer: the driver had that long to drain the queue.
        self._sock.disable_monitor()
        self._events.close(linger=0)
        self._sock.close(linger=0)
        self._ctx.term()
