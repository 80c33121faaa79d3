"""The live OTLP exporter's work, in a process of its own (`python -m
workerscope.driver.otlp_exporter URL SERVICE FLUSH_S`, started by driver/otlp.py's LiveOtlp):
the driver's interpreter lock is then the receive thread's alone, and the export runs on a
core of its own.

It folds the frames it is given into a TimelineBuilder of its own (plain spans straight to
OTLP's wire bytes: export/otlp.py's SpanWire), takes out what they made (ended jobs, spans,
samples), moves it onto the driver's clock and sends it (OtlpSender: batches, gzip, retries
with backoff), a cycle each FLUSH_S or each DRAIN_BYTES of frames. While a request waits or
retries it reads nothing: the pipe, then the driver's queue, fill, and the driver drops and
counts past its bound.

The pipe from the driver carries messages of a kind byte, a length (u32) and a body: a
frame as it came (F), a worker to let go of once what came before it is sent (W), the
drivers' clock offsets by worker (O, msgpack), close within N seconds (C, msgpack). Back,
after each cycle, the exporter's counts (msgpack, length-prefixed). End of input is a close
too (the driver is gone); SIGTERM makes it give up at once: what it still held is counted,
its counts written, and it exits. Ctrl-C is the driver's to handle: ignored here.
"""

from __future__ import annotations

import logging
import math
import os
import select
import signal
import struct
import sys
import time
from collections.abc import Callable
from typing import Any

import msgpack

from .. import protocol
from ..builder import TimelineBuilder
from ..errors import ProtocolError
from ..export.otlp import OtlpSender, SpanWire
from ..timeline import Timeline

log = logging.getLogger("workerscope")

DRAIN_BYTES = 1024 * 1024  # frames folded in one cycle (and one frame more)
CLOSING_TIMEOUT_S = 2.0  # a request's timeout once closing
IDLE_S = 0.02  # no input for this long: caught up
IDLE_CYCLE_S = 0.05  # the least time between two cycles made for being caught up
HEAD = struct.Struct("<cI")  # a message's kind and the length of its body
FRAME, FORGET, OFFSETS, CLOSE = b"F", b"W", b"O", b"C"
COUNTS = ("bad_frames", "frames_dropped", "requests", "failed", "spans", "points",
          "spans_dropped", "points_dropped", "last_error")


class Exporter:
    """Frames folded and what they made sent; counted in counts()."""

    def __init__(self, url: str, service: str, wait_for: Callable[[float], bool]) -> None:
        self.sender = OtlpSender(url, service, wait_for=wait_for, live=True)
        self.builder = TimelineBuilder(keep=True)
        self.wire = SpanWire(self.sender.protos)
        self.offsets: dict[str, int] = {}
        self.bad_frames = 0
        self.frames_dropped = 0  # frames given but never folded and sent (a close's deadline)
        self.folded = 0  # bytes folded since the last cycle
        self._forget: list[str] = []

    def fold(self, data: bytes) -> None:
        self.folded += len(data)
        try:
            frame = protocol.decode_frame(data, len(data))
            if frame.kind == protocol.SPANS:  # the bulk: plain spans straight to the wire
                wid = frame.worker
                pid, plain, rest = self.builder.plain_records(wid, frame.body)
                self.wire.add(wid, pid, plain, self.offsets.get(wid, 0))
                if rest is None:
                    return
                frame = frame._replace(body=rest)
            self.builder.add(frame)
        except ProtocolError:
            self.bad_frames += 1  # the receive thread took it whole; its body did not fold

    def forget(self, wid: str) -> None:
        self._forget.append(wid)

    def cycle(self) -> None:
        """Send what the frames folded so far made; then let go of the workers let go of."""
        self.folded = 0
        try:
            wire = self.wire.take()
            t = self._take(bool(wire[1]))
            if t is not None:
                self.sender.send(t, wire)
            for wid in self._forget:
                self.builder.forget(wid)
            self._forget.clear()
        except Exception as err:  # noqa: BLE001 - the exporter must never die: counted, it goes on
            self.sender.sent.last_error = f"{type(err).__name__}: {err}"
            log.warning("workerscope: OTLP export cycle failed: %r", err)

    def _take(self, spans: bool) -> Timeline | None:
        """What the frames folded so far made, on the driver's clock, taken out of the
        builder (which keeps only its workers and open jobs)."""
        b = self.builder
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
        return TimelineBuilder.finish((t, []), self.offsets)

    def counts(self) -> dict[str, Any]:
        s = self.sender.sent
        return {"bad_frames": self.bad_frames, "frames_dropped": self.frames_dropped,
                "requests": s.requests, "failed": s.failed, "spans": s.spans,
                "points": s.points, "spans_dropped": s.spans_dropped,
                "points_dropped": s.points_dropped, "last_error": s.last_error}


