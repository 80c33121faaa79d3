"""@profiled_remote on a class makes a Ray actor whose every method call is a job."""

from __future__ import annotations

import pytest
from helpers import run_ray_driver

from workerscope import Subscriber

ACTOR_DRIVER = """
import json, sys
import ray
from jobs import job
from workerscope.engines import profiled_remote

@profiled_remote(interval=0.05, endpoint=sys.argv[1], num_cpus=1)
class Counter:
    def __init__(self):
        self.total = 0

    def add(self, n):
        self.total += job(n)["n"]
        return self.total

    def read(self):
        return self.total

ray.init(num_cpus=2, include_dashboard=False)
try:
    c = Counter.remote()
    ray.get([c.add.remote(i) for i in range(1, 4)])
    total = ray.get(c.read.remote())
finally:
    ray.shutdown()
print(json.dumps(total))
"""


def test_ray_actor_methods_are_jobs(clean_env):
    """An actor made by @profiled_remote works as the class would (its state kept across
    calls), and each method call is a job named after the method, with its spans."""
    pytest.importorskip("ray")
    with Subscriber() as sub:
        assert run_ray_driver(ACTOR_DRIVER, sub.endpoint) == 6
        assert sub.wait(jobs=4, timeout=120)
        t = sub.timeline()
    assert sorted(j.name for j in t.jobs) == ["Counter.add"] * 3 + ["Counter.read"]
    assert all(j.status == "ok" for j in t.jobs)
    assert len({j.worker for j in t.jobs}) == 1  # one actor, one process
    crunch = [s for s in t.spans if s.name == "crunch"]
    assert len(crunch) == 3


QUEUED_DRIVER = """
import json, sys, time
import ray
from workerscope import timed
from workerscope.engines import profiled_remote

@timed
def nap():
    time.sleep(0.5)

@profiled_remote(interval=0.05, endpoint=sys.argv[1], num_cpus=1)
def work(n):
    nap()
    return n

ray.init(num_cpus=2, include_dashboard=False)
try:
    results = ray.get([work.remote(i) for i in range(4)])
    results += ray.get([work.options(name="renamed").remote(4)])
finally:
    ray.shutdown()
print(json.dumps(results))
"""


def test_ray_task_calls_carry_their_submit_time(clean_env):
    """Each `.remote()` call of a @profiled_remote task stamps its submit time in the driver:
    4 tasks of 0.5 s on 2 CPUs, so two of them wait for the first two (their queue times are
    about 0.5 s longer: at least 0.3), and `.options()` keeps the stamp."""
    pytest.importorskip("ray")
    with Subscriber() as sub:
        assert run_ray_driver(QUEUED_DRIVER, sub.endpoint) == list(range(5))
        assert sub.wait(jobs=5, timeout=120)
        t = sub.timeline()
    assert all(j.status == "ok" for j in t.jobs)
    waits = sorted(j.queued_ns / 1e9 for j in t.jobs[:4] if j.queued_ns is not None)
    assert len(waits) == 4, t.jobs
    assert waits[2] - waits[0] >= 0.3 and waits[3] - waits[1] >= 0.3, waits
    assert all(j.queued_ns is not None for j in t.jobs), t.jobs
