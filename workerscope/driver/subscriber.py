"""The driver's receiver: many sidecars, on many hosts, connect to one Subscriber.

A ROUTER socket bound once; each sidecar's DEALER connects to it (a DEALER queues frames until
the driver is there: no slow-joiner loss for workers that start first). A background thread owns
the socket (ZeroMQ sockets are not thread-safe), decodes frames, folds them into one Timeline,
counts frames lost per worker from gaps in their seq numbers, acknowledges each bye, and pings
each sidecar to learn its clock offset (Cristian's method, keeping the lowest-delay sample).
"""

from __future__ import annotations

import asyncio
import os
import socket
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from typing import AsyncIterator, Callable

import psutil
import zmq

from .. import protocol
from ..builder import TimelineBuilder
from ..errors import ProtocolError, WorkerscopeError
from ..procfs import boot_id
from ..timeline import Timeline

POLL_MS = 100
PINGS_AT_HELLO = 5


@dataclass
class _Clock:
    """The best (lowest round-trip) offset sample of one worker's clock."""

    offset_ns: int = 0
    delay_ns: int | None = None
    samples: int = 0


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
        self.iterator_dropped = 0
        self.last_error: str | None = None
        self.jobs_started = 0
        self.jobs_ended = 0
        self._next_seq: dict[str, int] = {}
        self._last_seen: dict[str, float] = {}
        self._clocks: dict[str, _Clock] = {}
        self._pings: dict[int, tuple[str, bytes, int]] = {}
        self._ping_ids = 0
        self._pending_ack: dict[str, tuple[bytes, int]] = {}
        self._latest: dict[str, dict] = {}
        self._no_ping: set[str] = set()
        self._closed = False
        self._job_seconds: list[float] = []
        self._boot = boot_id()
        self._host = socket.gethostname()
        self._builder = TimelineBuilder()
        self._cond = threading.Condition()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._ctx: zmq.Context | None = None
        self._sock: zmq.Socket | None = None
        self._tmpdir: str | None = None
        self._queues: list[tuple[asyncio.AbstractEventLoop, asyncio.Queue]] = []

    # -- lifecycle ---------------------------------------------------------------------------
    def start(self) -> "Subscriber":
        if self._thread is not None:
            return self
        self._ctx = zmq.Context()
        sock = self._ctx.socket(zmq.ROUTER)
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
            self._ctx.term()
            raise WorkerscopeError(f"cannot listen on {self.address!r}: {err}") from err
        self.endpoint = sock.getsockopt_string(zmq.LAST_ENDPOINT)
        if self.endpoint.startswith("ipc://"):
            os.chmod(self.endpoint[len("ipc://"):], 0o600)  # the socket file takes the umask
        self._sock = sock
        self._thread = threading.Thread(target=self._run, name="workerscope-subscriber",
                                        daemon=True)
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
        if self._tmpdir is not None:
            for name in os.listdir(self._tmpdir):
                os.unlink(os.path.join(self._tmpdir, name))
            os.rmdir(self._tmpdir)
            self._tmpdir = None
        self._closed = True
        for entry in list(self._queues):
            self._call(entry, self._end_queue)

    def __enter__(self) -> "Subscriber":
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
                ok = ok and sum(w.status != "running" for w in self._builder.t.workers.values()) >= byes
            return ok

        with self._cond:
            return self._cond.wait_for(done, timeout)

    def states(self) -> dict[str, str]:
        """Each worker's status now: what its bye said, else running, stale (silent for over
        stale_after s) or dead (its processes are gone from this host and it never said bye)."""
        now = time.monotonic()
        with self._cond:
            out = {}
            for wid, w in self._builder.t.workers.items():
                status = w.status
                if status == "running":
                    if self._local(w) and not any(psutil.pid_exists(p) for p in
                                                  (w.pid, w.sidecar_pid) if p):
                        status = "dead"
                    elif now - self._last_seen.get(wid, now) > self.stale_after:
                        status = "stale"
                out[wid] = status
            return out

    def _local(self, w) -> bool:  # type: ignore[no-untyped-def]
        return bool(w.boot_id) and w.boot_id == self._boot and w.host == self._host

    def clock_offsets(self) -> dict[str, tuple[int, int | None]]:
        """worker -> (ns its clock runs ahead of ours, error bound: half the best round trip)."""
        with self._cond:
            return {wid: (c.offset_ns, None if c.delay_ns is None else c.delay_ns // 2)
                    for wid, c in self._clocks.items()}

    def timeline(self) -> Timeline:
        """The merged timeline of every worker seen so far, on this driver's clock."""
        states = self.states()
        with self._cond:  # only copies under the lock: frames keep flowing while we build
            offsets = {wid: c.offset_ns for wid, c in self._clocks.items()}
            snapshot = self._builder.snapshot()
            lost, dropped = dict(self.lost), dict(self.dropped)
            clocks = {wid: (c.offset_ns, c.delay_ns) for wid, c in self._clocks.items()}
        t = self._builder.finish(snapshot, offsets)
        for wid, w in t.workers.items():
            w.lost = lost.get(wid, 0)
            w.dropped = max(w.dropped, dropped.get(wid, 0))
            w.status = states.get(wid, w.status)
            if wid in clocks:
                w.clock_offset_ns, d = clocks[wid]
                w.clock_error_ns = None if d is None else d // 2
        return t

    def frames(self, maxsize: int = 10_000) -> AsyncIterator[protocol.Frame]:
        """Every frame from now on, as an async iterator (`async for f in sub.frames()`),
        ending when the Subscriber closes. Call it inside a running event loop. A consumer
        that falls maxsize frames behind loses the newest (counted in iterator_dropped)
        rather than slowing the receive thread."""
        return _FrameQueue(self, asyncio.get_running_loop(), maxsize)

    # -- the receive thread ------------------------------------------------------------------
    def _run(self) -> None:
        assert self._sock is not None
        sock = self._sock
        while not self._stop.is_set():
            if not sock.poll(POLL_MS, zmq.POLLIN):
                continue
            while True:
                try:
                    parts = sock.recv_multipart(zmq.NOBLOCK)
                except zmq.Again:
                    break
                self._handle(sock, parts)

    def _handle(self, sock: zmq.Socket, parts: list[bytes]) -> None:
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
            except ProtocolError as err:
                self.bad_frames += 1
                self.last_error = str(err)
                return
            self._note_latest(frame)
            if frame.kind == protocol.HELLO and frame.body.get("mode") == "light":
                self._no_ping.add(frame.worker)
            if frame.kind == protocol.JOB_START:
                self.jobs_started += 1
            elif frame.kind == protocol.JOB_END:
                self.jobs_ended += 1
            elif frame.kind == protocol.HEARTBEAT:
                self.dropped[frame.worker] = _int(frame.body.get("dropped"))
            elif frame.kind == protocol.PONG:
                self._on_pong(frame)
            if frame.kind in (protocol.JOB_START, protocol.JOB_END, protocol.BYE):
                self._cond.notify_all()  # what wait() waits for; not every sample
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
        self._deliver(frame)

    def _deliver(self, frame: protocol.Frame) -> None:
        if self.on_frame is not None:
            try:
                self.on_frame(frame)
            except Exception as err:  # a user's callback must not stop the receive thread
                self.callback_errors += 1
                if self.callback_errors == 1:
                    print(f"workerscope: on_frame callback failed: {err!r}", file=sys.stderr)
                self.last_error = f"on_frame: {err!r}"
        for entry in list(self._queues):
            self._call(entry, self._put, frame)

    def _call(self, entry: tuple[asyncio.AbstractEventLoop, asyncio.Queue], fn: Callable,
              *args: object) -> None:
        """Run fn(queue, *args) on the consumer's loop; a loop that has ended (its consumer
        stopped iterating without closing) is forgotten."""
        loop, queue = entry
        try:
            loop.call_soon_threadsafe(fn, queue, *args)
        except RuntimeError:  # "Event loop is closed"
            if entry in self._queues:
                self._queues.remove(entry)

    def _end_queue(self, queue: asyncio.Queue) -> None:
        """Put the end marker in, making room by dropping (and counting) the oldest frame."""
        while True:
            try:
                queue.put_nowait(None)
                return
            except asyncio.QueueFull:
                queue.get_nowait()
                self.iterator_dropped += 1

    def _put(self, queue: asyncio.Queue, frame: protocol.Frame) -> None:
        try:
            queue.put_nowait(frame)
        except asyncio.QueueFull:
            self.iterator_dropped += 1

    def _send(self, sock: zmq.Socket, identity: bytes, kind: str, body: dict) -> None:
        try:
            sock.send_multipart([identity, protocol.encode_frame(kind, "driver", 0, body)],
                                zmq.NOBLOCK)
        except zmq.ZMQError as err:  # the sidecar is gone already; it counts its own loss
            self.last_error = f"{kind} to a sidecar: {err}"

    # -- clocks ------------------------------------------------------------------------------
    def _same_clock(self, wid: str) -> bool:
        w = self._builder.t.workers.get(wid)
        return w is not None and self._local(w)

    def _wants_ping(self, wid: str) -> bool:
        if self._same_clock(wid) or wid in self._no_ping:
            return False
        clock = self._clocks.get(wid)
        return clock is None or clock.samples < PINGS_AT_HELLO

    def _ping(self, sock: zmq.Socket, identity: bytes, wid: str) -> None:
        if self._same_clock(wid) or wid in self._no_ping:
            return  # one host, one clock (or a light worker, which has no one to answer)
        self._clocks.setdefault(wid, _Clock())
        self._ping_ids += 1
        t0 = time.time_ns()
        self._pings[self._ping_ids] = (wid, identity, t0)
        if len(self._pings) > 10_000:  # pongs that never came
            self._pings.pop(next(iter(self._pings)))
        self._send(sock, identity, protocol.PING, {"id": self._ping_ids, "t0": t0})

    def _on_pong(self, frame: protocol.Frame) -> None:
        t2 = time.time_ns()
        pending = self._pings.pop(_int(frame.body.get("id")), None)
        if pending is None or pending[0] != frame.worker:
            return
        _, _, t0 = pending
        t1 = _int(frame.body.get("t1"))
        clock = self._clocks[frame.worker]
        clock.samples += 1
        delay = t2 - t0
        if clock.delay_ns is None or delay < clock.delay_ns:
            clock.delay_ns = delay
            clock.offset_ns = t1 - (t0 + t2) // 2

    # -- live state --------------------------------------------------------------------------
    def _note_latest(self, frame: protocol.Frame) -> None:
        """Keep what a live view shows of each worker, cheaply, as frames arrive."""
        b = frame.body
        row = self._latest.setdefault(frame.worker, {"jobs": {}, "span": None, "tree": {},
                                                     "gpu_util": None})
        if frame.kind == protocol.SAMPLE:
            row["tree"] = b.get("tree") or row["tree"]
            utils = [v.get("util_percent") for _, v in b.get("gpus", ()) if "util_percent" in v]
            row["gpu_util"] = sum(utils) / len(utils) if utils else row["gpu_util"]
        elif frame.kind == protocol.JOB_START:
            row["jobs"][b.get("job")] = (str(b.get("name")), time.monotonic())
        elif frame.kind == protocol.JOB_END:
            started = row["jobs"].pop(b.get("job"), None)
            if started is not None:
                self._job_seconds.append(time.monotonic() - started[1])
                del self._job_seconds[:-1000]
        elif frame.kind == protocol.SPANS and b.get("records"):
            row["span"] = str(protocol.SpanRecord._make(b["records"][-1]).name)

    def live(self) -> list[dict[str, object]]:
        """One row per worker for a live view: host, pid, status, current job and last span,
        CPU, RSS, GPU use, frames lost, and whether its running job is a straggler (running
        for over 1.5x the median job so far)."""
        states = self.states()
        now = time.monotonic()
        with self._cond:
            done = sorted(self._job_seconds)
            median = done[len(done) // 2] if done else None
            rows = []
            for wid, w in sorted(self._builder.t.workers.items()):
                latest = self._latest.get(wid, {"jobs": {}, "span": None, "tree": {},
                                                "gpu_util": None})
                jobs = latest["jobs"]
                running = max((now - t0 for _, t0 in jobs.values()), default=None)
                rows.append({
                    "worker": wid, "host": w.host, "pid": w.pid, "status": states.get(wid, ""),
                    "job": ", ".join(name for name, _ in jobs.values()) or None,
                    "span": latest["span"], "cpu_percent": latest["tree"].get("cpu_percent"),
                    "rss_bytes": latest["tree"].get("rss_bytes"),
                    "gpu_util_percent": latest["gpu_util"], "lost": self.lost.get(wid, 0),
                    "dropped": self.dropped.get(wid, 0), "running_s": running,
                    "straggler": bool(median and running and len(done) >= 3
                                      and running > 1.5 * median),
                })
            return rows

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


def _int(value: object) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


class _FrameQueue:
    """The async iterator of Subscriber.frames(): registered at once, so no frame that
    arrives after the call is missed."""

    def __init__(self, sub: Subscriber, loop: asyncio.AbstractEventLoop, maxsize: int) -> None:
        self.sub = sub
        self.queue: asyncio.Queue = asyncio.Queue(maxsize)
        self.entry = (loop, self.queue)
        self.done = sub._closed
        if not self.done:
            sub._queues.append(self.entry)

    def __aiter__(self) -> "_FrameQueue":
        return self

    async def __anext__(self) -> protocol.Frame:
        if not self.done:
            frame = await self.queue.get()
            if frame is not None:
                return frame
            self.done = True
        if self.entry in self.sub._queues:
            self.sub._queues.remove(self.entry)
        raise StopAsyncIteration
