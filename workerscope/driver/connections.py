"""The connections to a driver's ROUTER: counted, capped, and each bound to one worker.

ZeroMQ accepts every TCP connection and offers no cap: 1,100 of them once used up the
process's descriptors, and libzmq's listener then retries a failing accept() in a loop at 100%
CPU (libzmq 4.3 tcp_listener::in_event). So the socket's monitor tells us of each connection
(its descriptor) as it comes and goes, and one past the ceiling is hung up at once: shutdown()
on a duplicate of its descriptor, which makes ZeroMQ see the peer leave and close it itself.
The ceiling leaves RESERVE_FDS descriptors below the process's limit for the program's own
files and sockets (and it raises the soft limit towards the hard one if that is what it takes
to fit max_connections).

A frame says which worker sent it; a connection may speak for one worker only, the first it
spoke for. ZeroMQ tells which connection a message came from (its routing id, and the
descriptor under it, ZMQ_SRCFD), so a frame from that connection under another worker's id is
refused, and so is a second connection claiming a worker that a live one holds, however long
that worker has been silent (a key holder would wait for a sidecar stopped in a debugger and
write its timeline). Each sender's routing id is a random secret of its socket
(transport.dealer), which it presents again when it reconnects: the ROUTER hands the id over
(ZMQ_ROUTER_HANDOVER) from a connection a network drop left half open to the new one, and the
worker's binding follows. A worker whose connection is gone (a driver restarted) is free to
be claimed again.
"""

from __future__ import annotations

import errno
import logging
import os
import resource
import socket
import threading
import time
from collections import deque
from dataclasses import dataclass

import zmq
from zmq.utils.monitor import parse_monitor_message

from .keys import ZapHandler

log = logging.getLogger("workerscope.driver")
# What the driver says at the first connection whose handshake it refused.
KEY_REFUSED = ("refused a connection whose handshake failed: a sender without this driver's "
               "key (a worker given another driver's endpoint, an old one, or one cut short) "
               "or not a workerscope sender at all; counted in refused['handshakes'] from "
               "now on. Give workers this driver's endpoint whole, with its ?curve=... part; a "
               "driver started again hands out the same one only with the same key "
               "(Subscriber(key=...), listen --key-file)")

# Descriptors kept for the program itself, below the process's limit.
RESERVE_FDS = 256
POLL_MS = 100
_EVENTS = (zmq.EVENT_ACCEPTED | zmq.EVENT_ACCEPT_FAILED | zmq.EVENT_DISCONNECTED
           | zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL | zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL
           | zmq.EVENT_HANDSHAKE_FAILED_AUTH)
_HANDSHAKE_FAILED = (zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL | zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL
                     | zmq.EVENT_HANDSHAKE_FAILED_AUTH)


def connection_ceiling(wanted: int) -> int:
    """How many connections this process can hold and keep RESERVE_FDS descriptors free: up
    to `wanted`, raising the soft RLIMIT_NOFILE (never past the hard one) if it must."""
    in_use = len(os.listdir("/proc/self/fd")) if os.path.isdir("/proc/self/fd") else 64
    need = wanted + in_use + RESERVE_FDS
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < need:
        raised = need if hard == resource.RLIM_INFINITY else min(need, hard)
        if raised > soft:
            try:
                resource.setrlimit(resource.RLIMIT_NOFILE, (raised, hard))
                log.info("raised the soft limit on open files from %d to %d", soft, raised)
                soft = raised
            except (ValueError, OSError) as err:
                log.info("could not raise the soft limit on open files (%d): %s", soft, err)
    if soft == resource.RLIM_INFINITY:
        return wanted
    return max(1, min(wanted, soft - in_use - RESERVE_FDS))


@dataclass
class Peer:
    """One connection that has spoken: the worker it speaks for, its descriptor (-1: unknown)."""

    worker: str
    fd: int


