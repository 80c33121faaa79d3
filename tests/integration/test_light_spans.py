"""Spans are kept in light mode (the default) and in nested monitor/profiled calls (issue 14)."""

from __future__ import annotations

import pytest

from workerscope import Subscriber, mark, monitor, profiled, span, timed
from workerscope.worker import recorder


@timed
def step(i=0):
    return i


@timed
def broken():
    raise KeyError("boom")


def work(n=3):
    """A job with @timed calls, a span() block with attributes, a mark and a failed call."""
    with span("block", rows=n):
        for i in range(n):
            step(i)
        mark("halfway", at=n)
    with pytest.raises(KeyError):
        broken()
    return n


def names(spans):
    return sorted(s.name for s in spans if s.kind != "job")


def test_light_job_keeps_its_spans_and_sends_them(clean_env):
    """A light job records its @timed/span()/mark() spans in a ring of the worker's own, reads
    them at its end, exposes them (last_timeline, a count in last_stats) and sends them to
    the driver with its stats; no sidecar is started."""
    with Subscriber() as sub:
        wrapped = profiled(work, endpoint=sub.endpoint)
        assert wrapped(3) == 3
        assert sub.wait(jobs=1, timeout=10)
        driver = sub.timeline()
    assert wrapped.last_stats["spans"] == 5 and wrapped.last_stats["spans_lost"] == 0
    for t in (wrapped.last_timeline, driver):
        (job,) = t.jobs
        assert job.name == "work" and job.status == "ok"
        assert names(t.spans) == ["block", "broken", "step", "step", "step"]
        by = {s.name: s for s in t.spans}
        assert by["block"].parent == job.id and by["block"].attrs == {"rows": 3}
        assert by["step"].parent == by["block"].id and by["step"].job == job.id
        assert by["broken"].error == "KeyError: 'boom'"
        assert [(m.name, m.attrs) for m in t.marks] == [("halfway", {"at": 3})]
        assert job.start_ns <= by["block"].start_ns <= by["block"].end_ns <= job.end_ns
    (w,) = driver.workers.values()
    assert w.id.endswith(":light") and w.spans_lost == 0


def test_light_spans_of_each_job_are_its_own(clean_env):
    """Back-to-back light jobs in one process each keep only their own spans."""
    wrapped = profiled(work)
    wrapped(2)
    first = wrapped.last_timeline
    wrapped(4)
    second = wrapped.last_timeline
    assert names(first.spans).count("step") == 2 and names(second.spans).count("step") == 4
    assert first.jobs[0].id != second.jobs[0].id
    assert recorder.active is None, "the ring is not left active between jobs"


def test_light_spans_past_the_ring_are_counted_lost(clean_env):
    """A light job that records more spans than its ring holds keeps the newest and counts
    the rest as spans_lost, in its stats and at the driver."""
    clean_env.setenv("WORKERSCOPE_RING_RECORDS", "64")

    def many():
        for i in range(300):
            step(i)

    with Subscriber() as sub:
        wrapped = profiled(many, endpoint=sub.endpoint)
        wrapped()
        assert sub.wait(jobs=1, timeout=10)
        driver = sub.timeline()
    s = wrapped.last_stats
    assert 0 < s["spans"] <= 64 and s["spans"] + s["spans_lost"] == 300
    (w,) = driver.workers.values()
    assert w.spans_lost == s["spans_lost"]
    assert len(driver.spans) - 1 == s["spans"]
    # It says how big a ring would have held the job: 300 records waited at its end, so
    # twice that, rounded up to a power of two; the job's own timeline and the driver's.
    sizing = "at its fullest 300 records waited to be read in a ring of 64"
    for timeline in (wrapped.last_timeline, driver):
        (note,) = [n for w in timeline.workers.values() for n in w.notes if sizing in n]
        assert "WORKERSCOPE_RING_RECORDS=1024" in note and "took in at most" not in note


def test_a_light_ring_of_the_size_its_note_gives_keeps_the_job(clean_env):
    """The size the note above gives holds the same job whole, and no note is said."""
    clean_env.setenv("WORKERSCOPE_RING_RECORDS", "1024")

    def many():
        for i in range(300):
            step(i)

    wrapped = profiled(many)
    wrapped()
    assert (wrapped.last_stats["spans"], wrapped.last_stats["spans_lost"]) == (300, 0)
    assert not [n for w in wrapped.last_timeline.workers.values() for n in w.notes
                if "at its fullest" in n]


def test_monitor_keeps_jobs_nested_in_it_with_their_spans(clean_env):
    """Inside `with monitor()`, a heavy profiled job, a light (default) one and an inner
    monitor each appear in the outer timeline with their own spans, and the outer block's
    spans before and after them stay the outer job's."""
    with monitor(interval=0.5) as m:
        step(-1)
        profiled(work, mode="heavy")(1)
        profiled(work)(2)
        with monitor(interval=0.5, name="inner"):
            work(3)
        step(-2)
    t = m.timeline
    jobs = {j.name: j for j in t.jobs}
    assert sorted(j.name for j in t.jobs) == ["inner", "monitor", "work", "work"]
    outer = jobs["monitor"].id
    steps = {}
    for s in t.spans:
        if s.name == "step":
            steps.setdefault(s.job, []).append(s)
    assert len(steps.pop(outer)) == 2, "the monitor's own spans, before and after"
    assert sorted(len(v) for v in steps.values()) == [1, 2, 3]
    assert len({s.job for s in t.spans if s.name == "block"}) == 3


def test_outer_ring_is_back_after_a_job_with_other_settings(clean_env):
    """A nested heavy job with other settings (so another sidecar and ring) does not take the
    outer job's spans after it ends; its own spans are in the outer timeline too."""
    with monitor(interval=0.5) as m:
        profiled(work, mode="heavy", interval=0.2)(2)
        step(-1)
    t = m.timeline
    (outer,) = [j for j in t.jobs if j.name == "monitor"]
    after = [s for s in t.spans if s.name == "step" and s.job == outer.id]
    assert len(after) == 1
    (inner,) = [j for j in t.jobs if j.name == "work"]
    assert len([s for s in t.spans if s.name == "step" and s.job == inner.id]) == 2


def test_a_light_ring_that_lost_a_damaged_record_gives_no_size_note(clean_env):
    """A record lost to a stray write into the ring (not to the ring filling) is counted in
    spans_lost and said as before, but no ring size is advised: the ring held the job (its
    note once advised a ring of 64 records, smaller than the 65,536 in use)."""
    from workerscope import spanring
    from workerscope.worker import light

    def job():
        for i in range(5):
            step(i)
        ring = light._ring  # a stray write over one slot's seq word of this process's ring
        q = ring.writer.q
        c = q[spanring.H_COUNTER]
        q[spanring.HEADER_WORDS + ((c - 1) & ring.writer.mask) * spanring.RECORD_WORDS] = -1

    wrapped = profiled(job)
    wrapped()
    assert (wrapped.last_stats["spans"], wrapped.last_stats["spans_lost"]) == (4, 1)
    notes = [n for w in wrapped.last_timeline.workers.values() for n in w.notes]
    assert any("span ring full" in n for n in notes)
    assert not [n for n in notes if "at its fullest" in n], notes
