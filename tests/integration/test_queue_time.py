"""Time waiting to start (profiled.queued()): a pool of 2 workers given 8 jobs of 1 s queues
them 0 to 3 s, in steps of about 1 s; each job carries its queue time, within 0.1 s of what
the driver measured itself, and the .pftrace draws a flow from each submit to its start."""

from __future__ import annotations

import concurrent.futures
import multiprocessing
import time

import pytest
from jobs import sleeps_a_second
from test_pftrace import decode

from workerscope import Subscriber, load, profiled
from workerscope.export.html import to_html
from workerscope.export.pftrace import write_pftrace
from workerscope.export.terminal import report

S = 1_000_000_000


@pytest.mark.engines
def test_a_pool_of_two_given_eight_jobs_of_a_second(clean_env, tmp_path):
    with Subscriber() as sub:
        run = profiled(sleeps_a_second, mode="heavy", interval=0.1, endpoint=sub.endpoint)
        ctx = multiprocessing.get_context("fork")
        with concurrent.futures.ProcessPoolExecutor(2, mp_context=ctx) as pool:
            submitted, futures = [], []
            for k in range(8):
                submitted.append(time.time_ns())
                futures.append(pool.submit(run.queued(), k))
            results = [f.result(timeout=120) for f in futures]
        assert sub.wait(jobs=8, byes=2, timeout=60)
        t = sub.timeline()
    measured = {(r["pid"], r["started"]): (r["started"] - submitted[r["k"]]) / S
                for r in results}
    jobs = sorted(t.jobs, key=lambda j: j.start_ns)
    assert len(jobs) == 8 and all(j.queued_ns is not None for j in jobs)
    for j in jobs:
        # the driver's own figure for the same job: the one whose fn started just after
        (mine,) = [q for (pid, started), q in measured.items()
                   if pid == j.pid and 0 <= started - j.start_ns < 0.1 * S]
        assert abs((j.queued_ns or 0) / S - mine) < 0.1, (j, mine)
    waits = sorted((j.queued_ns or 0) / S for j in jobs)
    assert waits[0] < 0.6 and 2.5 < waits[-1] < 4.5, waits
    # in pairs (two workers), each pair about a second after the one before
    steps = [waits[k + 2] - waits[k] for k in range(0, 6, 2)]
    assert all(0.7 < s < 1.6 for s in steps), waits
    t.save(str(tmp_path / "t.wsc"))
    back = load(str(tmp_path / "t.wsc"))
    assert sorted(j.queued_ns for j in back.jobs) == sorted(j.queued_ns for j in jobs)
    assert "spent waiting to start" in to_html(t)
    text = report(t, width=120)
    assert "queued" in text and "spent waiting to start" in text
    path = tmp_path / "t.pftrace"
    write_pftrace(t, str(path))
    got = decode(path.read_bytes())
    assert len(got["flows_out"]) == 8 and sorted(got["flows_out"]) == sorted(got["flows_in"])
    submits = [i for i in got["instants"] if i[1].startswith("submitted: ")]
    assert len(submits) == 8
