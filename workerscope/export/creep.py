"""Memory creep: a warm worker whose RSS after each job keeps growing, job after job, until
something kills it (dask/distributed's "memory leak in workers", Ray's "worker memory keeps
growing"). The one rule, for every view:

- a worker's RSS after a job is its tree's RSS at the first sample at or after the job's end
  (the sidecar takes one there), else the last before it;
- over the latest CREEP_MIN_JOBS jobs or more in a row (since the last fall of more than the
  threshold), it grew by more than max(CREEP_MIN_BYTES, CREEP_SHARE of the RSS after the first
  of them) a job on average, and rose after at least CREEP_RISING of them; the longest such
  run is the one told. A worker that allocates and frees a lot in each job (back where it
  started after each) is not flagged, nor one that grew once and stayed;
- the functions that held the growth: the span names whose calls' own RSS growth (end minus
  start, export/growth.py's figure where the samples pin it, less their children's) adds up
  to the most over those jobs.
"""

from __future__ import annotations

import bisect
import itertools
from collections.abc import Callable
from dataclasses import dataclass

from ..timeline import Job, Sample, Timeline
from .attribution import Attribution, attribute

CREEP_MIN_JOBS = 5
CREEP_MIN_BYTES = 16 * 1024 * 1024
CREEP_SHARE = 0.02
CREEP_RISING = 0.8  # of the jobs in a row, the share after which the RSS rose
HOLDERS_SHOWN = 3


@dataclass(frozen=True)
class Creep:
    """A worker whose memory crept: over `jobs` jobs, from `first_bytes` after the first to
    `last_bytes` after the last, `per_job_bytes` a job; `holders`: (span name, the RSS growth
    its calls held in those jobs), most first."""

    worker: str
    jobs: int
    first_bytes: float
    last_bytes: float
    per_job_bytes: float
    holders: tuple[tuple[str, float], ...]


def _after(samples: list[Sample], times: list[int], end_ns: int, next_ns: int | None) -> float | None:
    """The tree's RSS after a job: at the first sample at or after its end and before the
    next job's start, else the last one at or before its end (a sidecar that sampled just
    before takes none at the end of a short job)."""
    i = bisect.bisect_left(times, end_ns)
    if i < len(samples) and (next_ns is None or times[i] < next_ns) \
            and "rss_bytes" in samples[i].values:
        return samples[i].values["rss_bytes"]
    for k in range(i - 1, max(i - 4, -1), -1):
        if "rss_bytes" in samples[k].values:
            return samples[k].values["rss_bytes"]
    return None


def _creeps(points: list[float]) -> tuple[int, float] | None:
    """(jobs, growth a job) of the longest run of the latest jobs that creeps: at least
    CREEP_MIN_JOBS, since the last fall of more than the threshold, growing more than it a
    job on average and rising after CREEP_RISING of them; None if none does."""
    start = 0
    for k in range(1, len(points)):  # a fall (a restart of a cache, a gc): a new run
        if points[k - 1] - points[k] > max(CREEP_MIN_BYTES, CREEP_SHARE * points[k - 1]):
            start = k
    run = points[start:]
    for n in range(len(run), CREEP_MIN_JOBS - 1, -1):
        window = run[-n:]
        per_job = (window[-1] - window[0]) / (n - 1)
        rises = sum(b > a for a, b in itertools.pairwise(window))
        if (per_job > max(CREEP_MIN_BYTES, CREEP_SHARE * window[0])
                and rises >= CREEP_RISING * (n - 1)):
            return n, per_job
    return None


def memory_creep(t: Timeline, attribution: Attribution | None = None) -> list[Creep]:
    """Each worker whose RSS after each job crept (the module's rule), the largest first."""
    trees: dict[str, list[Sample]] = {}
    for s in t.samples:
        if s.scope == "tree":
            trees.setdefault(s.worker, []).append(s)
    jobs_of: dict[str, list[Job]] = {}
    for j in t.jobs:
        if j.end_ns is not None and j.worker in trees:
            jobs_of.setdefault(j.worker, []).append(j)
    found: list[tuple[str, list[Job], list[float], int, float]] = []
    for wid, jobs in jobs_of.items():
        samples = sorted(trees[wid], key=lambda s: s.t_ns)
        times = [s.t_ns for s in samples]
        jobs.sort(key=lambda j: j.end_ns or 0)
        starts = sorted(j.start_ns for j in jobs)
        points: list[tuple[Job, float]] = []
        for j in jobs:
            k = bisect.bisect_right(starts, j.end_ns or 0)
            v = _after(samples, times, j.end_ns or 0, starts[k] if k < len(starts) else None)
            if v is not None:
                points.append((j, v))
        crept = _creeps([v for _, v in points])
        if crept is not None:
            n, per_job = crept
            window = points[-n:]
            found.append((wid, [j for j, _ in window], [v for _, v in window], n, per_job))
    if found and attribution is None:
        attribution = attribute(t)  # once, only where something crept
    return sorted((Creep(wid, n, values[0], values[-1], per_job,
                         _holders(t, wid, {j.id for j in jobs}, attribution or {}))
                   for wid, jobs, values, n, per_job in found), key=lambda c: -c.per_job_bytes)


def _holders(t: Timeline, wid: str, jobs: set[int],
             attribution: Attribution) -> tuple[tuple[str, float], ...]:
    """The span names whose calls in `jobs` held the most RSS growth of their own: a call's
    growth less its children's (where the samples pin them), summed by name."""
    spans = [s for s in t.spans if s.worker == wid and s.kind != "job" and s.job in jobs]
    grew = {(s.pid, s.id): attribution.get((s.worker, s.pid, s.id), {}).get("rss_growth_bytes")
            for s in spans}
    children: dict[tuple[int, int], float] = {}
    for s in spans:
        g = grew[(s.pid, s.id)]
        if s.parent is not None and g is not None:
            children[(s.pid, s.parent)] = children.get((s.pid, s.parent), 0.0) + g
    held: dict[str, float] = {}
    for s in spans:
        g = grew[(s.pid, s.id)]
        if g is not None:
            own = g - children.get((s.pid, s.id), 0.0)
            if own > 0:
                held[s.name] = held.get(s.name, 0.0) + own
    ranked = sorted(held.items(), key=lambda kv: -kv[1])
    return tuple(ranked[:HOLDERS_SHOWN])


def creep_lines(creeps: list[Creep], name: Callable[[str], str] = str) -> list[str]:
    """Each creep as a sentence, for the reports; `name` shows a worker id."""
    from ..units import fmt_bytes

    out = []
    for c in creeps:
        held = ", ".join(f"{name_} (+{fmt_bytes(grew)})" for name_, grew in c.holders)
        out.append(f"{name(c.worker)}: memory creeps: RSS after each job grew {fmt_bytes(c.per_job_bytes)}"
                   f" a job over {c.jobs} jobs, {fmt_bytes(c.first_bytes)} to "
                   f"{fmt_bytes(c.last_bytes)}" + (
                       f"; held by {held}" if held else
                       "; no function is named: no span of those jobs has its growth pinned "
                       "by the samples (no @timed spans there, or calls shorter than the "
                       "sample interval: a shorter interval would tell)"))
    return out
