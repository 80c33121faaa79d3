"""The sidecar loop's timers, and every cadence derived from the sampling interval.

One `Deadlines` holds the loop's named timers on the monotonic clock (the tick, the
heartbeat, the ring drain, the look for a network namespace): which are due, when the loop
must wake next, and a fixed grid for the tick that skips the intervals a sample overran.
`cadences(interval)` is the one place the interval turns into the other cadences.
"""

from __future__ import annotations

from typing import NamedTuple


class Cadences(NamedTuple):
    """How often each of the sidecar's readings happens, in ns, for one sampling interval."""

    interval_ns: int
    # Every regular tick gets a rate; edge samples closer than this (or 50 ms) to the last
    # rate wait for the next one.
    min_rate_ns: int
    uss_every_ns: int  # smaps_rollup walks every mapping: at most every 10 s, or each tick
    # A look for the target's own network namespace, once a second (half an interval early:
    # a tick a hair before the second still looks).
    net_look_ns: int
    # The longest a job's edge may share the last sample instead of taking its own.
    share_max_ns: int


def cadences(interval_s: float) -> Cadences:
    """The cadences of a sidecar sampling every interval_s seconds."""
    interval_ns = int(interval_s * 1e9)
    return Cadences(
        interval_ns=interval_ns,
        min_rate_ns=int(min(0.05, 0.5 * interval_s) * 1e9),
        uss_every_ns=int(max(interval_s, 10.0) * 1e9),
        net_look_ns=1_000_000_000 - interval_ns // 2,
        share_max_ns=interval_ns // 5,
    )


class Deadlines:
    """Named timers, each a time on the monotonic clock (ns) at which it is due; a timer never
    set is due at once."""

    __slots__ = ("_at",)

    def __init__(self) -> None:
        self._at: dict[str, int] = {}

    def at(self, name: str) -> int:
        """When the timer is due (0: never set)."""
        return self._at.get(name, 0)

    def set(self, name: str, at: int) -> None:
        self._at[name] = at

    def due(self, name: str, now: int) -> bool:
        return now >= self._at.get(name, 0)

    def advance(self, name: str, every: int, now: int) -> None:
        """Move the timer one step along its fixed grid of `every`; where that is not after
        now (a sample overran whole intervals), skip the steps already past."""
        at = self._at.get(name, 0) + every
        if at <= now:
            at += ((now - at) // every + 1) * every
        self._at[name] = at

    def next_wake(self, names: tuple[str, ...] | list[str], latest: int) -> int:
        """The earliest of the named timers, and at the latest `latest`."""
        at = self._at
        return min([latest, *(at.get(name, 0) for name in names)])
