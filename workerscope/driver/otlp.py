"""OpenTelemetry, live: what a driver receives, sent on to an OTLP/HTTP collector as it comes
(`Subscriber(otlp="http://collector:4318")`, `workerscope listen --otlp URL`).

The receive thread only hands each frame it folded in, as it came, to a queue bounded in bytes
(QUEUE_BYTES): never a wait, never a decode. The exporter's own thread takes at most DRAIN_BYTES
of them a cycle (every FLUSH_S), folds them into a TimelineBuilder of its own, takes out what
that made (ended jobs, spans, samples), moves it onto the driver's clock and sends it
(export/otlp.py's OtlpSender: batches, gzip, retries with backoff). While a collector is slow
or down, the queue fills and frames past it are dropped and counted (`frames_dropped`), so the
driver never grows past its ceiling and the workers never wait; a cycle's spans and points
that still fail after their retries are counted as dropped too. At close, what is queued is
sent, retried as ever, within CLOSE_S; the rest is counted.
"""

from __future__ import annotations

import collections
import dataclasses
import logging
import threading
import time
from collections.abc import Callable

from .. import protocol
from ..builder import TimelineBuilder
from ..errors import ProtocolError
from ..export.otlp import OtlpSender, Sent, SpanWire, ready
from ..timeline import Timeline

log = logging.getLogger("workerscope")
__all__ = ["KINDS", "LiveOtlp", "OtlpCounts", "ready"]

QUEUE_BYTES = 32 * 1024 * 1024  # frames waiting for the exporter (docs/SECURITY.md)
DRAIN_BYTES = 1024 * 1024  # frames folded and sent in one cycle (and one frame more)
# Room kept past QUEUE_BYTES for the frames a timeline is anchored and ended by (hello,
# job_start, job_end, bye): dropped, they would leave a worker off the clock or a job open
# in the exporter for good.
CONTROL_BYTES = 2 * 1024 * 1024
FRAME_OVERHEAD = 100  # bytes a queued frame costs besides its own (the bytes object, the deque)
FLUSH_S = 1.0
CLOSE_S = 10.0
# The kinds a timeline is built from; the rest (heartbeats, pongs, acks) say nothing here.
KINDS = frozenset({protocol.HELLO, protocol.JOB_START, protocol.JOB_END, protocol.SAMPLE,
                   protocol.SPANS, protocol.MARK, protocol.BYE})
_CONTROL = frozenset({protocol.HELLO, protocol.JOB_START, protocol.JOB_END, protocol.BYE})


@dataclasses.dataclass(frozen=True)
class OtlpCounts:
    """What a live exporter did so far: its queue's bound and the most it held (bytes), frames
    queued and dropped (the queue full), requests
    made and failed after their retries, spans and points sent and given up on."""

    url: str
    queue_bytes: int
    peak_bytes: int
    frames: int
    frames_dropped: int
    bad_frames: int
    requests: int
    failed: int
    spans: int
    points: int
    spans_dropped: int
    points_dropped: int
    last_error: str | None


