"""How far each worker's wall clock runs ahead of the driver's: Cristian's method.

The driver sends a ping at t0 (its clock), the sidecar answers with t1 (its clock), the answer
arrives at t2 (the driver's clock again). If the two legs took equally long, the sidecar read
t1 at the driver's (t0 + t2) / 2, so the offset is t1 - (t0 + t2) / 2, and it is wrong by at
most half the round trip t2 - t0. Of several samples the one with the shortest round trip wins:
on loopback that gives ~10 us, where the median of all samples was 20x worse.

Pure arithmetic and bookkeeping, no sockets: the Subscriber sends what `ClockSync.ping` returns
and hands each pong to `ClockSync.pong`. Not thread-safe: the Subscriber calls it under its lock.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

# Samples taken from each worker (at its hello, heartbeats and bye) before its estimate is kept.
PINGS_AT_HELLO = 5
# Pings whose pong never came are forgotten, oldest first, past this many.
MAX_PENDING_PINGS = 10_000
# The largest clock offset taken for a real one: a century; past it a pong is refused.
SANE_OFFSET_NS = 100 * 365 * 86_400 * 10**9
_INT64 = 2**63


def offset_sample(t0: int, t1: int, t2: int) -> tuple[int, int]:
    """(offset, round trip) in ns of one ping sent at t0 and answered at t1 (the worker's
    clock), its answer received at t2 (t0 and t2 on the driver's clock)."""
    return t1 - (t0 + t2) // 2, t2 - t0


@dataclass
class ClockEstimate:
    """The best offset sample of one worker's clock so far: the lowest round trip wins."""

    offset_ns: int = 0
    delay_ns: int | None = None  # the round trip of the sample kept; None before the first
    samples: int = 0

    @property
    def error_ns(self) -> int | None:
        """The bound on the offset's error: half the best round trip (None before a sample)."""
        return None if self.delay_ns is None else self.delay_ns // 2

    def add(self, t0: int, t1: int, t2: int) -> bool:
        """Count one sample and keep it if its round trip is the shortest yet. A round trip
        below zero means the driver's wall clock stepped back mid-ping: counted, never kept."""
        self.samples += 1
        offset, delay = offset_sample(t0, t1, t2)
        if delay < 0 or (self.delay_ns is not None and delay >= self.delay_ns):
            return False
        self.offset_ns, self.delay_ns = offset, delay
        return True


class ClockSync:
    """The pings in flight to many workers and each worker's ClockEstimate.

    now: the driver's wall clock in ns (a fake one in tests)."""

    def __init__(self, now: Callable[[], int] = time.time_ns, wanted: int = PINGS_AT_HELLO,
                 max_pending: int = MAX_PENDING_PINGS) -> None:
        self.now = now
        self.wanted = wanted
        self.max_pending = max_pending
        self.estimates: dict[str, ClockEstimate] = {}
        self._pending: dict[int, tuple[str, int]] = {}  # ping id -> (worker, t0)
        self._last_id = 0

    def wants(self, wid: str) -> bool:
        """Whether this worker has answered fewer than `wanted` pings so far."""
        estimate = self.estimates.get(wid)
        return estimate is None or estimate.samples < self.wanted

    def ping(self, wid: str) -> dict[str, int]:
        """Note a ping to this worker sent now; returns the ping's body, {id, t0}."""
        self.estimates.setdefault(wid, ClockEstimate())
        self._last_id += 1
        t0 = self.now()
        self._pending[self._last_id] = (wid, t0)
        while len(self._pending) > self.max_pending:  # pongs that never came
            del self._pending[next(iter(self._pending))]
        return {"id": self._last_id, "t0": t0}

    def pong(self, wid: str, ping_id: int, t1: int) -> bool:
        """Fold in this worker's answer to ping `ping_id`, read at t1 on its clock. False for
        an answer to no ping of ours to that worker (forgotten, or already answered)."""
        t2 = self.now()
        pending = self._pending.get(ping_id)
        if pending is None or pending[0] != wid:
            return False
        del self._pending[ping_id]
        if not -_INT64 <= t1 < _INT64 or abs(t1 - t2) > SANE_OFFSET_NS:
            # A clock a century off is no clock: such a sample (a key holder's, or a broken
            # host's) would make every later time of that worker unwritable.
            return False
        self.estimates[wid].add(pending[1], t1, t2)
        return True

    def forget(self, wid: str) -> None:
        self.estimates.pop(wid, None)
        for ping_id in [i for i, (w, _) in self._pending.items() if w == wid]:
            del self._pending[ping_id]

    def offsets(self) -> dict[str, tuple[int, int | None]]:
        """worker -> (ns its clock runs ahead of the driver's, error bound in ns)."""
        return {wid: (e.offset_ns, e.error_ns) for wid, e in self.estimates.items()}
