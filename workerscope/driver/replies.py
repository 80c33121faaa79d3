"""What the driver says back to a sidecar: the ack of its bye, and clock pings.

A sidecar of another host (or of another boot of this one) is pinged at its hello, at each
heartbeat, and again at each pong while its clock estimate wants more (clock.py). A worker on
this host shares our clocks, and a light worker has no sidecar to answer: neither is pinged. A
short-lived worker's bye is acknowledged once its clock estimate is good enough, since its
sidecar answers pings only while it waits for that ack. Runs on the receive thread, under the
receive state's lock (receive.py).
"""

from __future__ import annotations

from typing import Any, TypeGuard

import zmq

from .. import protocol
from ..builder import TimelineBuilder
from ..errors import ProtocolError
from ..timeline import Worker
from .clock import ClockSync


class Replies:
    """Acks and pings of one driver, and what they wait on."""

    def __init__(self, clocks: ClockSync, builder: TimelineBuilder, host: str,
                 boot: str) -> None:
        self.clocks = clocks
        self.no_ping: set[str] = set()  # light workers: no sidecar to answer a ping
        self.pending_ack: dict[str, tuple[bytes, int]] = {}  # worker -> (identity, bye's seq)
        self._builder = builder  # who each worker is: its host and boot, from its hello
        self._host = host
        self._boot = boot

    def forget(self, wid: str) -> None:
        """Let go of one worker: its clock estimate, pings and the ack it waits for."""
        self.no_ping.discard(wid)
        self.pending_ack.pop(wid, None)
        self.clocks.forget(wid)

    def local(self, w: Worker) -> bool:
        """Whether this worker runs on this host, in this boot: then it shares our clocks."""
        return bool(w.boot_id) and w.boot_id == self._boot and w.host == self._host

    def answer(self, sock: zmq.Socket[bytes], identity: bytes,
               frame: protocol.Frame) -> str | None:
        """Acknowledge a bye, and ping a sidecar whose clock is not known well enough yet;
        what went wrong sending, if anything did."""
        wid, kind = frame.worker, frame.kind
        if kind == protocol.BYE:
            if self._wants_ping(wid):
                # Finish the clock estimate first (the sidecar answers pings while it waits
                # for this ack), then let it go.
                self.pending_ack[wid] = (identity, frame.seq)
                return self._ping(sock, identity, wid)
            return _send(sock, identity, protocol.ACK, {"seq": frame.seq})
        if kind in (protocol.HELLO, protocol.HEARTBEAT) or (
                kind == protocol.PONG and self._wants_ping(wid)):
            return self._ping(sock, identity, wid)
        if kind == protocol.PONG and wid in self.pending_ack:
            ack_to, seq = self.pending_ack.pop(wid)
            return _send(sock, ack_to, protocol.ACK, {"seq": seq})
        return None

    def pong(self, frame: protocol.Frame) -> None:
        """Take a pong into the clock estimate; ProtocolError if it is malformed."""
        ping_id, t1 = frame.body.get("id"), frame.body.get("t1")
        if not (is_int(ping_id) and is_int(t1)):
            raise ProtocolError(f"malformed pong frame from {frame.worker}: id and t1 must be "
                                "integers")
        self.clocks.pong(frame.worker, ping_id, t1)

    def _pingable(self, wid: str) -> bool:
        w = self._builder.t.workers.get(wid)
        return wid not in self.no_ping and not (w is not None and self.local(w))

    def _wants_ping(self, wid: str) -> bool:
        return self._pingable(wid) and self.clocks.wants(wid)

    def _ping(self, sock: zmq.Socket[bytes], identity: bytes, wid: str) -> str | None:
        if not self._pingable(wid):
            return None
        return _send(sock, identity, protocol.PING, self.clocks.ping(wid))


def _send(sock: zmq.Socket[bytes], identity: bytes, kind: str,
          body: dict[str, Any]) -> str | None:
    try:
        sock.send_multipart([identity, protocol.encode_frame(kind, "driver", 0, body)],
                            zmq.NOBLOCK)
    except zmq.ZMQError as err:  # the sidecar is gone already; it counts its own loss
        return f"{kind} to a sidecar: {err}"
    return None


def is_int(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)
