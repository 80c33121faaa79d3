"""A driver that starts after its workers: who they are, when their jobs began, what time it is.

A sidecar says hello once, to whichever driver is there. A driver that starts (or restarts)
later never sees that hello: it would not know the worker's host and pid, nor the clock anchor
that maps the worker's monotonic times to dates, so every later sample would be dated by
uptime (~57 years ago), and jobs already open would be unknown. So every heartbeat carries the
hello again and the job_start of each open job (sidecar/service.py), and until a worker's
anchor is known its time-bearing frames are held here (raw, bounded in bytes and in time),
then folded in order once a heartbeat says who it is.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field

from .. import protocol

# A heartbeat comes every protocol.HEARTBEAT_S; past this, held frames are folded as they are
# (a sidecar of an older version, or a hand-made sender, never says).
HOLD_S = 3.0
# Raw bytes held for all such workers together; past it, the oldest worker's are folded.
HOLD_BYTES = 16 * 1024 * 1024
# Frames whose times mean nothing without the worker's anchor.
_TIMED = frozenset({protocol.SAMPLE, protocol.SPANS, protocol.MARK, protocol.JOB_START,
                    protocol.JOB_END})


def needs_anchor(frame: protocol.Frame) -> bool:
    """Whether this frame's times need an anchor it does not carry itself."""
    return frame.kind in _TIMED and not (frame.kind == protocol.JOB_START
                                         and frame.body.get("anchor"))


def from_heartbeat(frame: protocol.Frame) -> tuple[protocol.Frame | None, list[protocol.Frame]]:
    """The hello and the job_starts of open jobs a heartbeat carries, as frames of its
    worker (the builder checks their bodies as it checks any frame)."""
    hello = frame.body.get("hello")
    opened = frame.body.get("open")
    hello_frame = (protocol.Frame(protocol.HELLO, frame.worker, frame.seq, hello)
                   if isinstance(hello, dict) else None)
    starts = [protocol.Frame(protocol.JOB_START, frame.worker, frame.seq, body)
              for body in (opened if isinstance(opened, list) else ()) if isinstance(body, dict)]
    return hello_frame, starts


@dataclass
class _Held:
    since: float
    nbytes: int = 0
    frames: list[bytes] = field(default_factory=list)


class Unanchored:
    """Raw frames of workers whose anchor is not known yet, oldest worker first."""

    def __init__(self, hold_s: float = HOLD_S, max_bytes: int = HOLD_BYTES) -> None:
        self.hold_s = hold_s
        self.max_bytes = max_bytes
        self.nbytes = 0
        self._held: OrderedDict[str, _Held] = OrderedDict()

    def hold(self, worker: str, data: bytes, now: float) -> list[tuple[str, list[bytes]]]:
        """Keep one frame; returns what must be let go to stay within bytes (worker, frames)."""
        held = self._held.setdefault(worker, _Held(now))
        held.frames.append(data)
        held.nbytes += len(data)
        self.nbytes += len(data)
        out = []
        while self.nbytes > self.max_bytes and self._held:
            oldest = next(iter(self._held))
            out.append((oldest, self.release(oldest)))
        return out

    def release(self, worker: str) -> list[bytes]:
        held = self._held.pop(worker, None)
        if held is None:
            return []
        self.nbytes -= held.nbytes
        return held.frames

    def expired(self, now: float) -> list[tuple[str, list[bytes]]]:
        out = []
        while self._held:
            worker, held = next(iter(self._held.items()))
            if now - held.since < self.hold_s:
                break
            out.append((worker, self.release(worker)))
        return out

    def __contains__(self, worker: object) -> bool:
        return worker in self._held

