"""The driver's receiver: many sidecars, on many hosts, connect to one Subscriber.

A ROUTER socket bound once; each sidecar's DEALER connects to it (a DEALER queues frames until
the driver is there: no slow-joiner loss for workers that start first). A background thread owns
the socket (ZeroMQ sockets are not thread-safe), decodes frames, folds them into one Timeline,
counts frames lost per worker from gaps in their seq numbers, acknowledges each bye, and pings
each sidecar of another host to learn its clock offset: that thread is a Receiver
(driver/receive.py, driver/replies.py, driver/clock.py), and what it counts and knows a
ReceiveState that it alone changes (driver/state.py). Here: the socket, its lifecycle and the
queries, answered from the ReceiveState with copies taken under its lock. Live rows are kept
in driver/live.py, the async iterator in driver/frames.py.

The driver is usually the user's own program, so nothing a sender does may crash it, bloat it
or lie to it (docs/SECURITY.md): on tcp:// only holders of its key get in (CURVE, keys.py);
each connection speaks for one worker (connections.py); connections, workers, frames and what
is kept are bounded in bytes (memory_ceiling); a worker gone silent leaves its jobs lost, not
running; a driver that starts late learns its workers from their heartbeats (late.py).

What was received is kept on disk, not in memory: every frame goes to a record file as it
arrives (record.py; `record=`, else a temporary one), and `timeline()` is built from it. In
memory stay each worker's live state and bounded queues, whatever the run's length.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import os
import socket
import tempfile
import threading
import time
import warnings
import weakref
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

import zmq

from .. import protocol
from ..builder import TimelineBuilder
from ..errors import WorkerscopeError
from ..procfs import boot_id
from ..record import MAX_SAMPLE_BYTES, QUEUE_BYTES, Facts, RecordWriter, read_record
from ..timeline import Timeline
from ..transport import MAX_FRAME_BYTES
from . import ipc, late, otlp
from .clock import ClockSync
from .connections import Connections, connection_ceiling, local_key
from .frames import FrameFanout
from .keys import DriverKeys, ZapHandler
from .live import LiveState
from .otlp import LiveOtlp, OtlpCounts
from .otlp import ready as otlp_ready
from .prometheus import MetricsServer
from .receive import OnFrame, Receiver
from .replies import Replies
from .state import Limits, ReceiveState

if TYPE_CHECKING:
    from ..export.causes import Straggler

# Frames ZeroMQ queues per connection (RCVHWM): one more is held while it is being read, so a
# connection holds at most (RECEIVE_QUEUE + 1) x MAX_FRAME_BYTES. ZeroMQ counts per connection,
# not per socket: the driver's queue is that times the connections (docs/SECURITY.md).
RECEIVE_QUEUE = 1
MAX_CONNECTIONS = 1024
MAX_WORKERS = 4096
HANDSHAKE_MS = 10_000  # a connection that has not finished its handshake by then is dropped
# Measured bytes behind the memory ceiling (docs/SECURITY.md): a frame decodes to at most ~20
# bytes of Python objects per byte (2-character strings; arrays and maps are counted and
# capped at decode); a connection with its worker cost ~43 KB (an idle one 4.3 KB); and a
# fixed allowance for the bookkeeping (pings in flight, counters) and the frame being
# decrypted.
DECODED_PER_BYTE = 24
PER_CONNECTION = 32 * 1024
PER_WORKER = 16 * 1024
FIXED = 16 * 1024 * 1024


class Subscriber:
    """Receive the frames of many workers. Use as a context manager.

        with Subscriber() as sub:
            pool.map(profiled(fn, mode="heavy", endpoint=sub.endpoint), items)
            sub.wait(jobs=len(items), timeout=60)
            sub.timeline().save("run.json")

    Three ways to follow frames as they come: `wait()` (blocking), `on_frame` (a callback run
    on the receive thread: keep it quick), and `async for frame in sub.frames()`.

    On tcp:// the Subscriber authenticates and encrypts (CURVE): `sub.endpoint` carries the
    keys a sidecar needs (tcp://HOST:PORT?curve=...), so treat it like a password. `key` (a
    `sub.key` of an earlier run, or keys.new_key()) keeps the same endpoint across restarts;
    `insecure=True` listens in plain text, for anyone who can reach the port. ipc:// paths are
    private to this user (0600).
    record: a file that every frame received is appended to as it arrives (`load()` and
    `workerscope report` read it, even if this driver was killed). Without it, a temporary
    record is used, removed when the Subscriber is garbage-collected or the program exits.
    stale_after: seconds of silence after which a worker shows as "stale" and its open jobs
    as lost. The max_* bounds keep the driver's memory under `memory_ceiling`: what goes past
    them is refused and counted in `refused`; max_kept_bytes caps the record's size (None:
    as large as the disk allows). max_workers bounds the workers held in memory at once, not
    those of the driver's life: past it, workers gone and done (no connection, and said bye or
    silent past stale_after) are let go of to make room, counted in `let_go`; what they sent
    stays in the record and in timeline(), while the live views (received, lost, states(),
    live(), /metrics) list only the workers held.
    """

    def __init__(self, address: str = "tcp://127.0.0.1:0",
                 on_frame: OnFrame | None = None,
                 stale_after: float = 10.0, receive_queue: int = RECEIVE_QUEUE, *,
                 insecure: bool = False, key: str | None = None,
                 max_connections: int = MAX_CONNECTIONS, max_workers: int = MAX_WORKERS,
                 max_kept_bytes: int | None = None,
                 record: str | os.PathLike[str] | None = None,
                 prometheus: str | None = None, otlp: str | None = None,
                 otlp_service: str = "workerscope") -> None:
        self.address = address
        self.prometheus = prometheus  # "HOST:PORT" to serve /metrics on (driver/prometheus.py)
        # The base URL of an OTLP/HTTP collector to send what arrives to (driver/otlp.py).
        self.otlp = otlp
        self.otlp_service = otlp_service
        self._otlp: LiveOtlp | None = None
        if otlp is not None:
            otlp_ready()  # the extra is missing: said now, not at start
        self._metrics: MetricsServer | None = None
        self._stacks_ids = itertools.count(1).__next__  # request ids of stacks() (atomic)
        self.receive_queue = receive_queue
        self.insecure = insecure
        self.max_connections = max_connections
        self._limits = Limits(stale_after=stale_after, max_workers=max_workers,
                             max_kept_bytes=max_kept_bytes, max_frame_bytes=MAX_FRAME_BYTES)
        self.record_path = None if record is None else os.fspath(record)
        self._record: RecordWriter | None = None
        self._keys = DriverKeys.parse(key) if key else None
        if insecure and address.startswith("tcp://"):
            warnings.warn(f"Subscriber({address!r}, insecure=True): frames travel in plain "
                          "text and anyone who can reach the port can send them", stacklevel=2)
        self.endpoint = ""
        self._fanout = FrameFanout()
        builder = TimelineBuilder(keep=False)  # the rest is in the record
        self._state = ReceiveState(self._limits, builder, LiveState(),
                                   Replies(ClockSync(), builder, socket.gethostname(), boot_id()))
        self._rx = Receiver(self._state, self._fanout, late.Unanchored(), on_frame)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._ctx: zmq.Context[zmq.Socket[bytes]] | None = None
        self._sock: zmq.Socket[bytes] | None = None
        self._conns: Connections | None = None
        self._zap: ZapHandler | None = None
        self._tmpdir: str | None = None
        self._ipc_path: str | None = None
        self._ipc_ours: tuple[int, int] | None = None
        self._closed_wall: int | None = None
        self._otlp_counts: OtlpCounts | None = None

    @property
    def prometheus_url(self) -> str | None:
        """Where /metrics is served while started (prometheus="HOST:PORT"; port 0 picks one)."""
        return None if self._metrics is None else self._metrics.url

    @property
    def key(self) -> str | None:
        """This driver's secret key (tcp:// without insecure): a Subscriber given it hands
        out the same endpoint, so sidecars of a previous run reconnect to it."""
        return None if self._keys is None else self._keys.text()

    @property
    def on_frame(self) -> OnFrame | None:
        """Called on the receive thread with each frame (keep it quick); may be set to None,
        or to another callback, while frames arrive."""
        return self._rx.on_frame

    @on_frame.setter
    def on_frame(self, callback: OnFrame | None) -> None:
        self._rx.on_frame = callback

    @property
    def stale_after(self) -> float:
        return self._limits.stale_after

    @property
    def max_workers(self) -> int:
        return self._limits.max_workers

    @property
    def let_go(self) -> int:
        """Workers let go of from memory to make room past max_workers (see the class)."""
        with self._state.cond:
            return self._state.let_go

    @property
    def max_kept_bytes(self) -> int | None:
        return self._limits.max_kept_bytes

    @property
    def max_frame_bytes(self) -> int:
        return self._limits.max_frame_bytes

    # Each read of a count below is a copy, made under the receive thread's lock: iterate it
    # while frames arrive, keep it, change it; the driver's own counts are untouched.
    @property
    def lost(self) -> dict[str, int]:
        """Frames lost per worker id, counted from gaps in its seq numbers."""
        return self._state.copy_lost()

    @property
    def received(self) -> dict[str, int]:
        """Frames received per worker id."""
        return self._state.copy_received()

    @property
    def dropped(self) -> dict[str, int]:
        """Frames each worker's sidecar could not queue, as its last heartbeat said."""
        return self._state.copy_dropped()

    @property
    def bad_frames(self) -> int:
        """Frames that could not be decoded or were malformed."""
        return self._state.counts().bad_frames

    @property
    def callback_errors(self) -> int:
        """Exceptions on_frame raised (each counted, the frame still delivered elsewhere)."""
        return self._state.counts().callback_errors

    @property
    def loop_errors(self) -> int:
        """Socket errors the receive loop waited out."""
        return self._state.counts().loop_errors

    @property
    def last_error(self) -> str | None:
        """The latest bad frame, refusal or error, in words."""
        return self._state.counts().last_error

    @property
    def jobs_started(self) -> int:
        return self._state.counts().jobs_started

    @property
    def jobs_ended(self) -> int:
        return self._state.counts().jobs_ended

    @property
    def _pending_ack(self) -> dict[str, tuple[bytes, int]]:
        # Byes waiting for a clock estimate: tests check none is left waiting at close.
        return self._state.pending_acks()

    @property
    def iterator_dropped(self) -> int:
        """Frames an async consumer of frames() fell too far behind to be given."""
        return self._fanout.dropped

    @property
    def refused(self) -> dict[str, int]:
        """What was refused, by reason: connections past the ceiling, failed handshakes
        (no key or a wrong one), frames for a worker their connection does not speak for,
        frames of workers past max_workers, frames not kept past max_kept_bytes, job starts
        past MAX_OPEN_JOBS open."""
        conns = self._conns
        return {"connections": 0 if conns is None else conns.refused,
                "handshakes": 0 if conns is None else conns.handshakes_failed,
                **self._state.copy_refused()}

    @property
    def memory_ceiling(self) -> int:
        """Bytes above its size at start this driver can grow to, whatever senders do (frames
        it hands to on_frame and frames() consumers aside): docs/SECURITY.md."""
        conns = self._conns.ceiling if self._conns is not None else self.max_connections
        queue = conns * ((self.receive_queue + 1) * self.max_frame_bytes + PER_CONNECTION)
        frame = (DECODED_PER_BYTE + 1) * self.max_frame_bytes  # decoded, and decrypted
        export = 0
        if self.otlp is not None:  # its queue, and the chunk being written to the exporter
            # (whose decoding and per-worker state are its own process's: docs/SECURITY.md)
            export = otlp.QUEUE_BYTES + otlp.CONTROL_BYTES + otlp.DRAIN_BYTES + MAX_FRAME_BYTES
        return (queue + frame + late.HOLD_BYTES + self.max_workers * PER_WORKER + FIXED
                + QUEUE_BYTES + export)

    # -- lifecycle ---------------------------------------------------------------------------
    def start(self) -> Subscriber:
        if self._thread is not None:
            return self
        if self.prometheus is not None and self._metrics is None:
            # First: a port that cannot be had fails the start before anything is bound.
            self._metrics = MetricsServer(self.prometheus, self._state.metrics)
        try:
            if self.otlp is not None and self._otlp is None:
                self._otlp = LiveOtlp(self.otlp, self.otlp_service, self._state.clock_offsets)
                self._rx.export = self._otlp
            return self._start()
        except BaseException:
            if self._metrics is not None:  # a start that failed serves nothing
                self._metrics.close()
                self._metrics = None
            self._close_otlp()
            raise

    def _close_otlp(self) -> None:
        if self._otlp is not None:
            self._rx.export = None
            self._otlp.close()  # what is queued is sent first (within otlp.CLOSE_S)
            self._otlp_counts = self._otlp.counts()
            self._otlp = None

    @property
    def otlp_counts(self) -> OtlpCounts | None:
        """What the live OTLP export (otlp=URL) sent, and dropped, so far (None without one):
        frames queued and dropped with the queue full, requests, spans and points sent and
        given up on after their retries, the last error."""
        live = self._otlp  # read once: a close may clear it meanwhile
        if live is not None:
            return live.counts()
        return self._otlp_counts

    def _start(self) -> Subscriber:
        ctx: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
        sock = ctx.socket(zmq.ROUTER)
        sock.setsockopt(zmq.LINGER, 0)
        sock.setsockopt(zmq.MAXMSGSIZE, self.max_frame_bytes)
        # A sender that reconnects presents its routing id again: the new connection takes it
        # over from one a network drop left half open (connections.py).
        sock.setsockopt(zmq.ROUTER_HANDOVER, 1)
        # Bounded: past this many frames waiting on a connection, ZeroMQ stops reading it, the
        # sidecar's queue fills, and it drops and counts rather than block its worker.
        sock.setsockopt(zmq.RCVHWM, self.receive_queue)
        sock.setsockopt(zmq.HANDSHAKE_IVL, HANDSHAKE_MS)
        address = self.address
        if address.startswith("tcp://") and address.endswith(":0"):
            address = address[:-2] + ":*"  # ZeroMQ's spelling of "any free port"
        try:
            if address.startswith("tcp://") and not self.insecure:
                self._keys = self._keys or DriverKeys.new()
                self._keys.serve(sock)
                self._zap = ZapHandler(ctx, self._keys.client_public)
            conns = Connections(sock, connection_ceiling(self.max_connections), address,
                                self._zap)
            self._bind(sock, address)
        except (zmq.ZMQError, WorkerscopeError) as err:
            self._close_sockets(sock, ctx)
            self._remove_tmpdir()
            if isinstance(err, WorkerscopeError):
                raise
            raise WorkerscopeError(
                f"cannot listen on {self.address!r}: {err}; give another address, e.g. "
                "tcp://127.0.0.1:0 for any free port") from err
        try:
            self._record = self._open_record()
        except WorkerscopeError:
            self._close_sockets(sock, ctx)
            self._remove_tmpdir()
            raise
        bound = sock.getsockopt_string(zmq.LAST_ENDPOINT)
        conns.listening = local_key(bound)
        secure = self._zap is not None and self._keys is not None
        self.endpoint = self._keys.endpoint(bound) if secure and self._keys else bound
        self._ctx, self._sock, self._conns = ctx, sock, conns
        conns.start()
        self._stop.clear()
        self._closed_wall = None
        self._state.record = self._record
        # The thread runs a method of ours, not of the Receiver: a started Subscriber stays
        # alive until closed, never collected (its context terminated) under its own thread.
        self._thread = threading.Thread(target=self._receive, args=(sock, conns),
                                        name="workerscope-subscriber", daemon=True)
        self._thread.start()
        return self

    def _receive(self, sock: zmq.Socket[bytes], conns: Connections) -> None:
        self._rx.run(sock, conns, self._stop)

    def _open_record(self) -> RecordWriter:
        if self._record is not None and self.record_path is not None:
            # Started again after a close: the same record goes on.
            return RecordWriter(self.record_path, resume=True)
        if self.record_path is not None:
            return RecordWriter(self.record_path)
        fd, path = tempfile.mkstemp(prefix="workerscope-record-", suffix=".wsc")  # 0600
        os.close(fd)
        self.record_path = path
        weakref.finalize(self, _remove, path)
        return RecordWriter(path, mode=0o600)

    def _bind(self, sock: zmq.Socket[bytes], address: str) -> None:
        if address in ("ipc://", "ipc://*"):
            self._tmpdir = tempfile.mkdtemp(prefix="workerscope-")  # 0700: only we can reach in
            address = f"ipc://{self._tmpdir}/driver.sock"
        if address.startswith("ipc://"):
            path = address[len("ipc://"):]
            if self._tmpdir is None:
                ipc.check_free(path)
            with ipc.private_umask():  # 0600 from the first instant, no chmod race
                sock.bind(address)
            self._ipc_path, self._ipc_ours = path, ipc.identity(path)
        else:
            sock.bind(address)

    def close(self) -> None:
        if self._thread is not None:
            self._stop.set()
            self._thread.join()
            self._thread = None
            if self._otlp is not None:  # no more frames for it: its last ones go out meanwhile
                self._otlp.begin_close()
            self._closed_wall = time.time_ns()
            if self._record is not None:
                self._state.write_facts(self._closed_wall)  # the last word: states and clocks
                self._record.close()  # timeline() still reads it
        sock, ctx = self._sock, self._ctx
        self._sock = self._ctx = None
        if sock is not None and ctx is not None:
            self._close_sockets(sock, ctx)
        if self._ipc_path is not None:
            ipc.remove_if_ours(self._ipc_path, self._ipc_ours)
            self._ipc_path = None
        self._remove_tmpdir()
        self._fanout.close()
        if self._metrics is not None:
            self._metrics.close()
            self._metrics = None
        self._close_otlp()

    def _close_sockets(self, sock: zmq.Socket[bytes], ctx: zmq.Context[zmq.Socket[bytes]]) -> None:
        if self._conns is not None:
            self._conns.close()  # and the authenticator
        elif self._zap is not None:
            self._zap.close()
        self._zap = None
        sock.close(0)
        ctx.destroy(0)  # the monitor's own socket too

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
        return self._state.wait(jobs, timeout, byes, started)

    def stacks(self, worker: str, timeout: float = 3.0,
               reason: str = "asked") -> dict[str, Any] | None:
        """What `worker` is doing right now: every thread's Python stack of each process of
        its tree that has workerscope loaded, and the command, state and wchan of the others,
        as its sidecar's faulthandler dump read them (no ptrace, no root). A dict with
        "processes" ([{"pid", "threads": [{"thread", "current", "frames": [{"file", "line",
        "function"}, ...] innermost first}]} or {"pid", "command", "state", "wchan"}]) and
        "error" where something stood in the way; the same dump is a mark named "stacks" in
        the timeline. None if no answer came within `timeout` s."""
        return self._state.stacks(worker, self._stacks_ids(), reason, timeout)

    def states(self) -> dict[str, str]:
        """Each worker's status now: what its bye said, else running (a job open), idle (no
        job open), stale (silent for over stale_after s) or dead (its processes are gone from
        this host and it never said bye)."""
        return self._state.states()

    def clock_offsets(self) -> dict[str, tuple[int, int | None]]:
        """worker -> (ns its clock runs ahead of ours, error bound: half the best round trip)."""
        return self._state.clock_offsets()

    def timeline(self, max_sample_bytes: int | None = MAX_SAMPLE_BYTES) -> Timeline:
        """The merged timeline of every worker seen so far, on this driver's clock, built
        from the record. Jobs still open on a worker gone stale or dead, or when the
        Subscriber has closed, end as lost. Samples that would take more than
        `max_sample_bytes` of memory (a long run of many workers) are folded into time bins,
        as `workerscope.load` does; None keeps every one."""
        if self._record is None or self.record_path is None:
            return Timeline()  # never started: nothing received
        facts = self._facts()
        written = self._record.flush()
        return read_record(self.record_path, written, facts, max_sample_bytes=max_sample_bytes)

    def flush(self) -> int:
        """Wait until every frame received so far is in the record file (it is written
        about every 0.25 s by itself); the number of frames the file holds."""
        if self._record is not None:
            self._record.flush()
        return self.record_frames

    @property
    def record_frames(self) -> int:
        """Frames written to the record file so far."""
        return 0 if self._record is None else self._record.frames

    def _facts(self) -> Facts:
        return self._state.facts(self._closed_wall)

    def frames(self, maxsize: int = 10_000) -> AsyncIterator[protocol.Frame]:
        """Every frame from now on, as an async iterator (`async for f in sub.frames()`),
        ending when the Subscriber closes. Call it inside a running event loop. A consumer
        that falls maxsize frames behind loses the newest (counted in iterator_dropped)
        rather than slowing the receive thread."""
        return self._fanout.subscribe(asyncio.get_running_loop(), maxsize)

    def stragglers(self) -> list[Straggler]:
        """The straggling workers now, each with its cause and the numbers behind it (or "no
        clear cause" and the two best): workerscope.export.causes' rule over the timeline
        received so far, a running job counted up to its worker's latest sample."""
        from ..export.causes import stragglers  # here: only a caller who asks pays its import

        return stragglers(self.timeline(), live=True)

    def live(self) -> list[dict[str, object]]:
        """One row per worker for a live view: host, pid, status, current job and last span,
        CPU and GPU use (None unless it is running), RSS, frames lost, failed jobs
        (`failed_jobs`), and whether its running job is a straggler (by
        `workerscope.timeline.is_straggler` against the jobs done so far)."""
        return self._state.rows()


def _remove(path: str) -> None:
    """Remove a temporary record (when its Subscriber is collected, or at exit)."""
    try:
        os.unlink(path)
    except FileNotFoundError:
        return  # removed already
    except OSError as err:
        logging.getLogger("workerscope.driver").warning(
            "could not remove the temporary record %s: %s", path, err.strerror or err)
