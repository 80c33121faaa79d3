"""What the receive thread of a Subscriber does with each frame.

A Receiver is made by the Subscriber with what it works with (the receive state it alone
changes, the frame fanout, the held frames of unanchored workers, on_frame) and run on the
receive thread, which alone owns the ROUTER socket. Each frame is decoded (bounded), checked
against the connection that sent it (connections.py), counted, held if its worker's clock
anchor is not known yet (late.py), folded into the live state (a TimelineBuilder that keeps
workers and open jobs only), appended to the record file within max_kept_bytes (record.py),
answered (acks, clock pings: replies.py) and handed to on_frame and frames(). All it counts
and knows is a ReceiveState (state.py), changed under its lock, which the Subscriber's
queries read copies of. About once a second the driver's own facts (clocks, loss, states)
join the record too.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import threading
import time
from collections.abc import Callable

import zmq

from .. import protocol
from ..errors import ProtocolError
from . import late, otlp
from .connections import Connections
from .frames import FrameFanout
from .replies import _send as replies_send
from .replies import is_int
from .state import ReceiveState

log = logging.getLogger("workerscope.driver")

POLL_MS = 100
BATCH = 256  # frames taken per round before the held frames get their turn
MAX_OPEN_JOBS = 10_000  # per worker
MAX_WORKER_ID = 512  # characters
FACTS_S = 1.0  # the driver's facts go to the record this often
LIVE_EVERY = 0.2  # seconds: how often the live view takes a worker's sample
# A worker that sent more than PROGRESS_FRAMES frames or PROGRESS_BYTES in PROGRESS_S is told
# its frames are being read (_read_so_far).
PROGRESS_S = 1.0
# At max_workers, workers gone and done are let go of this many at a time at most (and a
# sixteenth of max_workers at most); when none is, the next look is ROOM_EVERY_S later.
ROOM_BATCH = 256
ROOM_EVERY_S = 1.0
PROGRESS_FRAMES = 8
PROGRESS_BYTES = 64 * 1024
_KEPT_KINDS = frozenset({protocol.SAMPLE, protocol.SPANS, protocol.MARK, protocol.JOB_START,
                         protocol.JOB_END})
_JOB_KINDS = frozenset({protocol.JOB_START, protocol.JOB_END})

OnFrame = Callable[[protocol.Frame], None]


class Receiver:
    """The receive thread of one Subscriber (`run`), and the state it owns."""

    def __init__(self, state: ReceiveState, fanout: FrameFanout, unanchored: late.Unanchored,
                 on_frame: OnFrame | None = None) -> None:
        self.state = state
        self.on_frame = on_frame
        self._limits = state.limits
        self._builder = state.builder
        self._live = state.live
        self._replies = state.replies
        self._fanout = fanout
        self._unanchored = unanchored
        limits = state.limits
        self._max_kept = math.inf if limits.max_kept_bytes is None else limits.max_kept_bytes
        self._live_read: dict[str, float] = {}  # worker -> when the live view last read its sample
        self.export: otlp.LiveOtlp | None = None  # the live OTLP export, while one runs
        # worker -> (when its frames were last acknowledged as read, frames and bytes since)
        self._progress: dict[str, tuple[float, int, int]] = {}
        self._room_at = -math.inf  # when room for new workers was last looked for, in vain
        self._let_go_said = False
        # What folding a frame of each kind changes besides the builder and the live state.
        self._folded: dict[str, Callable[[protocol.Frame], None]] = {
            protocol.HELLO: self._hello, protocol.JOB_START: self._job_start,
            protocol.JOB_END: self._job_end, protocol.HEARTBEAT: self._heartbeat,
            protocol.BYE: self._bye, protocol.MARK: self._mark}

    # -- the receive thread ------------------------------------------------------------------
    def run(self, sock: zmq.Socket[bytes], conns: Connections, stop: threading.Event) -> None:
        # A pipe the askers of stacks write a byte to, so that a request leaves at once, not
        # at the poll's next timeout (ReceiveState.stacks).
        wake_r, wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        with self.state.cond:
            self.state.wake_fd = wake_w
        try:
            self._loop(sock, conns, stop, wake_r)
        finally:
            with self.state.cond:
                self.state.wake_fd = None
            os.close(wake_r)
            os.close(wake_w)

    def _loop(self, sock: zmq.Socket[bytes], conns: Connections, stop: threading.Event,
              wake: int) -> None:
        poller = zmq.Poller()
        poller.register(sock, zmq.POLLIN)
        poller.register(wake, zmq.POLLIN)
        backoff = 0.0
        facts_due = time.monotonic() + FACTS_S
        while not stop.is_set():
            try:
                if time.monotonic() >= facts_due:
                    facts_due = time.monotonic() + FACTS_S
                    self.state.write_facts()
                    self.state.ask_stragglers(time.monotonic())
                ready = dict(poller.poll(POLL_MS))
                conns.forget_ended()
                if wake in ready:
                    with contextlib.suppress(BlockingIOError):  # emptied already
                        os.read(wake, 4096)
                if self.state.stacks_asked:
                    self._ask_stacks(sock, conns)
                if sock in ready:
                    for _ in range(BATCH):
                        try:
                            # The routing id as a zmq.Frame (it knows the descriptor it came
                            # on), the frame as bytes: two recv() calls cost a third of one
                            # recv_multipart(). The parts of a message arrive together.
                            identity = sock.recv(zmq.NOBLOCK, copy=False)
                        except zmq.Again:
                            break
                        self._handle(sock, conns, identity, _rest(sock, identity))
                self._release(self._unanchored.expired(time.monotonic()))
                backoff = 0.0
            except Exception as err:  # noqa: BLE001 - the receive thread must outlive any one error
                # Never spin on an error that repeats (descriptors run out, say): wait longer
                # each time, up to a second, and say so once a minute at most.
                backoff = min(1.0, max(0.01, backoff * 2))
                st = self.state
                with st.cond:
                    st.loop_errors += 1
                    st.last_error = f"receive loop: {err!r}"
                    errors = st.loop_errors
                if errors == 1 or errors % 1000 == 0:
                    log.warning("receive loop error (counted in loop_errors): %r", err)
                stop.wait(backoff)

    def _ask_stacks(self, sock: zmq.Socket[bytes], conns: Connections) -> None:
        """Send the stacks requests Subscriber.stacks queued, each to its worker's connection
        (the receive thread alone uses the socket)."""
        st = self.state
        with st.cond:
            asked = list(st.stacks_asked)
            st.stacks_asked.clear()
        for worker, request, reason in asked:
            holder = conns.owner.get(worker)
            error = None
            if holder is None or holder not in conns.peers:
                error = f"{worker!r:.100} has no connection to this driver"
            else:
                error = replies_send(sock, holder, protocol.STACKS,
                                     {"id": request, "reason": reason})
            if error is not None:
                with st.cond:
                    if request in st.stacks_waited:
                        st.stacks_got[request] = {"error": error, "processes": []}
                        st.cond.notify_all()

    def _handle(self, sock: zmq.Socket[bytes], conns: Connections, ident: zmq.Frame,
                parts: list[bytes]) -> None:
        # Whatever it sent, its handshake passed: never counted as a failed one at its end.
        fd = _srcfd(ident)
        conns.spoken.add(fd)
        if len(parts) != 1:
            self._bad(f"expected [identity, frame], got {len(parts) + 1} parts")
            conns.hang_up(fd)  # no sidecar sends those: a flood, most likely
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
        st = self.state
        with st.cond:
            now = time.monotonic()
            if wid not in st.received and len(st.received) >= self._limits.max_workers and (
                    not conns.may_speak_for(identity, wid) or not self._make_room(conns, now)):
                self._refuse("workers", f"a worker past max_workers={self._limits.max_workers}")
                return
            if not conns.speaks_for(identity, fd, wid):
                self._refuse("identity", f"a frame for {wid!r:.100} from a connection that "
                                         "speaks for another worker")
                return
            self._count(frame, now)  # it arrived, even if its body turns out malformed
            if wid not in st.anchored and late.needs_anchor(frame):
                overflow = self._unanchored.hold(wid, data, now)
                folded, held = False, []
            else:
                folded = self._fold(frame, data)
                if folded:
                    error = self._replies.answer(sock, identity, frame)
                    if error is not None:
                        st.last_error = error
                overflow = []
                held = self._unanchored.release(wid) if wid in st.anchored else []
        if folded:
            self._read_so_far(sock, identity, frame, len(data), now)
            self._deliver(frame)
        self._release([*overflow, (wid, held)])

    def _make_room(self, conns: Connections, now: float) -> bool:
        """At max_workers, let go of workers that are gone and done (ReceiveState.gone): a
        batch of ROOM_BATCH at most, so a run of short-lived workers costs one pass over the
        workers a batch; looked for at most once a ROOM_EVERY_S when none was found, so a
        flood of new ids costs no more. True if room was made."""
        if now - self._room_at < ROOM_EVERY_S:
            return False
        conns.forget_ended()

        def connected(wid: str) -> bool:
            return conns.owner.get(wid) in conns.peers

        st = self.state
        batch = max(1, min(ROOM_BATCH, self._limits.max_workers // 16))
        gone = [wid for wid in st.gone(now, connected) if wid not in self._unanchored][:batch]
        if not gone:
            self._room_at = now
            return False
        st.forget(gone)
        for wid in gone:
            self._live_read.pop(wid, None)
            self._progress.pop(wid, None)
            conns.owner.pop(wid, None)
            if self.export is not None:
                self.export.forget(wid)
        if not self._let_go_said:  # once: a day of short-lived workers does it all day
            self._let_go_said = True
            log.info("let go of %d worker(s) gone and done, to make room past max_workers=%d "
                     "(what they sent is in the record; counted in let_go from now on)",
                     len(gone), self._limits.max_workers)
        return True

    def _read_so_far(self, sock: zmq.Socket[bytes], identity: bytes, frame: protocol.Frame,
                     size: int, now: float) -> None:
        """Tell a busy worker's sidecar that its frames are being read (an ack of the seq
        just read), at most once a PROGRESS_S, as soon as PROGRESS_FRAMES frames or
        PROGRESS_BYTES came within one: a sidecar whose job has ended waits for its bye's
        ack as long as these come, so a driver behind a flood still gets every frame queued
        before the bye. A quiet worker gets none: it is never far behind."""
        if frame.kind == protocol.BYE or not is_int(frame.seq):
            return
        since, frames, nbytes = self._progress.get(frame.worker, (now, 0, 0))
        if now - since >= PROGRESS_S:
            since, frames, nbytes = now, 0, 0
        if frames >= 0:  # not told yet in this window
            frames, nbytes = frames + 1, nbytes + size
            if frames >= PROGRESS_FRAMES or nbytes >= PROGRESS_BYTES:
                replies_send(sock, identity, protocol.ACK, {"seq": frame.seq})
                frames = -1
        self._progress[frame.worker] = (since, frames, nbytes)

    def _decode(self, data: bytes) -> protocol.Frame:
        """The frame, its body decoded only if someone reads it now. A sample's body is
        read by on_frame, frames() and the live view (which takes a worker's sample
        LIVE_EVERY s at most); the rest of them go to the record as they came, and are
        checked whole when a timeline is built from it."""
        max_bytes = self._limits.max_frame_bytes
        if self.on_frame is not None or self._fanout.active:
            return protocol.decode_frame(data, max_bytes)  # every body is read
        frame = protocol.peek_frame(data, max_bytes)
        if frame.kind != protocol.SAMPLE:
            return protocol.decode_frame(data, max_bytes)
        now = time.monotonic()
        wid = frame.worker
        if now - self._live_read.get(wid, -LIVE_EVERY) >= LIVE_EVERY:
            # Remembered only for a worker already let in (this thread alone writes
            # `received`): a frame refused next, past max_workers or for its id, leaves no
            # trace here.
            if wid in self.state.received:
                self._live_read[wid] = now
            return protocol.decode_frame(data, max_bytes)
        return frame

    def _fold(self, frame: protocol.Frame, data: bytes | None) -> bool:
        """Fold one frame into the live state and the record (under the lock); `data` is
        the frame as received, None for one this driver made. False if it was malformed or
        refused."""
        wid, kind = frame.worker, frame.kind
        if kind == protocol.JOB_START and self._live.open_jobs(wid) >= MAX_OPEN_JOBS:
            self._refuse("open_jobs", f"{wid!r:.100} has {MAX_OPEN_JOBS} jobs open already")
            return False
        st = self.state
        keep = kind not in _KEPT_KINDS or st.kept < self._max_kept
        try:
            if keep:
                self._builder.add(frame)
                if data is None:
                    data = protocol.encode_frame(kind, wid, frame.seq, frame.body)
                if st.record is not None and st.record.append(data):
                    st.kept += len(data)
            else:
                self._refuse("kept", f"max_kept_bytes={self._limits.max_kept_bytes} reached")
                st.not_kept[wid] = st.not_kept.get(wid, 0) + 1
            if kind == protocol.PONG:
                self._replies.pong(frame)
        except ProtocolError as err:
            st.bad_frames += 1
            st.last_error = str(err)
            return False
        export = self.export
        if export is not None and kind in otlp.KINDS:
            export.put(kind, data if data is not None else
                       protocol.encode_frame(kind, wid, frame.seq, frame.body))
        ended = False
        if keep or kind in _JOB_KINDS:  # live rows need every job
            ended = self._live.note(frame, time.monotonic())
        after = self._folded.get(kind)
        # A job_end ends a job only if one was open: else wait(jobs=N) would count ends of
        # jobs never started (a forged frame, or one sent twice). Unless its start may have
        # been lost on the way (the worker lost or dropped frames, or starts were refused).
        if after is not None and (kind != protocol.JOB_END or ended or self._start_missing(wid)):
            after(frame)
        return True

    def _start_missing(self, wid: str) -> bool:
        st = self.state
        return bool(st.lost.get(wid) or st.dropped.get(wid) or st.refused["open_jobs"])

    # -- what a frame of each kind changes once folded (under the lock) ------------------------
    def _hello(self, frame: protocol.Frame) -> None:
        self.state.anchored.add(frame.worker)
        self.state.introduced.add(frame.worker)
        if frame.body.get("mode") == "light":
            self._replies.no_ping.add(frame.worker)

    def _job_start(self, frame: protocol.Frame) -> None:
        if frame.body.get("anchor"):
            self.state.anchored.add(frame.worker)
        self.state.jobs_started += 1
        self.state.cond.notify_all()  # what wait() waits for; not every sample

    def _job_end(self, frame: protocol.Frame) -> None:
        self.state.jobs_ended += 1
        self.state.cond.notify_all()

    def _bye(self, frame: protocol.Frame) -> None:
        self.state.cond.notify_all()

    def _mark(self, frame: protocol.Frame) -> None:
        """A dump of stacks someone is waiting for (Subscriber.stacks): handed over by its id,
        from the worker it was asked of only."""
        st = self.state
        for record in frame.body.get("records") or ():
            if (isinstance(record, (list, tuple)) and len(record) > 8
                    and record[4] == protocol.STACKS_MARK and isinstance(record[8], dict)):
                request = record[8].get("request")
                if is_int(request) and st.stacks_waited.get(request) == frame.worker:
                    st.stacks_got[request] = {**record[8], "worker": frame.worker}
                    st.cond.notify_all()

    def _heartbeat(self, frame: protocol.Frame) -> None:
        self.state.dropped[frame.worker] = _int(frame.body.get("dropped"))
        if frame.worker not in self.state.introduced:
            self._join_late(frame)

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
                    frame = protocol.decode_frame(data, self._limits.max_frame_bytes)
                except ProtocolError:
                    continue  # decoded once already: cannot fail
                with self.state.cond:
                    self.state.anchored.add(frame.worker)  # no anchor coming: stop holding
                    folded = self._fold(frame, data)
                if folded:
                    self._deliver(frame)

    def _deliver(self, frame: protocol.Frame) -> None:
        callback = self.on_frame  # read once: the user may set it to None meanwhile
        if callback is not None:
            try:
                callback(frame)
            except Exception as err:  # noqa: BLE001 - a user's callback must not stop the receive thread
                st = self.state
                with st.cond:
                    st.callback_errors += 1
                    st.last_error = f"on_frame: {err!r}"
                    first = st.callback_errors == 1
                if first:  # once: a callback that fails on every frame would flood the log
                    log.warning("on_frame callback failed (counted in callback_errors from "
                                "now on): %r", err)
        self._fanout.publish(frame)

    # -- bookkeeping (under the lock) --------------------------------------------------------
    def _count(self, frame: protocol.Frame, now: float) -> None:
        wid, seq, st = frame.worker, frame.seq, self.state
        st.last_seen[wid] = now
        st.last_wall[wid] = time.time_ns()
        st.received[wid] = st.received.get(wid, 0) + 1
        next_seq = st.next_seq
        if wid not in next_seq and seq > 0 and frame.kind != protocol.HELLO:
            # This driver started after the worker: what came before went to no driver here.
            next_seq[wid] = seq
        expected = next_seq.get(wid, 0)
        lost = st.lost.get(wid, 0)
        if seq > expected:
            lost += seq - expected
        st.lost[wid] = lost
        next_seq[wid] = max(expected, seq + 1)

    def _refuse(self, why: str, message: str) -> None:
        """Count a refused frame; warn on the first of each reason."""
        st = self.state
        st.refused[why] += 1
        st.last_error = f"refused: {message}"
        if st.refused[why] == 1:
            log.warning("refused %s (counted in refused[%r] from now on)", message, why)

    def _bad(self, why: str) -> None:
        st = self.state
        with st.cond:
            st.bad_frames += 1
            st.last_error = why


def _rest(sock: zmq.Socket[bytes], identity: zmq.Frame) -> list[bytes]:
    """The parts of a message after its routing id: one, from a sidecar."""
    parts = []
    more = identity.more
    while more:
        parts.append(sock.recv(zmq.NOBLOCK))
        more = bool(sock.getsockopt(zmq.RCVMORE))
    return parts


def _srcfd(part: zmq.Frame) -> int:
    """The descriptor of the connection a message came from (ZMQ_SRCFD), -1 if unknown."""
    try:
        return int(part.get(zmq.SRCFD))
    except (zmq.ZMQError, ValueError, TypeError):
        return -1


def _int(value: object) -> int:
    return value if is_int(value) else 0