class LiveOtlp:
    """One driver's live OTLP export (see the module's doc)."""

    def __init__(self, url: str, service: str,
                 offsets: Callable[[], dict[str, tuple[int, int | None]]],
                 queue_bytes: int | None = None, flush_s: float = FLUSH_S) -> None:
        self.url = url
        self._stop = threading.Event()
        self._deadline = float("inf")  # set by close()
        self.sender = OtlpSender(url, service, wait_for=self._interrupted, live=True)
        self._offsets = offsets
        self._max = QUEUE_BYTES if queue_bytes is None else queue_bytes
        self._flush_s = flush_s
        self._lock = threading.Lock()
        # Frames as they came; a worker's id alone: let go of it once what came before is sent.
        self._queue: collections.deque[bytes | str] = collections.deque()
        self._forget: list[str] = []
        self._bytes = 0
        self.peak_bytes = 0  # the most the queue held
        self.frames = 0
        self.frames_dropped = 0
        self.bad_frames = 0
        self._builder = TimelineBuilder(keep=True)
        self._wire = SpanWire(self.sender.protos)
        self._thread = threading.Thread(target=self._run, name="workerscope-otlp", daemon=True)
        self._thread.start()

    def _interrupted(self, seconds: float) -> bool:
        """Between retries: sleep, and True (give up) once past the close deadline, so a
        collector that is down holds close() CLOSE_S at most."""
        if not self._stop.wait(seconds):
            return False  # running: slept the whole time
        left = self._deadline - time.monotonic()
        if left > 0:
            time.sleep(min(seconds, left))
        return time.monotonic() >= self._deadline

    # -- the receive thread ------------------------------------------------------------------
    def put(self, kind: protocol.FrameKind, data: bytes) -> None:
        """Queue one frame as it came; past the bound it is dropped and counted. Never waits
        (beyond a lock held for a deque operation)."""
        if kind not in KINDS:
            return
        size = len(data) + FRAME_OVERHEAD
        room = self._max + (CONTROL_BYTES if kind in _CONTROL else 0)
        with self._lock:
            if self._bytes + size > room:
                self.frames_dropped += 1
                return
            self._queue.append(data)
            self._bytes += size
            self.peak_bytes = max(self.peak_bytes, self._bytes)
            self.frames += 1

    def forget(self, wid: str) -> None:
        """The driver let go of this worker (to make room for new ones): so does the exporter,
        once the frames queued before now are sent. Never dropped: it costs a few bytes."""
        with self._lock:
            self._queue.append(wid)
            self._bytes += FRAME_OVERHEAD

    # -- its own thread ----------------------------------------------------------------------
    def _run(self) -> None:
        while not self._stop.wait(self._flush_s):
            self._cycle()
            while self._bytes and not self._stop.is_set():  # a burst: drain it, cycle by cycle
                self._cycle()
                time.sleep(0.001)  # let the receive thread have the interpreter between cycles
        self.sender.timeout = min(self.sender.timeout, 2.0)  # closing: no long waits
        while self._bytes and time.monotonic() < self._deadline:
            self._cycle()
        with self._lock:
            # Not sent in time: counted, not lost quietly.
            self.frames_dropped += sum(isinstance(x, bytes) for x in self._queue)
            self._queue.clear()
            self._bytes = 0
        self._cycle()  # whatever the last frames made

    def _cycle(self) -> None:
        try:
            offsets = {wid: off for wid, (off, _) in self._offsets().items()}
            self._fold(offsets)
            wire = self._wire.take()
            t = self._take(offsets, bool(wire[1]))
            if t is not None:
                self.sender.send(t, wire)
            for wid in self._forget:
                self._builder.forget(wid)
            self._forget.clear()
        except Exception as err:  # noqa: BLE001 - the exporter must never die: counted, it goes on
            self.sender.sent.last_error = f"{type(err).__name__}: {err}"
            log.warning("workerscope: OTLP export cycle failed: %r", err)

    def _fold(self, offsets: dict[str, int]) -> None:
        taken = 0
        while taken < DRAIN_BYTES:
            with self._lock:
                if not self._queue:
                    return
                data = self._queue.popleft()
                if isinstance(data, str):
                    self._bytes -= FRAME_OVERHEAD
                    self._forget.append(data)
                    continue
                self._bytes -= len(data) + FRAME_OVERHEAD
            taken += len(data)
            try:
                frame = protocol.decode_frame(data, len(data))
                if frame.kind == protocol.SPANS:  # the bulk: plain spans straight to the wire
                    wid = frame.worker
                    pid, plain, rest = self._builder.plain_records(wid, frame.body)
                    self._wire.add(wid, pid, plain, offsets.get(wid, 0))
                    if rest is None:
                        continue
                    frame = frame._replace(body=rest)
                self._builder.add(frame)
            except ProtocolError:
                self.bad_frames += 1  # the receive thread took it whole; its body did not fold

    def _take(self, offsets: dict[str, int], spans: bool) -> Timeline | None:
        """What the frames folded so far made, on the driver's clock, taken out of the
        builder (which keeps only its workers and open jobs)."""
        b = self._builder
        # Process and thread names say nothing in OTLP: let go of them every cycle.
        b.t.processes.clear()
        b.t.threads.clear()
        if not (spans or b.t.jobs or b.t.spans or b.t.samples or b.t.marks):
            return None
        t, _ = b.snapshot()
        b.t.jobs.clear()
        b.t.spans.clear()
        b.t.samples.clear()
        b.t.marks.clear()
        return TimelineBuilder.finish((t, []), offsets)

    def counts(self) -> OtlpCounts:
        s: Sent = self.sender.sent
        return OtlpCounts(self.url, self._max, self.peak_bytes, self.frames, self.frames_dropped,
                          self.bad_frames, s.requests, s.failed, s.spans, s.points, s.spans_dropped,
                          s.points_dropped, s.last_error)

    def close(self) -> None:
        """Send what is queued (within CLOSE_S), then stop."""
        self._deadline = time.monotonic() + CLOSE_S
        self.sender.deadline = self._deadline  # a request under way ends by then too
        self._stop.set()
        self._thread.join(CLOSE_S + 30.0)