class Connections:
    """The live connections of one ROUTER and who each speaks for.

    The monitor has a thread of its own (watch()): the receive thread can spend tens of
    milliseconds on one large frame, and a burst of connections must be hung up while it
    does. Bindings (speaks_for) belong to the receive thread; connections that ended reach it
    through a queue."""

    def __init__(self, sock: zmq.Socket[bytes], ceiling: int, listening: str,
                 zap: ZapHandler | None = None) -> None:
        self.ceiling = ceiling
        self.zap = zap
        self.monitor = sock.get_monitor_socket(_EVENTS)
        self.listening = local_key(listening)  # to hang up only our own connections
        self.live: dict[int, None] = {}  # descriptors, oldest first
        self.spoken: set[int] = set()  # of those, connections a frame came from
        self._hung: set[int] = set()  # hung up, not gone yet
        self.refused = 0  # connections hung up past the ceiling
        self.failed_handshakes = 0  # without the key, with the wrong one, or not ZeroMQ at all
        # Connections that ended having sent no frame, not hung up here: garbage, a greeting
        # cut short (ZeroMQ reports no failed handshake for those).
        self.ended_silent = 0
        self.accept_failures = 0
        self.peers: dict[bytes, Peer] = {}  # routing id -> the worker it speaks for
        self.owner: dict[str, bytes] = {}  # worker -> the routing id that speaks for it
        self._ended: deque[int] = deque()  # descriptors of connections gone, for the bindings
        self._warned_at = 0.0
        self._said_refused = False  # the first failed handshake is said, once
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def handshakes_failed(self) -> int:
        """Connections refused at their handshake: those ZeroMQ says failed one (less those
        hung up here: they fail too), or, where more, those that ended without a frame (a
        failed handshake ends its connection too, so the two overlap: the larger stands)."""
        return max(0, self.failed_handshakes - self.refused, self.ended_silent)

    # -- the monitor -------------------------------------------------------------------------
    def start(self) -> None:
        self._thread = threading.Thread(target=self.watch, name="workerscope-connections",
                                        daemon=True)
        self._thread.start()

    def watch(self) -> None:
        """The monitor thread: take events as they come, and answer the authenticator's
        questions (a handshake must not wait for the receive thread's frames), until
        close()."""
        poller = zmq.Poller()
        poller.register(self.monitor, zmq.POLLIN)
        if self.zap is not None:
            poller.register(self.zap.socket, zmq.POLLIN)
        while not self._stop.is_set():
            try:
                ready = dict(poller.poll(POLL_MS))
                if self.monitor in ready:
                    self.drain()
                if self.zap is not None and self.zap.socket in ready:
                    self.zap.handle()
            except zmq.ZMQError as err:  # never spin on an error that repeats
                self._warn(f"connection monitor: {err}")
                self._stop.wait(0.1)

    def drain(self) -> None:
        """Take every event the monitor has queued, without blocking."""
        while True:
            try:
                parts = self.monitor.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                return
            try:
                event = parse_monitor_message(parts)
            except (ValueError, IndexError, TypeError):
                continue
            kind, value = int(event["event"]), int(event["value"])
            if kind == zmq.EVENT_ACCEPTED:
                self.live[value] = None
                if len(self.live) - len(self._hung) > self.ceiling:
                    self._refuse_one(value)
            elif kind == zmq.EVENT_DISCONNECTED:
                if value in self.live and value not in self.spoken and value not in self._hung:
                    self.ended_silent += 1
                self.live.pop(value, None)
                self._hung.discard(value)
                self.spoken.discard(value)
                self._ended.append(value)
            elif kind & _HANDSHAKE_FAILED:
                self.failed_handshakes += 1
                if not self._said_refused and value not in self._hung:
                    self._said_refused = True
                    log.warning(KEY_REFUSED)
            elif kind == zmq.EVENT_ACCEPT_FAILED:
                self.accept_failures += 1
                self._warn(f"accept() failed: {os.strerror(value)} (descriptors run out?)")

    def _refuse_one(self, newest: int) -> None:
        """Past the ceiling: hang up the oldest connection that has sent nothing yet (idle
        connections must not lock out sidecars: a sidecar speaks as soon as it connects),
        else the newest."""
        victim = next((fd for fd in self.live if fd not in self.spoken and fd not in self._hung),
                      newest)
        self.refused += 1
        self._hung.add(victim)
        self._warn(f"{len(self.live)} connections, over the ceiling of {self.ceiling}: "
                   "hung up one that had sent nothing (counted in refused)")
        self.hang_up(victim)

    def hang_up(self, fd: int) -> None:
        """End the connection on descriptor `fd`, if it is one of ours, ZeroMQ's way: shut the
        socket down and let ZeroMQ see the peer leave and close the descriptor itself. No
        new descriptor is needed (not even a dup): this must work when they have run out."""
        if fd < 0:
            return
        try:
            sock = socket.socket(fileno=fd)
        except OSError:
            return  # closed meanwhile, or not a socket
        try:
            # The number may have been reused since the event: shut down only a connection
            # to our own address.
            if local_key(sock.getsockname()) == self.listening:
                sock.shutdown(socket.SHUT_RDWR)
        except OSError as err:
            if err.errno not in (errno.ENOTCONN, errno.ENOTSOCK, errno.EBADF):
                log.debug("hang up fd %d: %s", fd, err)
        finally:
            sock.detach()  # the descriptor stays ZeroMQ's to close

    def _warn(self, message: str) -> None:
        now = time.monotonic()
        if now - self._warned_at > 60:  # at most once a minute: a flood must not flood the log
            self._warned_at = now
            log.warning("%s", message)

    # -- who speaks for whom -----------------------------------------------------------------
    def speaks_for(self, routing_id: bytes, fd: int, worker: str) -> bool:
        """Whether a frame from this connection may speak for `worker`; binds a connection's
        first worker."""
        peer = self.peers.get(routing_id)
        if peer is not None:
            if peer.fd != fd and peer.worker == worker:  # the same socket, reconnected
                peer.fd = fd
                self.spoken.add(fd)
            return peer.worker == worker
        holder = self.owner.get(worker)
        if holder is not None and holder in self.peers:
            self.forget_ended()  # its connection may have ended just now
            if holder in self.peers:
                return False
        if len(self.peers) > 2 * self.ceiling + 1024:
            self._forget_dead()
        self.peers[routing_id] = Peer(worker, fd)
        self.spoken.add(fd)
        self.owner[worker] = routing_id
        return True

    def may_speak_for(self, routing_id: bytes, worker: str) -> bool:
        """Whether this connection speaks for no worker yet, or for this one (no binding made)."""
        peer = self.peers.get(routing_id)
        return peer is None or peer.worker == worker

    def fd_of(self, worker: str) -> int:
        holder = self.owner.get(worker)
        peer = self.peers.get(holder) if holder is not None else None
        return -1 if peer is None else peer.fd

    def forget_ended(self) -> None:
        """Let go of the bindings of connections that have ended (on the receive thread)."""
        ended = set()
        while self._ended:
            ended.add(self._ended.popleft())
        if ended:
            for routing_id in [r for r, p in self.peers.items() if p.fd in ended]:
                del self.peers[routing_id]

    def _forget_dead(self) -> None:
        """Bindings whose connection is no longer live (a missed event): let them go."""
        live = self.live.copy()  # the monitor thread's: copied in one step
        for routing_id in [r for r, p in self.peers.items() if p.fd not in live]:
            del self.peers[routing_id]

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        self.monitor.close(0)
        if self.zap is not None:
            self.zap.close()


def local_key(endpoint_or_name: object) -> str:
    """What identifies our listener in a socket's local name or in a bound endpoint: the port
    for TCP (an accepted connection's local host is the interface it came in on, not 0.0.0.0),
    the path for ipc."""
    name = endpoint_or_name
    if isinstance(name, tuple):
        return f"tcp:{name[1]}"
    if isinstance(name, bytes):
        name = name.decode(errors="replace")
    text = str(name)
    if text.startswith("tcp://"):
        return "tcp:" + text.rpartition(":")[2]
    return "ipc:" + text.removeprefix("ipc://")
