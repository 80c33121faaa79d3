"""CPU per thread: spans that run side by side in threads of one process are each credited
their own thread's CPU (scope `thread`), not the whole process's."""

from __future__ import annotations

import threading
import time

import pytest
from helpers import burn

from workerscope import monitor, span
from workerscope.export.attribution import attribute
from workerscope.timeline import Sample, Span, Timeline

S = 1_000_000_000


@pytest.mark.accuracy
def test_burning_and_sleeping_threads_get_their_own_cpu(clean_env):
    """Two threads, each in its own span: the one burning 1 s of its CPU is credited
    0.85-1.15 s, the one sleeping 1 s at most 0.1 s; the job around them keeps the whole
    process's CPU."""

    def burner() -> None:
        with span("burn"):
            burn(1.0)  # 1 s of this thread's own CPU time, however long that takes

    def sleeper() -> None:
        with span("sleep"):
            time.sleep(1.0)

    with monitor(interval=0.1) as m:
        threads = [threading.Thread(target=burner), threading.Thread(target=sleeper)]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
    t = m.timeline
    got = attribute(t)
    by_name = {s.name: s for s in t.spans}
    burnt, slept = (got[(s.worker, s.pid, s.id)] for s in (by_name["burn"], by_name["sleep"]))
    assert 0.85 <= burnt["cpu_s"] <= 1.15, burnt
    assert slept["cpu_s"] <= 0.1, slept
    assert {s.tid for s in t.samples if s.scope == "thread"} >= {by_name["burn"].tid,
                                                                  by_name["sleep"].tid}
    (job,) = [s for s in t.spans if s.kind == "job"]
    assert got[(job.worker, job.pid, job.id)]["cpu_s"] >= 0.85, "the job's is the process's"


def _span(sid: int, tid: int, start: float, end: float, kind: str = "span") -> Span:
    return Span("w", 1, sid, None, f"s{sid}", int(start * S), int(end * S), 10, tid, kind=kind)


def _timeline(spans: list[Span], threads: dict[int, list[tuple[float, float]]]) -> Timeline:
    """Spans of pid 10; the process burns 2 cores from 0 to 10 s; thread `tid` has the
    given (t, cpu_s) readings."""
    samples = [Sample("w", int(x * S), "proc", 10, {"cpu_user_s": 2.0 * x, "cpu_system_s": 0.0})
               for x in range(11)]
    samples += [Sample("w", int(x * S), "tree", 10, {"cpu_user_s": 2.0 * x, "cpu_system_s": 0.0})
                for x in range(11)]
    for tid, rows in threads.items():
        samples += [Sample("w", int(x * S), "thread", 10, {"cpu_user_s": c, "cpu_system_s": 0.0},
                           tid) for x, c in rows]
    return Timeline(spans=spans, samples=samples)


def test_alone_in_its_process_a_span_keeps_the_process_cpu():
    """A span with no span of another thread beside it is credited the process's CPU (the
    threads it started count), even where its own thread was read."""
    t = _timeline([_span(1, 11, 2, 4)], {11: [(x, 0.5 * x) for x in range(11)]})
    assert attribute(t)[("w", 10, 1)]["cpu_s"] == 4.0


def test_overlapping_spans_of_two_threads_get_their_threads_cpu():
    """Spans of two threads that overlap get their own thread's CPU; tree CPU is the tree's."""
    spans = [_span(1, 11, 2, 4), _span(2, 12, 3, 6)]
    t = _timeline(spans, {11: [(x, 1.0 * x) for x in range(11)],
                          12: [(x, 0.25 * x) for x in range(11)]})
    got = attribute(t)
    assert got[("w", 10, 1)]["cpu_s"] == 2.0
    assert got[("w", 10, 2)]["cpu_s"] == 0.75
    assert got[("w", 10, 2)]["tree_cpu_s"] == 6.0


