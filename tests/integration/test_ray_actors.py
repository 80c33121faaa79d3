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
