"""Factories for synthetic records, timelines and wire frames, by field name.

Tests import them (`from factories import span, timeline`); benchmarks put tests/ on sys.path
first. Every argument is keyword-only (a frame's kind excepted), so a call reads as the record
it makes instead of as ten positional values, and a default stands for "not what this test is
about": times in ns from 0, worker "w" with pid 1, a thread equal to its process, a span or mark
outside any job.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from workerscope import protocol
from workerscope.timeline import Job, Mark, Sample, Span, Timeline, Worker

S = 1_000_000_000  # one second, in ns
T0 = 1_700_000_000 * S  # an epoch origin (November 2023), as in a real trace


def worker(id: str = "w", *, host: str | None = None, pid: int | None = None,
           **fields: Any) -> Worker:
    """A Worker; `host` and `pid` default to those an id like "node/host:pid:sidecar" names
    (else "h" and 1). Other fields (status, interval, notes, ...) by name."""
    parts = id.rsplit("/", maxsplit=1)[-1].split(":")
    if host is None:
        host = parts[0] if len(parts) > 1 else "h"
    if pid is None:
        pid = int(parts[1]) if len(parts) > 1 and parts[1].isdigit() else 1
    return Worker(id, host=host, pid=pid, **fields)


def job(*, worker: str = "w", id: int = 1, name: str = "job", start_ns: int = 0,
        end_ns: int | None = None, status: str = "ok", error: str | None = None, pid: int = 1,
        tid: int | None = None, **fields: Any) -> Job:
    """A Job; its thread is its process's main thread unless `tid` says otherwise."""
    return Job(worker, id, name, start_ns, end_ns, status, error, pid, pid if tid is None else tid,
               **fields)


def job_span(j: Job, **fields: Any) -> Span:
    """The span of kind "job" that stands for job `j` on the timeline: the job's id, name,
    times and threads, its status in attrs, its error if it did not end ok. Fields override."""
    values: dict[str, Any] = {
        "worker": j.worker, "job": j.id, "id": j.id, "name": j.name, "start_ns": j.start_ns,
        "end_ns": j.start_ns if j.end_ns is None else j.end_ns, "pid": j.pid,
        "tid": j.pid if j.tid is None else j.tid, "attrs": {"status": j.status},
        "error": None if j.status == "ok" else j.error, "kind": "job"}
    values.update(fields)
    return span(**values)


def span(*, worker: str = "w", job: int | None = None, id: int = 1, parent: int | None = None,
         name: str = "f", start_ns: int = 0, end_ns: int | None = None, pid: int = 1,
         tid: int | None = None, attrs: dict[str, Any] | None = None, error: str | None = None,
         kind: str = "span", cut_short: bool = False) -> Span:
    """A Span; it ends where it starts unless `end_ns` says otherwise, on its process's main
    thread unless `tid` says otherwise."""
    return Span(worker, job, id, parent, name, start_ns, start_ns if end_ns is None else end_ns,
                pid, pid if tid is None else tid, attrs, error, kind, cut_short)


def mark(*, worker: str = "w", job: int | None = None, name: str = "m", t_ns: int = 0,
         pid: int = 1, tid: int | None = None, attrs: dict[str, Any] | None = None) -> Mark:
    """A Mark, on its process's main thread unless `tid` says otherwise."""
    return Mark(worker, job, name, t_ns, pid, pid if tid is None else tid, attrs)


def sample(*, worker: str = "w", t_ns: int = 0, scope: str = "tree", pid: int | None = None,
           tid: int | None = None, values: Mapping[str, float] | None = None,
           **more: float) -> Sample:
    """A Sample; its values from `values` and any further keywords
    (`sample(scope="tree", pid=10, cpu_percent=50.0)`)."""
    return Sample(worker, t_ns, scope, pid, {**(values or {}), **more}, tid)


def timeline(*, workers: Iterable[Worker] | Mapping[str, Worker] = (), jobs: Iterable[Job] = (),
             spans: Iterable[Span] = (), marks: Iterable[Mark] = (),
             samples: Iterable[Sample] = (), processes: Mapping[tuple[str, int], str] | None = None,
             threads: Mapping[tuple[str, int, int], str] | None = None,
             sort: bool = True) -> Timeline:
    """A Timeline of these records (workers by their ids), sorted as a loaded one is unless
    `sort` is False."""
    by_id = dict(workers) if isinstance(workers, Mapping) else {w.id: w for w in workers}
    t = Timeline(workers=by_id, jobs=list(jobs), spans=list(spans), marks=list(marks),
                 samples=list(samples))
    t.processes.update(processes or {})
    t.threads.update(threads or {})
    if sort:
        t.sort()
    return t


def span_record(*, kind: int = protocol.RECORD_SPAN, job: int | None = None, id: int = 0,
                parent: int | None = None, name: str = "s", start_ns: int = 0,
                end_ns: int | None = None, tid: int = 1, attrs: dict[str, Any] | None = None,
                error: str | None = None, cut_short: bool = False) -> protocol.SpanRecord:
    """A span (or, with kind=RECORD_MARK, mark) record as a spans or mark frame carries it;
    it ends where it starts unless `end_ns` says otherwise."""
    return protocol.SpanRecord(kind, job, id, parent, name, start_ns,
                               start_ns if end_ns is None else end_ns, tid, attrs, error, cut_short)


def frame(kind: str, *, worker: str = "w", seq: int = 0, body: Mapping[str, Any] | None = None,
          **fields: Any) -> bytes:
    """A frame encoded for the wire: its body from `body` and any further keywords
    (`frame("job_end", seq=3, job=1, t=5)`)."""
    return protocol.encode_frame(kind, worker, seq, {**(body or {}), **fields})