def test_spans_of_one_thread_or_apart_in_time_are_not_concurrent():
    """Nested spans of one thread, and spans of two threads that do not overlap in time,
    keep the process's CPU; so does a span whose thread was never read."""
    spans = [_span(1, 11, 1, 5), _span(2, 11, 2, 3), _span(3, 12, 5, 7), _span(4, 13, 6, 8)]
    t = _timeline(spans, {11: [(x, 0.1 * x) for x in range(11)],
                          12: [(x, 0.1 * x) for x in range(11)]})
    got = attribute(t)
    assert got[("w", 10, 1)]["cpu_s"] == 8.0
    assert got[("w", 10, 2)]["cpu_s"] == 2.0
    assert abs(got[("w", 10, 3)]["cpu_s"] - 0.2) < 1e-9, "overlaps span 4, of thread 13"
    assert got[("w", 10, 4)]["cpu_s"] == 4.0, "thread 13 was never read"


def test_a_job_is_measured_against_jobs_only():
    """A job with spans of other threads inside it keeps the process's CPU; two jobs that
    overlap in two threads (a thread pool) each get their thread's."""
    spans = [_span(1, 11, 0, 3.5, "job"), _span(2, 12, 1, 3), _span(3, 13, 2, 3.5),
             _span(4, 14, 4, 6, "job"), _span(5, 15, 5, 7, "job")]
    rows = {tid: [(x, 0.5 * x) for x in range(11)] for tid in (11, 12, 13, 14, 15)}
    got = attribute(_timeline(spans, rows))
    assert got[("w", 10, 1)]["cpu_s"] == 7.0
    assert got[("w", 10, 2)]["cpu_s"] == 1.0
    assert got[("w", 10, 4)]["cpu_s"] == 1.0 and got[("w", 10, 5)]["cpu_s"] == 1.0


def test_a_thread_first_read_after_its_span_leaves_the_process_cpu():
    """A thread whose readings start after the span ended says nothing of it: the span keeps
    the process's CPU rather than a made-up 0."""
    spans = [_span(1, 11, 1, 2), _span(2, 12, 1, 2)]
    t = _timeline(spans, {11: [(x, 0.1 * x) for x in range(5, 11)]})
    assert attribute(t)[("w", 10, 1)]["cpu_s"] == 2.0


def test_thread_samples_keep_their_tid_through_a_wsc_file(tmp_path):
    """A thread sample's tid survives save and load; samples without one load as before."""
    t = _timeline([_span(1, 11, 2, 4)], {11: [(1, 0.5)]})
    path = t.save(str(tmp_path / "t.wsc"))
    from workerscope import load

    back = load(path)
    threads = [s for s in back.samples if s.scope == "thread"]
    assert [(s.pid, s.tid, s.values) for s in threads] == [(10, 11, {"cpu_user_s": 0.5,
                                                                     "cpu_system_s": 0.0})]
    assert all(s.tid is None for s in back.samples if s.scope != "thread")


def test_a_thread_born_since_the_last_sample_starts_at_zero_cpu():
    """A thread row with a start (a thread born since the previous sample) also puts the
    thread's 0 CPU at that start on the timeline, so a span begun with the thread is
    credited the CPU it used before its first reading."""
    from workerscope import protocol
    from workerscope.builder import TimelineBuilder

    b = TimelineBuilder()
    b.add(protocol.Frame(protocol.HELLO, "w", 0, {"host": "h", "pid": 10, "anchor": [0, 0]}))
    b.add(protocol.Frame(protocol.SAMPLE, "w", 1, {"t": 2 * S, "threads": [
        [10, 11, {"cpu_user_s": 0.3, "cpu_system_s": 0.0}, S],
        [10, 12, {"cpu_user_s": 5.0, "cpu_system_s": 0.0}]]}))
    got = sorted((s.tid, s.t_ns, s.values["cpu_user_s"]) for s in b.timeline().samples)
    assert got == [(11, S, 0.0), (11, 2 * S, 0.3), (12, 2 * S, 5.0)]