class _Process:
    """The exporter process's loop: read messages, fold, send a cycle at a time."""

    def __init__(self, url: str, service: str, flush_s: float) -> None:
        self.deadline = math.inf  # monotonic: set by a close, or at once by SIGTERM
        self.closing = False
        self.flush_s = flush_s
        self.ex = Exporter(url, service, self._interrupted)
        self.buf = bytearray()
        self.eof = False

    def _interrupted(self, seconds: float) -> bool:
        """Between retries: sleep, and True (give up) once past the close deadline."""
        left = self.deadline - time.monotonic()
        time.sleep(max(0.0, min(seconds, left)))
        return time.monotonic() >= self.deadline

    def give_up(self, *_: object) -> None:  # SIGTERM
        self.closing = True
        self.deadline = time.monotonic()
        self.ex.sender.deadline = self.deadline

    def _close(self, within: float) -> None:
        self.closing = True
        self.deadline = min(self.deadline, time.monotonic() + max(within, 0.0))
        self.ex.sender.deadline = self.deadline
        self.ex.sender.timeout = min(self.ex.sender.timeout, CLOSING_TIMEOUT_S)

    def _messages(self) -> None:
        """Apply every whole message read so far, while a cycle's bytes are not folded."""
        buf, view, at = self.buf, memoryview(self.buf), 0
        try:
            while len(buf) - at >= HEAD.size and self.ex.folded < DRAIN_BYTES:
                kind, size = HEAD.unpack_from(buf, at)
                if len(buf) - at - HEAD.size < size:
                    break
                body = bytes(view[at + HEAD.size:at + HEAD.size + size])
                at += HEAD.size + size
                if kind == FRAME:
                    if self.closing and time.monotonic() >= self.deadline:
                        self.ex.frames_dropped += 1
                    else:
                        self.ex.fold(body)
                elif kind == FORGET:
                    self.ex.forget(body.decode())
                elif kind == OFFSETS:
                    self.ex.offsets = {str(k): int(v) for k, v in msgpack.unpackb(body).items()}
                elif kind == CLOSE:
                    self._close(float(msgpack.unpackb(body)))
        finally:
            view.release()
            del buf[:at]

    def run(self, fd: int, out: int) -> None:
        next_cycle = time.monotonic() + self.flush_s
        last_cycle = idle_since = time.monotonic()
        while True:
            self._messages()
            now = time.monotonic()
            # A cycle: every FLUSH_S, DRAIN_BYTES of frames, at the end; and once caught up
            # (nothing came for IDLE_S), at least IDLE_CYCLE_S after the last: a burst is
            # sent as it ends, and a steady trickle still makes few requests.
            caught_up = (self.ex.folded and now - idle_since >= IDLE_S
                         and now - last_cycle >= IDLE_CYCLE_S)
            if (self.ex.folded >= DRAIN_BYTES or now >= next_cycle or caught_up
                    or (self.eof and not self.buf)):
                self.ex.cycle()
                _write(out, msgpack.packb(self.ex.counts()))
                last_cycle = time.monotonic()
                next_cycle = last_cycle + self.flush_s
                if self.eof and not self.buf:
                    return
                continue
            if self.eof:  # a torn last message: nothing more comes
                self.buf.clear()
                continue
            if self.ex.folded >= DRAIN_BYTES:
                continue
            wait = next_cycle - now
            if self.ex.folded:
                wait = min(wait, max(IDLE_S - (now - idle_since), last_cycle + IDLE_CYCLE_S - now))
            ready, _, _ = select.select([fd], [], [], max(0.0, wait))
            if ready:
                chunk = os.read(fd, 1 << 20)
                idle_since = time.monotonic()
                if chunk:
                    self.buf += chunk
                else:
                    self.eof = True
                    self._close(self.deadline - time.monotonic() if self.closing
                                else CLOSE_AFTER_EOF_S)


CLOSE_AFTER_EOF_S = 10.0  # the driver gone without a close: what is held is sent within this


def _write(fd: int, data: bytes) -> None:
    blob = struct.pack("<I", len(data)) + data
    while blob:
        try:
            n = os.write(fd, blob)
        except BrokenPipeError:
            return  # the driver is gone: nobody reads the counts
        blob = blob[n:]


def main(argv: list[str]) -> int:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the driver's Ctrl-C: its close ends us
    # What goes wrong is in the counts, and the driver logs it through the user's logging.
    logging.disable(logging.CRITICAL)
    url, service, flush_s = argv[0], argv[1], float(argv[2])
    proc = _Process(url, service, flush_s)
    signal.signal(signal.SIGTERM, proc.give_up)
    proc.run(sys.stdin.fileno(), sys.stdout.fileno())
    # Its counts are written: no interpreter teardown (tens of ms of protobuf's modules) for
    # the driver's close to wait on.
    logging.shutdown()
    os._exit(0)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
