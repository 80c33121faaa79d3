"""A tree's memory and CPU per process, as `mprof --multiprocess` draws it: from the `proc`
samples, one line for each of the TOP processes that weighed most (by peak RSS, or by CPU
time), and one line, "others", summing the rest.

Every process of a tree is sampled at the same tick, so the others of one worker are summed
sample by sample. The others of several workers (each ticking on its own clock) are added up
by carrying each worker's last sum forward until its next sample, for as long as that worker
has samples.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Callable
from itertools import pairwise

from ..timeline import Timeline
from ..units import short_worker

TOP = 5  # processes drawn one by one; the rest are summed
OTHERS = -1  # the colour index of the "others" line: grey in every view

Points = list[tuple[int, float]]
Key = tuple[str, int]  # (worker, pid)


def _peak(points: Points) -> float:
    return max(v for _, v in points)


def _area(points: Points) -> float:
    """The integral of a rate over time: a sample's value describes the interval it ends,
    so each counts for the time since the one before (the first for nothing)."""
    return sum(v * (t1 - t0) for (t0, _), (t1, v) in pairwise(points))


def _carry_sum(parts: list[Points]) -> Points:
    """The sum of step functions, each held from one of its points to the next and ending at
    its last point."""
    if len(parts) == 1:
        return parts[0]
    times = sorted({t for p in parts for t, _ in p})
    out: Points = []
    for t in times:
        total = 0.0
        for p in parts:
            if p[0][0] <= t <= p[-1][0]:
                total += p[bisect.bisect_right(p, (t, math.inf)) - 1][1]
        out.append((t, total))
    return out


def process_lines(t: Timeline, metric: str, rank: str,
                  order: list[str]) -> list[tuple[str, int, Points]]:
    """(label, colour, points) for the breakdown of `metric` over the workers in `order`: the
    TOP processes by `rank` ("peak" or "area", i.e. CPU time for cpu_percent), largest first,
    labelled "name pid" (plus the worker when there are several hosts), then "others (N
    processes)". A worker's own process (its tree's root) takes the worker's colour, its index
    in `order`, as the worker's line does in the tree's plots; other processes take colours
    after the workers', by rank; OTHERS for the sum. A single leftover process is drawn as
    itself."""
    wanted = set(order)
    series: dict[Key, Points] = {}
    for smp in t.samples:
        if smp.scope == "proc" and smp.pid is not None and smp.worker in wanted:
            v = smp.values.get(metric)
            if isinstance(v, (int, float)) and math.isfinite(v):
                series.setdefault((smp.worker, smp.pid), []).append((smp.t_ns, float(v)))
    if not series:
        return []
    for pts in series.values():
        pts.sort()
    weigh: Callable[[Points], float] = _peak if rank == "peak" else _area
    ranked = sorted(series, key=lambda k: (-weigh(series[k]), k))
    top, rest = ranked[:TOP], ranked[TOP:]
    if len(rest) == 1:
        top, rest = ranked, []
    # A pid names a process on its host: the worker is said only when there are several hosts.
    hosts = {w: (t.workers[w].host if w in t.workers else w) for w, _ in series}
    several = len(set(hosts.values())) > 1
    out: list[tuple[str, int, Points]] = []
    index = {w: i for i, w in enumerate(order)}
    for i, (w, pid) in enumerate(top):
        name = t.processes.get((w, pid), "pid")
        label = f"{name} {pid}" + (f" ({short_worker(w)})" if several else "")
        root = w in t.workers and t.workers[w].pid == pid
        out.append((label, index[w] if root else len(order) + i, series[(w, pid)]))
    if rest:
        per_worker: dict[str, dict[int, float]] = {}
        for w, pid in rest:
            sums = per_worker.setdefault(w, {})
            for ts, v in series[(w, pid)]:
                sums[ts] = sums.get(ts, 0.0) + v
        parts = [sorted(sums.items()) for sums in per_worker.values()]
        out.append((f"others ({len(rest)} processes)", OTHERS, _carry_sum(parts)))
    return out
