"""The receive thread of a Subscriber: frames in, folded into the timeline and live state.

A mixin of Subscriber (subscriber.py holds the sockets, the lifecycle and the queries; this, what
happens to each frame). It runs on the receive thread, which alone owns the ROUTER socket;
everything it changes is read by the queries under `_cond`. Each frame is decoded (bounded),
checked against the connection that sent it (connections.py), counted, held if its worker's
clock anchor is not known yet (late.py), folded into the live state (a TimelineBuilder that
keeps workers and open jobs only), appended to the record file within max_kept_bytes
(record.py), answered (acks, clock pings) and handed to on_frame and frames(). About once a
second the driver's own facts (clocks, loss, states) join the record too.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any, TypeGuard

import zmq

from .. import protocol
from ..builder import TimelineBuilder
from ..errors import ProtocolError
from ..record import FACTS, Facts, RecordWriter
from ..timeline import Worker
from . import late
from .clock import ClockSync
from .connections import Connections
from .frames import FrameFanout
from .live import LiveState

log = logging.getLogger("workerscope.driver")

POLL_MS = 100
BATCH = 256  # frames taken per round before the held frames get their turn
MAX_OPEN_JOBS = 10_000  # per worker
MAX_WORKER_ID = 512  # characters
FACTS_S = 1.0  # the driver's facts go to the record this often
LIVE_EVERY = 0.2  # seconds: how often the live view takes a worker's sample
_KEPT_KINDS = frozenset({protocol.SAMPLE, protocol.SPANS, protocol.MARK, protocol.JOB_START,
                         protocol.JOB_END})


class FrameReceiver:
    """What the receive thread does with frames; its state is made by Subscriber.__init__."""

    on_frame: Callable[[protocol.Frame], None] | None
    stale_after: float
    max_workers: int
    max_kept_bytes: int | None
    max_frame_bytes: int
    lost: dict[str, int]
    received: dict[str, int]
    dropped: dict[str, int]
    bad_frames: int
    callback_errors: int
    loop_errors: int
    last_error: str | None
    jobs_started: int
    jobs_ended: int
    _refused: dict[str, int]
    _not_kept: dict[str, int]
    _kept: int
    _next_seq: dict[str, int]
    _last_seen: dict[str, float]
    _last_wall: dict[str, int]
    _anchored: set[str]  # workers whose clock anchor is known (or will never be)
    _introduced: set[str]  # workers whose hello was folded in (its own, or a heartbeat's)
    _unanchored: late.Unanchored
    _clocks: ClockSync
    _no_ping: set[str]
    _pending_ack: dict[str, tuple[bytes, int]]
    _live: LiveState
    _fanout: FrameFanout
    _boot: str
    _host: str
    _builder: TimelineBuilder
    _record: RecordWriter | None
    _live_read: dict[str, float]  # worker -> when the live view last read its sample
    _cond: threading.Condition
    _stop: threading.Event

    def _facts(self) -> Facts:
        """What this driver knows that no frame says; made by Subscriber."""
        raise NotImplementedError

    def _run(self, sock: zmq.Socket[bytes], conns: Connections) -> None:
        poller = zmq.Poller()
        poller.register(sock, zmq.POLLIN)
        backoff = 0.0
        facts_due = time.monotonic() + FACTS_S
        while not self._stop.is_set():
            try:
                if time.monotonic() >= facts_due:
                    facts_due = time.monotonic() + FACTS_S
                    self._write_facts()
                ready = dict(poller.poll(POLL_MS))
                conns.forget_ended()
                if sock in ready:
                    for _ in range(BATCH):
                        try:
                            # The routing id as a zmq.Frame (it knows the descriptor it came
                            # on), the frame as bytes: two recv() calls cost a third of one
                            # recv_multipart(). The parts of a message arrive together.
                            identity = sock.recv(zmq.NOBLOCK, copy=False)
                        except zmq.Again:
                            break
                        self._handle(sock, conns, identity, self._rest(sock, identity))
                self._release(self._unanchored.expired(time.monotonic()))
                backoff = 0.0
            except Exception as err:  # noqa: BLE001 - the receive thread must outlive any one error
                # Never spin on an error that repeats (descriptors run out, say): wait longer
                # each time, up to a second, and say so once a minute at most.
                backoff = min(1.0, max(0.01, backoff * 2))
                with self._cond:
                    self.loop_errors += 1
                    self.last_error = f"receive loop: {err!r}"
                    first = self.loop_errors == 1
                if first or self.loop_errors % 1000 == 0:
                    log.warning("receive loop error (counted in loop_errors): %r", err)
                self._stop.wait(backoff)

    @staticmethod
    def _rest(sock: zmq.Socket[bytes], identity: zmq.Frame) -> list[bytes]:
        """The parts of a message after its routing id: one, from a sidecar."""
        parts = []
        more = identity.more
        while more:
            parts.append(sock.recv(zmq.NOBLOCK))
            more = bool(sock.getsockopt(zmq.RCVMORE))
        return parts

    def _handle(self, sock: zmq.Socket[bytes], conns: Connections, ident: zmq.Frame,
                parts: list[bytes]) -> None:
        if len(parts) != 1:
            self._bad(f"expected [identity, frame], got {len(parts) + 1} parts")
            conns.hang_up(_srcfd(ident))  # no sidecar sends those: a flood, most likely
            return
        identity, data = ident.bytes, parts[0]
        try:
            frame = self._decode(data)
        except ProtocolError as err:
            self._bad(str(err))
            return
        wid = frame.worker
        if len(wid) > MAX_WORKER_ID:
            self._bad(f"worker id of {len(wid)} characters (at most {MAX_WORKER_ID})")
            return
        with self._cond:
            if wid not in self.received and len(self.received) >= self.max_workers:
                self._refuse("workers", f"a worker past max_workers={self.max_workers}")
                return
            silent = time.monotonic() - self._last_seen.get(wid, 0.0) > self.stale_after
            if not conns.speaks_for(identity, _srcfd(ident), wid, silent):
                self._refuse("identity", f"a frame for {wid!r:.100} from a connection that "
                                         "speaks for another worker")
                return
            self._count(frame)  # it arrived, even if its body turns out malformed
            if wid not in self._anchored and late.needs_anchor(frame):
                overflow = self._unanchored.hold(wid, data, time.monotonic())
                folded, held = False, []
            else:
                folded = self._fold(frame, data)
                if folded:
                    self._reply(sock, identity, frame)
                overflow = []
                held = self._unanchored.release(wid) if wid in self._anchored else []
        if folded:
            self._deliver(frame)
        self._release([*overflow, (wid, held)])

    def _decode(self, data: bytes) -> protocol.Frame:
        """The frame, its body decoded only if someone reads it now. A sample's body is
        read by on_frame, frames() and the live view (which takes a worker's sample
        LIVE_EVERY s at most); the rest of them go to the record as they came, and are
        checked whole when a timeline is built from it."""
        if self.on_frame is not None or self._fanout.active:
            return protocol.decode_frame(data, self.max_frame_bytes)  # every body is read
        frame = protocol.peek_frame(data, self.max_frame_bytes)
        if frame.kind != protocol.SAMPLE:
            return protocol.decode_frame(data, self.max_frame_bytes)
        now = time.monotonic()
        if now - self._live_read.get(frame.worker, -LIVE_EVERY) >= LIVE_EVERY:
            self._live_read[frame.worker] = now
            return protocol.decode_frame(data, self.max_frame_bytes)
        return frame

    def _fold(self, frame: protocol.Frame, data: bytes | None) -> bool:
        """Fold one frame into the live state and the record (under the lock); `data` is
        the frame as received, None for one this driver made. False if it was malformed or
        refused. A heartbeat of a worker not known yet tells who it is."""
        wid, kind = frame.worker, frame.kind
        if kind == protocol.JOB_START and self._live.open_jobs(wid) >= MAX_OPEN_JOBS:
            self._refuse("open_jobs", f"{wid!r:.100} has {MAX_OPEN_JOBS} jobs open already")
            return False
        keep = not (kind in _KEPT_KINDS and self.max_kept_bytes is not None
                    and self._kept >= self.max_kept_bytes)
        try:
            if keep:
                self._builder.add(frame)
                if data is None:
                    data = protocol.encode_frame(kind, wid, frame.seq, frame.body)
                if self._record is not None and self._record.append(data):
                    self._kept += len(data)
            else:
                self._refuse("kept", f"max_kept_bytes={self.max_kept_bytes} reached")
                self._not_kept[wid] = self._not_kept.get(wid, 0) + 1
            if kind == protocol.PONG:
                self._on_pong(frame)
        except ProtocolError as err:
            self.bad_frames += 1
            self.last_error = str(err)
            return False
        if kind == protocol.HELLO:
            self._anchored.add(wid)
            self._introduced.add(wid)
            if frame.body.get("mode") == "light":
                self._no_ping.add(wid)
        elif kind == protocol.JOB_START and frame.body.get("anchor"):
            self._anchored.add(wid)
        if keep or kind in (protocol.JOB_START, protocol.JOB_END):  # live rows need every job
            self._live.note(frame, time.monotonic())
        if kind == protocol.JOB_START:
            self.jobs_started += 1
        elif kind == protocol.JOB_END:
            self.jobs_ended += 1
        elif kind == protocol.HEARTBEAT:
            self.dropped[wid] = _int(frame.body.get("dropped"))
            if wid not in self._introduced:
                self._join_late(frame)
        if kind in (protocol.JOB_START, protocol.JOB_END, protocol.BYE):
            self._cond.notify_all()  # what wait() waits for; not every sample
        return True

    def _join_late(self, heartbeat: protocol.Frame) -> None:
        """A worker that said hello before this driver listened: its heartbeat says who it
        is, and which of its jobs are open (they began before this driver)."""
        hello, starts = late.from_heartbeat(heartbeat)
        if hello is None or not self._fold(hello, None):
            return
        first = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime())
        notes = self._builder.worker(heartbeat.worker).notes
        notes.append(f"this driver started after the worker: first heard from it at {first}; "
                     "what it sent before then went to no driver here")
        live = self._live.workers.get(heartbeat.worker)
        known = live.jobs if live is not None else {}  # those whose start came already
        for start in starts:
            if _int(start.body.get("job")) not in known and self._fold(start, None):
                notes.append(f"job {start.body.get('name')!s:.200} ({start.body.get('job')}) "
                             "began before this driver: its frames from before are not here")

    def _release(self, batches: list[tuple[str, list[bytes]]]) -> None:
        """Fold held frames, in order: their worker's anchor is known now, or they waited
        long enough (then they are folded as they are)."""
        for _, frames in batches:
            for data in frames:
                try:
                    frame = protocol.decode_frame(data, self.max_frame_bytes)
                except ProtocolError:
                    continue  # decoded once already: cannot fail
                with self._cond:
                    self._anchored.add(frame.worker)  # no anchor coming: stop holding
                    folded = self._fold(frame, data)
                if folded:
                    self._deliver(frame)

    def _reply(self, sock: zmq.Socket[bytes], identity: bytes, frame: protocol.Frame) -> None:
        """Acknowledge a bye, and ping a sidecar whose clock is not known well enough yet."""
        wid = frame.worker
        if frame.kind == protocol.BYE:
            if self._wants_ping(wid):
                # A short-lived worker: finish its clock estimate first (the sidecar answers
                # pings while it waits for this ack), then let it go.
                self._pending_ack[wid] = (identity, frame.seq)
                self._ping(sock, identity, wid)
            else:
                self._send(sock, identity, protocol.ACK, {"seq": frame.seq})
        elif frame.kind in (protocol.HELLO, protocol.HEARTBEAT) or (
                frame.kind == protocol.PONG and self._wants_ping(wid)):
            self._ping(sock, identity, wid)
        elif frame.kind == protocol.PONG and wid in self._pending_ack:
            ack_to, seq = self._pending_ack.pop(wid)
            self._send(sock, ack_to, protocol.ACK, {"seq": seq})

    def _deliver(self, frame: protocol.Frame) -> None:
        callback = self.on_frame  # read once: the user may set it to None meanwhile
        if callback is not None:
            try:
                callback(frame)
            except Exception as err:  # noqa: BLE001 - a user's callback must not stop the receive thread
                with self._cond:
                    self.callback_errors += 1
                    self.last_error = f"on_frame: {err!r}"
                    first = self.callback_errors == 1
                if first:  # once: a callback that fails on every frame would flood the log
                    log.warning("on_frame callback failed (counted in callback_errors from "
                                "now on): %r", err)
        self._fanout.publish(frame)

    def _send(self, sock: zmq.Socket[bytes], identity: bytes, kind: str,
              body: dict[str, Any]) -> None:
        try:
            sock.send_multipart([identity, protocol.encode_frame(kind, "driver", 0, body)],
                                zmq.NOBLOCK)
        except zmq.ZMQError as err:  # the sidecar is gone already; it counts its own loss
            self.last_error = f"{kind} to a sidecar: {err}"

    # -- clocks ------------------------------------------------------------------------------
    def _local(self, w: Worker) -> bool:
        """Whether this worker runs on this host, in this boot: then it shares our clocks."""
        return bool(w.boot_id) and w.boot_id == self._boot and w.host == self._host

    def _pingable(self, wid: str) -> bool:
        # One host, one clock; and a light worker has no sidecar to answer.
        w = self._builder.t.workers.get(wid)
        return wid not in self._no_ping and not (w is not None and self._local(w))

    def _wants_ping(self, wid: str) -> bool:
        return self._pingable(wid) and self._clocks.wants(wid)

    def _ping(self, sock: zmq.Socket[bytes], identity: bytes, wid: str) -> None:
        if self._pingable(wid):
            self._send(sock, identity, protocol.PING, self._clocks.ping(wid))

    def _on_pong(self, frame: protocol.Frame) -> None:
        ping_id, t1 = frame.body.get("id"), frame.body.get("t1")
        if not (_is_int(ping_id) and _is_int(t1)):
            raise ProtocolError(f"malformed pong frame from {frame.worker}: id and t1 must be "
                                "integers")
        self._clocks.pong(frame.worker, ping_id, t1)

    # -- bookkeeping -------------------------------------------------------------------------
    def _count(self, frame: protocol.Frame) -> None:
        wid = frame.worker
        self._last_seen[wid] = time.monotonic()
        self._last_wall[wid] = time.time_ns()
        self.received[wid] = self.received.get(wid, 0) + 1
        if wid not in self._next_seq and frame.seq > 0 and frame.kind != protocol.HELLO:
            # This driver started after the worker: what came before went to no driver here.
            self._next_seq[wid] = frame.seq
        expected = self._next_seq.get(wid, 0)
        if frame.seq > expected:
            self.lost[wid] = self.lost.get(wid, 0) + frame.seq - expected
        self._next_seq[wid] = max(expected, frame.seq + 1)
        self.lost.setdefault(wid, 0)

    def _write_facts(self) -> None:
        if self._record is not None:
            self._record.append(self._facts().encode(), FACTS)

    def _refuse(self, why: str, message: str) -> None:
        """Count a refused frame (under the lock); warn on the first of each reason."""
        self._refused[why] += 1
        self.last_error = f"refused: {message}"
        if self._refused[why] == 1:
            log.warning("refused %s (counted in refused[%r] from now on)", message, why)

    def _bad(self, why: str) -> None:
        with self._cond:
            self.bad_frames += 1
            self.last_error = why


def _srcfd(part: zmq.Frame) -> int:
    """The descriptor of the connection a message came from (ZMQ_SRCFD), -1 if unknown."""
    try:
        return int(part.get(zmq.SRCFD))
    except (zmq.ZMQError, ValueError, TypeError):
        return -1


def _is_int(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


def _int(value: object) -> int:
    return value if _is_int(value) else 0
