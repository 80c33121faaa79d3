"""OpenTelemetry, live: what a driver receives, sent on to an OTLP/HTTP collector as it comes
(`Subscriber(otlp="http://collector:4318")`, `workerscope listen --otlp URL`).

The receive thread only hands each frame it folded in, as it came, to a queue bounded in bytes
(QUEUE_BYTES): never a wait, never a decode. A feeder thread writes the queue into the pipe of
the exporter, a process of its own (driver/otlp_exporter.py: it folds the frames, a cycle
every FLUSH_S or DRAIN_BYTES, and sends what they made: the work is off the driver's
interpreter lock and on a core of its own), with the clock offsets as they change; a reader
thread takes the counts it says after each cycle. While a collector is slow or down, the
exporter stops reading, the queue fills and frames past it are dropped and counted
(`frames_dropped`), so the driver never grows past its ceiling and the workers never wait; a
cycle's spans and points that still fail after their retries are counted as dropped too. At
close, what is queued is handed over and sent, retried as ever, within CLOSE_S; then the
exporter is stopped, and the rest is counted. An exporter process that dies is said once, and
the frames for it are dropped and counted from then on.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import logging
import os
import select
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

import msgpack

from .. import protocol
from ..export.otlp import WARN_EVERY, ready
from .otlp_exporter import CLOSE, DRAIN_BYTES, FORGET, FRAME, HEAD, OFFSETS

log = logging.getLogger("workerscope")
__all__ = ["DRAIN_BYTES", "KINDS", "LiveOtlp", "OtlpCounts", "ready"]

QUEUE_BYTES = 32 * 1024 * 1024  # frames waiting for the exporter (docs/SECURITY.md)
# Room kept past QUEUE_BYTES for the frames a timeline is anchored and ended by (hello,
# job_start, job_end, bye): dropped, they would leave a worker off the clock or a job open
# in the exporter for good.
CONTROL_BYTES = 2 * 1024 * 1024
FRAME_OVERHEAD = 100  # bytes a queued frame costs besides its own (the bytes object, the deque)
FLUSH_S = 1.0
CLOSE_S = 10.0
POLL_S = 0.05  # how often the feeder looks at an empty queue
OFFSETS_S = 0.5  # how often the clock offsets are looked at for the exporter
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
        self._offsets = offsets
        self._max = QUEUE_BYTES if queue_bytes is None else queue_bytes
        self._lock = threading.Lock()
        # Frames as they came; a worker's id alone: let go of it once what came before is sent.
        self._queue: collections.deque[bytes | str] = collections.deque()
        self._bytes = 0
        self.peak_bytes = 0  # the most the queue held
        self.frames = 0
        self.frames_dropped = 0  # here: past the queue, or never handed to the exporter
        self._counts: dict[str, Any] = {}  # the exporter process's, as it last said them
        self._error: str | None = None  # why the exporter process is gone, if it is
        self._sent_offsets: dict[str, int] = {}  # the clock offsets as the exporter has them
        self._offsets_at = -OFFSETS_S
        self._child = subprocess.Popen(
            [sys.executable, "-m", "workerscope.driver.otlp_exporter", url, service,
             repr(flush_s)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, close_fds=True)
        self._feeder = threading.Thread(target=self._feed, name="workerscope-otlp", daemon=True)
        self._reader = threading.Thread(target=self._read, name="workerscope-otlp-counts",
                                        daemon=True)
        self._feeder.start()
        self._reader.start()

    # -- the receive thread ------------------------------------------------------------------
    def put(self, kind: protocol.FrameKind, data: bytes) -> None:
        """Queue one frame as it came; past the bound it is dropped and counted. Never waits
        (beyond a lock held for a deque operation)."""
        if kind not in KINDS:
            return
        size = len(data) + FRAME_OVERHEAD
        room = self._max + (CONTROL_BYTES if kind in _CONTROL else 0)
        with self._lock:
            if self._bytes + size > room or self._error is not None:
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

    # -- the feeder thread: the queue into the exporter's pipe -------------------------------
    def _chunk(self) -> tuple[bytearray, int]:
        """Messages for the pipe: the clock offsets, then queued frames (DRAIN_BYTES or so)."""
        out = bytearray()
        now = time.monotonic()
        if now - self._offsets_at >= OFFSETS_S and (self._queue or self._stop.is_set()):
            self._offsets_at = now
            offsets = {wid: off for wid, (off, _) in self._offsets().items()}
            if offsets != self._sent_offsets:
                body = msgpack.packb(offsets)
                out += HEAD.pack(OFFSETS, len(body)) + body
                self._sent_offsets = offsets
        frames = 0
        while len(out) < DRAIN_BYTES:
            with self._lock:
                if not self._queue:
                    break
                item = self._queue.popleft()
                self._bytes -= (len(item) if isinstance(item, bytes) else 0) + FRAME_OVERHEAD
            if isinstance(item, str):
                wid = item.encode()
                out += HEAD.pack(FORGET, len(wid)) + wid
            else:
                out += HEAD.pack(FRAME, len(item)) + item
                frames += 1
        return out, frames

    def _feed(self) -> None:
        fd = self._child.stdin.fileno() if self._child.stdin else -1
        os.set_blocking(fd, False)
        pending, frames = bytearray(), 0
        try:
            while True:
                stopping = self._stop.is_set()
                if not pending:
                    pending, frames = self._chunk()
                    if frames == 0 and not self._bytes:
                        if stopping:
                            break
                        if len(pending) == 0:
                            self._stop.wait(POLL_S)
                            continue
                left = self._deadline - time.monotonic()
                if left <= 0:
                    break
                _, writable, _ = select.select([], [fd], [], min(left, 1.0))
                if writable:
                    with contextlib.suppress(BlockingIOError):  # the pipe filled meanwhile
                        del pending[:os.write(fd, pending)]
                    if not pending:
                        frames = 0
            if not pending:  # all handed over: the exporter has what is left of the time
                body = msgpack.packb(max(self._deadline - time.monotonic(), 0.0))
                # A pipe full now (the exporter busy sending): the end of input says close
                # all the same, and close() bounds the time.
                with contextlib.suppress(BlockingIOError):
                    os.write(fd, HEAD.pack(CLOSE, len(body)) + body)
        except OSError as err:  # the exporter process is gone (BrokenPipeError), or its pipe
            self._gone(f"the OTLP exporter process stopped reading: {err}")
        finally:
            with self._lock:
                self.frames_dropped += frames  # handed over in part, or not at all
            with contextlib.suppress(OSError):
                os.close(fd)

    def _gone(self, why: str) -> None:
        with self._lock:
            first = self._error is None
            self._error = why
            self.frames_dropped += sum(isinstance(x, bytes) for x in self._queue)
            self._queue.clear()
            self._bytes = 0
        if first:
            log.warning("workerscope: %s; frames for it are dropped from now on (counted)", why)

    # -- the reader thread: the exporter's counts --------------------------------------------
    def _read(self) -> None:
        out = self._child.stdout
        while out is not None:
            size = out.read(4)
            if len(size) < 4:
                break
            data = out.read(struct.unpack("<I", size)[0])
            try:
                counts = msgpack.unpackb(data)
            except ValueError:
                break
            if isinstance(counts, dict):
                before = int(self._counts.get("failed", 0))
                self._counts = counts
                failed = int(counts.get("failed", 0))
                # The first failure, then every WARN_EVERY-th: a collector down for hours
                # is not a flood.
                if failed > before and (before == 0 or failed // WARN_EVERY > before // WARN_EVERY):
                    log.warning("workerscope: OTLP export failed (%d requests so far, counted): "
                                "%s", failed, counts.get("last_error"))
        code = self._child.wait()
        if not self._stop.is_set():
            self._gone(f"the OTLP exporter process exited (code {code})")

    def counts(self) -> OtlpCounts:
        c = self._counts
        error = c.get("last_error") or self._error

        def n(key: str) -> int:
            return int(c.get(key, 0))

        return OtlpCounts(self.url, self._max, self.peak_bytes, self.frames,
                          self.frames_dropped + n("frames_dropped"), n("bad_frames"),
                          n("requests"), n("failed"), n("spans"), n("points"),
                          n("spans_dropped"), n("points_dropped"), error)

    def begin_close(self, within: float = CLOSE_S) -> None:
        """Start closing (nothing more will be put): what is queued is handed over, and
        the exporter sends it, within `within` s from now. close() waits for it."""
        if not self._stop.is_set():
            self._deadline = time.monotonic() + within
            self._stop.set()

    def close(self, within: float = CLOSE_S) -> None:
        """Hand over what is queued and let the exporter send it, within `within` s (from
        begin_close, if called); then it is stopped (SIGTERM: it counts what it still held),
        and the rest is counted here."""
        self.begin_close(within)
        self._feeder.join(CLOSE_S + 5.0)
        try:
            self._child.wait(max(self._deadline - time.monotonic(), 0.0) + 2.0)
        except subprocess.TimeoutExpired:
            self._child.terminate()
            try:
                self._child.wait(5.0)
            except subprocess.TimeoutExpired:
                self._child.kill()
                self._child.wait()
        self._reader.join(5.0)
        if self._child.stdout is not None:
            self._child.stdout.close()
        with self._lock:
            # Not handed over in time: counted, not lost quietly.
            self.frames_dropped += sum(isinstance(x, bytes) for x in self._queue)
            self._queue.clear()
            self._bytes = 0
