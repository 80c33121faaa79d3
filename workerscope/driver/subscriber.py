"""The driver's receiver: many sidecars, on many hosts, connect to one Subscriber.

A ROUTER socket bound once; each sidecar's DEALER connects to it (a DEALER queues frames until
the driver is there: no slow-joiner loss for workers that start first). A background thread owns
the socket (ZeroMQ sockets are not thread-safe), decodes frames, folds them into one Timeline,
counts frames lost per worker from gaps in their seq numbers, acknowledges each bye, and pings
each sidecar of another host to learn its clock offset (driver/clock.py). Live rows are kept in
driver/live.py, the async iterator in driver/frames.py.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import tempfile
import threading
import time
from collections.abc import AsyncIterator, Callable
from typing import Any, TypeGuard

import psutil
import zmq

from .. import protocol
from ..builder import TimelineBuilder
from ..errors import ProtocolError, WorkerscopeError
from ..procfs import boot_id
from ..protocol import Status
from ..timeline import Timeline, Worker
from .clock import ClockSync
from .frames import FrameFanout
from .live import LiveState

log = logging.getLogger("workerscope.driver")

POLL_MS = 100


class Subscriber:
    """Receive the frames of many workers. Use as a context manager.

        with Subscriber() as sub:
            pool.map(profiled(fn, mode="heavy", endpoint=sub.endpoint), items)
            sub.wait(jobs=len(items), timeout=60)
            sub.timeline().save("run.json")

    Three ways to follow frames as they come: `wait()` (blocking), `on_frame` (a callback run
    on the receive thread: keep it quick), and `async for frame in sub.frames()`.
    stale_after: seconds of silence after which a worker shows as "stale".
    """

    def __init__(self, address: str = "tcp://127.0.0.1:0",
                 on_frame: Callable[[protocol.Frame], None] | None = None,
                 stale_after: float = 10.0, receive_queue: int = 100_000) -> None:
        self.address = address
        self.on_frame = on_frame
        self.stale_after = stale_after
        self.receive_queue = receive_queue
        self.endpoint = ""
        self.lost: dict[str, int] = {}
        self.received: dict[str, int] = {}
        self.dropped: dict[str, int] = {}  # frames each sidecar could not queue (it says so)
        self.bad_frames = 0
        self.callback_errors = 0
        self.last_error: str | None = None
        self.jobs_started = 0
        self.jobs_ended = 0
        self._next_seq: dict[str, int] = {}
        self._last_seen: dict[str, float] = {}
        self._clocks = ClockSync()
        self._no_ping: set[str] = set()  # light workers: no sidecar to answer a ping
        self._pending_ack: dict[str, tuple[bytes, int]] = {}  # worker -> (identity, bye's seq)
        self._live = LiveState()
        self._fanout = FrameFanout()
        self._boot = boot_id()
        self._host = socket.gethostname()
        self._builder = TimelineBuilder()
        self._cond = threading.Condition()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._ctx: zmq.Context[zmq.Socket[bytes]] | None = None
        self._sock: zmq.Socket[bytes] | None = None
        self._tmpdir: str | None = None

    @property
    def iterator_dropped(self) -> int:
        """Frames an async consumer of frames() fell too far behind to be given."""
        return self._fanout.dropped

    # -- lifecycle ---------------------------------------------------------------------------
    def start(self) -> Subscriber:
        if self._thread is not None:
            return self
        ctx: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
        sock = ctx.socket(zmq.ROUTER)
        sock.setsockopt(zmq.LINGER, 0)
        sock.setsockopt(zmq.MAXMSGSIZE, protocol.MAX_FRAME_BYTES)
        # Bounded: past this many frames waiting here, ZeroMQ stops reading the sockets, the
        # sidecars' queues fill, and they drop and count rather than block their workers.
        sock.setsockopt(zmq.RCVHWM, self.receive_queue)
        address = self.address
        if address.startswith("tcp://") and address.endswith(":0"):
            address = address[:-2] + ":*"  # ZeroMQ's spelling of "any free port"
        if address in ("ipc://", "ipc://*"):
            self._tmpdir = tempfile.mkdtemp(prefix="workerscope-")  # 0700: only we can reach in
            address = f"ipc://{self._tmpdir}/driver.sock"
        try:
            sock.bind(address)
        except zmq.ZMQError as err:
            sock.close(0)
            ctx.term()
            self._remove_tmpdir()
            raise WorkerscopeError(
                f"cannot listen on {self.address!r}: {err}; give another address, e.g. "
                "tcp://127.0.0.1:0 for any free port") from err
        self.endpoint = sock.getsockopt_string(zmq.LAST_ENDPOINT)
        if self.endpoint.startswith("ipc://"):
            os.chmod(self.endpoint[len("ipc://"):], 0o600)  # the socket file takes the umask
        self._ctx, self._sock = ctx, sock
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, args=(sock,),
                                        name="workerscope-subscriber", daemon=True)
        self._thread.start()
        return self

    def close(self) -> None:
        if self._thread is not None:
            self._stop.set()
            self._thread.join()
            self._thread = None
        if self._sock is not None:
            self._sock.close(0)
            self._sock = None
        if self._ctx is not None:
            self._ctx.term()
            self._ctx = None
        self._remove_tmpdir()
        self._fanout.close()

    def _remove_tmpdir(self) -> None:
        if self._tmpdir is not None:
            for name in os.listdir(self._tmpdir):
                os.unlink(os.path.join(self._tmpdir, name))
            os.rmdir(self._tmpdir)
            self._tmpdir = None

    def __enter__(self) -> Subscriber:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- queries -----------------------------------------------------------------------------
    def wait(self, jobs: int | None = None, timeout: float | None = None,
             byes: int | None = None, started: int | None = None) -> bool:
        """Block until `jobs` jobs have ended, `started` jobs have started and `byes` workers
        have said bye (each when given). False on timeout."""
        def done() -> bool:
            ok = jobs is None or self.jobs_ended >= jobs
            ok = ok and (started is None or self.jobs_started >= started)
            if byes is not None:
                said_bye = sum(w.status != Status.RUNNING for w in self._builder.t.workers.values())
                ok = ok and said_bye >= byes
            return ok

        with self._cond:
            return self._cond.wait_for(done, timeout)

    def states(self) -> dict[str, str]:
        """Each worker's status now: what its bye said, else running, stale (silent for over
        stale_after s) or dead (its processes are gone from this host and it never said bye)."""
        now = time.monotonic()
        with self._cond:
            out: dict[str, str] = {}
            for wid, w in self._builder.t.workers.items():
                status = w.status
                if status == Status.RUNNING:
                    if self._local(w) and not any(psutil.pid_exists(p) for p in
                                                  (w.pid, w.sidecar_pid) if p):
                        status = Status.DEAD
                    elif now - self._last_seen.get(wid, now) > self.stale_after:
                        status = Status.STALE
                out[wid] = status
            return out

    def clock_offsets(self) -> dict[str, tuple[int, int | None]]:
        """worker -> (ns its clock runs ahead of ours, error bound: half the best round trip)."""
        with self._cond:
            return self._clocks.offsets()

    def timeline(self) -> Timeline:
        """The merged timeline of every worker seen so far, on this driver's clock."""
        states = self.states()
        with self._cond:  # only copies under the lock: frames keep flowing while we build
            clocks = self._clocks.offsets()
            snapshot = self._builder.snapshot()
            lost, dropped = dict(self.lost), dict(self.dropped)
        t = self._builder.finish(snapshot, {wid: offset for wid, (offset, _) in clocks.items()})
        for wid, w in t.workers.items():
            w.lost = lost.get(wid, 0)
            w.dropped = max(w.dropped, dropped.get(wid, 0))
            w.status = states.get(wid, w.status)
            if wid in clocks:
                w.clock_offset_ns, w.clock_error_ns = clocks[wid]
        return t

    def frames(self, maxsize: int = 10_000) -> AsyncIterator[protocol.Frame]:
        """Every frame from now on, as an async iterator (`async for f in sub.frames()`),
        ending when the Subscriber closes. Call it inside a running event loop. A consumer
        that falls maxsize frames behind loses the newest (counted in iterator_dropped)
        rather than slowing the receive thread."""
        return self._fanout.subscribe(asyncio.get_running_loop(), maxsize)

    def live(self) -> list[dict[str, object]]:
        """One row per worker for a live view: host, pid, status, current job and last span,
        CPU, RSS, GPU use, frames lost, and whether its running job is a straggler (by
        `workerscope.timeline.is_straggler` against the jobs done so far)."""
        states = self.states()
        with self._cond:
            return self._live.rows(self._builder.t.workers, states, self.lost, self.dropped,
                                   time.monotonic())

    # -- the receive thread ------------------------------------------------------------------
    def _run(self, sock: zmq.Socket[bytes]) -> None:
        while not self._stop.is_set():
            if not sock.poll(POLL_MS, zmq.POLLIN):
                continue
            while True:
                try:
                    parts = sock.recv_multipart(zmq.NOBLOCK)
                except zmq.Again:
                    break
                self._handle(sock, parts)

    def _handle(self, sock: zmq.Socket[bytes], parts: list[bytes]) -> None:
        if len(parts) != 2:
            self._bad(f"expected [identity, frame], got {len(parts)} parts")
            return
        identity, data = parts
        try:
            frame = protocol.decode_frame(data)
        except ProtocolError as err:
            self._bad(str(err))
            return
        with self._cond:
            self._count(frame)  # it arrived, even if its body turns out malformed
            try:
                self._builder.add(frame)
                if frame.kind == protocol.PONG:
                    self._on_pong(frame)
            except ProtocolError as err:
                self.bad_frames += 1
                self.last_error = str(err)
                return
            self._live.note(frame, time.monotonic())
            if frame.kind == protocol.HELLO and frame.body.get("mode") == "light":
                self._no_ping.add(frame.worker)
            if frame.kind == protocol.JOB_START:
                self.jobs_started += 1
            elif frame.kind == protocol.JOB_END:
                self.jobs_ended += 1
            elif frame.kind == protocol.HEARTBEAT:
                self.dropped[frame.worker] = _int(frame.body.get("dropped"))
            if frame.kind in (protocol.JOB_START, protocol.JOB_END, protocol.BYE):
                self._cond.notify_all()  # what wait() waits for; not every sample
            self._reply(sock, identity, frame)
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
        self.received[wid] = self.received.get(wid, 0) + 1
        expected = self._next_seq.get(wid, 0)
        if frame.seq > expected:
            self.lost[wid] = self.lost.get(wid, 0) + frame.seq - expected
        self._next_seq[wid] = max(expected, frame.seq + 1)
        self.lost.setdefault(wid, 0)

    def _bad(self, why: str) -> None:
        with self._cond:
            self.bad_frames += 1
            self.last_error = why


def _is_int(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


def _int(value: object) -> int:
    return value if _is_int(value) else 0
