"""The memory-creep rule (export/creep.py) at its edges, on hand-built timelines: how many
jobs, how much growth a job, and growth that came once and stayed."""

from __future__ import annotations

from factories import job, sample, worker

from workerscope.export.creep import CREEP_MIN_BYTES, CREEP_MIN_JOBS, memory_creep
from workerscope.timeline import Timeline

S = 1_000_000_000
MIB = 1 << 20


def _timeline(after_each_job: list[float]) -> Timeline:
    """A worker whose tree RSS right after job k is after_each_job[k]."""
    t = Timeline()
    t.workers["w"] = worker("w")
    for k, rss in enumerate(after_each_job):
        t.jobs.append(job(worker="w", id=k + 1, start_ns=k * S, end_ns=k * S + S // 2,
                          status="ok"))
        t.samples.append(sample(worker="w", t_ns=k * S + S // 2, pid=1, rss_bytes=rss))
    t.sort()
    return t


def test_steady_growth_over_enough_jobs_is_creep():
    grow = CREEP_MIN_BYTES + 2 * MIB
    (c,) = memory_creep(_timeline([100 * MIB + k * grow for k in range(CREEP_MIN_JOBS)]))
    assert c.jobs == CREEP_MIN_JOBS and c.per_job_bytes == grow
    assert c.holders == ()  # no spans: nothing to name, and it says so


def test_too_few_jobs_too_little_growth_or_one_step_is_not():
    grow = CREEP_MIN_BYTES + 2 * MIB
    assert memory_creep(_timeline([100 * MIB + k * grow for k in range(CREEP_MIN_JOBS - 1)])) == []
    small = CREEP_MIN_BYTES - MIB
    assert memory_creep(_timeline([100 * MIB + k * small for k in range(10)])) == []
    # 2% of a 4 GiB worker is 82 MiB a job: 20 MiB a job there is not creep
    assert memory_creep(_timeline([4096 * MIB + k * 20 * MIB for k in range(10)])) == []
    # one big step, then flat: it grew once and stayed
    once = [100 * MIB] + [600 * MIB] * 8
    assert memory_creep(_timeline(once)) == []
