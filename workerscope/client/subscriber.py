"""The driver's receiver: many sidecars, on many hosts, connect to one Subscriber.

A ROUTER socket bound once; each sidecar's DEALER connects to it. A background thread owns
the socket (ZeroMQ sockets are not thread-safe), decodes frames, folds them into one
Timeline, counts frames lost per worker from gaps in their seq numbers, and acknowledges
each bye so the sidecar can exit knowing its last frames arrived.
"""

from __future__ import annotations

import os
import sys
import tempfile
import threading
from typing import Callable

import zmq

from .. import protocol
from ..errors import ProtocolError, WorkerscopeError
from ..timeline import Timeline, TimelineBuilder

POLL_MS = 100


class Subscriber:
    """Receive the frames of many workers. Use as a context manager.

        with Subscriber() as sub:
            pool.map(profiled(fn, mode="heavy", endpoint=sub.endpoint), items)
            sub.wait(jobs=len(items), timeout=60)
            sub.timeline().save("run.json")
    """

    def __init__(self, address: str = "tcp://127.0.0.1:0",
                 on_frame: Callable[[protocol.Frame], None] | None = None) -> None:
        self.address = address
        self.on_frame = on_frame
        self.endpoint = ""
        self.lost: dict[str, int] = {}
        self.received: dict[str, int] = {}
        self.bad_frames = 0
        self.callback_errors = 0
        self.last_error: str | None = None
        self.jobs_started = 0
        self.jobs_ended = 0
        self._next_seq: dict[str, int] = {}
        self._builder = TimelineBuilder()
        self._cond = threading.Condition()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._ctx: zmq.Context | None = None
        self._sock: zmq.Socket | None = None
        self._tmpdir: str | None = None

    # -- lifecycle ---------------------------------------------------------------------------
    def start(self) -> "Subscriber":
        if self._thread is not None:
            return self
        self._ctx = zmq.Context()
        sock = self._ctx.socket(zmq.ROUTER)
        sock.setsockopt(zmq.LINGER, 0)
        sock.setsockopt(zmq.MAXMSGSIZE, protocol.MAX_FRAME_BYTES)
        sock.setsockopt(zmq.RCVHWM, 100_000)
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

    def timeline(self) -> Timeline:
        """The merged timeline of every worker seen so far."""
        with self._cond:
            t = self._builder.timeline()
            for wid, w in t.workers.items():
                w.lost = self.lost.get(wid, 0)
            return t

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
            if frame.kind == protocol.JOB_START:
                self.jobs_started += 1
            elif frame.kind == protocol.JOB_END:
                self.jobs_ended += 1
            self._cond.notify_all()
        if frame.kind == protocol.BYE:
            ack = protocol.encode_frame(protocol.ACK, "driver", 0, {"seq": frame.seq})
            try:
                sock.send_multipart([identity, ack], zmq.NOBLOCK)
            except zmq.ZMQError as err:  # the sidecar is gone already; it counts its own loss
                self.last_error = f"ack to {frame.worker}: {err}"
        if self.on_frame is not None:
            try:
                self.on_frame(frame)
            except Exception as err:  # a user's callback must not stop the receive thread
                self.callback_errors += 1
                if self.callback_errors == 1:
                    print(f"workerscope: on_frame callback failed: {err!r}", file=sys.stderr)
                self.last_error = f"on_frame: {err!r}"

    def _count(self, frame: protocol.Frame) -> None:
        wid = frame.worker
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
