"""Edges of queue time and memory creep a review found: a queued job through cloudpickle,
a submit time no clock gives, a submit drawn before the trace's first event, the latest run
of creeping jobs told, and the functions ranked by the growth they held themselves."""

from __future__ import annotations

import pickle
import time

import cloudpickle
from factories import frame, job, span, worker
from test_creep_rule import _timeline

from workerscope import profiled, protocol
from workerscope.builder import TimelineBuilder
from workerscope.export.creep import memory_creep
from workerscope.export.pftrace import write_pftrace
from workerscope.timeline import Timeline
from workerscope.worker.jobs import _Profiled

S = 1_000_000_000
MIB = 1 << 20


def test_a_queued_job_survives_cloudpickle_and_pickle():
    """cloudpickle copies a profiled by value as the function it passes for: the queued job
    finds its job logic again (it called a bare function, which raised AttributeError)."""
    def local(x):
        return x + 1

    q = profiled(local, mode="light").queued()
    back = cloudpickle.loads(cloudpickle.dumps(q))
    assert isinstance(back.job, _Profiled) and back.submitted == q.submitted
    assert back(3) == 4
    lam = profiled(lambda x: x * 2, mode="light").queued()
    assert cloudpickle.loads(cloudpickle.dumps(lam))(3) == 6
    by_name = pickle.loads(pickle.dumps(profiled(len, mode="light").queued()))
    assert by_name([1, 2]) == 2


def test_a_submit_time_no_clock_gives_is_dropped():
    b = TimelineBuilder()
    anchor = [time.time_ns(), time.monotonic_ns()]
    b.add(protocol.decode_frame(frame("hello", worker="h:1:2", host="h", pid=1, anchor=anchor)))
    for k, submitted in enumerate((-2**63, 2**63 - 1, True, anchor[0] - S)):
        b.add(protocol.decode_frame(frame("job_start", worker="h:1:2", seq=2 * k + 1,
                                          job=k + 1, name="j", t=anchor[1] + k, pid=1,
                                          tid=1, submitted=submitted)))
        b.add(protocol.decode_frame(frame("job_end", worker="h:1:2", seq=2 * k + 2,
                                          job=k + 1, t=anchor[1] + k + 10, status="ok")))
    jobs = sorted(b.timeline().jobs, key=lambda j: j.id)
    assert [j.submitted_ns for j in jobs[:3]] == [None, None, None]
    assert jobs[3].submitted_ns == anchor[0] - S and abs(jobs[3].queued_ns - S) < S // 100


def test_a_submit_before_every_event_is_drawn_where_it_was(tmp_path):
    from test_pftrace import decode

    t = Timeline()
    t.workers["w"] = worker("w")
    j = job(worker="w", id=1, start_ns=100 * S, end_ns=101 * S, status="ok")
    t.jobs.append(type(j)(**{**j.__dict__, "submitted_ns": 98 * S}))
    t.spans.append(span(worker="w", job=1, id=1, name="j", start_ns=100 * S, end_ns=101 * S,
                        kind="job"))
    t.sort()
    path = tmp_path / "t.pftrace"
    write_pftrace(t, str(path))
    got = decode(path.read_bytes())
    (submit,) = [i for i in got["instants"] if i[1].startswith("submitted: ")]
    assert submit[2] == 98 * S and submit[3]["queued_s"] == 2.0
    assert got["flows_out"] == got["flows_in"] == [1]


def test_the_latest_run_of_creeping_jobs_is_told():
    flat_then_growing = [100 * MIB] * 20 + [100 * MIB + k * 50 * MIB for k in range(1, 11)]
    (c,) = memory_creep(_timeline(flat_then_growing))
    # the 10 growing jobs, and at most the few flat ones before that the 80% rule lets in
    assert 10 <= c.jobs <= 13 and 40 * MIB < c.per_job_bytes <= 50 * MIB, c
    rise_drop_rise = ([100 * MIB + k * 40 * MIB for k in range(10)]
                      + [100 * MIB + k * 40 * MIB for k in range(10)])
    (c,) = memory_creep(_timeline(rise_drop_rise))
    assert c.jobs == 10 and c.per_job_bytes == 40 * MIB, c


def test_the_functions_are_ranked_by_the_growth_they_held_themselves():
    t = _timeline([100 * MIB + k * 20 * MIB for k in range(6)])
    attribution = {}
    for k in range(6):
        parent = span(worker="w", job=k + 1, id=10 + k, parent=k + 1, name="process",
                      start_ns=k * S, end_ns=k * S + S // 4, pid=1)
        child = span(worker="w", job=k + 1, id=20 + k, parent=10 + k, name="parse",
                     start_ns=k * S, end_ns=k * S + S // 8, pid=1)
        t.spans += [parent, child]
        attribution[("w", 1, 10 + k)] = {"rss_growth_bytes": 20.0 * MIB}
        attribution[("w", 1, 20 + k)] = {"rss_growth_bytes": 1.0 * MIB}
    (c,) = memory_creep(t, attribution)
    assert [name for name, _ in c.holders] == ["process", "parse"]
    assert c.holders[0][1] == 6 * 19.0 * MIB and c.holders[1][1] == 6 * 1.0 * MIB
