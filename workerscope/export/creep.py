"""Memory creep: a warm worker whose RSS after each job keeps growing, job after job, until
something kills it (dask/distributed's "memory leak in workers", Ray's "worker memory keeps
growing"). The one rule, for every view:

- a worker's RSS after a job is its tree's RSS at the first sample at or after the job's end
  (the sidecar takes one there), else the last before it;
- over at least CREEP_MIN_JOBS jobs in a row, it grew by more than max(CREEP_MIN_BYTES,
  CREEP_SHARE of the RSS after the first of them) a job on average, and rose after at least
  CREEP_RISING of them: a worker that allocates and frees a lot in each job (back where it
  started after each) is not flagged, nor one that grew once and stayed;
- the functions that held the growth: the span names whose calls' RSS growth (end minus start,
  export/growth.py's figure where the samples pin it) adds up to the most over those jobs,
  leaf calls first (a caller's growth includes its callees').
"""

from __future__ import annotations

import bisect
import itertools
from dataclasses import dataclass

from ..timeline import Sample, Timeline
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


def _after(samples: list[Sample], times: list[int], t_ns: int) -> float | None:
    """The tree's RSS at the first sample at or after t_ns, else the last before it."""
    i = bisect.bisect_left(times, t_ns)
    for k in (i, i - 1):
        if 0 <= k < len(samples) and "rss_bytes" in samples[k].values:
            return samples[k].values["rss_bytes"]
    return None


def memory_creep(t: Timeline, attribution: Attribution | None = None) -> list[Creep]:
    """Each worker whose RSS after each job crept (the module's rule), the largest first."""
    trees: dict[str, list[Sample]] = {}
    for s in t.samples:
        if s.scope == "tree":
            trees.setdefault(s.worker, []).append(s)
    found: list[Creep] = []
    for wid, samples in trees.items():
        samples.sort(key=lambda s: s.t_ns)
        times = [s.t_ns for s in samples]
        jobs = sorted((j for j in t.jobs if j.worker == wid and j.end_ns is not None),
                      key=lambda j: j.end_ns or 0)
        after = [(j, _after(samples, times, j.end_ns or 0)) for j in jobs]
        points = [(j, v) for j, v in after if v is not None]
        if len(points) < CREEP_MIN_JOBS:
            continue
        first, last = points[0][1], points[-1][1]
        per_job = (last - first) / (len(points) - 1)
        rises = sum(b[1] > a[1] for a, b in itertools.pairwise(points))
        if (per_job <= max(CREEP_MIN_BYTES, CREEP_SHARE * first)
                or rises < CREEP_RISING * (len(points) - 1)):
            continue
        found.append(Creep(wid, len(points), first, last, per_job,
                           _holders(t, wid, {j.id for j, _ in points}, attribution)))
    return sorted(found, key=lambda c: -c.per_job_bytes)


def _holders(t: Timeline, wid: str, jobs: set[int],
             attribution: Attribution | None) -> tuple[tuple[str, float], ...]:
    """The span names whose calls in `jobs` held the most RSS growth, leaf calls first."""
    attribution = attribute(t) if attribution is None else attribution
    spans = [s for s in t.spans if s.worker == wid and s.kind != "job" and s.job in jobs]
    parents = {(s.pid, s.parent) for s in spans if s.parent is not None}
    held: dict[tuple[bool, str], float] = {}
    for s in spans:
        grew = attribution.get((s.worker, s.pid, s.id), {}).get("rss_growth_bytes")
        if grew is not None and grew > 0:
            key = ((s.pid, s.id) in parents, s.name)  # leaves (False) sort first
            held[key] = held.get(key, 0.0) + grew
    ranked = sorted(held.items(), key=lambda kv: (kv[0][0], -kv[1]))
    return tuple((name, grew) for (_, name), grew in ranked[:HOLDERS_SHOWN])


def creep_lines(creeps: list[Creep]) -> list[str]:
    """Each creep as a sentence, for the reports."""
    from ..units import fmt_bytes

    out = []
    for c in creeps:
        held = ", ".join(f"{name} (+{fmt_bytes(grew)})" for name, grew in c.holders)
        out.append(f"{c.worker}: memory creeps: RSS after each job grew {fmt_bytes(c.per_job_bytes)}"
                   f" a job over {c.jobs} jobs, {fmt_bytes(c.first_bytes)} to "
                   f"{fmt_bytes(c.last_bytes)}" + (
                       f"; held by {held}" if held else
                       "; no call's growth is pinned by the samples (calls shorter than the "
                       "sample interval): a shorter interval would name the functions"))
    return out
