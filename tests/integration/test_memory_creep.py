"""Memory creep (export/creep.py): a warm worker whose RSS after each job keeps growing is
flagged, with the function whose calls held the growth; one that allocates and frees 200 MiB
a job is not. Real workers, each a heavy profiled job run 8 times in one process."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from workerscope import Subscriber
from workerscope.export.creep import memory_creep
from workerscope.export.html import to_html
from workerscope.export.terminal import report

MIB = 1 << 20
WORKER = textwrap.dedent("""
    import sys, time
    from workerscope import profiled, timed

    kept = []

    def touched(n):
        b = bytearray(n)
        b[::4096] = b"x" * len(b[::4096])  # resident, not just reserved
        return b

    @timed
    def load():
        time.sleep(0.1)

    @timed
    def leaks():  # 20 MiB a job, kept for ever: a cache that is never emptied
        for _ in range(20):
            kept.append(touched(1 << 20))
            time.sleep(0.01)
        time.sleep(0.1)

    @timed
    def churns():  # 200 MiB a job, freed before the job ends
        b = touched(200 << 20)
        time.sleep(0.2)
        del b

    def job(kind):
        load()
        leaks() if kind == "leak" else churns()

    run = profiled(job, mode="heavy", interval=0.05, endpoint=sys.argv[1])
    for _ in range(8):
        run(sys.argv[2])
""")


@pytest.fixture(scope="module")
def creeping():
    """The timeline of a leaking worker and a churning one, and the leaker's id."""
    with Subscriber() as sub:
        for kind in ("leak", "churn"):
            subprocess.run([sys.executable, "-c", WORKER, sub.endpoint, kind], check=True,
                           timeout=300)
        assert sub.wait(jobs=16, byes=2, timeout=60)
        t = sub.timeline()
    leaker = next(j.worker for j in sorted(t.jobs, key=lambda j: j.start_ns))
    return t, leaker


def test_a_worker_leaking_20_mib_a_job_is_flagged_naming_the_function(creeping):
    t, leaker = creeping
    (creep,) = memory_creep(t)
    assert creep.worker == leaker and creep.jobs == 8
    assert 18 * MIB < creep.per_job_bytes < 23 * MIB, creep
    assert creep.holders[0][0] == "leaks", creep.holders
    assert "load" not in [name for name, grew in creep.holders if grew > 8 * MIB]


def test_a_worker_that_allocates_and_frees_200_mib_a_job_is_not(creeping):
    t, leaker = creeping
    assert [c.worker for c in memory_creep(t)] == [leaker]
    churner = next(w for w in t.workers if w != leaker)
    peaks = [s.values.get("rss_bytes", 0) for s in t.samples
             if s.worker == churner and s.scope == "tree"]
    assert max(peaks) > 200 * MIB  # it did hold 200 MiB at a time


def test_the_reports_say_it(creeping):
    t, leaker = creeping
    text = report(t, width=120)
    assert "memory creep:" in text and "held by leaks" in text
    assert text.count("memory creeps") == 1 and leaker.split(":")[1] in text
    page = to_html(t)
    assert "memory creeps: RSS after each job grew" in page and "held by leaks" in page
