"""Engines profiled with no function wrapped by hand (workerscope.engines): Dask's worker plugin
makes every task a job; for Ray, a decorator in place of ray.remote; for Lithops, an executor."""

from __future__ import annotations

import pytest
from helpers import lithops_clean, lithops_localhost, run_ray_driver
from jobs import job

from workerscope import Subscriber, span

pytestmark = pytest.mark.engines


def _spans_by_job(t):
    by_job = {}
    for s in t.spans:
        if s.kind == "span":
            by_job.setdefault((s.worker, s.job), []).append(s)
    return by_job


def test_dask_plugin_every_task_a_job(clean_env):
    """Every task of a LocalCluster (2 processes, 2 threads each) with the plugin is a job named
    after its key, with the spans its thread ran under it; a task that raised is a job in error;
    teardown makes each worker say bye."""
    distributed = pytest.importorskip("distributed")
    from workerscope.engines import WorkerscopePlugin

    def task(n):  # defined here: cloudpickle ships it by value, unwrapped
        with span("item", n=n):
            return job(n)

    def fail():
        raise ValueError("no")

    n_tasks = 12
    with Subscriber() as sub:
        with distributed.LocalCluster(n_workers=2, threads_per_worker=2, processes=True,
                                      dashboard_address=None) as cluster, \
                distributed.Client(cluster) as client:
            client.register_plugin(WorkerscopePlugin(endpoint=sub.endpoint, interval=0.05))
            futures = client.map(task, range(n_tasks))
            results = client.gather(futures)
            keys = {f.key: i for i, f in enumerate(futures)}
            bad = client.submit(fail, key="bad-task")
            assert isinstance(bad.exception(), ValueError)  # the task's own, as Dask reports it
            pids = set(client.run(lambda: __import__("os").getpid()).values())
        assert [r["n"] for r in results] == list(range(n_tasks))
        assert sub.wait(jobs=n_tasks + 1, byes=2, timeout=120)
        t = sub.timeline()

    failed = [j for j in t.jobs if j.name == "bad-task"]
    assert [(j.status, j.error) for j in failed] == [("error", "ValueError: no")]
    t.jobs.remove(failed[0])
    assert sorted(j.name for j in t.jobs) == sorted(keys)
    assert all(j.status == "ok" for j in t.jobs), [(j.name, j.status, j.error) for j in t.jobs]
    assert {j.pid for j in t.jobs} <= pids
    spans = _spans_by_job(t)
    for j in t.jobs:
        mine = {s.name: s for s in spans.get((j.worker, j.id), [])}
        assert set(mine) == {"item", "load_rows", "crunch"}, (j.name, sorted(mine))
        # Under the job of its own task, in the thread that ran it.
        assert mine["item"].attrs == {"n": keys[j.name]}
        assert all(s.tid == j.tid for s in mine.values())
        assert j.start_ns <= mine["item"].start_ns <= mine["item"].end_ns <= j.end_ns
    # One sidecar per worker process, for the plugin's lifetime, closed cleanly.
    assert len(t.workers) == 2
    assert all(w.status == "exited" for w in t.workers.values()), \
        {w.id: w.status for w in t.workers.values()}
    assert all(lost == 0 for lost in sub.lost.values())



def test_dask_plugin_bad_variable_in_worker(clean_env):
    """A bad WORKERSCOPE_* variable where the workers run fails no task: they run unmonitored."""
    distributed = pytest.importorskip("distributed")
    from workerscope.engines import WorkerscopePlugin

    clean_env.setenv("WORKERSCOPE_INTERVAL", "soon")  # the workers' processes inherit it
    with distributed.LocalCluster(n_workers=1, threads_per_worker=2, processes=True,
                                  dashboard_address=None) as cluster, \
            distributed.Client(cluster) as client:
        clean_env.delenv("WORKERSCOPE_INTERVAL")
        client.register_plugin(WorkerscopePlugin(interval=0.05))
        assert [r["n"] for r in client.gather(client.map(job, range(4)))] == list(range(4))

RAY_DRIVER = """
import json, sys
import ray
from jobs import job
from workerscope.engines import profiled_remote

endpoint = sys.argv[1]

@profiled_remote(interval=0.05, endpoint=endpoint, num_cpus=1)
def given(n):
    return job(n)

@profiled_remote                        # settings from the workers' environment
def from_env(n):
    return job(n)

ray.init(num_cpus=2, include_dashboard=False, runtime_env={"env_vars": {
    "WORKERSCOPE_ENDPOINT": endpoint, "WORKERSCOPE_INTERVAL": "0.05"}})
try:
    results = ray.get([given.remote(i) for i in range(3)] + [from_env.remote(i) for i in range(3, 5)])
finally:
    ray.shutdown()
print(json.dumps([r["n"] for r in results]))
"""


def test_ray_profiled_remote(clean_env):
    """`@profiled_remote(...)` in place of `@ray.remote(...)`: every call a job, with workerscope's
    options and Ray's together, or bare with the settings in runtime_env's env_vars."""
    pytest.importorskip("ray")
    with Subscriber() as sub:
        assert run_ray_driver(RAY_DRIVER, sub.endpoint) == list(range(5))
        assert sub.wait(jobs=5, timeout=120)
        t = sub.timeline()
    assert sorted(j.name for j in t.jobs) == ["from_env"] * 2 + ["given"] * 3
    assert all(j.status == "ok" for j in t.jobs)
    spans = _spans_by_job(t)
    for j in t.jobs:
        assert sorted(s.name for s in spans[(j.worker, j.id)]) == ["crunch", "load_rows"]


def test_lithops_profiled_executor(clean_env):
    """profiled_executor over Lithops' localhost executor: each call of an unwrapped function
    is a job with its spans."""
    lithops = pytest.importorskip("lithops")
    from workerscope.engines import profiled_executor

    with Subscriber() as sub:
        fexec = profiled_executor(lithops_localhost(lithops), endpoint=sub.endpoint,
                                  interval=0.05)
        fexec.map(job, range(3), include_modules=["jobs"])  # workerscope is installed there
        results = fexec.get_result()
        lithops_clean(fexec)
        assert [r["n"] for r in results] == list(range(3))
        assert sub.wait(jobs=3, timeout=120)
        t = sub.timeline()
    assert [j.name for j in t.jobs] == ["job"] * 3 and all(j.status == "ok" for j in t.jobs)
    spans = _spans_by_job(t)
    for j in t.jobs:
        assert sorted(s.name for s in spans[(j.worker, j.id)]) == ["crunch", "load_rows"]
