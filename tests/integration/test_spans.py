"""@timed, span() and mark() record what they should, nest, and change nothing they wrap."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from workerscope import mark, monitor, span, timed
from workerscope.worker import recorder as spans


@timed
def add(a, b=0):
    return a + b


@timed("custom-name", team="db")
def named():
    return "n"


@timed
def fails():
    raise KeyError("boom")


@timed
def outer():
    return inner() + 1


@timed
def inner():
    return 1


class Thing:
    @timed
    def method(self, x):
        return x * 2


@timed
async def coro(x):
    await asyncio.sleep(0.01)
    return x + 1


def by_name(timeline):
    return {s.name: s for s in timeline.spans}


def test_no_monitor_means_nothing_recorded_and_results_unchanged():
    """Without a monitor, decorated functions behave exactly as undecorated ones."""
    assert spans.active is None
    assert add(1, b=2) == 3
    assert add.__name__ == "add" and add.__wrapped__(1) == 1
    with span("x") as s:
        pass
    assert type(s).__name__ == "_NoSpan", "no recording object is made without a monitor"
    assert mark("m") is None
    assert spans.active is None
    with pytest.raises(KeyError):
        fails()


def test_spans_recorded_with_names_attrs_nesting_and_errors(clean_env):
    """Spans carry qualified names, attrs, parent links, pid/tid, and the exception's type,
    message and traceback."""
    with monitor(interval=0.5) as m:
        assert add(2, 3) == 5
        assert named() == "n"
        assert Thing().method(4) == 8
        assert outer() == 2
        with pytest.raises(KeyError):
            fails()
        with span("block", rows=10):
            mark("checkpoint", step=3)
        assert asyncio.run(coro(1)) == 2
    t = m.timeline
    s = by_name(t)
    job = next(x for x in t.spans if x.kind == "job")
    assert s["add"].parent == job.id and s["add"].end_ns >= s["add"].start_ns
    assert s["custom-name"].attrs == {"team": "db"}
    assert "Thing.method" in s
    assert s["inner"].parent == s["outer"].id
    assert s["outer"].start_ns <= s["inner"].start_ns <= s["inner"].end_ns <= s["outer"].end_ns
    assert s["fails"].error == "KeyError: 'boom'"
    assert 'in fails' in s["fails"].attrs["traceback"]
    assert s["block"].attrs == {"rows": 10}
    assert s["coro"].end_ns - s["coro"].start_ns >= 10_000_000
    assert [(mk.name, mk.attrs) for mk in t.marks] == [("checkpoint", {"step": 3})]
    assert s["block"].start_ns <= t.marks[0].t_ns <= s["block"].end_ns
    assert {x.pid for x in t.spans} == {job.pid}
    assert all(x.tid == threading.get_native_id() for x in t.spans)
    assert spans.active is None, "the monitor must deactivate span recording on exit"


def test_span_durations_match_the_clock(clean_env):
    """A span around a 50 ms sleep lasts 50 ms (within scheduling slack) on the wall axis."""
    with monitor(interval=0.5) as m:
        t0 = time.time_ns()
        with span("sleep"):
            time.sleep(0.05)
        t1 = time.time_ns()
    s = by_name(m.timeline)["sleep"]
    assert 50e6 <= s.duration_ns <= 80e6
    # mapped to wall time through the anchor: within 1 ms of the wall clock read here
    assert abs(s.start_ns - t0) < 1e6 and abs(s.end_ns - t1) < 1e6


def test_threads_have_their_own_parents(clean_env):
    """Spans in other threads nest under their own thread's spans, and threads are named."""
    def work():
        with span("thread-outer"):
            add(1)

    with monitor(interval=0.5) as m:
        ts = [threading.Thread(target=work, name=f"w{i}") for i in range(3)]
        for th in ts:
            th.start()
        for th in ts:
            th.join()
    t = m.timeline
    outers = {x.id: x for x in t.spans if x.name == "thread-outer"}
    adds = [x for x in t.spans if x.name == "add"]
    assert len(outers) == 3 and len(adds) == 3
    for a in adds:
        assert a.parent in outers and outers[a.parent].tid == a.tid
    assert {"w0", "w1", "w2"} <= set(t.threads.values())


def test_exception_in_monitor_block_marks_job_error(clean_env):
    """A job whose block raises ends with status error and the exception type, and re-raises."""
    m = monitor(interval=0.5, name="bad-job")
    with pytest.raises(ZeroDivisionError), m:
        _ = 1 / 0
    (job,) = m.timeline.jobs
    assert (job.name, job.status, job.error) == ("bad-job", "error",
                                                "ZeroDivisionError: division by zero")
