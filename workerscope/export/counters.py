"""The counters of a trace (Chrome .json and Perfetto .pftrace), grouped and named once.

A worker's counters come process by process, its tree root first: the tree's and the process's
own (`tree.*`, `proc.*`) lead, then its threads' (`thread.*`, one track per thread: the tid is
in the name, so two threads never merge), then the sidecar's cost. A machine's counters
(`host.*`, `gpu<i>.*`) come once per host, from the worker that sampled them most, as the
report's plots take them. Cumulative counters (CPU seconds, IO bytes, context switches, network
and disk totals: docs/METRICS.md) go out as per-second rates, named `<scope>.<metric>/s`. A
thread whose counters never move from 0 (a pool's parked thread: most threads of a process
that imports numpy or torch) has nothing to show.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import NamedTuple

from ..protocol import CUMULATIVE, is_gpu_scope  # a trace shows cumulative ones as rates
from ..timeline import Sample, Timeline

# Within a process: the tree's counters (on the root), then its own, its threads', the sidecar's.
_SCOPE_RANK = {"tree": 0, "proc": 1, "thread": 2, "sidecar": 3}


class CounterGroup(NamedTuple):
    """The samples of one scope of one process (or thread, or machine device), in time order."""
    host: str
    worker: str  # whose samples these are; for a machine's device, the worker that read it most
    scope: str
    pid: int | None  # the process the counters sit on; None for a machine's device
    tid: int | None  # the thread, for scope thread
    samples: list[Sample]


def counter_name(scope: str, metric: str, tid: int | None = None) -> str:
    """The track name of a counter: "tree.rss_bytes", "tree.read_bytes/s" for a cumulative
    one's rate, "thread.cpu_percent (tid 12)" for a thread's."""
    name = f"{scope}.{metric}/s" if metric in CUMULATIVE else f"{scope}.{metric}"
    return name if tid is None else f"{name} (tid {tid})"


def is_device(scope: str) -> bool:
    """A machine's scope (host, gpu<i>, gpu<i>/mig<g>): the same values for every worker of
    that host."""
    return scope == "host" or is_gpu_scope(scope)


def counter_groups(t: Timeline) -> tuple[list[CounterGroup], list[CounterGroup]]:
    """(the workers' groups, the machines' groups), each in the order a trace shows them:
    workers as t.workers lists them, each worker's root process first, then by pid; in a
    process tree, proc, thread (by tid), sidecar; machines by host, host before gpu<i>."""
    host_of = {wid: w.host for wid, w in t.workers.items()}
    root_of = {wid: w.pid for wid, w in t.workers.items()}
    worker_rank = {wid: i for i, wid in enumerate(t.workers)}
    by_key: dict[tuple[str, str, int | None, int | None], list[Sample]] = {}
    for smp in t.samples:
        pid = None if is_device(smp.scope) else smp.pid
        tid = smp.tid if smp.scope == "thread" else None
        by_key.setdefault((smp.worker, smp.scope, pid, tid), []).append(smp)
    workers: list[CounterGroup] = []
    best: dict[tuple[str, str], CounterGroup] = {}
    for (wid, scope, pid, tid), samples in by_key.items():
        samples.sort(key=lambda s: s.t_ns)
        group = CounterGroup(host_of.get(wid, ""), wid, scope, pid, tid, samples)
        if pid is None and tid is None and is_device(scope):
            k = (group.host, scope)
            if k not in best or len(samples) > len(best[k].samples):
                best[k] = group
        else:
            workers.append(group)

    def worker_order(g: CounterGroup) -> tuple[int, str, bool, int, int, int]:
        pid = g.pid if g.pid is not None else -1
        return (worker_rank.get(g.worker, len(worker_rank)), g.worker, pid != root_of.get(g.worker),
                pid, _SCOPE_RANK.get(g.scope, len(_SCOPE_RANK)), g.tid or 0)

    workers.sort(key=worker_order)
    machines = [best[k] for k in sorted(best, key=lambda k: (k[0], k[1] != "host", k[1]))]
    return workers, machines


def group_values(group: CounterGroup) -> Iterator[tuple[int, list[tuple[str, float]]]]:
    """(t_ns, [(metric, value)]) per sample: finite values only, and for a cumulative metric
    its rate per second since its previous value, by plotspec.counter_rates' rule (none for
    its first value, nor where it went back)."""
    last: dict[str, tuple[int, float]] = {}
    for smp in group.samples:
        values: list[tuple[str, float]] = []
        for metric, value in smp.values.items():
            if not isinstance(value, (int, float)) or not math.isfinite(value):
                continue
            if metric in CUMULATIVE:
                prev = last.get(metric)
                last[metric] = (smp.t_ns, value)
                if prev is not None and smp.t_ns > prev[0] and value >= prev[1]:
                    values.append((metric, (value - prev[1]) * 1e9 / (smp.t_ns - prev[0])))
            else:
                values.append((metric, value))
        yield smp.t_ns, values


def track_points(group: CounterGroup) -> dict[str, list[tuple[int, float]]]:
    """Each counter of a group with the points it shows, (t_ns, value) in time order, by
    group_values' rule; counters in name order, none without a point."""
    points: dict[str, list[tuple[int, float]]] = {}
    for t_ns, values in group_values(group):
        for metric, value in values:
            points.setdefault(metric, []).append((t_ns, value))
    return {metric: points[metric] for metric in sorted(points)}


def counter_metrics(group: CounterGroup) -> list[str]:
    """The counters of a group that have a point (track_points' keys), in name order, without
    holding the points; none for a thread whose every point is 0 (its CPU never moved while it
    was watched)."""
    seen: set[str] = set()
    moved = group.scope != "thread"
    for _, values in group_values(group):
        for metric, value in values:
            seen.add(metric)
            moved = moved or value != 0
    return sorted(seen) if moved else []
