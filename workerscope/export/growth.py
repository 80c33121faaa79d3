"""How much a span's process grew: bounds from the RSS samples, and a figure only where they agree.

Samples come every interval, spans at any time: a call shorter than the interval shares its
sample interval with its neighbours, and RSS that rose in that interval may be theirs. So each
figure is worked out as bounds, taking of each sample interval around an edge only what the span
could have done there:
- within a sample interval RSS is taken to move one way (a rise, or a fall), so at an instant
  between two samples it lies between their values;
- RSS rises no faster than MAX_RISE (page faults take time), so the part of an interval outside
  the span can account for only so much of that interval's rise;
- a high-water mark (peak_rss_bytes) that rose between two samples is the largest RSS between
  them.
A figure is given (the middle of its bounds) where the bounds are within TOLERANCE of it, or
within SLACK bytes: else the samples cannot tell the span's growth from its neighbours', and
there is no figure at all, rather than a share of someone else's.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Iterable
from dataclasses import dataclass

MAX_RISE = 8 * 1024**3  # bytes/s: faulting in fresh pages, 4 KiB or 2 MiB at a time, is slower
TOLERANCE = 0.1  # a figure is given within +/- 10 %
SLACK = 1024**2  # ... or within +/- 1 MiB, a noise floor below which the share does not matter

Bounds = tuple[float, float]


def pinned(bounds: Bounds | None) -> float | None:
    """The middle of bounds that are close enough to say a figure, else None."""
    if bounds is None:
        return None
    lo, hi = bounds
    mid, half = (lo + hi) / 2, (hi - lo) / 2
    return mid if half <= max(TOLERANCE * abs(mid), SLACK) else None


@dataclass
class Memory:
    """One process's RSS and high-water mark (nan where not read) at its sample times."""

    times: list[int]
    rss: list[float]
    hwm: list[float]

    @classmethod
    def of(cls, rows: Iterable[tuple[int, dict[str, float]]]) -> Memory:
        """From (t_ns, values) rows in time order; rows without rss_bytes are skipped."""
        m = cls([], [], [])
        for t, v in rows:
            if "rss_bytes" in v:
                m.times.append(t)
                m.rss.append(float(v["rss_bytes"]))
                m.hwm.append(float(v.get("peak_rss_bytes", math.nan)))
        return m

    def level(self, t: int, i: int | None = None) -> Bounds | None:
        """Bounds on the RSS at t; clamped to the first and last samples (None if none).
        i: bisect_left(self.times, t), where the caller has it already."""
        times, rss = self.times, self.rss
        if not times:
            return None
        if i is None:
            i = bisect.bisect_left(times, t)
        if i < len(times) and times[i] == t:
            return rss[i], rss[i]
        if i == 0:
            return rss[0], rss[0]
        if i == len(times):
            return rss[-1], rss[-1]
        a, b = times[i - 1], times[i]
        ra, rb = rss[i - 1], rss[i]
        lo = max(min(ra, rb), rb - MAX_RISE * (b - t) / 1e9)
        hi = min(max(ra, rb), ra + MAX_RISE * (t - a) / 1e9)
        if lo > hi:  # the samples break an assumption (a dip, a faster rise): say the middle
            lo = hi = ra + (rb - ra) * (t - a) / (b - a)
        return lo, hi

    def end_growth(self, t0: int, t1: int) -> Bounds | None:
        """Bounds on RSS at t1 minus RSS at t0."""
        return self.growth(t0, t1)[0]

    def peak_growth(self, t0: int, t1: int) -> Bounds | None:
        """Bounds on the most the RSS rose above its level at t0 while [t0, t1] ran."""
        return self.growth(t0, t1)[1]

    def growth(self, t0: int, t1: int,
               at: tuple[int, int, int] | None = None) -> tuple[Bounds | None, Bounds | None]:
        """(end_growth, peak_growth) of [t0, t1], each edge's level worked out once. at: the
        caller's (bisect_left(times, t0), bisect_left(times, t1), bisect_right(times, t1))."""
        times = self.times
        if at is None:
            at = (bisect.bisect_left(times, t0), bisect.bisect_left(times, t1),
                  bisect.bisect_right(times, t1))
        lo_i, end_i, hi_i = at
        start, end = self.level(t0, lo_i), self.level(t1, end_i)
        if start is None or end is None:
            return None, None
        return (end[0] - start[1], end[1] - start[0]), self._peak(t0, t1, start, end, lo_i, hi_i)

    def growth_inside(self, t0: int, t1: int, k: int) -> tuple[Bounds, Bounds]:
        """growth(t0, t1) of a span between two samples, times[k - 1] < t0 <= t1 < times[k]
        (the common case: calls shorter than the interval), by the same arithmetic as
        level() and _peak() take there, without their bisects, slices and branches."""
        a, b = self.times[k - 1], self.times[k]
        ra, rb = self.rss[k - 1], self.rss[k]
        low, high = min(ra, rb), max(ra, rb)
        lo0 = max(low, rb - MAX_RISE * (b - t0) / 1e9)
        hi0 = min(high, ra + MAX_RISE * (t0 - a) / 1e9)
        if lo0 > hi0:
            lo0 = hi0 = ra + (rb - ra) * (t0 - a) / (b - a)
        lo1 = max(low, rb - MAX_RISE * (b - t1) / 1e9)
        hi1 = min(high, ra + MAX_RISE * (t1 - a) / 1e9)
        if lo1 > hi1:
            lo1 = hi1 = ra + (rb - ra) * (t1 - a) / (b - a)
        peak_lo, peak_hi = max(lo0, lo1), max(hi0, hi1)
        if self.hwm[k] > self.hwm[k - 1]:  # a new peak in the interval: as much as reachable
            peak_hi = max(peak_hi, min(self.hwm[k], hi0 + MAX_RISE * (t1 - t0) / 1e9))
        return (lo1 - hi0, hi1 - lo0), (max(peak_lo - hi0, 0.0), max(peak_hi - lo0, 0.0))

    def _peak(self, t0: int, t1: int, start: Bounds, end: Bounds, lo_i: int, hi_i: int) -> Bounds:
        times, rss, hwm = self.times, self.rss, self.hwm
        peak_lo = max(start[0], end[0], *rss[lo_i:hi_i])
        peak_hi = max(start[1], end[1], *rss[lo_i:hi_i])
        # Each sample interval that meets the span, where the high-water mark rose over it:
        # its largest RSS, as much of it as could have been reached inside the span.
        for k in range(max(lo_i, 1), min(hi_i + 1, len(times))):
            a, b = times[k - 1], times[k]
            if not hwm[k] > hwm[k - 1]:  # no new peak in it (or not read, or reset)
                continue
            if a >= t0 and b <= t1:
                peak_lo = max(peak_lo, hwm[k])
                reach = hwm[k]
            elif a < t0:
                reach = start[1] + MAX_RISE * (min(b, t1) - t0) / 1e9
            else:
                reach = rss[k - 1] + MAX_RISE * (t1 - a) / 1e9
            peak_hi = max(peak_hi, min(hwm[k], reach))
        return max(peak_lo - start[1], 0.0), max(peak_hi - start[0], 0.0)
